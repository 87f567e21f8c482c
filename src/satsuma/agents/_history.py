"""History processors: what of a long conversation is sent with each model call.

The agent keeps its whole conversation; a processor chooses, before each call, the part
sent to the model. Every processor cuts only at the start of an exchange (a user message
holding no tool results), so a ``tool_use`` is never separated from its ``tool_result``
and the messages sent always begin with a user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, final

import attrs

from .._messages import Message, Usage

__all__ = ["HistoryProcessor", "KeepAll", "KeepLastExchanges", "TokenBudget"]


class HistoryProcessor(Protocol):
    """Chooses the messages sent with a model call.

    ``last_usage`` is the usage of the previous call of this agent (None before the
    first), whose input tokens tell how large the conversation was then.
    """

    def process(
        self, messages: Sequence[Message], last_usage: Usage | None
    ) -> Sequence[Message]: ...


def exchange_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes where an exchange starts: a user message with no tool_result in it."""
    return [
        index
        for index, message in enumerate(messages)
        if message.role == "user"
        and not any(block.get("type") == "tool_result" for block in message.content)
    ]


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
    """Send only the last ``count`` exchanges (a user prompt and everything after it)."""

    count: int = attrs.field(validator=_positive)

    def process(self, messages: Sequence[Message], last_usage: Usage | None) -> Sequence[Message]:
        starts = exchange_starts(messages)
        if len(starts) <= self.count:
            return messages
        return messages[starts[-self.count] :]


def _size(message: Message) -> int:
    return sum(len(str(block)) for block in message.content)


@final
@attrs.frozen
class TokenBudget:
    """Keep the conversation under ``max_tokens`` input tokens by dropping the oldest
    exchanges.

    Token counts come from the usage the API reported for the previous call: the
    characters of each message are converted at that call's tokens-per-character rate
    (four characters a token before the first call). The newest exchange is always kept;
    if it alone is over the budget, the API's "prompt is too long" answer fails the run.
    """

    max_tokens: int = attrs.field(validator=_positive)

    def process(self, messages: Sequence[Message], last_usage: Usage | None) -> Sequence[Message]:
        sizes = [_size(message) for message in messages]
        total_chars = sum(sizes) or 1
        if last_usage is not None and last_usage.total_input_tokens > 0:
            rate = last_usage.total_input_tokens / total_chars
        else:
            rate = 0.25
        if total_chars * rate <= self.max_tokens:
            return messages
        remaining = total_chars
        for start in exchange_starts(messages)[1:]:
            remaining = sum(sizes[start:])
            if remaining * rate <= self.max_tokens:
                return messages[start:]
        starts = exchange_starts(messages)
        return messages[starts[-1] :] if starts else messages
