"""History processors: what of a long conversation is sent with each model call.

The agent keeps its whole conversation; a processor chooses, before each call, the part
sent to the model. Every processor cuts only at the start of an exchange (a user message
holding no tool results), so a ``tool_use`` is never separated from its ``tool_result``
and the messages sent always begin with a user message.

A trimmer cuts in steps, never one exchange a turn: once the conversation passes its
limit it drops old exchanges until what is left is ``cut_to`` of the limit (60 % by
default), then keeps that first message for as many turns as the limit allows. The
messages sent then begin the same way from turn to turn, and the prompt cache (a prefix
read back byte for byte) serves them; a cut every turn would write it again every turn.
Where a cut is remembered between calls, a ``TrimMemo`` per conversation, kept by the
agent, holds it (``choose``); ``process`` alone starts afresh each time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, final

import attrs

from .._messages import Message, Usage, message_size

__all__ = [
    "HistoryProcessor",
    "KeepAll",
    "KeepLastExchanges",
    "TokenBudget",
    "TrimMemo",
    "choose",
    "fixed_size",
]


class HistoryProcessor(Protocol):
    """Chooses the messages sent with a model call.

    ``last_usage`` is the usage of the previous call of this agent (None before the
    first), whose input tokens tell how large the conversation was then.
    """

    def process(
        self, messages: Sequence[Message], last_usage: Usage | None
    ) -> Sequence[Message]: ...


def starts_exchange(message: Message) -> bool:
    """Whether an exchange starts at this message: a user message with no tool_result."""
    return message.role == "user" and not any(
        block.get("type") == "tool_result" for block in message.content
    )


def exchange_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes where an exchange starts, first to last."""
    return [index for index, message in enumerate(messages) if starts_exchange(message)]


def _starts_from_the_end(messages: Sequence[Message]) -> Iterator[int]:
    """Indexes where an exchange starts, last to first: a processor walks back only as
    far as what it keeps, so its cost does not grow with the conversation's length."""
    for index in range(len(messages) - 1, -1, -1):
        if starts_exchange(messages[index]):
            yield index


@final
class TrimMemo:
    """What a conversation's trimmer remembers between model calls: where the messages
    of the last request began (an index, and that message, to tell that the history was
    not rewritten since), the size of that request in characters (what the API's
    usage for it calibrates), and the size of the tool definitions last measured."""

    __slots__ = (
        "counted",
        "counted_chars",
        "counted_last",
        "counted_start",
        "first",
        "sent_chars",
        "start",
        "tools",
        "tools_chars",
    )

    def __init__(self) -> None:
        self.start = 0
        self.first: Message | None = None
        self.sent_chars = 0
        self.tools: object = None
        self.tools_chars = 0
        # The characters of messages[counted_start:counted] when last measured (and the
        # last of them, to tell that they are still there): the next call adds only the
        # new messages, so a long kept history is not summed again at every call.
        self.counted_start = 0
        self.counted = 0
        self.counted_chars = 0
        self.counted_last: Message | None = None

    def chars_from(self, messages: Sequence[Message], start: int) -> int:
        """Characters of ``messages[start:]``, measuring only what was added since the
        last time when the start is the same."""
        end = self.counted
        if (
            self.counted_start == start
            and start < end <= len(messages)
            and messages[end - 1] is self.counted_last
        ):
            chars = self.counted_chars + _chars(messages[end:])
        else:
            chars = _chars(messages[start:])
        self.counted_start, self.counted, self.counted_chars = start, len(messages), chars
        self.counted_last = messages[-1] if messages else None
        return chars

    def start_in(self, messages: Sequence[Message]) -> int:
        """The remembered start, or 0 when the history changed under it (a restart, a
        roll-back)."""
        start = self.start
        if 0 < start < len(messages) and messages[start] is self.first:
            return start
        return 0

    def keep(self, messages: Sequence[Message], start: int) -> int:
        self.start = start
        self.first = messages[start] if start < len(messages) else None
        return start

    def rate(self, last_usage: Usage | None) -> float:
        """Tokens per character: of the last request, as the API counted it, or 0.25."""
        if last_usage is not None and last_usage.total_input_tokens > 0 and self.sent_chars:
            return last_usage.total_input_tokens / self.sent_chars
        return 0.25


def fixed_size(memo: TrimMemo, system: str | None, tools: Sequence[Mapping[str, Any]]) -> int:
    """Characters of what every request carries besides its messages (the system prompt
    and the tool definitions), measured as messages are; the tools measured again only
    when they change (an MCP server announced new ones)."""
    if memo.tools is not tools:
        memo.tools = tools
        # An agent class's prepared definitions are one object for all its agents: the
        # last measured is remembered for the process (held, so its id is not reused),
        # and a conversation of one run does not measure them again.
        global _last_measured
        last = _last_measured
        if last is not None and last[0] is tools:
            memo.tools_chars = last[1]
        else:
            memo.tools_chars = sum(len(str(tool)) for tool in tools)
            _last_measured = (tools, memo.tools_chars)
    return len(system or "") + memo.tools_chars


