"""MCP content blocks to the Anthropic content blocks a tool_result holds."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

import mcp.types as mcp_types

__all__ = ["convert_result"]

_IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def convert_result(result: mcp_types.CallToolResult) -> tuple[str | list[dict[str, Any]], bool]:
    """The content the model reads, and whether the server called the result an error.

    Text stays text, images the API accepts become image blocks, an embedded text resource
    becomes text that names its URI; anything the model cannot read (audio, binary
    resources, links) becomes a line that says what it was. A result with no content but
    structured content is shown as its JSON.
    """
    blocks: list[dict[str, Any]] = []
    for item in result.content:
        blocks.append(_convert(item))
    if not blocks and result.structured_content is not None:
        blocks.append({"type": "text", "text": json.dumps(result.structured_content)})
    if all(block["type"] == "text" for block in blocks):
        return "\n".join(block["text"] for block in blocks), bool(result.is_error)
    return blocks, bool(result.is_error)


def _convert(item: object) -> dict[str, Any]:
    if isinstance(item, mcp_types.TextContent):
        return _text(item.text)
    if isinstance(item, mcp_types.ImageContent):
        return _image(item.data, item.mime_type) or _text(
            f"[image: {item.mime_type}, {_size(item.data)} — a type the model cannot read]"
        )
    if isinstance(item, mcp_types.AudioContent):
        return _text(f"[audio: {item.mime_type}, {_size(item.data)} — not shown to the model]")
    if isinstance(item, mcp_types.ResourceLink):
        return _text(f"[resource link: {item.name} <{item.uri}>]")
    if isinstance(item, mcp_types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return _text(f"[resource {resource.uri}]\n{resource.text}")
        mime = resource.mime_type or "application/octet-stream"
        image = (
            _image(resource.blob, mime)
            if isinstance(resource, mcp_types.BlobResourceContents)
            else None
        )
        if image is not None:
            return image
        blob = getattr(resource, "blob", "")
        return _text(f"[resource {resource.uri}: {mime}, {_size(blob)} — not shown to the model]")
    return _text(f"[unsupported MCP content: {type(item).__name__}]")


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image(data: str, mime: str | None) -> dict[str, Any] | None:
    if mime not in _IMAGE_TYPES:
        return None
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}


def _size(data: str) -> str:
    return f"{len(data) * 3 // 4:,} bytes"
