"""The stored conversation as AG-UI messages, for the MESSAGES_SNAPSHOT that ends a run's
stream.

The server's history wins over the client's: after each run the client is sent the
conversation as the server keeps it, so a client that missed a stream, or sent a history
of its own making, draws the same conversation as the agent reads. Messages API JSON
(``{"role", "content"}`` with text, ``tool_use`` and ``tool_result`` blocks) becomes
AG-UI's user, assistant (with ``toolCalls``) and tool messages; thinking is left out.
Ids are the message's place in the conversation, so a message keeps its id from one
snapshot to the next.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["to_agui_messages"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "text"
        )
    return ""


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, Mapping)]
    return []


def to_agui_messages(thread_id: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """AG-UI messages (camelCase JSON) for a stored conversation."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        message_id = f"{thread_id}-{index}"
        blocks = _blocks(message.get("content"))
        if message.get("role") == "assistant":
            assistant: dict[str, Any] = {"id": message_id, "role": "assistant"}
            text = _text(blocks)
            if text:
                assistant["content"] = text
            calls = [
                {
                    "id": str(block.get("id")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name")),
                        "arguments": json.dumps(block.get("input"), separators=(",", ":")),
                    },
                }
                for block in blocks
                if block.get("type") == "tool_use"
            ]
            if calls:
                assistant["toolCalls"] = calls
            out.append(assistant)
            continue
        # A user turn: its tool results (each a tool message), then its text, if any.
        for block in blocks:
            if block.get("type") != "tool_result":
                continue
            call_id = str(block.get("tool_use_id"))
            tool: dict[str, Any] = {
                "id": f"{message_id}-{call_id}",
                "role": "tool",
                "toolCallId": call_id,
                "content": _text(block.get("content")),
            }
            if block.get("is_error"):
                tool["error"] = tool["content"] or "error"
            out.append(tool)
        text = _text(blocks)
        if text:
            out.append({"id": message_id, "role": "user", "content": text})
    return out
