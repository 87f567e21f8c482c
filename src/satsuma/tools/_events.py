"""Events a ToolRunner reports while calls run, and the sinks that receive them.

Delivery policy (a slow consumer must never stall a tool):

- A callback sink is called synchronously on the trio thread; it must return quickly. If
  it raises, the exception is logged (logger ``satsuma.tools``) and the call goes on.
- A memory-channel sink never blocks a tool. An event goes straight into the channel when
  there is room; otherwise it waits in the runner's queue, which a pump task drains into
  the channel in order. While waiting, progress lines and updates are coalesced: a newer
  ``ToolProgress`` (or ``ToolUpdate``) for the same call replaces the one not yet
  delivered, so a chatty tool costs the queue one slot per call. ``ToolCallStart`` and
  ``ToolCallEnd`` are never dropped or merged, and ``execute`` returns only once every
  event it queued has been delivered. If the receiving side is closed, further events
  are dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

import attrs
import trio

from ._results import Content, ToolOutcome

__all__ = [
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


ToolEvent: TypeAlias = ToolCallStart | ToolProgress | ToolUpdate | ToolCallEnd | NestedEvent
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


@attrs.define(eq=False)
class _Slot:
    event: ToolEvent
    key: tuple[str, str] | None


@attrs.define(eq=False)
class ChannelEmitter:
    """Feeds a memory channel without ever blocking the emitter (see module docstring)."""

    channel: trio.MemorySendChannel[Any]
    _queue: deque[_Slot] = attrs.Factory(deque)
    _pending: dict[tuple[str, str], _Slot] = attrs.Factory(dict)
    _wakeup: trio.Event = attrs.Factory(trio.Event)
    _sending: bool = False
    _closed: bool = False
    _dead: bool = False

    def emit(self, event: ToolEvent) -> None:
        if self._dead:
            return
        if not self._queue and not self._sending:
            try:
                self.channel.send_nowait(event)
                return
            except trio.WouldBlock:
                pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._dead = True
                return
        key = None
        if isinstance(event, (ToolProgress, ToolUpdate)):
            key = (type(event).__name__, event.tool_use_id)
            waiting = self._pending.get(key)
            if waiting is not None:
                waiting.event = event
                return
        slot = _Slot(event, key)
        if key is not None:
            self._pending[key] = slot
        self._queue.append(slot)
        self._wakeup.set()

    def close(self) -> None:
        """No more events will come; the pump returns once the queue is drained."""
        self._closed = True
        self._wakeup.set()

    async def pump(self) -> None:
        while True:
            while not self._queue:
                if self._closed or self._dead:
                    return
                self._wakeup = trio.Event()
                await self._wakeup.wait()
            slot = self._queue.popleft()
            if slot.key is not None:
                del self._pending[slot.key]
            if self._dead:
                continue
            self._sending = True
            try:
                await self.channel.send(slot.event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._dead = True
            finally:
                self._sending = False


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
