"""A conversation as a Chat Completions request: satsuma's own (Anthropic-shaped)
messages and tool definitions translated into the parameters of OpenAI's
``chat.completions.create``, at the edge, for ``OpenAIModel`` (its answers are
``_chat_codec``'s). Like ``_codec`` it imports nothing of satsuma and not the SDK.

What has no counterpart on the other side:

- A ``tool_result``'s ``is_error``: Chat Completions' tool messages have no such field, so
  the model reads it in the text, which begins ``Error: `` (satsuma's own failure texts
  already do; a tool's ``("ok", content, True)`` gets the prefix here).
- Images in a tool result: tool messages carry text only, so they follow in a user
  message after the turn's tool messages.
- Thinking blocks (from an Anthropic model earlier in the conversation) are left out: no
  Chat Completions endpoint takes them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._requests import MessageLike

__all__ = [
    "UnsupportedContent",
    "chat_messages",
    "chat_tools",
    "request_params",
    "tool_message_text",
]

_ERROR_PREFIX = "Error: "


class UnsupportedContent(ValueError):
    """A conversation holds something Chat Completions cannot carry."""


def chat_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Function tools from Anthropic tool definitions (``{name, description,
    input_schema}``).

    Raises:
        UnsupportedContent: a definition of another kind (an Anthropic server tool).
    """
    out = []
    for tool in tools:
        if "input_schema" not in tool or tool.get("type", "custom") != "custom":
            raise UnsupportedContent(
                f"tool {tool.get('name')!r} is an Anthropic server tool "
                f"({tool.get('type')!r}), which Chat Completions cannot call"
            )
        function: dict[str, Any] = {
            "name": tool["name"],
            "parameters": dict(tool["input_schema"]),
        }
        if tool.get("description"):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _image_part(block: Mapping[str, Any]) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = source.get("url", "")
    else:
        raise UnsupportedContent(f"an image whose source is {source.get('type')!r}")
    return {"type": "image_url", "image_url": {"url": url}}


def _user_parts(blocks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append(_image_part(block))
        else:
            raise UnsupportedContent(f"a {kind!r} block in a user message")
    return parts


def _user_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    # Text alone goes as a plain string, which every compatible server takes (some local
    # ones take no list of parts at all).
    if all(part["type"] == "text" for part in parts):
        return {"role": "user", "content": "\n\n".join(part["text"] for part in parts)}
    return {"role": "user", "content": parts}


def tool_message_text(content: str | Sequence[Mapping[str, Any]], is_error: bool) -> str:
    """What the model reads in the tool message answering a call."""
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(block["text"] for block in content if block.get("type") == "text")
    if is_error and not text.startswith(_ERROR_PREFIX):
        text = _ERROR_PREFIX + text
    return text


def _user(message: MessageLike) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    rest: list[Mapping[str, Any]] = []
    for block in message.content:
        if block.get("type") != "tool_result":
            rest.append(block)
            continue
        content = block.get("content", "")
        out.append(
            {
                "role": "tool",
                "tool_call_id": block["tool_use_id"],
                "content": tool_message_text(content, bool(block.get("is_error"))),
            }
        )
        if not isinstance(content, str):
            pictures = [_image_part(part) for part in content if part.get("type") == "image"]
            if pictures:
                label = f"Images from the result of tool call {block['tool_use_id']}:"
                images += [{"type": "text", "text": label}, *pictures]
    parts = images + _user_parts(rest)
    if parts:
        out.append(_user_message(parts))
    return out


def _assistant(message: MessageLike) -> dict[str, Any] | None:
    texts = []
    calls = []
    for block in message.content:
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {
                        "name": block["name"],
                        "arguments": json.dumps(block.get("input", {})),
                    },
                }
            )
        # Thinking and Anthropic server blocks have no counterpart: left out.
    if not texts and not calls:
        return None
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        out["tool_calls"] = calls
    return out


def chat_messages(system: str | None, messages: Iterable[MessageLike]) -> list[dict[str, Any]]:
    """The ``messages`` parameter for a system prompt and a conversation.

    Raises:
        UnsupportedContent: a block Chat Completions cannot carry (a document, say).
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "user":
            out += _user(message)
        else:
            assistant = _assistant(message)
            if assistant is not None:
                out.append(assistant)
    return out


def request_params(
    *,
    model: str,
    system: str | None,
    messages: Iterable[MessageLike],
    tools: Iterable[Mapping[str, Any]] = (),
    max_tokens: int,
    max_tokens_param: str = "max_completion_tokens",
) -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create`` (without ``stream``)."""
    params: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(system, messages),
        max_tokens_param: max_tokens,
    }
    if definitions := chat_tools(tools):
        params["tools"] = definitions
    return params
