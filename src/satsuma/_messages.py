"""Conversation values: messages and token usage.

A message's content is kept as the API's own content blocks (dicts in the SDK's "param"
form), so that thinking blocks, signatures and block types satsuma does not know travel
back to the API exactly as it sent them. The store knows only these types.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

__all__ = ["Message", "Role", "Usage"]

Role = Literal["user", "assistant"]


def _freeze_blocks(blocks: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(map(dict, blocks))  # no Python frame per block: every message of every turn


@attrs.frozen(kw_only=True)
class Message:
    """One message of a conversation.

    Attributes:
        role: ``"user"`` or ``"assistant"``.
        content: The content blocks, as the Messages API takes them (``{"type": "text",
            ...}``, ``tool_use``, ``tool_result``, ``thinking``, ...).
    """

    role: Role
    content: tuple[Mapping[str, Any], ...] = attrs.field(converter=_freeze_blocks)

    @classmethod
    def user(cls, *blocks: Mapping[str, Any] | str) -> Message:
        """A user message; strings become text blocks."""
        return cls(role="user", content=[_block(block) for block in blocks])

    @property
    def text(self) -> str:
        """The text blocks joined (what a person would read)."""
        return "".join(block["text"] for block in self.content if block.get("type") == "text")

    @property
    def tool_uses(self) -> list[Mapping[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_use"]

    @property
    def tool_results(self) -> list[Mapping[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_result"]

    @functools.cached_property
    def _param(self) -> Mapping[str, Any]:
        # Built once: the whole history goes out with every request, and a request late
        # in a long conversation should allocate nothing per message it carries. The
        # content as a list: the SDK copies a list by its exact type, a tuple only after
        # a mapping check (five Python calls a message, for every request carrying it).
        return {"role": self.role, "content": list(self.content)}

    @functools.cached_property
    def _size(self) -> int:
        # Computed once: a message never changes, and a long conversation is measured
        # before every model call.
        return sum(map(len, map(str, self.content)))  # no Python frame per block


def message_param(message: Message) -> Mapping[str, Any]:
    """The message as one item of the API's ``messages`` parameter, made once and shared
    by every request that carries it (the SDK copies a body before sending it)."""
    return message._param


def message_size(message: Message) -> int:
    """How many characters the message's blocks print as: a size estimate that history
    processors and the test models' usage counts share."""
    return message._size


def _block(block: Mapping[str, Any] | str) -> Mapping[str, Any]:
    return {"type": "text", "text": block} if isinstance(block, str) else block


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens counted by the API, and what they cost, per turn or summed per run.

    Attributes:
        input_tokens: Input tokens neither written to nor read from the prompt cache.
        output_tokens: Output tokens.
        cache_creation_input_tokens: Input tokens written to the prompt cache.
        cache_read_input_tokens: Input tokens read from the prompt cache.
        cache_creation_1h_input_tokens: Of ``cache_creation_input_tokens``, those
            written for an hour (``cache="1h"``), which cost more than 5 minutes' writes.
        cost_usd: What the tokens cost in US dollars, priced by the model's prices
            (``satsuma.set_prices`` overrides them); None when the cost is unknown: a
            model without prices (a local model on an OpenAI-compatible endpoint, a
            scripted one), or a sum with such a call in it. Never a made-up 0.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    cost_usd: float | None = None

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_1h_input_tokens=self.cache_creation_1h_input_tokens
            + other.cache_creation_1h_input_tokens,
            cost_usd=_summed_cost(self, other),
        )

    @property
    def is_empty(self) -> bool:
        """No token at all: a usage that adds nothing to a sum, its cost known or not."""
        return not (
            self.input_tokens
            or self.output_tokens
            or self.cache_creation_input_tokens
            or self.cache_read_input_tokens
        )

    @property
    def total_input_tokens(self) -> int:
        """Every input token, cached or not: the size of the prompt the API read."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


def _summed_cost(a: Usage, b: Usage) -> float | None:
    """The cost of two usages together: unknown when either has tokens of unknown cost.

    An empty usage (the start of a run's sum, a run that made no call) has no cost of its
    own, so it neither makes a sum unknown nor turns an unknown one into 0."""
    if a.cost_usd is None:
        return b.cost_usd if a.is_empty else None
    if b.cost_usd is None:
        return a.cost_usd if b.is_empty else None
    return a.cost_usd + b.cost_usd
