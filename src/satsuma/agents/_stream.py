"""The bounded buffer between a run and the reader of ``agent.stream``.

A run emits its events synchronously (a model's text deltas, a tool's progress), so it
cannot wait for a reader at every event. It waits where it can: before each model call,
a run whose reader is ``STREAM_BUFFER`` events behind waits until the reader has caught
up below that mark (backpressure: a slow reader slows the run, it never grows memory).
Between two model calls the events of one turn still arrive; while the buffer is full,
those that only say "more of the same" are merged instead of queued:

- a text, thinking or answer delta joins the delta queued last when it is of the same
  kind and iteration (no text is lost; the reader gets it in fewer, longer pieces);
- a tool's progress line or partial result replaces the one still queued for the same
  call (a status shows its latest state).

Every other event (a call's start and end, a retry, an approval) is always queued: there
are a bounded number per turn. So the buffer holds at most ``STREAM_BUFFER`` events plus
those of one turn.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

import attrs
import trio

from ..tools import ToolProgress, ToolUpdate
from ._events import AgentEvent, OutputDelta, TextDelta, ThinkingDelta

__all__ = ["STREAM_BUFFER", "EventBuffer"]

STREAM_BUFFER: Final = 256
"""Events an ``agent.stream`` reader may be behind before its run waits for it."""

_DELTAS: Final = (TextDelta, ThinkingDelta, OutputDelta)
_STATUSES: Final = (ToolProgress, ToolUpdate)


@final
class EventBuffer:
    """One stream's events, from its run (``put``, ``wait_for_room``, ``end``) to its
    reader (``get``, ``leave``). All on the trio thread."""

    def __init__(self, capacity: int = STREAM_BUFFER) -> None:
        self._capacity = capacity
        self._events: deque[AgentEvent] = deque()
        self._ended = False
        self._left = False
        self._readable = trio.lowlevel.ParkingLot()
        self._room = trio.lowlevel.ParkingLot()

    def __len__(self) -> int:
        return len(self._events)

    # --- the run's side ---------------------------------------------------------------

    def put(self, event: AgentEvent) -> None:
        """Queue ``event`` (or merge it, while the buffer is full); never waits."""
        if self._left or self._ended:
            return
        if len(self._events) < self._capacity or not self._merged(event):
            self._events.append(event)
        self._readable.unpark_all()

    def _merged(self, event: AgentEvent) -> bool:
        events = self._events
        if isinstance(event, _DELTAS):
            last = events[-1]
            if (
                type(last) is type(event)
                and last.run_id == event.run_id
                and last.iteration == event.iteration
            ):
                events[-1] = attrs.evolve(last, text=last.text + event.text)
                return True
            return False
        if isinstance(event, _STATUSES):
            for index in range(len(events) - 1, -1, -1):
                queued = events[index]
                if type(queued) is type(event) and (queued.tool_use_id == event.tool_use_id):
                    del events[index]
                    events.append(event)
                    return True
        return False

    async def wait_for_room(self) -> None:
        """Wait until the reader is less than the capacity behind (or has left)."""
        while len(self._events) >= self._capacity and not self._left:
            await self._room.park()

    def end(self) -> None:
        """The run is over: the reader gets what is queued, then the end."""
        self._ended = True
        self._readable.unpark_all()

    # --- the reader's side ------------------------------------------------------------

    async def get(self) -> AgentEvent:
        """The next event.

        Raises:
            trio.EndOfChannel: the run ended and every event was read.
        """
        while not self._events:
            if self._ended:
                raise trio.EndOfChannel
            await self._readable.park()
        event = self._events.popleft()
        if len(self._events) < self._capacity:
            self._room.unpark_all()
        return event

    def leave(self) -> None:
        """The reader is gone: drop what is queued, and never make the run wait again."""
        self._left = True
        self._events.clear()
        self._room.unpark_all()
