"""A RunResult as the queue keeps it: JSON text, written by the node that ran the run
and read by the client that waits for it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from .._messages import Message, Usage
from ..agents import RunResult, RunStatus, internal
from ..store import QueuedRun, RunRecord
from ..tools import PendingCall

__all__ = [
    "decode_result",
    "encode_result",
    "failed_result",
    "queued_result",
    "result_from_record",
]


def encode_result(result: RunResult) -> str:
    return json.dumps(
        {
            "run_id": result.run_id,
            # A typed answer as JSON; null for a typed run that has none.
            "output": internal.output_to_json(internal.raw_output(result)),
            "status": result.status,
            "messages": [
                {"role": message.role, "content": list(message.content)}
                for message in result.messages
            ],
            "usage": {
                "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens,
                "cache_creation_input_tokens": result.usage.cache_creation_input_tokens,
                "cache_read_input_tokens": result.usage.cache_read_input_tokens,
                "cache_creation_1h_input_tokens": result.usage.cache_creation_1h_input_tokens,
                "cost_usd": result.usage.cost_usd,
            },
            "iterations": result.iterations,
            "error": result.error,
            "pending": [
                {"id": p.id, "tool_name": p.tool_name, "input": p.input, "reason": p.reason}
                for p in result.pending
            ],
        }
    )


def decode_result(text: str) -> RunResult:
    data: dict[str, Any] = json.loads(text)
    return RunResult(
        run_id=data["run_id"],
        output=data["output"],
        status=data["status"],
        messages=tuple(
            Message(role=message["role"], content=message["content"])
            for message in data["messages"]
        ),
        usage=Usage(**data["usage"]),
        iterations=data["iterations"],
        error=data["error"],
        pending=tuple(PendingCall(**p) for p in data.get("pending", ())),
    )


def failed_result(run_id: str, error: str) -> RunResult:
    """The result of a run that no agent could answer (its class is served by no node
    that could open it, its agent could not be opened, ...)."""
    return RunResult(run_id=run_id, output="", status="failed", error=error)


def queued_result(run: QueuedRun, text: str | None) -> RunResult:
    """The result of a run that ended in the queue: the one its node wrote, or (none
    was: the run never reached a node that could run it) a failed one saying why."""
    if text is not None:
        return decode_result(text)
    return failed_result(run.run_id, run.error or f"the run ended {run.status}")


def result_from_record(
    record: RunRecord, history: Sequence[Message], output_spec: internal.OutputSpec | None = None
) -> RunResult:
    """The result of a run whose agent recorded its end but whose node stopped before
    the queue heard of it: rebuilt from the record and the conversation (the messages
    of the run, from its prompt to the next prompt or the end; its iterations are not
    recorded). ``output_spec``: the agent class's output type, which reads a typed
    answer as the run's own end did (typed, so that the queue keeps the same JSON);
    without it, a stored answer is the final_answer call's input as the model sent it.

    Raises:
        ValueError: the stored answer does not fit ``output_spec``.
    """
    part = internal.run_part(record, history)
    answer = internal.stored_answer(part)  # a typed answer, as the JSON the model sent
    output: Any
    if answer is not None:
        output = answer[0] if output_spec is None else output_spec.from_input(answer[0])
    elif output_spec is not None:
        output = internal.NO_ANSWER  # a typed run that ended without its answer
    else:
        output = next((m.text for m in reversed(part) if m.role == "assistant" and m.text), "")
    status: RunStatus = "failed"
    if record.status not in ("running", "interrupted"):
        status = cast("RunStatus", record.status)
    return RunResult(
        run_id=record.run_id,
        output=output,
        status=status,
        messages=tuple(part),
        usage=record.usage,
        error=record.error,
    )
