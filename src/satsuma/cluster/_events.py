"""The events of a queued run, as the process that submitted it reads them: the events
its node recorded in the database (``_recording``), decoded back into the agent's event
classes, and two of the cluster's own: ``EventsDropped`` and ``RunResumed``.

A stream reads the run's events in order from a position, waits for more on the run's
NOTIFY channel (polling as the fallback, as ``Cluster.result`` does) and ends with a
``RunEnd`` made from the result the queue holds, once the run has ended and every event
recorded before its end was read: the end is the queue's, so a run that ended without
any event (cancelled while queued, or no node could open its agent) still ends its
stream, and a run handed from node to node ends once.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias, final, get_args

import attrs
import cattrs
import trio

from .._exceptions import StoreClosed, StoreError, StoreUnavailable
from ..agents import AgentEvent, RunEnd, internal
from ..store import PostgresStore, channel_for, read_events, watch_run
from ..store import run_queue as queue
from ..tools import Content
from ._results import queued_result
from ._shared_listen import Subscription, subscribe

__all__ = ["ClusterEvent", "EventStream", "EventsDropped", "RunResumed"]

logger = logging.getLogger("satsuma.cluster")

_PAGE: Final = 500  # events read at once


@attrs.frozen(kw_only=True)
class EventsDropped:
    """Events of the run that the stream cannot give, at this point of it: the run's
    stored events passed its node's cap (the oldest text deltas went first, see
    ``EventLog``), the stream started after events that were dropped, a write of them
    failed, or one could not be read back. ``reason`` says which, as far as the reader
    can tell.

    Attributes:
        agent: The agent's name.
        run_id: The run.
        count: How many events are missing here.
        reason: Why, in a sentence.
    """

    agent: str
    run_id: str
    count: int
    reason: str


@attrs.frozen(kw_only=True)
class RunResumed:
    """The run goes on in a new attempt, on node ``node``: the node that ran it died, or
    was stopped and handed it back. The events that follow are the new attempt's (it
    starts with its own ``RunStart``); events of the earlier attempt not yet written
    when its node stopped are not in the stream.

    Attributes:
        agent: The agent's name.
        run_id: The run.
        node: The name of the node that runs it now.
        attempt: Which claim of the run this is (2 for the first takeover).
    """

    agent: str
    run_id: str
    node: str
    attempt: int


ClusterEvent: TypeAlias = AgentEvent | EventsDropped | RunResumed
"""What ``Cluster.events`` yields: the agent's events, and the cluster's own markers."""

# Every class a node records: each of an agent's events but RunEnd (never recorded: the
# stream makes it from the queue's result), and RunResumed. OutputValidated's output
# comes back as the JSON it was written as.
_CLASSES: Final[dict[str, type[Any]]] = {
    cls.__name__: cls for cls in (*get_args(AgentEvent), RunResumed) if cls is not RunEnd
}

# satsuma's own converter: never cattrs' global one.
_converter: Final = cattrs.Converter()
# A tool's content is JSON's own shape already (a string or a list of blocks).
_converter.register_structure_hook(Content, lambda value, _: value)


def encode_event(event: object) -> str:
    """An event as the JSON-lines log writes it (one line, without its newline)."""
    return internal.json_line(event).rstrip("\n")


def decode_event(text: str) -> ClusterEvent:
    """An event back from its JSON. A ``NestedEvent``'s inner event stays the JSON
    object it was written as (without its class name, which the log does not write).

    Raises:
        ValueError: the text is not an event this satsuma knows.
    """
    try:
        data = json.loads(text)
        cls = _CLASSES[data.pop("type")]
        event: ClusterEvent = _converter.structure(data, cls)
    except Exception as exc:
        raise ValueError(f"not an event this satsuma can read: {_summary(exc)}") from exc
    return event


def _summary(exc: Exception) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    if isinstance(exc, KeyError):
        return f"unknown or missing type {exc}"
    return f"{type(exc).__name__}: {exc}"


_CAPPED: Final = (
    "the run's stored events passed its node's cap (oldest text deltas first), or could "
    "not be written"
)


@final
class EventStream:
    """The events of one queued run, in order, as an async iterator; it ends after the
    run's ``RunEnd``. Made by ``Cluster.events`` (and ``Cluster.stream``).

    Use it in ``async with`` (or ``contextlib.aclosing``) when you may leave the loop
    early: that stops its listening at once (it stops anyway when the stream ends).
    Leaving the loop does not cancel the run. Iterate it from one task at a time; the
    open streams and waiting ``result`` calls of a trio run share one LISTEN connection
    per database.

    Attributes:
        run_id: The run.
        position: Where the stream is in the run's recorded events: pass it as
            ``start`` to ``Cluster.events`` to go on from here later (after a
            reconnect, say).
    """

    def __init__(
        self,
        store: PostgresStore,
        run_id: str,
        *,
        start: int,
        poll_interval: float,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self.run_id = run_id
        self.position = start
        self._poll_interval = poll_interval
        self._before = before
        self._listener: Subscription | None = None
        self._buffer: deque[ClusterEvent] = deque()
        self._ended = False
        self._found = False  # the run was read once: a database away then pauses the stream
        # The run is marked watched (its node streams its answers) at the first read;
        # one this stream submits is queued watched.
        self._watching = before is not None
        self._away = False  # the database is away (logged once)

    def __repr__(self) -> str:
        return f"<EventStream {self.run_id} at {self.position}>"

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ClusterEvent:
        while not self._buffer:
            if self._ended:
                raise StopAsyncIteration
            try:
                await self._fill()
            except BaseException:
                # Cancelled (or failed) while waiting: nothing stays open behind the
                # caller; a next iteration opens it again.
                self._close_listener()
                raise
        return self._buffer.popleft()

    async def aclose(self) -> None:
        """Stop reading and listening; iterating then ends at once."""
        self._ended = True
        self._buffer.clear()
        self._close_listener()

    async def __aenter__(self) -> EventStream:
        """Start it: a stream of ``Cluster.stream`` submits its run here (else at the
        first iteration)."""
        await self._start()
        return self

    async def _start(self) -> None:
        # Taken before the await: a submission cancelled midway may have committed (a
        # store call cut short is abandoned, its outcome unknown), and must not be made
        # twice.
        before, self._before = self._before, None
        if before is not None:
            await before()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    async def _fill(self) -> None:
        """Read what the run has recorded past ``position``; if nothing, end the stream
        (the run ended) or wait for a notification (or the poll interval)."""
        await self._start()
        if self._listener is None:
            # Listening before the read: a batch committed after it is heard. The
            # listener is the process's shared one (a server that is away makes it
            # ready at once: the stream polls, and the read below says so).
            # A run's end is told on one of two channels (store/_end_notice.py).
            self._listener = await subscribe(
                self._store,
                {
                    channel_for(self.run_id): None,
                    queue.RESULT_CHANNEL: self.run_id,
                    queue.DONE_CHANNEL: self.run_id,
                },
                keep=[queue.RESULT_CHANNEL, queue.DONE_CHANNEL],
            )
        try:
            if not self._watching:
                await self._watch()
            page = await read_events(self._store, self.run_id, self.position, _PAGE)
        except StoreError as exc:
            await self._lost(exc)
            return
        if page is None:
            self._close_listener()
            raise ValueError(f"no run {self.run_id!r} in the cluster's queue")
        self._found = True
        if self._away:
            self._away = False
            logger.warning("the database is back: streaming run %s again", self.run_id)
        for seq, text in page.events:
            if seq > self.position:
                self._dropped(page.agent_name, seq - self.position, _CAPPED)
            try:
                self._buffer.append(decode_event(text))
            except ValueError as exc:
                self._dropped(page.agent_name, 1, f"it could not be read back ({exc})")
            self.position = seq + 1
        if page.events:
            return
        if page.ended:
            # Events are written before the run's end, or with it (one transaction):
            # none will come after this read.
            if page.next_seq > self.position:
                self._dropped(page.agent_name, page.next_seq - self.position, _CAPPED)
                self.position = page.next_seq
            try:
                found = await queue.outcome(self._store, self.run_id)
            except StoreError as exc:
                await self._lost(exc)
                return
            if found is None:  # deleted from the queue meanwhile
                raise ValueError(f"no run {self.run_id!r} in the cluster's queue")
            result = queued_result(*found)
            self._buffer.append(
                RunEnd(
                    agent=page.agent_name,
                    run_id=self.run_id,
                    iteration=result.iterations,
                    result=result,
                )
            )
            self._ended = True
            self._close_listener()
            return
        await self._wait()

    async def _watch(self) -> None:
        """Mark the run watched (``watch_run``), once. A database that refuses it (a
        role that may only read, a replica) leaves the run as it is: the stream goes on
        at the pace of a run nobody watches (each answer whole, its events written once
        a second, no NOTIFY for them: read every poll interval). One that is away is
        asked again at the next read."""
        try:
            await watch_run(self._store, self.run_id)
        except (StoreClosed, StoreUnavailable):
            raise
        except StoreError as exc:
            logger.warning(
                "streaming run %s: could not mark it watched, so its node does not stream "
                "its answers and writes its events once a second (%s)",
                self.run_id,
                exc,
            )
        self._watching = True

    async def _wait(self) -> None:
        """Until a notification about this run (its events, or its end; the done
        channel tells of every run's), or the poll interval."""
        assert self._listener is not None
        await self._listener.wait(self._poll_interval)

    async def _lost(self, exc: StoreError) -> None:
        """A read failed. Before the run was found, that is the caller's error; after,
        the database is away (a restart, a failover): the stream waits and reads again
        every poll interval, as ``Cluster.result`` does, rather than ending. Any other
        store error (a closed store, a row that does not decode) ends the stream."""
        if not self._found or not isinstance(exc, StoreUnavailable):
            raise exc
        if not self._away:
            self._away = True
            logger.warning(
                "lost the database while streaming run %s (%s); trying again every %gs",
                self.run_id,
                exc,
                self._poll_interval,
            )
        self._close_listener()  # a new one is made once the database is back
        await trio.sleep(self._poll_interval)

    def _dropped(self, agent: str, count: int, reason: str) -> None:
        self._buffer.append(
            EventsDropped(agent=agent, run_id=self.run_id, count=count, reason=reason)
        )
