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
from typing import Any, Final, TypeVar

import attrs

from .._jsonvalue import plain_or_problem
from .._messages import Usage
from ..tools import ToolCall
from ._tools import tool_call

__all__ = ["Failure", "Reply", "script_item_calls"]

T = TypeVar("T")


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


# How many past requests a scripted model or a loopback server keeps by default: enough
# for any test to read back what it sent, and a bound for a long one (each request holds
# the whole conversation so far, so keeping all of them grows as its square).
DEFAULT_KEPT_REQUESTS: Final = 100


def checked_keep(keep_requests: object) -> int | None:
    """``keep_requests`` checked: an int >= 0, or None (keep every request).

    Raises:
        ValueError: it is neither.
    """
    if keep_requests is not None and (
        not isinstance(keep_requests, int) or isinstance(keep_requests, bool) or keep_requests < 0
    ):
        raise ValueError(f"keep_requests must be an integer >= 0 or None, got: {keep_requests!r}")
    return keep_requests


def remember(kept: list[T], item: T, keep: int | None) -> None:
    """Append ``item`` to ``kept``, dropping the oldest past the last ``keep``."""
    kept.append(item)
    if keep is not None and len(kept) > keep:
        del kept[: len(kept) - keep]


def as_reply(item: Reply | str) -> Reply:
    return Reply(text=item) if isinstance(item, str) else item


def script_item_calls(item: Reply | str) -> tuple[ToolCall, ...]:
    return as_reply(item).tool_calls


def input_text(value: Any) -> str:
    """A scripted call's input as the JSON text a model streams: a ``str`` as it is (raw
    JSON, perhaps not valid); ``{}`` for an input JSON cannot carry (nested past 64
    levels, NaN, an int past 4,300 digits, an object), which the agent's JSON gate then
    refuses from the call itself, as it would a real model's."""
    if isinstance(value, str):
        return value
    plain, problem = plain_or_problem(value, "")
    return "{}" if problem is not None else json.dumps(plain)


def unsendable(reply: Reply) -> str | None:
    """What makes a reply's call input impossible to send over the wire as JSON (a
    loopback server's reply), or None. Raw JSON text (a ``str``) is always sendable."""
    for call in reply.tool_calls:
        if not isinstance(call.input, str):
            _, problem = plain_or_problem(call.input, "")
            if problem is not None:
                return (
                    f"the input of call {call.id} ({call.name}) cannot be sent as JSON: "
                    f"{problem}; script it as raw JSON text (a str) to send it as it is"
                )
    return None


def estimate_usage(reply: Reply, prompt_chars: int) -> Usage:
    """The default usage of a scripted reply: a token per 4 characters, at least 1."""
    if reply.usage is not None:
        return reply.usage
    out_chars = len(reply.text or "") + len(reply.thinking or "")
    # Measured on the JSON text, never on str(input): a deep input's str() recurses, and
    # an int's past Python's digit limit raises.
    out_chars += sum(len(input_text(call.input)) + len(call.name) for call in reply.tool_calls)
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
        # As the model sent it: the agent's JSON gate judges it (a loopback server
        # refuses, when scripted, an input it could not write).
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(block_input)}
        )
    return blocks, reply.tool_calls
