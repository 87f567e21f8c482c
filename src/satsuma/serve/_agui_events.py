"""A run's events as AG-UI events: the translation behind ``POST /ag-ui/{name}``.

satsuma's events (``satsuma.event_to_json``) say what happened; AG-UI's say it as a
chat interface draws it: a text message opened, grown and closed, a tool call opened,
given its arguments, closed and answered, all between RUN_STARTED and one closing
event. This module turns the first into the second, one event at a time, with no I/O,
so that it can be tested against the protocol's own models without a server.

The events are plain dicts with the protocol's camelCase keys: the ``ag-ui-protocol``
package is not a dependency of the server, only of its tests.

Steps: each model turn is a step named ``model_turn_{n}`` (n the run's iteration) and
each tool call a step named ``tool_call_{id}``, so that a client can show where the
time of a run went.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["APPROVAL_EVENT", "AGUIStream", "finished_without_end", "run_error"]

APPROVAL_EVENT = "satsuma.approval_required"
"""The CUSTOM event's name that says the run waits for decisions on tool calls."""

# A run that ended on one of these did not produce its answer: RUN_ERROR, whose
# ``code`` is the status.
_FAILED = frozenset({"failed", "max_iterations", "deadline_exceeded"})


def run_error(message: str, code: str) -> dict[str, Any]:
    """A RUN_ERROR event."""
    return {"type": "RUN_ERROR", "message": message, "code": code}


def finished_without_end(thread_id: str, run_id: str) -> dict[str, Any]:
    """The RUN_ERROR for a stream of events that stopped before the run's end."""
    del thread_id, run_id  # RUN_ERROR carries no ids: it closes the run it is in.
    return run_error("the run's events stopped before its end", "internal_error")


def _pending_json(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "call_id": call["id"],
        "tool": call["tool_name"],
        "input": call["input"],
        "reason": call["reason"],
    }


