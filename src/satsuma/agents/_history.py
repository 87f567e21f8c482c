"""History processors: what of a long conversation is sent with each model call.

The agent keeps its whole conversation; a processor chooses, before each call, the part
sent to the model. Every processor cuts only at the start of an exchange (a user message
holding no tool results), so a ``tool_use`` is never separated from its ``tool_result``
and the messages sent always begin with a user message.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, final

import attrs

from .._messages import Message, Usage, message_size

__all__ = ["HistoryProcessor", "KeepAll", "KeepLastExchanges", "TokenBudget"]


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
        kept = 0
        for seen, start in enumerate(_starts_from_the_end(messages)):
            if seen == self.count:  # an older exchange exists: drop it and what precedes
                return messages[kept:]
            kept = start
        return messages


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
        # Sizes are measured once per message (they are cached on it), so summing them is
        # the only work here that grows with the conversation.
        total_chars = sum(message_size(message) for message in messages) or 1
        if last_usage is not None and last_usage.total_input_tokens > 0:
            rate = last_usage.total_input_tokens / total_chars
        else:
            rate = 0.25
        if total_chars * rate <= self.max_tokens:
            return messages
        # Walk back from the newest message, keeping whole exchanges while they fit.
        kept = None
        chars = 0
        end = len(messages)
        for start in _starts_from_the_end(messages):
            chars += sum(message_size(message) for message in messages[start:end])
            end = start
            if kept is not None and chars * rate > self.max_tokens:
                break
            kept = start
        return messages[kept:] if kept is not None else messages
