"""The script a ScriptedModel or a MessagesServer plays: replies and injected failures.

A script is a list. Each item answers one model call, in order:

- a ``str``: a text reply that ends the turn;
- a ``Reply``: text, thinking and tool calls, with an optional stop reason and usage;
- an exception (e.g. ``ModelError("overloaded", status=529)``): the call fails with it;
- for a MessagesServer, a ``Failure``: the HTTP-level fault to inject (see there).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._messages import Usage
from ..tools import ToolCall
from ._tools import tool_call

__all__ = ["Failure", "Reply", "script_item_calls"]


def _calls(value: Iterable[ToolCall | tuple[str, Any]]) -> tuple[ToolCall, ...]:
    out = []
    for item in value:
        if isinstance(item, ToolCall):
            out.append(item)
        else:
            name, arguments = item
            out.append(tool_call(name, arguments))
    return tuple(out)


@attrs.frozen(kw_only=True)
class Reply:
    """One scripted assistant response.

    Attributes:
        text: The text the assistant says (streamed as deltas), or None.
        tool_calls: ToolCalls, or ``(name, input)`` pairs (ids are made up). An input
            given as a ``str`` is streamed as that raw JSON text: use it to script a
            tool_use whose input does not parse.
        thinking: A thinking block's text, or None.
        stop_reason: Defaults to ``tool_use`` when there are tool calls, else ``end_turn``.
        usage: Defaults to a rough count (a token per 4 characters).
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    thinking: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None

    @property
    def final_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "end_turn"


@attrs.frozen(kw_only=True)
class Failure:
    """An HTTP-level fault for a MessagesServer to inject in place of one response.

    Build one with the class methods; after a failure the script moves on, so a retried
    request gets the next item.
    """

    kind: str
    status: int | None = None
    retry_after: float | None = None
    message: str = ""
    after_events: int = 0
    delay: float = 0.0
    then: Reply | str | None = None

    @classmethod
    def rate_limited(cls, retry_after: float | None = 1.0) -> Failure:
        """429 with a ``retry-after`` header."""
        return cls(kind="status", status=429, retry_after=retry_after, message="rate limited")

    @classmethod
    def overloaded(cls) -> Failure:
        """529 ``overloaded_error``."""
        return cls(kind="status", status=529, message="Overloaded")

    @classmethod
    def server_error(cls, status: int = 500) -> Failure:
        """A 5xx ``api_error``."""
        return cls(kind="status", status=status, message="Internal server error")

    @classmethod
    def bad_request(cls, message: str) -> Failure:
        """400 ``invalid_request_error`` (e.g. ``prompt is too long``): not retried."""
        return cls(kind="status", status=400, message=message)

    @classmethod
    def cut_stream(cls, reply: Reply | str, after_events: int = 3) -> Failure:
        """Start streaming ``reply``, then drop the connection after some events."""
        return cls(kind="cut", after_events=after_events, then=reply)

    @classmethod
    def stream_error(cls, reply: Reply | str, after_events: int = 3) -> Failure:
        """Start streaming ``reply``, then send an ``error`` event (overloaded) in the stream."""
        return cls(kind="error_event", after_events=after_events, then=reply, message="Overloaded")

    @classmethod
    def slow(cls, reply: Reply | str, delay: float) -> Failure:
        """Answer with ``reply``, but only after ``delay`` seconds."""
        return cls(kind="slow", delay=delay, then=reply)


def as_reply(item: Reply | str) -> Reply:
    return Reply(text=item) if isinstance(item, str) else item


def script_item_calls(item: Reply | str) -> tuple[ToolCall, ...]:
    return as_reply(item).tool_calls


def estimate_usage(reply: Reply, prompt_chars: int) -> Usage:
    """The default usage of a scripted reply: a token per 4 characters, at least 1."""
    if reply.usage is not None:
        return reply.usage
    out_chars = len(reply.text or "") + len(reply.thinking or "")
    out_chars += sum(len(str(call.input)) + len(call.name) for call in reply.tool_calls)
    return Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, out_chars // 4))


def reply_blocks(reply: Reply) -> tuple[list[Mapping[str, Any]], tuple[ToolCall, ...]]:
    """The assistant content blocks of a reply, and the calls to run.

    A call whose input is a str stands for raw JSON that did not parse: its block holds
    ``{}`` and its ToolCall keeps the raw text.
    """
    blocks: list[Mapping[str, Any]] = []
    if reply.thinking is not None:
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": "scripted"})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        block_input = call.input
        if isinstance(block_input, str):
            try:
                block_input = json.loads(block_input)
            except (ValueError, RecursionError):  # not JSON, or too deep for json to read
                block_input = {}
        if not isinstance(block_input, Mapping):
            block_input = {}
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(block_input)}
        )
    return blocks, reply.tool_calls