_last_measured: tuple[Sequence[Mapping[str, Any]], int] | None = None


def choose(
    processor: HistoryProcessor,
    messages: Sequence[Message],
    last_usage: Usage | None,
    memo: TrimMemo,
    fixed_chars: int,
) -> Sequence[Message]:
    """The messages to send with a call: by satsuma's trimmers with the conversation's
    memo and the size of the system prompt and tools (they count the whole request);
    by any other processor through ``process``."""
    if isinstance(processor, (TokenBudget, KeepLastExchanges)):
        start = processor.cut(messages, last_usage, memo, fixed_chars)
        # What the API's usage for this call will calibrate (TokenBudget's next call,
        # the context window's check).
        memo.sent_chars = fixed_chars + memo.chars_from(messages, start)
        return messages[start:]
    chosen = processor.process(messages, last_usage)
    if chosen is messages:
        memo.sent_chars = fixed_chars + memo.chars_from(messages, 0)
    else:
        memo.sent_chars = fixed_chars + _chars(chosen)
    return chosen


def _chars(messages: Sequence[Message]) -> int:
    # Sizes are measured once per message (they are cached on it).
    return sum(map(message_size, messages))


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0 < value <= 1
    ):
        raise ValueError(f"{attribute.name} must be a number above 0 and at most 1, got: {value!r}")


@final
@attrs.frozen
class KeepAll:
    """Send the whole conversation (the default)."""

    def process(self, messages: Sequence[Message], last_usage: Usage | None) -> Sequence[Message]:
        return messages


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got: {value!r}")


@final
@attrs.frozen
class KeepLastExchanges:
    """Send at most the last ``count`` exchanges (a user prompt and everything after it).

    Past ``count``, the oldest are dropped down to ``cut_to`` of it (60 %, at least one
    exchange), so that the messages sent begin the same way for several turns and the
    prompt cache keeps serving them.
    """

    count: int = attrs.field(validator=_positive)
    cut_to: float = attrs.field(default=0.6, validator=_fraction, kw_only=True)

    def process(self, messages: Sequence[Message], last_usage: Usage | None) -> Sequence[Message]:
        return messages[self.cut(messages, last_usage, TrimMemo(), 0) :]

    def cut(
        self,
        messages: Sequence[Message],
        last_usage: Usage | None,
        memo: TrimMemo,
        fixed_chars: int,
    ) -> int:
        """Where the messages sent begin (``choose`` calls it, with the memo)."""
        start = memo.start_in(messages)
        starts: list[int] = []
        for index in _starts_from_the_end(messages):
            if index < start:
                break
            starts.append(index)
            if len(starts) > self.count:
                keep = max(1, math.floor(self.count * self.cut_to))
                return memo.keep(messages, starts[keep - 1])
        return memo.keep(messages, start)


@final
@attrs.frozen
class TokenBudget:
    """Keep each request under ``max_tokens`` input tokens (tools, system prompt and
    messages together) by dropping the oldest exchanges.

    Past the limit, old exchanges are dropped until the request is ``cut_to`` of it (60 %
    by default); the messages sent then begin the same way until the limit is reached
    again, so that the prompt cache keeps serving them.

    Token counts come from the usage the API reported for the previous call: the
    characters of each message, of the system prompt and of the tool definitions are
    converted at that request's tokens-per-character rate (four characters a token
    before the first call). The newest exchange is always kept; if it alone is over the
    budget, the API's "prompt is too long" answer fails the run.
    """

    max_tokens: int = attrs.field(validator=_positive)
    cut_to: float = attrs.field(default=0.6, validator=_fraction, kw_only=True)

    def process(self, messages: Sequence[Message], last_usage: Usage | None) -> Sequence[Message]:
        return messages[self.cut(messages, last_usage, TrimMemo(), 0) :]

    def cut(
        self,
        messages: Sequence[Message],
        last_usage: Usage | None,
        memo: TrimMemo,
        fixed_chars: int,
    ) -> int:
        """Where the messages sent begin (``choose`` calls it, with the memo)."""
        rate = memo.rate(last_usage)
        start = memo.start_in(messages)
        if (fixed_chars + memo.chars_from(messages, start)) * rate <= self.max_tokens:
            return memo.keep(messages, start)
        # Walk back from the newest message, keeping whole exchanges while they fit in
        # the lower mark; it stops before the old start, which no longer fits at all.
        target = self.max_tokens * self.cut_to
        kept = None
        chars = fixed_chars
        end = len(messages)
        for index in _starts_from_the_end(messages):
            chars += _chars(messages[index:end])
            end = index
            if kept is not None and chars * rate > target:
                break
            kept = index
        return memo.keep(messages, kept if kept is not None else start)
