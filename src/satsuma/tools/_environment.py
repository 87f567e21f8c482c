"""What a ToolRunner and its ``execute`` are given, checked (the context mapping, the
numeric options), and the environment that every call of one ``execute`` shares."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from os import PathLike, fspath
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio
from opentelemetry.trace import Tracer

from ._approval import Approver, Decision, Deferral
from ._calls import ToolCall
from ._context import ToolContext
from ._events import Emitter
from ._results import ToolOutcome

__all__ = [
    "Environment",
    "Interrupt",
    "OutcomeCallback",
    "count_or_none",
    "parse_context",
    "finish_report",
    "outcome_not_taken",
    "positive_or_none",
]

logger = logging.getLogger("satsuma.tools")

# How long the finishing steps of a call that already ran (its after_call hooks, the
# on_outcome callback) may hold off a cancellation, each.
_FINISH_SECONDS = 10.0

# A plain function, or an async one (awaited shielded, see ``ToolRunner.execute``).
OutcomeCallback = Callable[["ToolCall", ToolOutcome], Awaitable[None] | None]


class Interrupt(Protocol):
    """Anything with ``is_set()``: a ``trio.Event``, a ``threading.Event``."""

    def is_set(self) -> bool: ...


def positive_or_none(name: str, value: object) -> float | None:
    """``value`` as a float, for an option in seconds (None passes).

    Raises:
        ValueError: it is not a positive number; the message names ``name``.
    """
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number or None, got: {value!r}")
    return float(value)


def count_or_none(name: str, value: object, minimum: int = 1) -> int | None:
    """``value``, for an option that counts (None passes).

    Raises:
        ValueError: it is not an integer of at least ``minimum``; the message names ``name``.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} or None, got: {value!r}")
    return value


@attrs.frozen
class Environment:
    """What every call of one ``execute`` shares."""

    working_dir: Path
    capabilities: frozenset[str]
    extra: Mapping[str, Any]
    agent: Any
    emitter: Emitter | None
    interrupt: Interrupt | None
    trio_thread: int
    trio_token: trio.lowlevel.TrioToken
    tracer: Tracer | None  # None: no TracerProvider configured, no spans
    on_outcome: OutcomeCallback | None
    approver: Approver | Deferral | None
    approval_timeout: float | None
    decisions: Mapping[str, Decision]
    # The run's clock, read directly: what trio.current_time() reads, in two calls fewer.
    now: Callable[[], float]

    def context_for(self, call: ToolCall) -> ToolContext:
        """The ToolContext of one call."""
        return ToolContext(
            tool_use_id=call.id,
            tool_name=call.name,
            working_dir=self.working_dir,
            capabilities=self.capabilities,
            extra=self.extra,
            agent=self.agent,
            emitter=self.emitter,
            trio_thread=self.trio_thread,
            trio_token=self.trio_token,
        )


def parse_context(
    context: Mapping[str, Any] | None,
) -> tuple[Path, frozenset[str], dict[str, Any]]:
    """The working directory, the capabilities and the other keys of ``execute``'s
    ``context`` mapping.

    Raises:
        TypeError: the mapping, its ``working_dir`` or its ``capabilities`` is of the
            wrong type.
    """
    if context is None:
        return Path.cwd(), frozenset(), {}
    if not isinstance(context, Mapping):
        raise TypeError(f"context must be a mapping, got: {type(context).__name__}")
    extra = dict(context)
    working_dir = extra.pop("working_dir", None)
    capabilities = extra.pop("capabilities", ())
    if working_dir is None:
        path = Path.cwd()
    elif isinstance(working_dir, str | PathLike):
        path = Path(fspath(working_dir))
    else:
        raise TypeError(f"context['working_dir'] must be a path, got: {type(working_dir).__name__}")
    if isinstance(capabilities, str) or not isinstance(capabilities, Iterable):
        raise TypeError(
            f"context['capabilities'] must be a set or list of names, got: {capabilities!r}"
        )
    names = frozenset(capabilities)
    if names and not all(isinstance(name, str) for name in names):
        raise TypeError(
            f"context['capabilities'] must hold strings, got: {sorted(map(repr, names))}"
        )
    return path, names, extra


def outcome_not_taken(call: ToolCall) -> None:
    """Log, from inside its ``except`` block, that the ``on_outcome`` callback raised:
    the call's outcome stands."""
    logger.exception("on_outcome callback failed for call %s; the outcome stands", call.id)


async def finish_report(pending: Awaitable[object], call: ToolCall) -> None:
    """Await what an async ``on_outcome`` callback returned, shielded, for at most
    ``_FINISH_SECONDS``; what it raises is logged. (The runner calls the callback
    itself: a plain function cannot be interrupted and costs no cancel scope.)"""
    try:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + _FINISH_SECONDS):
            await pending
    except Exception:
        outcome_not_taken(call)
