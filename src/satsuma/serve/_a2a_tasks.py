"""satsuma's runs as A2A tasks, and A2A messages as prompts and approval decisions: the
mapping the A2A surface (``_a2a.py``) answers by (docs/serve.md, "A2A").

- a task is a run: ``id`` is the run id, ``contextId`` the conversation's agent_id;
- a run's status is a task state (``queued`` is submitted; ``running`` and
  ``interrupted`` are working; ``awaiting_approval`` is input-required; ``completed``,
  ``cancelled`` and the failures are the terminal states);
- input-required's status message names each pending call (text for people, and a
  data part ``{"pending": [{"call_id", "tool", "input", "reason"}]}`` for programs);
  the decisions come back as a data part of the next message to the task:
  ``{"decisions": {call_id: {"decision": "approve" | "deny", "input"?, "reason"?}}}``;
- the output is the task's one artifact, ``output``: the final text as a text part, a
  typed output as a data part.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .. import _a2a as wire
from ..tools import Approve, Deny
from ._runs import DENIED, PendingView, RunState, RunView

__all__ = [
    "OUTPUT_ARTIFACT",
    "Decision",
    "artifact_of",
    "decisions_in",
    "prompt_of",
    "state_of",
    "task_of",
]

OUTPUT_ARTIFACT: Final = "output"

_STATES: Final[Mapping[RunState, wire.TaskState]] = {
    "queued": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "interrupted": "TASK_STATE_WORKING",  # its node or a restart resumes it
    "awaiting_approval": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "cancelled": "TASK_STATE_CANCELED",
    "max_iterations": "TASK_STATE_FAILED",
    "deadline_exceeded": "TASK_STATE_FAILED",
    "failed": "TASK_STATE_FAILED",
}


def state_of(status: RunState) -> wire.TaskState:
    """The task state of a run's status."""
    return _STATES[status]


def artifact_of(view: RunView) -> wire.Artifact | None:
    """The run's output as the task's artifact (None until it completed)."""
    if view.status != "completed" or view.output is None:
        return None
    part = (
        wire.Part.of_text(view.output)
        if isinstance(view.output, str)
        else wire.Part.of_data(view.output)
    )
    return wire.Artifact(parts=(part,), artifact_id=f"{view.run_id}-output", name=OUTPUT_ARTIFACT)


def _pending_json(call: PendingView) -> dict[str, Any]:
    return {"call_id": call.call_id, "tool": call.tool, "input": call.input, "reason": call.reason}


def _status_message(view: RunView) -> wire.Message | None:
    """What goes with the state: the question of input-required, the failure's reason."""
    parts: tuple[wire.Part, ...]
    if view.status == "awaiting_approval":
        lines = [f"{len(view.pending)} tool call(s) wait for a decision:"]
        lines += [
            f"- {p.call_id}: {p.tool}({json.dumps(p.input, default=str)[:500]})"
            for p in view.pending
        ]
        lines.append(
            'Reply to this task with a data part {"decisions": {CALL_ID: {"decision": '
            '"approve" or "deny", "input"?: {...}, "reason"?: "..."}}}.'
        )
        pending = {"pending": [_pending_json(p) for p in view.pending]}
        parts = (wire.Part.of_text("\n".join(lines)), wire.Part.of_data(pending))
    elif view.error is not None:
        error = dict(view.error)
        parts = (wire.Part.of_text(f"{error.get('type')}: {error.get('message')}"),)
    elif view.status in ("max_iterations", "deadline_exceeded"):
        parts = (wire.Part.of_text(f"the run ended: {view.status}"),)
    else:
        return None
    return wire.Message(
        role="ROLE_AGENT",
        parts=parts,
        message_id=f"{view.run_id}-status-{view.status}-{len(view.pending)}",
        context_id=view.agent_id,
        task_id=view.run_id,
    )


def _timestamp(view: RunView) -> str | None:
    moment = view.ended_at if view.ended_at is not None else view.started_at
    return None if moment is None else wire.rfc3339(moment)


