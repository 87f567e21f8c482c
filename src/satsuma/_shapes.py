"""The shapes of satsuma's own tool definitions and tool-call blocks, as dicts.

satsuma keeps every conversation in the Anthropic Messages shape, whichever provider
answers it (``models._chat_requests`` translates at the edge): a tool definition is
``{name, description, input_schema}``, a call is a ``tool_use`` block and its answer a
``tool_result`` block. Tools build them (``Tool.schema()``, ``format_results``) and read
them (a ``ToolUseBlock`` given to the runner), and the models send and read them, so they
live here in the shared kernel, which every room may import. Like the codecs, this
module imports nothing of satsuma and not the SDK.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["anthropic_tool", "openai_function", "parse_tool_use", "tool_result_block"]


def anthropic_tool(name: str, description: str, input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic tool definition: ``{name, description, input_schema}``, a fresh copy
    that the caller may change freely."""
    return {
        "name": name,
        "description": description,
        "input_schema": copy.deepcopy(dict(input_schema)),
    }


def openai_function(name: str, description: str, input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function-tool descriptor."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": copy.deepcopy(dict(input_schema)),
        },
    }


def tool_result_block(tool_use_id: str, content: str | list[Any], is_error: bool) -> dict[str, Any]:
    """A ``tool_result`` content block answering one ``tool_use``."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content if isinstance(content, str) else [dict(block) for block in content],
        "is_error": is_error,
    }


def parse_tool_use(block: object) -> tuple[str, str, object] | None:
    """``(id, name, input)`` of a ``tool_use`` block, given as the SDK's ``ToolUseBlock``
    (or any object with those attributes and ``type == "tool_use"``) or as a dict.

    Returns None when ``block`` is not a tool_use block.
    """
    if isinstance(block, Mapping):
        if "id" in block and "name" in block:
            return block["id"], block["name"], block.get("input", {})
        return None
    if getattr(block, "type", None) in ("tool_use", "server_tool_use") or all(
        hasattr(block, attr) for attr in ("id", "name", "input")
    ):
        try:
            return block.id, block.name, block.input  # type: ignore[attr-defined]
        except AttributeError:
            return None
    return None
