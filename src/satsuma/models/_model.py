"""The Model protocol: what the agent loop needs from a model provider.

A model takes a request (system prompt, messages, tool definitions) and returns the
assistant's response, reporting text and thinking as they stream and each retry it
makes. ``AnthropicModel`` is the implementation for the Anthropic Messages API;
``satsuma.testing`` has ``ScriptedModel`` and ``FunctionModel`` for tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from .._frozen import FrozenDict, freeze
from .._messages import Message, Usage
from .._toolcall import ToolCall

__all__ = ["CACHE_MODES", "CacheMode", "Model", "ModelListener", "ModelRequest", "ModelResponse"]


_FROZEN = frozenset((FrozenDict,))


def _frozen_tools(tools: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    # Frozen once where they are made (AgentSpec.tool_schemas): then this only checks,
    # and the class's one tuple goes on as it is.
    if type(tools) is tuple and set(map(type, tools)) <= _FROZEN:  # no frame per tool
        return tools
    return tuple(map(freeze, tools))


CacheMode: TypeAlias = Literal["auto", "1h"]
"""Prompt caching of a request: ``"auto"`` (breakpoints on the tools, the system prompt
and the conversation's prefix, moving with it, for 5 minutes) or ``"1h"`` (the same,
written for an hour)."""

CACHE_MODES: tuple[CacheMode, ...] = ("auto", "1h")


def _cache_mode(value: object) -> CacheMode | None:
    # True and False were this field's values before the modes: kept as "auto" and None.
    if value is True:
        return "auto"
    if value is False or value is None:
        return None
    if value in CACHE_MODES:
        return value
    raise ValueError(f'cache must be "auto", "1h" or None, got: {value!r}')


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One model call.

    Attributes:
        model: The model id (aliases are resolved before this point).
        system: The system prompt, or None.
        messages: The conversation, after the agent's history processor.
        tools: Tool definitions, as ``Tool.schema()`` gives them (and equal to it), but
            read-only all the way down: every agent of a class shares them, so their
            dicts and lists raise TypeError when changed. ``copy.deepcopy`` gives a plain
            copy to change.
        max_tokens: The most tokens the response may have.
        cache: Prompt caching: ``"auto"`` (the default) marks the tools, the system
            prompt and the conversation's prefix, the last moving with it, for 5
            minutes; ``"1h"`` the same for an hour; None sends no breakpoint. (True
            and False are taken as ``"auto"`` and None.)
    """

    model: str
    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_frozen_tools)
    max_tokens: int = 4096
    cache: CacheMode | None = attrs.field(default="auto", converter=_cache_mode)


@attrs.frozen(kw_only=True)
class ModelResponse:
    """The assistant's answer to one request.

    Attributes:
        content: The assistant message's blocks, to be kept in the history as they are.
        calls: One ToolCall per ``tool_use`` block, in order. Its ``input`` is the raw
            JSON text when the streamed input did not parse (the runner then answers
            that call with ``Invalid arguments``; the history block holds ``{}``).
        stop_reason: The API's stop reason (``end_turn``, ``tool_use``, ``max_tokens``...).
        usage: Tokens of this call.
        model: The model that answered.
        id: The provider's id for this response (the Messages API's ``msg_...``), or ""
            when the model has none (scripted models).
    """

    content: tuple[Mapping[str, Any], ...]
    calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None
    usage: Usage = attrs.Factory(Usage)
    model: str = ""
    id: str = ""

    @property
    def text(self) -> str:
        return "".join(block["text"] for block in self.content if block.get("type") == "text")


class ModelListener(Protocol):
    """Receives what a model reports while it answers.

    ``wants_deltas`` is False when nothing listens to the text and thinking as they are
    written (a run without event listeners): a model may then ask for whole responses,
    which cost less, and report their text in one piece.

    A model whose API answers with a ``retry-after`` also calls the listener's
    ``retry_after(seconds)``, if it has one (look it up with ``getattr``): the agent loop
    then pauses every user of the configuration's limits (docs/limits.md).
    """

    @property
    def wants_deltas(self) -> bool: ...

    def text(self, delta: str) -> None: ...

    def thinking(self, delta: str) -> None: ...

    def retry(self, attempt: int, delay: float, reason: str) -> None: ...


class Model(Protocol):
    """A model provider. Raise ``ModelError`` for a failure that retries could not cure."""

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse: ...