class AGUIStream:
    """The AG-UI events of one run, built from its satsuma events in order.

    ``start()`` gives RUN_STARTED; ``feed(event)`` gives the AG-UI events each satsuma
    event stands for; the last ones (RUN_FINISHED or RUN_ERROR) come from ``RunEnd``.
    Text messages and steps still open when the run ends are closed first, so that
    every START has its END.

    Args:
        thread_id: AG-UI's ``threadId`` (the conversation's ``agent_id``).
        run_id: AG-UI's ``runId``, as the client sent it.
        resumed: The ids of paused calls this run was resumed with.
    """

    def __init__(self, thread_id: str, run_id: str, *, resumed: Iterable[str] = ()) -> None:
        self._thread_id = thread_id
        self._run_id = run_id
        # Calls an earlier stream started and this one answers: a run resumed after
        # their approval gives their results with no start of their own.
        self._resumed = set(resumed)
        self._message_id: str | None = None  # the text message open, if any
        self._reasoning_id: str | None = None  # the reasoning message open, if any
        self._turn_step: str | None = None  # the model turn's step open, if any
        self._tool_steps: dict[str, str] = {}  # tool_use_id -> its open step
        self._last_message_id: str | None = None  # the turn's message: calls' parent
        self.ended = False

    def start(self, satsuma_run_id: str) -> dict[str, Any]:
        """RUN_STARTED, naming satsuma's own run id in its metadata."""
        return {
            "type": "RUN_STARTED",
            "threadId": self._thread_id,
            "runId": self._run_id,
            "metadata": {"satsuma": {"run_id": satsuma_run_id}},
        }

    def feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The AG-UI events that stand for one satsuma event (often none)."""
        kind = event.get("type")
        if self.ended:
            return []
        if kind == "TextDelta":
            return self._close_reasoning() + self._text(event)
        if kind == "ThinkingDelta":
            return self._thinking(event)
        if kind == "TurnEnd":
            return self._close_turn()
        if kind == "ToolCallStart":
            return self._tool_start(event)
        if kind == "ToolCallEnd":
            return self._tool_end(event)
        if kind == "RunEnd":
            return self._end(event["result"])
        # RunStart is RUN_STARTED, sent before any event; the others (model retries,
        # approvals asked and decided, output validation) have no AG-UI
        # counterpart a chat interface would draw, and the run's end carries their
        # outcome.
        return []

    def _open_turn(self, iteration: int) -> list[dict[str, Any]]:
        if self._turn_step is not None:
            return []
        self._turn_step = f"model_turn_{iteration}"
        return [{"type": "STEP_STARTED", "stepName": self._turn_step}]

    def _text(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        text = str(event.get("text", ""))
        if not text:
            # AG-UI refuses an empty delta; an empty piece says nothing anyway.
            return []
        out = self._open_turn(int(event.get("iteration", 0)))
        if self._message_id is None:
            self._message_id = f"{event.get('run_id', self._run_id)}-{event.get('iteration', 0)}"
            self._last_message_id = self._message_id
            out.append(
                {"type": "TEXT_MESSAGE_START", "messageId": self._message_id, "role": "assistant"}
            )
        out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": self._message_id, "delta": text})
        return out

    def _thinking(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        text = str(event.get("text", ""))
        if not text:
            return []
        out = self._open_turn(int(event.get("iteration", 0)))
        if self._reasoning_id is None:
            self._reasoning_id = (
                f"{event.get('run_id', self._run_id)}-{event.get('iteration', 0)}-reasoning"
            )
            out.append({"type": "REASONING_START", "messageId": self._reasoning_id})
            out.append(
                {
                    "type": "REASONING_MESSAGE_START",
                    "messageId": self._reasoning_id,
                    "role": "reasoning",
                }
            )
        out.append(
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": self._reasoning_id, "delta": text}
        )
        return out

    def _close_reasoning(self) -> list[dict[str, Any]]:
        if self._reasoning_id is None:
            return []
        message_id, self._reasoning_id = self._reasoning_id, None
        return [
            {"type": "REASONING_MESSAGE_END", "messageId": message_id},
            {"type": "REASONING_END", "messageId": message_id},
        ]

    def _close_text(self) -> list[dict[str, Any]]:
        if self._message_id is None:
            return []
        message_id, self._message_id = self._message_id, None
        return [{"type": "TEXT_MESSAGE_END", "messageId": message_id}]

    def _close_turn(self) -> list[dict[str, Any]]:
        out = self._close_reasoning() + self._close_text()
        if self._turn_step is not None:
            out.append({"type": "STEP_FINISHED", "stepName": self._turn_step})
            self._turn_step = None
        return out

    def _tool_start(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        # A call starts once its turn ended (its input is whole by then).
        out = self._close_turn()
        call_id = str(event["tool_use_id"])
        step = f"tool_call_{call_id}"
        self._tool_steps[call_id] = step
        start: dict[str, Any] = {
            "type": "TOOL_CALL_START",
            "toolCallId": call_id,
            "toolCallName": str(event["tool_name"]),
        }
        if self._last_message_id is not None:
            start["parentMessageId"] = self._last_message_id
        out += [{"type": "STEP_STARTED", "stepName": step}, start]
        out.append(
            {
                "type": "TOOL_CALL_ARGS",
                "toolCallId": call_id,
                "delta": json.dumps(event.get("input"), separators=(",", ":")),
            }
        )
        out.append({"type": "TOOL_CALL_END", "toolCallId": call_id})
        return out

    def _tool_end(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        call_id = str(event["tool_use_id"])
        step = self._tool_steps.pop(call_id, None)
        if step is None and call_id not in self._resumed:
            return []  # a call this stream never saw start, nor was resumed with
        self._resumed.discard(call_id)
        outcome = event.get("outcome") or {}
        content = outcome.get("content", "")
        out: list[dict[str, Any]] = [
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"{call_id}-result",
                "toolCallId": call_id,
                "content": content if isinstance(content, str) else json.dumps(content),
                "role": "tool",
            }
        ]
        if step is not None:
            out.append({"type": "STEP_FINISHED", "stepName": step})
        return out

    def _close_all(self) -> list[dict[str, Any]]:
        out = self._close_turn()
        for step in self._tool_steps.values():
            out.append({"type": "STEP_FINISHED", "stepName": step})
        self._tool_steps.clear()
        return out

    def _end(self, result: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.ended = True
        out = self._close_all()
        status = str(result.get("status"))
        satsuma_run_id = result.get("run_id")
        if status in _FAILED:
            message = result.get("error") or f"the run ended {status}"
            out.append(run_error(str(message), status))
            return out
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self._thread_id,
            "runId": self._run_id,
        }
        body: dict[str, Any] = {"run_id": satsuma_run_id, "status": status}
        if status == "awaiting_approval":
            pending = [_pending_json(call) for call in result.get("pending", ())]
            body["pending"] = pending
            out.append(
                {
                    "type": "CUSTOM",
                    "name": APPROVAL_EVENT,
                    "value": {"run_id": satsuma_run_id, "pending": pending},
                }
            )
            if pending:  # an interrupt outcome names at least one interrupt
                finished["outcome"] = {
                    "type": "interrupt",
                    "interrupts": [
                        {
                            "id": call["call_id"],
                            "reason": "tool_approval",
                            "message": call["reason"],
                            "toolCallId": call["call_id"],
                            "metadata": {"tool": call["tool"], "input": call["input"]},
                        }
                        for call in pending
                    ],
                }
        elif status == "cancelled":
            finished["outcome"] = {"type": "cancelled"}
        else:
            body["output"] = result.get("output")
        finished["result"] = body
        out.append(finished)
        return out
