"""Events a ToolRunner reports while calls run, and the sinks that receive them.

Delivery policy (a slow or stuck consumer never stalls a tool, and never stalls
``execute`` for long):

- A callback sink is called synchronously on the trio thread; it must return quickly. If
  it raises, the exception is logged (logger ``satsuma.tools``) and the call goes on.
- A memory-channel sink never blocks a tool. An event goes straight into the channel when
  there is room and nothing waits ahead of it; otherwise it waits in the runner's queue,
  which a pump task drains into the channel in order. While waiting, progress lines and
  updates are coalesced: a newer ``ToolProgress`` (or ``ToolUpdate``) for the same call
  replaces the one not yet delivered, so a chatty tool costs the queue one slot per call
  and kind. ``ToolCallStart`` and ``ToolCallEnd`` are never merged.
- The queue is bounded. Once ``MAX_QUEUED_EVENTS`` (10,000) events wait, newer
  ``ToolProgress``, ``ToolUpdate`` and ``NestedEvent`` events are dropped and counted;
  ``ToolCallStart`` and ``ToolCallEnd`` are still queued, as there are two per call at
  most.
- Once the calls are done, ``execute`` waits for the queue to drain only while the reader
  keeps taking events: if it takes none for ``DRAIN_GRACE`` (1 second), it is stuck, and
  the events still queued are dropped. A reader that takes each event within the grace
  gets every event, in order, however long the whole takes.
- If ``execute`` is cancelled, the queued events that fit in the channel at once are sent
  without waiting (so a reader with room still sees the ``ToolCallEnd`` of calls ended by
  the cancellation); the rest are dropped.
- Dropped events are reported once per ``execute``: one warning on ``satsuma.tools``
  with how many were lost and why. Once the receiving side is closed, or the reader was
  found stuck, further events are dropped silently.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, final

import attrs
import trio

from ._results import Content, ToolOutcome

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "EventSink",
    "NestedEvent",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolEvent",
    "ToolProgress",
    "ToolUpdate",
]

logger = logging.getLogger("satsuma.tools")


@attrs.frozen(kw_only=True)
class _Tagged:
    """Where an event comes from. A bare ToolRunner leaves these None; an agent fills
    them in on every event it reports."""

    agent: str | None = None
    run_id: str | None = None
    iteration: int | None = None


@attrs.frozen(kw_only=True)
class ToolCallStart(_Tagged):
    """A call began running (after any wait for a concurrency slot)."""

    tool_use_id: str
    tool_name: str
    input: Any


@attrs.frozen(kw_only=True)
class ToolProgress(_Tagged):
    """A status line from a running tool (``ctx.progress``), for humans only."""

    tool_use_id: str
    tool_name: str
    text: str


@attrs.frozen(kw_only=True)
class ToolUpdate(_Tagged):
    """A partial result from a running tool (``ctx.update``), for UIs only."""

    tool_use_id: str
    tool_name: str
    content: Content
    details: Any = None


@attrs.frozen(kw_only=True)
class ToolCallEnd(_Tagged):
    """A call ended; ``outcome`` is exactly what the model will be sent."""

    tool_use_id: str
    tool_name: str
    outcome: ToolOutcome


@attrs.frozen(kw_only=True)
class NestedEvent(_Tagged):
    """An event of a run nested inside this call (a sub-agent's), reported under it."""

    tool_use_id: str
    tool_name: str
    event: Any


@attrs.frozen(kw_only=True)
class ApprovalRequested(_Tagged):
    """A call needs a person's decision before it may run (its tool ``requires_approval``,
    or a hook returned ``Ask``); ``input`` is what it would run with."""

    tool_use_id: str
    tool_name: str
    input: Any
    reason: str


@attrs.frozen(kw_only=True)
class ApprovalDecided(_Tagged):
    """A decision on a call that needed one: ``approved``, with the ``input`` it runs with
    (edited or not); or denied, with the ``reason`` the model reads. ``decided_by`` is
    the decision's ``by`` (``Approve(by=...)``, ``Deny(reason, by=...)``); None when it
    named no one, or when satsuma denied the call itself (no answer in time, no
    approver, an approver that failed)."""

    tool_use_id: str
    tool_name: str
    approved: bool
    input: Any = None
    reason: str | None = None
    decided_by: str | None = None


ToolEvent: TypeAlias = (
    ToolCallStart
    | ToolProgress
    | ToolUpdate
    | ToolCallEnd
    | NestedEvent
    | ApprovalRequested
    | ApprovalDecided
)
EventSink: TypeAlias = "Callable[[ToolEvent], object] | trio.MemorySendChannel[Any]"


class Emitter(Protocol):
    def emit(self, event: ToolEvent) -> None: ...


@attrs.define(eq=False)
class CallbackEmitter:
    callback: Callable[[ToolEvent], object]

    def emit(self, event: ToolEvent) -> None:
        try:
            self.callback(event)
        except Exception:
            logger.exception("satsuma event callback %r raised on %r", self.callback, event)


MAX_QUEUED_EVENTS = 10_000
"""How many events a channel sink's queue holds for a reader that is behind. Past it,
newer ``ToolProgress``, ``ToolUpdate`` and ``NestedEvent`` events are dropped (and
counted); ``ToolCallStart`` and ``ToolCallEnd`` are still queued, two per call at most."""

DRAIN_GRACE = 1.0
"""Seconds ``execute``, once its calls are done, waits for a channel's reader to take the
next queued event before it considers the reader stuck and drops what is left."""

# Never dropped from a full queue: a few per call at most, and a UI waits on them.
_LIFECYCLE = (ToolCallStart, ToolCallEnd, ApprovalRequested, ApprovalDecided)


class _State(enum.Enum):
    OPEN = "open"  # events are queued and delivered
    CLOSING = "closing"  # execute is done: deliver what is queued while the reader takes it
    DEAD = "dead"  # the reader is gone or stuck: every event is dropped, silently


@attrs.define(eq=False)
class _Slot:
    event: ToolEvent
    key: tuple[str, str] | None


@final
@attrs.define(eq=False)
class ChannelEmitter:
    """Feeds a memory channel without ever blocking the emitter (see module docstring).

    ``execute`` starts ``pump`` in a nursery, emits, calls ``close`` and waits for
    ``pump`` to return; ``close`` bounds that wait by ``DRAIN_GRACE`` per event.
    """

    channel: trio.MemorySendChannel[Any]
    _queue: deque[_Slot] = attrs.Factory(deque)
    # The waiting slot of each call's progress (and update) that a newer one replaces; a
    # slot leaves this table once the pump starts sending it, so nothing overtakes it.
    _pending: dict[tuple[str, str], _Slot] = attrs.Factory(dict)
    _wakeup: trio.Event = attrs.Factory(trio.Event)
    _state: _State = _State.OPEN
    _pump_exited: bool = False
    _send_scope: trio.CancelScope | None = None
    _overflowed: int = 0

    def emit(self, event: ToolEvent) -> None:
        if self._state is _State.DEAD:
            return
        if not self._queue:
            # Nothing is waiting ahead of it, so going straight in overtakes nothing.
            try:
                self.channel.send_nowait(event)
            except trio.WouldBlock:
                pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._die()
                return
            else:
                return
        key = None
        if isinstance(event, (ToolProgress, ToolUpdate)):
            key = (type(event).__name__, event.tool_use_id)
            waiting = self._pending.get(key)
            if waiting is not None:
                waiting.event = event
                return
        if len(self._queue) >= MAX_QUEUED_EVENTS and not isinstance(event, _LIFECYCLE):
            self._overflowed += 1
            return
        slot = _Slot(event, key)
        if key is not None:
            self._pending[key] = slot
        self._queue.append(slot)
        self._wakeup.set()

    def close(self) -> None:
        """No more events will come from the calls. The pump delivers what is queued for as
        long as the reader keeps taking events, then returns; if it already returned
        (cancelled), what fits in the channel now is sent and the rest dropped."""
        if self._state is not _State.OPEN:
            return
        self._state = _State.CLOSING
        if self._pump_exited:
            self._finish(stuck=False)
            return
        if self._send_scope is not None:
            # The pump may have waited on this reader for the whole run; from now on,
            # each event gets DRAIN_GRACE.
            self._send_scope.deadline = trio.current_time() + DRAIN_GRACE
        self._wakeup.set()

    async def pump(self) -> None:
        """Feed the queue into the channel, in order, until ``close`` and an empty queue,
        a closed receiver, or a reader that takes nothing for ``DRAIN_GRACE`` after
        ``close``."""
        try:
            while self._state is not _State.DEAD:
                if not self._queue:
                    if self._state is _State.CLOSING:
                        return
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
                    continue
                # The head stays queued while it is sent: if the send is cancelled, it is
                # still first in line for whatever delivers next.
                slot = self._queue[0]
                self._unpend(slot)
                with trio.CancelScope() as scope:
                    self._send_scope = scope
                    if self._state is _State.CLOSING:
                        scope.deadline = trio.current_time() + DRAIN_GRACE
                    try:
                        await self.channel.send(slot.event)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        self._die()
                        return
                self._send_scope = None
                # Checked after the scope exits: cancelled_caught is True only for our own
                # deadline, never for a cancelled execute.
                if scope.cancelled_caught:
                    self._finish(stuck=True)
                    return
                self._queue.popleft()
        finally:
            self._send_scope = None
            self._pump_exited = True
            # On cancellation (a cancelled execute) the calls may still be reporting their
            # ends: push what fits now, and leave the rest for close().
            self._push_nowait()
            if self._state is _State.CLOSING:
                self._finish(stuck=False)

    def _unpend(self, slot: _Slot) -> None:
        if slot.key is not None and self._pending.get(slot.key) is slot:
            del self._pending[slot.key]

    def _push_nowait(self) -> None:
        while self._queue and self._state is not _State.DEAD:
            try:
                self.channel.send_nowait(self._queue[0].event)
            except trio.WouldBlock:
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._die()
                return
            self._unpend(self._queue.popleft())

    def _die(self) -> None:
        # The receiver is closed: nobody is listening, so nothing is worth a warning.
        self._state = _State.DEAD
        self._queue.clear()
        self._pending.clear()

    def _finish(self, *, stuck: bool) -> None:
        """Send what fits without waiting, drop the rest, and say once what was lost."""
        if self._state is _State.DEAD:
            return
        self._push_nowait()
        left = len(self._queue)
        self._die()
        problems = []
        if self._overflowed:
            problems.append(
                f"{self._overflowed} progress, update or nested events arrived while "
                f"{MAX_QUEUED_EVENTS} were already waiting"
            )
        if left and stuck:
            problems.append(
                f"{left} events were still queued when the reader took nothing for "
                f"{DRAIN_GRACE:g} s after the calls had ended"
            )
        elif left:
            problems.append(f"{left} events did not fit in the channel when execute was cancelled")
        if problems:
            logger.warning(
                "satsuma dropped %d tool events for an event channel whose reader fell behind: %s",
                self._overflowed + left,
                "; ".join(problems),
            )


def make_emitter(sink: object) -> CallbackEmitter | ChannelEmitter | None:
    """The emitter for an ``events=`` argument.

    Raises:
        TypeError: ``sink`` is neither a trio MemorySendChannel nor a callable.
    """
    if sink is None:
        return None
    if isinstance(sink, trio.MemorySendChannel):
        return ChannelEmitter(sink)
    if callable(sink):
        return CallbackEmitter(sink)
    raise TypeError(
        f"events must be a trio.MemorySendChannel or a callable, got: {type(sink).__name__}"
    )
