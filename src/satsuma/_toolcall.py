"""ToolCall: one request from the model to run one tool, and the JSON gate its input
passes before anything records, shows or serialises it.

A tool call belongs to the conversation as much as to the tools: a model's response
carries them (``satsuma.models``), the runner runs them (``satsuma.tools``), so it lives
in the shared kernel, below both. ``satsuma.tools`` exports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._jsonvalue import expected_text, plain_or_problem
from ._shapes import parse_tool_use
from ._text import is_valid_text, valid_text

__all__ = ["CheckedCalls", "ToolCall", "as_call", "checked_calls", "gated", "gated_all"]

# The mark gated() leaves on each call it returns. Only this module has it, so no call
# can claim to have passed the gate without passing it.
_PASSED = object()


@attrs.frozen
class ToolCall:
    """One tool call: the model's ``tool_use`` block in satsuma's terms.

    Attributes:
        id: The ``tool_use_id`` that the result must answer.
        name: The name of the tool asked for.
        input: The arguments: normally a dict; a ``str`` is taken as JSON text (as some
            models and providers send it) and decoded before validation.
        refused: Why the JSON gate refused the input the model sent (NaN, nesting past
            64 levels, an object JSON cannot hold...), or None. A refused call's
            ``input`` is ``{}``, so that nothing records or shows what could not be
            serialised; the runner answers it ``Error: Invalid arguments: REFUSED``.
    """

    id: str
    name: str
    input: Any = attrs.field(factory=dict)
    refused: str | None = attrs.field(default=None, kw_only=True)
    # Not an argument, not compared, not shown: set by gated() alone, and lost by
    # attrs.evolve (a call changed after the gate is gated again).
    _gate: object = attrs.field(default=None, init=False, eq=False, repr=False)


class CheckedCalls(tuple[ToolCall, ...]):
    """A turn's calls, every one through the JSON gate: made only by ``checked_calls``,
    for the agent, whose calls the response's check has just gated, so that the runner
    does not walk them again. The runner gates any other calls it is given."""

    __slots__ = ()

    def __new__(cls, calls: Iterable[ToolCall], key: object = None) -> CheckedCalls:
        if key is not _PASSED:
            raise TypeError("CheckedCalls are made by checked_calls() alone")
        return super().__new__(cls, calls)


def checked_calls(calls: Iterable[ToolCall]) -> CheckedCalls:
    """``calls``, each gated unless ``gated`` returned that very call (an agent's calls
    come from its response's check; one renamed since, by ``attrs.evolve``, is walked
    again)."""
    return CheckedCalls([call if call._gate is _PASSED else gated(call) for call in calls], _PASSED)


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


def gated(call: ToolCall, *, plain_input: bool = False) -> ToolCall:
    """``call`` with its input through the JSON gate, before anything records, shows or
    serialises it (the journal, events, approvals, the loop guard).

    An input of built-in JSON values comes back as it is; one holding subclasses of
    them (a custom Model's) as a copy of plain values; one the gate refuses (see
    ``satsuma._jsonvalue``) as ``{}`` with the reason in ``refused``. JSON text (a
    ``str`` or ``bytes``) is left to the runner, which decodes it and gates what it
    decodes to.

    ``plain_input``: the caller has just found this very input plain (``is_plain``),
    so it is not walked again.
    """
    call_id, name = call.id, call.name
    # Judged inline, not by a call each: this runs on every call of every response.
    if not (
        type(call_id) is str
        and (str.isascii(call_id) or is_valid_text(call_id))
        and type(name) is str
        and (str.isascii(name) or is_valid_text(name))
    ):
        # A custom Model's str subclasses: plain strs, read from their storage, and valid
        # Unicode (a lone surrogate as U+FFFD), as the request that sends them back needs.
        call = attrs.evolve(call, id=_plain_str(call.id), name=_plain_str(call.name))
    given = call.input
    if call.refused is not None or type(given) in (str, bytes, bytearray):
        # JSON text is not through the gate yet: the runner decodes and gates it.
        return call
    if plain_input:
        object.__setattr__(call, "_gate", _PASSED)
        return call
    plain, problem = plain_or_problem(given, "")
    if problem is not None:
        if not issubclass(type(given), (dict, list, tuple)) and not _is_mapping(given):
            # Not an object at all: said as validation says it of any other non-object.
            problem = expected_text("arguments", "object", given)
        call = attrs.evolve(call, input={}, refused=problem)
    elif plain is not given:
        call = attrs.evolve(call, input=plain)
    object.__setattr__(call, "_gate", _PASSED)
    return call


def gated_all(calls: Iterable[ToolCall], plain_inputs: set[int]) -> tuple[ToolCall, ...]:
    """Each of ``calls`` through ``gated``, in one loop: ``plain_inputs`` holds the ids
    of the inputs the caller has just found plain (each alive in the caller's hands, so
    an id is that very input). A call with ASCII id and name and such an input passes
    as ``gated`` would pass it, without a call of its own: this is every call of every
    response."""
    out: list[ToolCall] = []
    for call in calls:
        call_id, name = call.id, call.name
        if (
            id(call.input) in plain_inputs
            and call.refused is None
            and type(call_id) is str
            and str.isascii(call_id)
            and type(name) is str
            and str.isascii(name)
        ):
            object.__setattr__(call, "_gate", _PASSED)
            out.append(call)
        else:
            out.append(gated(call, plain_input=id(call.input) in plain_inputs))
    return tuple(out)


def _is_mapping(value: object) -> bool:
    try:
        return isinstance(value, Mapping)
    except Exception:  # a __class__ property that raises: not a mapping we can read
        return False


def _plain_str(value: Any) -> Any:
    return valid_text(str.__str__(value)) if issubclass(type(value), str) else value
