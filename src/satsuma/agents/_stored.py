"""A run read back as the store kept it: its part of the conversation, its typed or text
answer, its result; and the answer of an interrupted run that later runs went past."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from .._messages import Message
from ..store import PendingApproval, RunRecord
from ..tools import PendingCall
from ._output import ANSWER_TAKEN_TEXT, OUTPUT_TOOL, OutputSpec, answer_json
from ._result import NO_ANSWER, RunResult, RunStatus

__all__ = ["gone_past", "own_answer", "run_part", "stored_answer", "stored_result"]


def own_answer(
    record: RunRecord, runs: Sequence[RunRecord], history: Sequence[Message]
) -> str | None:
    """The answer of an interrupted run that later runs went past (its end could not be
    written before the process stopped), found in its own part of the conversation:
    from its prompt to where the next run starts. None when no later run started, so
    that the run's part is the conversation's end (it is resumed there).

    Raises:
        ValueError: a later run went past it before it had an answer.
    """
    if record.position is None:
        return None  # recorded by an older satsuma: where it starts is not known
    order = [r.run_id for r in runs]
    if record.run_id not in order:
        return None
    later = [r.position for r in runs[order.index(record.run_id) + 1 :] if r.position is not None]
    if not later:
        return None
    part = history[record.position : max(record.position, min(later[0], len(history)))]
    if part and part[-1].role == "assistant" and not part[-1].tool_uses:
        return part[-1].text
    raise ValueError(
        f"run {record.run_id} can no longer be resumed: a later run went past it before "
        "it had an answer"
    )


def run_part(record: RunRecord, history: Sequence[Message]) -> list[Message]:
    """The messages a run added to the conversation: from its prompt to the next run's
    prompt (a user message with text) or the end; empty when its position is unknown.

    A run that ended on tool results (a typed answer's) had the next prompt joined to
    that message (roles alternate): the run's part gets the results back alone, as the
    run itself left them."""
    part: list[Message] = []
    if record.position is not None and record.position < len(history):
        part.append(history[record.position])
        for message in history[record.position + 1 :]:
            if message.role == "user" and any(
                block.get("type") == "text" for block in message.content
            ):
                # The next run's prompt.
                results = message.tool_results
                if results:
                    part.append(Message(role="user", content=results))
                break
            part.append(message)
    return part


def stored_answer(part: Sequence[Message]) -> tuple[Any] | None:
    """The typed answer a run took, as the model sent it (in a 1-tuple, since
    None may be an answer), found in the run's part of the conversation: the input of
    the final_answer call that was answered as taken (its input: a type that is not an
    object is wrapped as ``{"value": ...}``). None when the run took none."""
    for index in range(len(part) - 1, 0, -1):
        results = part[index].tool_results if part[index].role == "user" else []
        taken = {
            result["tool_use_id"]
            for result in results
            if not result.get("is_error") and result.get("content") == ANSWER_TAKEN_TEXT
        }
        if not taken:
            continue
        for block in part[index - 1].tool_uses:
            if block.get("id") in taken and block.get("name") == OUTPUT_TOOL:
                return (block.get("input"),)
    return None


def stored_result(
    record: RunRecord,
    history: Sequence[Message],
    pending: Sequence[PendingApproval],
    output: OutputSpec | None,
) -> RunResult[Any]:
    """A run's result rebuilt from its record and its part of the conversation: its
    typed answer read as ``output`` (the type to read it as; None: text).
    ``iterations`` is counted from the run's assistant messages.

    Raises:
        ValueError: the run has not ended (running, interrupted); its stored answer does
            not fit ``output``; or it completed with another kind of answer than
            ``output`` reads (text for a type, or a typed answer read as text): it was
            asked for another type with ``run(..., output_type=X)``.
    """
    if record.status in ("running", "interrupted"):
        raise ValueError(
            f"run {record.run_id} has not ended ({record.status}): it has no result yet"
        )
    part = run_part(record, history)
    found = stored_answer(part)
    value: Any
    if found is not None and output is None:
        raise ValueError(
            f"run {record.run_id} completed with a typed answer (its final_answer input: "
            f"{answer_json(found[0])}), not text: read it with result(run_id, "
            "output_type=X), X the type it was asked for"
        )
    if found is not None:
        assert output is not None
        value = output.from_input(found[0])
    elif output is not None and record.status == "completed":
        raise ValueError(
            f"run {record.run_id} completed with a text answer, not a typed one (it was "
            "asked for text: output_type=str); read it with result(run_id, output_type=str)"
        )
    elif output is not None:
        value = NO_ANSWER
    else:
        value = next((m.text for m in reversed(part) if m.role == "assistant" and m.text), "")
    return RunResult(
        run_id=record.run_id,
        output=value,
        status=cast("RunStatus", record.status),
        messages=tuple(part),
        usage=record.usage,
        iterations=sum(1 for message in part if message.role == "assistant"),
        error=record.error,
        pending=tuple(
            PendingCall(id=p.tool_use_id, tool_name=p.tool_name, input=p.input, reason=p.reason)
            for p in pending
        ),
    )


def gone_past(record: RunRecord, when: str) -> str:
    """Why a run a new run or a reset goes past ends ``cancelled`` (see runs_left)."""
    if record.status == "awaiting_approval":
        return f"awaiting approval, and not decided {when}"
    return (
        "decided through the store without the agent's lease (Store.claim_paused_run), "
        f"so nothing ran its calls; closed {when}"
    )
