"""The Anthropic Messages API's request parameters: the one place that builds them.

What AnthropicModel sends (and FakeModel bills): the ``messages``, ``system`` and
``tools`` parameters and the prompt cache's breakpoints. The conversation's own values
(messages, tool definitions) are shared with the SDK rather than copied: it copies a
request's body before sending it. Imports nothing of satsuma, and not the SDK either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "MessageLike",
    "conversation_breakpoints",
    "mark_message",
    "message_params",
    "previous_turn_end",
    "request_params",
    "system_params",
    "tool_params",
]

_EPHEMERAL = {"type": "ephemeral"}


class MessageLike(Protocol):
    """What the codec needs of a conversation message (``satsuma.Message`` has it)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> Sequence[Mapping[str, Any]]: ...


def message_params(messages: Iterable[MessageLike]) -> list[Mapping[str, Any]]:
    """The ``messages`` parameter: one ``{role, content}`` mapping per message.

    Nothing is copied: the whole history goes out with every request, and the SDK
    (``anthropic>=2.12``) copies a request's body into plain dicts and lists before
    sending it (tuples and read-only mappings included), never changing ours. A second
    deep copy here was the largest cost of a request late in a long conversation."""
    return [{"role": message.role, "content": message.content} for message in messages]


def _marker(ttl: str | None) -> dict[str, Any]:
    """A ``cache_control`` value: 5 minutes unless ``ttl`` is ``"1h"``."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else dict(_EPHEMERAL)


def system_params(
    system: str | None, *, cache: bool, ttl: str | None = None
) -> list[dict[str, Any]]:
    """The ``system`` parameter as text blocks (none for an empty prompt, which the API
    rejects); with ``cache``, the last block carries the cache breakpoint."""
    if not system:
        return []
    blocks: list[dict[str, Any]] = [{"type": "text", "text": system}]
    if cache:
        blocks[-1]["cache_control"] = _marker(ttl)
    return blocks


def tool_params(
    tools: Iterable[Mapping[str, Any]], *, cache: bool, ttl: str | None = None
) -> list[Mapping[str, Any]]:
    """The ``tools`` parameter; with ``cache``, the last definition carries the cache
    breakpoint (the API caches every tool up to and including it).

    The definitions themselves are not copied, for the reason ``message_params`` gives:
    the SDK copies the body before sending it. Only the last one is, when it gets the
    breakpoint, so that the caller's stays as it was."""
    out: list[Mapping[str, Any]] = list(tools)
    if cache and out:
        out[-1] = {**out[-1], "cache_control": _marker(ttl)}
    return out


def previous_turn_end(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The index, in a ``messages`` parameter, of the message that ended the previous request of the agent loop: the
    last user message before the last assistant message (None if there is none).

    Each request of the loop ends with a user message (a prompt or tool results) and
    its answer comes next, so that message is where the last request's cache entry
    ends: a breakpoint there reads it back even when this turn adds more than the 20
    blocks the API looks back from a breakpoint (many parallel tool results)."""
    seen_assistant = False
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "assistant":
            seen_assistant = True
        elif seen_assistant and messages[index]["content"]:
            return index
    return None


def mark_message(message: Mapping[str, Any], ttl: str | None) -> Mapping[str, Any]:
    """A copy of a ``{role, content}`` parameter whose last block carries a breakpoint
    (only that block and the list are copied: the rest is shared, as sent)."""
    content = list(message["content"])
    content[-1] = {**content[-1], "cache_control": _marker(ttl)}
    return {"role": message["role"], "content": content}


def conversation_breakpoints(params: dict[str, Any], *, ttl: str | None, automatic: bool) -> None:
    """Add the breakpoints that move with the conversation to ``params`` (built by
    ``request_params`` with ``cache``), keeping to the API's 4 a request.

    With ``automatic`` (Anthropic's own API), the top-level ``cache_control`` puts one
    on the last block; elsewhere (Bedrock, Vertex AI, which take block breakpoints
    only) the last message's last block gets one. Either way the end of the previous
    turn gets one too, while the 4 allow it (tools and system take up to 2)."""
    messages: list[Mapping[str, Any]] = params["messages"]
    if not messages or not _markable(messages[-1]):
        return
    used = bool(params.get("system")) + bool(params.get("tools"))
    if automatic:
        params["cache_control"] = _marker(ttl)
    else:
        messages[-1] = mark_message(messages[-1], ttl)
    used += 1
    previous = previous_turn_end(messages)
    if previous is not None and used < 4 and _markable(messages[previous]):
        messages[previous] = mark_message(messages[previous], ttl)


def _markable(message: Mapping[str, Any]) -> bool:
    """Whether a message's last block may carry a breakpoint: the API refuses one on
    an empty text block (and there is nothing to mark in an empty message)."""
    content = message["content"]
    if not content:
        return False
    last = content[-1]
    return not (last.get("type") == "text" and not last.get("text"))


def request_params(
    *,
    model: str,
    system: str | None,
    messages: Iterable[MessageLike],
    tools: Iterable[Mapping[str, Any]] = (),
    max_tokens: int,
    cache: bool,
    ttl: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create`` (without ``stream``).

    With ``cache``, the tools and the system prompt carry breakpoints (``ttl`` ``"1h"``
    for an hour, else 5 minutes); ``conversation_breakpoints`` adds the conversation's.
    """
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": message_params(messages),
    }
    if system_blocks := system_params(system, cache=cache, ttl=ttl):
        params["system"] = system_blocks
    if tool_definitions := tool_params(tools, cache=cache, ttl=ttl):
        params["tools"] = tool_definitions
    return params
