"""Tool calls whose input came as JSON text, decoded before validation. ``ToolCall`` and
the JSON gate live in the shared kernel (``satsuma._toolcall``): a model's response
carries calls too."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import attrs

from .._jsonvalue import MAX_DEPTH
from .._toolcall import CheckedCalls, ToolCall, as_call, checked_calls, gated

__all__ = ["CheckedCalls", "ToolCall", "admitted", "as_call", "checked_calls", "decoded", "gated"]


def admitted(calls: Iterable[object]) -> Sequence[ToolCall]:
    """``execute``'s calls as ToolCalls through the JSON gate (JSON text has its own,
    after decoding): the event of a call's start, hooks, the approver and on_outcome see
    only plain values (or {}). CheckedCalls, which only ``checked_calls`` makes, passed
    it already; whatever else a caller gives is walked, even calls that passed once (a
    caller may have changed their input since).

    Raises:
        TypeError: a call has the wrong shape.
    """
    if type(calls) is CheckedCalls:
        return calls
    return [gated(as_call(call, index)) for index, call in enumerate(calls)]


def decoded(call: ToolCall) -> tuple[ToolCall, str | None]:
    """``call`` with its JSON text input (as some models and providers send it) decoded,
    or the call as it is and why its text is not arguments."""
    try:
        return attrs.evolve(call, input=json.loads(call.input)), None
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            return call, f"arguments are nested more than {MAX_DEPTH} levels deep"
        return call, f"expected arguments to be an object, got: invalid JSON ({exc})"
