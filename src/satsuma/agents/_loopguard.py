"""The loop guard (``AgentSpec.loop_guard``): how many turns in a row a run asked for the
same calls, and what the model reads when the guard refuses them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import final

import attrs

from ..tools import ToolCall

__all__ = ["Streak", "loop_guard_reason", "loop_guard_refusal", "names_of"]


def loop_guard_refusal(names: str, count: int) -> str:
    return (
        f"Error: Loop guard: this same request ({names}) came {count} turns in a row, so it "
        "was not run. Repeating it will not give a different result; change the arguments "
        "or take another approach. Asking for it once more ends the run."
    )


def loop_guard_reason(names: str, count: int) -> str:
    return f"Loop guard: the same request ({names}) came {count} turns in a row"


def names_of(calls: Sequence[ToolCall]) -> str:
    return ", ".join(dict.fromkeys(call.name for call in calls))


# One encoder for every signature: json.dumps with options builds a new one each call.
_ENCODER = json.JSONEncoder(sort_keys=True, default=repr)


def _signature(call: ToolCall) -> tuple[str, str]:
    try:
        arguments = _ENCODER.encode(call.input)
    except Exception:  # RecursionError too: a hostile input is refused by the runner
        arguments = f"<unprintable {type(call.input).__name__} {id(call.input)}>"
    return call.name, arguments


@attrs.define(eq=False)
class _TurnRequest:
    """What a turn asked for, compared with the turn before it by the loop guard.

    A turn is a loop only when it repeats the previous turn's whole request: identical
    calls side by side in one turn (twenty sleeps, five dice) are ordinary work. The
    arguments are serialised only when the tool names already match, which most turns
    of a working conversation do not."""

    calls: Sequence[ToolCall]
    names: tuple[str, ...]
    _full: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def of(cls, calls: Sequence[ToolCall]) -> _TurnRequest:
        return cls(calls, tuple(sorted([call.name for call in calls])))

    def full(self) -> tuple[tuple[str, str], ...]:
        if self._full is None:
            self._full = tuple(sorted(map(_signature, self.calls)))
        return self._full

    def repeats(self, previous: _TurnRequest | None) -> bool:
        return (
            previous is not None and self.names == previous.names and self.full() == previous.full()
        )


@final
class Streak:
    """The run's streak of turns asking for the same calls."""

    __slots__ = ("count", "request")

    def __init__(self) -> None:
        self.request: _TurnRequest | None = None
        self.count = 0

    def add(self, calls: Sequence[ToolCall]) -> int:
        """Count a turn asking for ``calls``; how many turns in a row asked for them."""
        request = _TurnRequest.of(calls)
        if request.repeats(self.request):
            self.count += 1
        else:
            self.count = 1
        # The newest of equal requests is kept: its full signature is made already.
        self.request = request
        return self.count
