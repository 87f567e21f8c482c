"""ToolCall: one request from the model to run one tool."""

from __future__ import annotations

from typing import Any

import attrs

from .._codec import parse_tool_use

__all__ = ["ToolCall", "as_call"]


@attrs.frozen
class ToolCall:
    """One tool call: the model's ``tool_use`` block in satsuma's terms.

    Attributes:
        id: The ``tool_use_id`` that the result must answer.
        name: The name of the tool asked for.
        input: The arguments: normally a dict; a ``str`` is taken as JSON text (as some
            models and providers send it) and decoded before validation.
    """

    id: str
    name: str
    input: Any = attrs.field(factory=dict)


def as_call(value: object, index: int) -> ToolCall:
    """Accept a ToolCall, a dict with ``id``/``name``/``input``, or the Anthropic SDK's
    ``ToolUseBlock``.

    Raises:
        TypeError: ``value`` is none of those; the message gives its position.
    """
    if isinstance(value, ToolCall):
        return value
    parsed = parse_tool_use(value)
    if parsed is None:
        raise TypeError(
            f"calls[{index}] must be a ToolCall, a dict with id, name and input, or a "
            f"ToolUseBlock, got: {type(value).__name__}"
        )
    call_id, name, arguments = parsed
    if not isinstance(call_id, str) or not call_id:
        raise TypeError(f"calls[{index}] has no tool_use id (a non-empty string), got: {call_id!r}")
    return ToolCall(call_id, name if isinstance(name, str) else repr(name), arguments)
