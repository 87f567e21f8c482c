"""Tool calls whose input came as JSON text, decoded before validation. ``ToolCall`` and
the JSON gate live in the shared kernel (``satsuma._toolcall``): a model's response
carries calls too."""

from __future__ import annotations

import json

import attrs

from .._jsonvalue import MAX_DEPTH
from .._toolcall import ToolCall, as_call, gated

__all__ = ["ToolCall", "as_call", "decoded", "gated"]


def decoded(call: ToolCall) -> tuple[ToolCall, str | None]:
    """``call`` with its JSON text input (as some models and providers send it) decoded,
    or the call as it is and why its text is not arguments."""
    try:
        return attrs.evolve(call, input=json.loads(call.input)), None
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            return call, f"arguments are nested more than {MAX_DEPTH} levels deep"
        return call, f"expected arguments to be an object, got: invalid JSON ({exc})"
