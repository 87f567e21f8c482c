"""The numbered events of one run, kept in memory for every reader of it.

One list and one ``trio.Event`` per run, however many read it: a reader is an index into
the list, so a thousand subscribers cost a thousand small generators, not a thousand
channels. The list is bounded (``limit``): past it the oldest events are dropped, and a
reader asking for them is first given one ``EventsLost`` event (numbered as the last
event lost, so that resuming from its id goes on without a repeat) saying which ids it
missed. A run that a person's decision resumes appends to the same log, so its numbers go
on where they left off.

A log begun for a run of an earlier server life (paused, then resumed after a restart) is
not kept across that restart, so it starts from ``first_id``: a number above any the
earlier life gave (see ``LocalRuns``). A client resuming with an id of that life is then
told of the gap by an ``EventsLost`` event, never given an old number again.

An event may be appended unencoded (``append_lazy``: its type and a function giving its
JSON dict): most runs' events are read by nobody (a client that waits for the run reads
its view, not its events), and encoding each one was a measurable share of a served
run's CPU. It is encoded once, when a reader first reaches it, and kept encoded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import trio

from ._runs import RunEvent

__all__ = ["DEFAULT_EVENT_LIMIT", "EventLog", "first_id_now"]


class _Unencoded:
    """An event appended by ``append_lazy``, not read yet: its id, type and encoder."""

    __slots__ = ("encode", "id", "type")

    def __init__(self, id_: int, type_: str, encode: Callable[[], Mapping[str, Any]]) -> None:
        self.id = id_
        self.type = type_
        self.encode = encode


DEFAULT_EVENT_LIMIT = 10_000
"""Events kept per run: far past a long run's (text deltas come a few per word)."""


def first_id_now() -> int:
    """A first id for the log of a run that had events in an earlier server life: the
    time in microseconds. An earlier life began its logs at 1 or at its own start time,
    and gave far fewer than one event a microsecond, so this is above every id it gave
    (and below 2**53, which JavaScript clients read exactly, until the year 2255)."""
    return time.time_ns() // 1000


class EventLog:
    """The events of one run, numbered 1, 2, 3, ... (or on from ``first_id``) and
    followed by any number of readers.

    Args:
        limit: How many events are kept; past it the oldest are dropped.
        first_id: The first event's id (1 unless the run had events in an earlier life).
    """

    def __init__(self, limit: int = DEFAULT_EVENT_LIMIT, *, first_id: int = 1) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got: {limit}")
        if first_id < 1:
            raise ValueError(f"first_id must be at least 1, got: {first_id}")
        self._limit = limit
        self._events: list[RunEvent | _Unencoded] = []
        self._first = first_id  # the id of self._events[0]
        self._next = first_id
        self._changed = trio.Event()
        # True once a reader waits on _changed: until then an append has no one to wake
        # and keeps it (a new trio.Event per event was a share of a run's CPU).
        self._watched = False
        # True while the run is not going on (ended, or paused awaiting approval): a
        # reader that has read everything then stops instead of waiting.
        self._settled = False

    @property
    def last_id(self) -> int:
        """The id of the newest event, 0 before any."""
        return self._next - 1

    @property
    def last_type(self) -> str | None:
        """The type of the newest event, None before any."""
        return self._events[-1].type if self._events else None

    def append(self, data: Mapping[str, Any]) -> RunEvent:
        """Add one event (``event_to_json``'s dict) and wake every reader."""
        event = RunEvent(self._next, data)
        self._add(event)
        return event

    def append_lazy(self, type_: str, encode: Callable[[], Mapping[str, Any]]) -> None:
        """Add one event of type ``type_`` whose dict ``encode()`` gives, called once
        when a reader first reaches it (never if none does), and wake every reader."""
        self._add(_Unencoded(self._next, type_, encode))

    def _add(self, event: RunEvent | _Unencoded) -> None:
        self._next += 1
        self._events.append(event)
        if len(self._events) > self._limit:
            # Dropping in blocks keeps appends O(1) amortised on a very long run.
            drop = max(1, self._limit // 10)
            del self._events[:drop]
            self._first += drop
        self._wake()

    def settle(self) -> None:
        """The run stopped (ended or paused): readers that are done stop waiting."""
        self._settled = True
        self._wake()

    def unsettle(self) -> None:
        """The run goes on again (resumed after approval)."""
        self._settled = False

    def _wake(self) -> None:
        if self._watched:
            self._watched = False
            self._changed.set()
            self._changed = trio.Event()

    async def follow(self, after: int = 0) -> AsyncGenerator[RunEvent, None]:
        """The events numbered above ``after``, then each as it comes; it ends after a
        ``RunEnd`` (the run ended or paused), or at once when the run has stopped and
        nothing is newer than ``after``."""
        after = max(0, after)
        while True:
            if after < self._first - 1:
                lost = self._first - 1
                yield RunEvent(lost, {"type": "EventsLost", "first_id": after + 1, "last_id": lost})
                after = lost
                # More may have been dropped while the reader took that one: looked at
                # again, never read past the log's start (a negative index: the end's).
                continue
            if after < self.last_id:
                index = after + 1 - self._first
                held = self._events[index]
                if isinstance(held, _Unencoded):
                    event = self._events[index] = RunEvent(held.id, held.encode())
                else:
                    event = held
                after = event.id
                yield event
                if event.type == "RunEnd":
                    return
                continue
            if self._settled:
                return
            self._watched = True
            await self._changed.wait()
