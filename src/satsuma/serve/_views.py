"""How agents' and the store's values become the server's views of them: the stored id of
a served conversation, usage and errors as JSON, a run's end as its ``RunView``, pending
calls as ``PendingView`` (and the store's list of them, for every ``Runs``)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import attrs

from ..agents import RunResult, internal
from ..store import PendingApproval, Store
from ..tools import PendingCall
from ._runs import PendingView, RunView

__all__ = [
    "epoch_now",
    "add_usage",
    "error_json",
    "is_paused",
    "json_values",
    "pending_view",
    "public_event",
    "public_text",
    "settled_view",
    "split_stored_id",
    "stored_id",
    "stored_pending",
    "undecided",
    "usage_json",
]


def stored_id(agent: str, agent_id: str) -> str:
    """The id a served conversation is kept under in the store (see the module)."""
    return f"{agent}/{agent_id}"


def split_stored_id(stored: str) -> tuple[str, str] | None:
    """``(name, agent_id)`` of a stored id that ``stored_id`` made, else None."""
    agent, sep, agent_id = stored.partition("/")
    return (agent, agent_id) if sep and agent_id else None


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def usage_json(result_usage: Any) -> dict[str, int | float | None]:
    """A ``Usage`` as the API answers it (``cost_usd`` null when the cost is unknown);
    None (nothing counted) is zeros, with every key all the same."""
    if result_usage is None:
        return {**dict.fromkeys(_USAGE_KEYS, 0), "cost_usd": None}
    return {
        "input_tokens": result_usage.input_tokens,
        "output_tokens": result_usage.output_tokens,
        "cache_creation_input_tokens": result_usage.cache_creation_input_tokens,
        "cache_read_input_tokens": result_usage.cache_read_input_tokens,
        "cost_usd": result_usage.cost_usd,
    }


# An absolute file path of a folder and a name at least (``/srv/app/agents.db``,
# ``C:\\app\\x``): not one inside a URL (``http://host/path``) or a relative name
# (``support/t-1``), which a word, a slash or a colon comes before.
_PATH = re.compile(r"(?<![\w.:/\\])(?:/|[A-Za-z]:\\)(?:[^\s'\"/\\]+[/\\])+[^\s'\",)/\\]+")


def public_text(text: str) -> str:
    """``text`` (a run's error) with the server's file paths left out: a client learns
    what failed, not where the server keeps its files (the server's log has them)."""
    return _PATH.sub("<path>", text)


def public_event(data: dict[str, Any]) -> dict[str, Any]:
    """A run's event as a client is shown it: a crashed tool's traceback (its outcome's
    ``details``) left out, and the run's error without file paths. The conversation the
    model read is not changed."""
    outcome = data.get("outcome")
    if isinstance(outcome, dict) and isinstance(outcome.get("details"), dict):
        details = outcome["details"]
        if "traceback" in details:
            kept = {k: v for k, v in details.items() if k != "traceback"}
            data = {**data, "outcome": {**outcome, "details": kept}}
    result = data.get("result")
    if isinstance(result, dict) and isinstance(result.get("error"), str):
        data = {**data, "result": {**result, "error": public_text(result["error"])}}
    return data


def add_usage(total: Mapping[str, Any], turn: Mapping[str, Any]) -> dict[str, Any]:
    """``total`` (a run's usage as JSON, or empty) with one turn's ``usage`` added: what
    a run has spent so far, kept should it crash before its result says (the cost is
    unknown, null, once any turn's is)."""
    summed: dict[str, Any] = {
        key: int(total.get(key) or 0) + int(turn.get(key) or 0) for key in _USAGE_KEYS
    }
    costs = (total.get("cost_usd", 0.0) if total else 0.0, turn.get("cost_usd"))
    known = all(isinstance(cost, int | float) for cost in costs)
    summed["cost_usd"] = sum(costs) if known else None
    return summed


def error_json(text: str | None) -> dict[str, str] | None:
    """A run's error text (``Kind: message``) as ``{"type", "message"}``, without the
    server's file paths (``public_text``)."""
    if text is None:
        return None
    kind, sep, message = public_text(text).partition(": ")
    if sep and kind.isidentifier():
        return {"type": kind, "message": message}
    return {"type": "Error", "message": public_text(text)}


def json_values(value: Any) -> Any:
    """A stored value (frozen mappings and tuples) as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): json_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_values(v) for v in value]
    return value


def epoch_now() -> float:
    """Seconds since the epoch (trio's clock is for deadlines, not for records)."""
    return time.time()


def pending_view(view: RunView, call: PendingCall | PendingApproval) -> PendingView:
    """A call of ``view``'s run waiting for a decision, from the agent's or the store's
    value of it."""
    if isinstance(call, PendingCall):
        call_id, tool = call.id, call.tool_name
    else:
        call_id, tool = call.tool_use_id, call.tool_name
    return PendingView(
        run_id=view.run_id,
        agent=view.agent,
        agent_id=view.agent_id,
        call_id=call_id,
        tool=tool,
        input=json_values(call.input),
        reason=call.reason,
    )


async def undecided(view: RunView, store: Store, *, stranded: bool = False) -> RunView:
    """``view`` with the calls decided already left out of ``pending``: a run awaiting
    approval waits only on those nobody has decided (the others are kept in the store,
    ``Store.proposed_decisions``, until the last decision resumes the run).

    With ``stranded``, a run whose every call is decided keeps them all listed: in one
    process, where the last decision resumes the run at once, it still waits only when
    that resume failed on the store, and the same decision sent again resumes it."""
    if view.status != "awaiting_approval" or not view.pending:
        return view
    decided = await store.proposed_decisions(view.run_id)
    waiting = tuple(call for call in view.pending if call.call_id not in decided)
    if len(waiting) == len(view.pending) or (stranded and not waiting):
        return view
    return attrs.evolve(view, pending=waiting)


def settled_view(
    view: RunView, result: RunResult[Any] | None, failure: BaseException | None
) -> RunView:
    """``view`` once its run ended or paused with ``result``, failed to run at all with
    ``failure`` (the agent stopped or crashed), or neither (cancelled)."""
    now = epoch_now()
    if result is not None:
        return attrs.evolve(
            view,
            status=result.status,
            output=internal.output_to_json(internal.raw_output(result)),
            error=error_json(result.error),
            usage=usage_json(result.usage),
            pending=tuple(pending_view(view, call) for call in result.pending),
            ended_at=None if result.status == "awaiting_approval" else now,
            started_at=view.started_at or now,
        )
    if failure is not None:
        return attrs.evolve(
            view,
            status="failed",
            error={"type": type(failure).__name__, "message": public_text(str(failure))},
            usage=view.usage or usage_json(None),
            ended_at=now,
        )
    return attrs.evolve(view, status="cancelled", ended_at=now, pending=())


async def stored_pending(
    store: Store, served: Mapping[str, Any], agent: str | None = None, *, stranded: bool = False
) -> list[PendingView]:
    """The calls waiting for a decision in ``store``, of the ``served`` agents (or of
    ``agent`` alone), leaving out those decided already (``stranded``: see
    ``undecided``): what ``Runs.pending`` lists, on any process of the store and after a
    restart."""
    views: list[PendingView] = []
    for record in await store.runs_awaiting_approval():
        parts = split_stored_id(record.agent_id)
        if parts is None or parts[0] not in served or agent not in (None, parts[0]):
            continue
        base = RunView(
            run_id=record.run_id,
            agent=parts[0],
            agent_id=parts[1],
            status="awaiting_approval",
            prompt=record.prompt,
        )
        calls = await store.pending_calls(record.run_id)
        base = attrs.evolve(base, pending=tuple(pending_view(base, c) for c in calls))
        views += (await undecided(base, store, stranded=stranded)).pending
    return views


async def is_paused(store: Store, agent: str, agent_id: str) -> bool:
    """Whether the conversation has a run awaiting approval: busy, for ``if_busy:
    "reject"``, as a run in progress is (its next run would go past the paused one and
    end it cancelled)."""
    records = await store.runs(stored_id(agent, agent_id))
    return any(record.status == "awaiting_approval" for record in records)
