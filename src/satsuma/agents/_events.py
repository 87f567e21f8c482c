"""Events an agent reports while it runs, and their JSON form.

Every event carries the agent's name, the run id and the iteration (the number of the
model call it belongs to; 0 before the first). Tool events are the ToolRunner's own
classes with those three fields filled in.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias, get_origin

import attrs
import cattrs

from .._messages import Usage
from ..tools import ToolEvent
from ._result import RunResult, raw_output

__all__ = [
    "AgentEvent",
    "BudgetWarning",
    "ModelRetry",
    "ModelWaitEnd",
    "ModelWaitStart",
    "OutputDelta",
    "OutputRejected",
    "OutputValidated",
    "RunEnd",
    "RunStart",
    "TextDelta",
    "ThinkingDelta",
    "TurnEnd",
    "event_to_json",
]


@attrs.frozen(kw_only=True)
class _RunEvent:
    agent: str
    run_id: str
    iteration: int


@attrs.frozen(kw_only=True)
class RunStart(_RunEvent):
    """A run began; ``prompt`` is the user's message."""

    prompt: str


@attrs.frozen(kw_only=True)
class _Piece(_RunEvent):
    """A piece of what the model writes, as it streams: ``text``."""

    text: str


@attrs.frozen(kw_only=True)
class TextDelta(_Piece):
    """A piece of the assistant's text, as it streams."""


@attrs.frozen(kw_only=True)
class ThinkingDelta(_Piece):
    """A piece of the assistant's thinking, as it streams."""


@attrs.frozen(kw_only=True)
class ModelRetry(_RunEvent):
    """A model call failed in a retryable way and is tried again after ``delay`` seconds.

    Text already streamed by the failed attempt is not part of the answer: UIs should
    drop what they showed of this iteration.
    """

    attempt: int
    delay: float
    reason: str


@attrs.frozen(kw_only=True)
class ModelWaitStart(_RunEvent):
    """The model call waits for its configuration's limits (docs/limits.md) before it is
    sent; only a call that cannot start at once reports it. ``reason`` says what it waits
    for first (``20 of 20 slots in use``, ``3 calls queued before it``, a rate, a
    ``retry-after`` pause); ``queued`` is how many calls wait, this one included."""

    reason: str
    queued: int


@attrs.frozen(kw_only=True)
class ModelWaitEnd(_RunEvent):
    """The model call waited ``seconds`` (after a ``ModelWaitStart``) and is sent now. A
    run cancelled while it waits ends with no ModelWaitEnd."""

    seconds: float


@attrs.frozen(kw_only=True)
class OutputDelta(_Piece):
    """A piece of the typed answer's JSON as the model writes it (the streamed input of
    its ``final_answer`` call; see docs/output.md). Parse it only once whole: the answer
    is ``OutputValidated``'s."""


@attrs.frozen(kw_only=True)
class OutputValidated(_RunEvent):
    """The model's answer validated: ``output`` is the typed value (verifiers, if any,
    have yet to pass it)."""

    output: Any


@attrs.frozen(kw_only=True)
class OutputRejected(_RunEvent):
    """The model's answer did not validate (or it ended its turn without one): it reads
    the errors and tries again while ``retries_left`` is above 0; else the run fails.
    A UI should drop the JSON this iteration streamed."""

    errors: tuple[str, ...]
    retries_left: int


@attrs.frozen(kw_only=True)
class TurnEnd(_RunEvent):
    """A model call ended: its usage and stop reason."""

    usage: Usage
    stop_reason: str | None


@attrs.frozen(kw_only=True)
class BudgetWarning(_RunEvent):
    """A model call's cost took a budget past 80 % of its limit (``satsuma.Budget``):
    sent once per budget and period (a run; an agent; an agent's UTC day), by the run
    whose call crossed the mark, whichever process it is in.

    Attributes:
        budget: ``usd_per_run``, ``usd_per_agent`` or ``usd_per_agent_per_day``.
        source: ``agent`` (the class's budget) or ``process`` (``satsuma.set_budget``).
        limit_usd: The limit.
        spent_usd: What is spent under it now.
    """

    budget: str
    source: str
    limit_usd: float
    spent_usd: float


@attrs.frozen(kw_only=True)
class RunEnd(_RunEvent):
    """The run ended; always the last event of a run."""

    result: RunResult


AgentEvent: TypeAlias = (
    RunStart
    | TextDelta
    | ThinkingDelta
    | ModelRetry
    | ModelWaitStart
    | ModelWaitEnd
    | ToolEvent  # a tool's events, with the run's agent, run_id and iteration
    | OutputDelta
    | OutputValidated
    | OutputRejected
    | TurnEnd
    | BudgetWarning
    | RunEnd
)

# satsuma's own converter: never cattrs' global one.
_converter: Final = cattrs.Converter()


def _is_run_result(cls: Any) -> bool:
    return cls is RunResult or get_origin(cls) is RunResult


def _unstructure_result(result: RunResult[Any]) -> dict[str, Any]:
    # The output is typed by the agent (an attrs instance, an enum...), not by the field:
    # unstructured by what it is.
    # A typed run with no answer has none: null.
    data = {
        field.alias or field.name: getattr(result, field.name) for field in attrs.fields(RunResult)
    }
    data["output"] = raw_output(result)
    return {key: _converter.unstructure(value) for key, value in data.items()}


_converter.register_unstructure_hook_func(_is_run_result, _unstructure_result)


def event_to_json(event: AgentEvent) -> dict[str, Any]:
    """An event as a JSON-ready dict, with its class name under ``"type"``."""
    return any_event_to_json(event)


def any_event_to_json(event: object) -> dict[str, Any]:
    """``event_to_json`` for any attrs event: an agent's, a tool's, a supervisor's (whose
    classes this layer may not import).

    Raises:
        TypeError: ``event`` is not an instance of an attrs class.
    """
    if not attrs.has(type(event)):
        raise TypeError(f"an event must be an attrs class instance, got: {type(event).__name__}")
    data: dict[str, Any] = _converter.unstructure(event)
    data["type"] = type(event).__name__
    return data