def task_of(view: RunView, *, history: bool = True) -> wire.Task:
    """The run as an A2A task; ``history`` holds the prompt that started it."""
    artifact = artifact_of(view)
    prompt = wire.Message(
        role="ROLE_USER",
        parts=(wire.Part.of_text(view.prompt),),
        message_id=f"{view.run_id}-prompt",
        context_id=view.agent_id,
        task_id=view.run_id,
    )
    return wire.Task(
        id=view.run_id,
        context_id=view.agent_id,
        state=state_of(view.status),
        message=_status_message(view),
        timestamp=_timestamp(view),
        artifacts=() if artifact is None else (artifact,),
        history=(prompt,) if history else (),
    )


def status_update_of(view: RunView) -> wire.StatusUpdate:
    """The run's state as a streamed status update."""
    return wire.StatusUpdate(
        task_id=view.run_id,
        context_id=view.agent_id,
        state=state_of(view.status),
        message=_status_message(view),
        timestamp=_timestamp(view),
    )


def prompt_of(message: wire.Message) -> str:
    """The prompt a message carries: its text parts; a message of data parts only is
    their JSON.

    Raises:
        A2AError: ``CONTENT_TYPE_NOT_SUPPORTED`` for a file part (by URL or bytes);
            ``INVALID_PARAMS`` for a message with nothing to say.
    """
    for part in message.parts:
        if part.kind in ("url", "raw"):
            raise wire.A2AError(
                wire.CONTENT_TYPE_NOT_SUPPORTED,
                "file parts are not supported: send text parts (or data parts)",
            )
    text = message.text
    if not text.strip() and message.data:
        text = "\n".join(json.dumps(value, ensure_ascii=False) for value in message.data)
    if not text.strip():
        raise wire.A2AError(wire.INVALID_PARAMS, "the message has no text: nothing to ask")
    return text


@attrs.frozen
class Decision:
    """One pending call's decision, read from a message."""

    call_id: str
    decision: Approve | Deny


def _invalid(message: str) -> wire.A2AError:
    return wire.A2AError(wire.INVALID_PARAMS, message)


def decisions_in(message: wire.Message, by: str | None) -> list[Decision]:
    """The decisions a message to an input-required task carries: its data part
    ``{"decisions": {call_id: {"decision": "approve" | "deny", "input"?, "reason"?}}}``.

    Raises:
        A2AError: ``INVALID_PARAMS`` naming what is wrong (no such data part, a
            decision neither approve nor deny, an ``input`` that is not an object...).
    """
    found = [d for d in message.data if isinstance(d, Mapping) and "decisions" in d]
    if len(found) != 1:
        raise _invalid(
            "the task waits for approval: send one data part "
            '{"decisions": {CALL_ID: {"decision": "approve" or "deny"}}}'
        )
    given = found[0]["decisions"]
    if not isinstance(given, Mapping) or not given:
        raise _invalid("'decisions' must be a non-empty object of call ids to decisions")
    decisions = []
    for call_id, raw in given.items():
        where = f"decisions[{call_id!r}]"
        if not isinstance(raw, Mapping):
            raise _invalid(f"{where} must be an object")
        unknown = sorted(set(raw) - {"decision", "input", "reason"})
        if unknown:
            raise _invalid(f"{where} has an unknown field {unknown[0]!r}")
        verdict = raw.get("decision")
        if verdict == "approve":
            if "reason" in raw:
                raise _invalid(f"{where}: 'reason' goes with a denial only")
            edited = raw.get("input")
            if edited is not None and not isinstance(edited, Mapping):
                raise _invalid(f"{where}.input must be an object")
            decisions.append(Decision(call_id, Approve(input=edited, by=by)))
        elif verdict == "deny":
            if "input" in raw:
                raise _invalid(f"{where}: 'input' goes with an approval only")
            reason = raw.get("reason", "")
            if not isinstance(reason, str):
                raise _invalid(f"{where}.reason must be a string")
            decisions.append(Decision(call_id, Deny(reason.strip() or DENIED, by=by)))
        else:
            raise _invalid(f"{where}.decision must be 'approve' or 'deny', got: {verdict!r:.40}")
    return decisions
