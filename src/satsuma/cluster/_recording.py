"""How a node records the events of the runs it runs, for ``Cluster.events``.

The agent calls the recorder with each event, on the trio thread; the recorder only
queues it in memory (text deltas merged into the one before them, other events turned
into their JSON at once, as the JSON-lines log does) and never waits. The agent's steps
carry what waits in their own transactions (``ride``: ``satsuma.store.Taken.events``;
not the step that ends the run, whose end in the queue comes right after it),
which costs no transaction of its own; a flusher task writes what no step carried, in
one transaction: 5 ms after a boundary (a call starting or ending, a retry, an
approval; the events that come with it go in the same batch), else ``flush_interval``
after the first event queued. One batch is written at a time (by a step or the
flusher), so that the events are numbered in their order. What is left when the run ends is written with its end, in the transaction that
writes its result; a run handed back writes it before it goes. A run of two calls at
once then costs no transaction of events of its own, measured (two before the steps
carried them).

A write that fails is logged and tried again with the next batch (a second later at the
soonest): the run goes on whatever happens to its events. What waits in memory is bounded
like what is stored: past the cap, the oldest half is dropped, and the stream says how
many events it missed there (their seqs are skipped).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, final

import attrs
import trio

from .._exceptions import StoreError, StoreUnavailable
from ..agents import (
    AgentEvent,
    OutputDelta,
    OutputValidated,
    RunEnd,
    RunStart,
    TextDelta,
    ThinkingDelta,
    TurnEnd,
    internal,
)
from ..store import (
    KIND_CHATTER,
    KIND_DELTA,
    KIND_OTHER,
    Entry,
    PostgresStore,
    QueuedRun,
    Stored,
    append_events,
    expire_queue,
    purge_ended,
)
from ..store import run_queue as queue
from ..tools import NestedEvent, ToolProgress, ToolUpdate
from ._events import RunResumed, encode_event

__all__ = ["EventLog", "RunRecorder", "expire_ended"]

logger = logging.getLogger("satsuma.cluster")

# After a failed write, the next is tried this much later at the soonest.
_RETRY_DELAY: Final = 1.0
# The last write of a run (and a write cut short by a drain) is bounded.
_LAST_WRITE_SECONDS: Final = 5.0
# A boundary is written this soon after it, with what came meanwhile.
_GATHER_SECONDS: Final = 0.005
# The events of a run nobody watches are written this often, and with the run's end:
# none of a run shorter than this is written before its end (no step carries them).
_UNWATCHED_SECONDS: Final = 1.0
# How often a node deletes the events of runs past their retention, at most.
_EXPIRY_PERIOD: Final = 60.0

_CHATTER: Final = (ToolProgress, ToolUpdate, NestedEvent)
# Pieces of streamed text: merged while they wait, and the first to go past the cap.
_DELTAS: Final = (TextDelta, ThinkingDelta, OutputDelta)
_AnyDelta = TextDelta | ThinkingDelta | OutputDelta


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got: {value!r}")


@final
@attrs.frozen(kw_only=True)
class EventLog:
    """How a node keeps the events of the runs it runs, for ``Cluster.events``: in the
    database, per run, bounded, and for a while after the run ends. Pass it to
    ``Node(event_log=...)``; ``None`` there records nothing (streams then give only each
    run's ``RunEnd``).

    Attributes:
        max_events: A run keeps at most this many events. Past it (or ``max_bytes``),
            its oldest are deleted: deltas first (of text, thinking, a typed answer),
            then progress lines and updates, then the rest, down to nine tenths of the
            cap; a watcher behind them gets ``EventsDropped``. Consecutive deltas are
            stored merged, so a long answer costs a few events per second, not one per
            token.
        max_bytes: A run keeps at most this many bytes of events (as JSON); an event
            larger than this is not kept at all.
        flush_interval: Seconds an event of a watched run may wait before it is
            written; a boundary (a call starting or ending, a retry, an approval)
            writes at once. A run nobody watches writes its events once a second and
            with its end. Either writes at once when a quarter of ``max_events`` or
            ``max_bytes`` waits.
        retention: Seconds a run's events are kept after it ended; nodes delete older
            ones about once a minute. They go earlier with the run's row in the queue
            (``Node(result_retention=...)``, an hour by default) when that is shorter.

    Raises:
        ValueError: a bound is below 1, or a time is not positive.
    """

    max_events: int = attrs.field(default=10_000, validator=attrs.validators.ge(1))
    max_bytes: int = attrs.field(default=4_000_000, validator=attrs.validators.ge(1))
    flush_interval: float = attrs.field(default=0.1, validator=_positive)
    retention: float = attrs.field(default=3600.0, validator=_positive)


@attrs.define(eq=False)
class _Delta:
    """Text deltas of one kind and iteration, merged while they wait."""

    first: _AnyDelta
    parts: list[str]

    def event(self) -> _AnyDelta:
        return attrs.evolve(self.first, text="".join(self.parts))


_Pending = _Delta | Entry


@final
class RunRecorder(internal.WatchedEvents):
    """The event sink of one attempt at a queued run on a node; ``recording()`` runs its
    flusher."""

    def __init__(
        self, store: PostgresStore, run: QueuedRun, node_id: str, node_name: str, log: EventLog
    ) -> None:
        self._store = store
        self._run = run
        self._node_id = node_id
        self._log = log
        # Someone streams the run's events (``watch``): the model's answers are
        # streamed, their text recorded as it is written, and what waits is written at
        # each boundary. Else answers come whole, and what waits is written every
        # ``_UNWATCHED_SECONDS`` and with the run's end.
        self.watched = run.watched
        self._pending: list[_Pending] = []
        self._pending_bytes = 0
        self._queued = trio.Event()  # something waits to be written
        self._boundary = trio.Event()  # ... and it should be written now
        self._stopped = False  # the run is no longer this node's: nothing more is written
        self._failures = 0
        # What the run stores after this recorder's last batch, while known: a batch
        # that cannot take it past its cap is sent without the trim's statement.
        self._stored: Stored | None = None
        # Set while a batch is being written (by the flusher, or carried by a step):
        # one at a time, so that the run's events are numbered in their order.
        self._writing: trio.Event | None = None
        if run.attempts > 1:
            self(
                RunResumed(
                    agent=run.agent_name, run_id=run.run_id, node=node_name, attempt=run.attempts
                )
            )

    @property
    def wants_deltas(self) -> bool:
        """Asked by the agent before each model call (``WatchedEvents``)."""
        return self.watched

    def watch(self) -> None:
        """Someone streams the run now: what waits is written at once (5 ms on), and
        from then on at each boundary, the answers streamed from the next model call."""
        self.watched = True
        if self._pending:
            self._boundary.set()

    def __call__(self, event: AgentEvent | RunResumed) -> None:
        if self._stopped or isinstance(event, RunEnd):
            return  # the run's end is the queue's: a stream makes its RunEnd from it
        if isinstance(event, _DELTAS):
            last = self._pending[-1] if self._pending else None
            if (
                isinstance(last, _Delta)
                and type(last.first) is type(event)
                and last.first.iteration == event.iteration
            ):
                last.parts.append(event.text)
            else:
                self._pending.append(_Delta(event, [event.text]))
            self._pending_bytes += len(event.text)
        else:
            text = encode_event(event)
            if len(text) > self._log.max_bytes:
                self._pending.append(1)  # too big to keep: a gap in the stream
            else:
                kind = KIND_CHATTER if isinstance(event, _CHATTER) else KIND_OTHER
                self._pending.append((kind, text))
                self._pending_bytes += len(text)
                if kind == KIND_OTHER and self.watched and _is_boundary(event):
                    self._boundary.set()
        self._queued.set()
        log = self._log
        if len(self._pending) * 4 > log.max_events or self._pending_bytes * 4 > log.max_bytes:
            # A flood (a tool's progress lines, a long answer): written now, long before
            # it could reach the cap in memory, where only its oldest half could go (the
            # table's trim keeps the run's other events and drops deltas first).
            self._boundary.set()
            if len(self._pending) > log.max_events or self._pending_bytes > log.max_bytes:
                self._shed()

    def _shed(self) -> None:
        """Drop the oldest half of what waits (the database is away, or far too slow):
        one gap in its place."""
        keep = len(self._pending) // 2
        dropped = self._pending[: len(self._pending) - keep]
        count = sum(entry if isinstance(entry, int) else 1 for entry in dropped)
        self._pending = [count, *self._pending[len(dropped) :]]
        self._pending_bytes = sum(_size(entry) for entry in self._pending)
        logger.warning(
            "run %s: %d events waiting to be written were dropped (the database is slow or away)",
            self._run.run_id,
            count,
        )

    @asynccontextmanager
    async def recording(self) -> AsyncIterator[RunRecorder]:
        """Run the flusher while the block runs. What is left when it ends waits: for
        the run's end, which writes it in its own transaction (``last_events``), or for
        ``flush_last`` (a run handed back)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flush_loop)
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()

    def last_events(self) -> queue.LastEvents | None:
        """What waits, for the run's end to write with it (``run_queue.finish``): taken
        from here, so that it is written once. None when nothing waits, or nothing more
        of the run is written here."""
        if self._stopped or not self._pending:
            return None
        batch = self._batch()
        return queue.LastEvents(batch, self._log.max_events, self._log.max_bytes, self._stored)

    async def flush_last(self) -> None:
        """Write what is left, for a run that does not end here (handed back): bounded,
        shielded, as a cancelled run's last write must be."""
        with trio.move_on_after(_LAST_WRITE_SECONDS, shield=True):
            await self.flush()
        lost = sum(entry if isinstance(entry, int) else 1 for entry in self._pending)
        if lost and not self._stopped:
            logger.warning(
                "run %s: its last %d events could not be written; a stream of it goes without them",
                self._run.run_id,
                lost,
            )

    async def _flush_loop(self) -> None:
        while True:
            await self._queued.wait()
            wait = self._log.flush_interval if self.watched else _UNWATCHED_SECONDS
            with trio.move_on_after(wait):
                await self._boundary.wait()
                # The events that come with it (a turn's end and its calls' starts, a
                # call's end and the next turn's) go in the same batch.
                await trio.sleep(_GATHER_SECONDS)
            if not await self.flush():
                await trio.sleep(_RETRY_DELAY)

    def ride(self) -> _Ride | None:
        """What waits, for an agent's step to write in its transaction
        (``satsuma.store.Taken.events``), sparing a transaction of its own; None when
        nothing waits, a batch is being written, or nobody watches the run (its events
        wait for the flusher's next write, or the run's end)."""
        if not self.watched or self._stopped or not self._pending or self._writing is not None:
            return None
        self._writing = trio.Event()
        return _Ride(self, self._batch())

    def _rode(self, batch: list[Entry], written: bool | None, stored: Stored | None) -> None:
        """A step that carried ``batch`` ended: written (``stored``: what the run stores
        with it, None if the node no longer held the run), not written (it waits on), or
        unknown (a gap, never a repeat)."""
        assert self._writing is not None
        self._writing.set()
        self._writing = None
        held = written is True and stored is not None
        self._stored = stored if held else None
        if written is None:
            lost = sum(entry if isinstance(entry, int) else 1 for entry in batch)
            self._pending[:0] = [lost]
            self._queued.set()
        elif not written:
            self._put_back(batch)
        elif not held:
            self._stopped = True
            self._pending, self._pending_bytes = [], 0

    async def flush(self) -> bool:
        """Write what waits, in one transaction; False if that failed (it waits on)."""
        while self._writing is not None:  # a step carries a batch: after it
            await self._writing.wait()
        if self._stopped or not self._pending:
            return True
        self._writing = trio.Event()
        try:
            return await self._flush()
        finally:
            self._writing.set()
            self._writing = None

    async def _flush(self) -> bool:
        batch = self._batch()
        try:
            async with _writers(self._store):
                # Shielded, bounded: a batch that went out is never cut short by the
                # run's end (a store call cancelled is abandoned, and whether it was
                # written is unknown; written again, its events would be twice in the
                # stream). Only a database that stops answering leaves it unknown.
                with trio.move_on_after(_LAST_WRITE_SECONDS, shield=True) as bound:
                    stored = await append_events(
                        self._store,
                        self._run.run_id,
                        self._node_id,
                        batch,
                        max_events=self._log.max_events,
                        max_bytes=self._log.max_bytes,
                        stored=self._stored,
                    )
                if bound.cancelled_caught:
                    raise StoreUnavailable(
                        self._store.location,
                        f"no answer in {_LAST_WRITE_SECONDS:g}s; the batch may or may not "
                        "have been written",
                    )
        # Any Exception: the run must not fail because its events could not be written
        # (a StoreError, or a bug of this module); the run's own writes are what count.
        except Exception as exc:
            self._stored = None  # perhaps written: what the run stores is not known
            self._failures += 1
            if self._failures == 1 or not isinstance(exc, StoreError):
                logger.warning(
                    "run %s: could not write its events (%s); trying again with the next batch",
                    self._run.run_id,
                    exc,
                    exc_info=not isinstance(exc, StoreError),
                )
            self._put_back(batch)
            return False
        except BaseException:
            # Cancelled before the batch went out (waiting for a writer's slot; the
            # write itself is shielded): the last flush, when the run ends, writes it.
            self._put_back(batch)
            raise
        self._stored = stored
        if stored is None:
            # Declared dead and the run given to another node: nothing more of it here.
            self._stopped = True
            self._pending, self._pending_bytes = [], 0
        self._failures = 0
        return True

    def _batch(self) -> list[Entry]:
        """Take what waits, as the entries to write."""
        batch: list[Entry] = [
            (KIND_DELTA, encode_event(entry.event())) if isinstance(entry, _Delta) else entry
            for entry in self._pending
        ]
        self._pending, self._pending_bytes = [], 0
        self._queued, self._boundary = trio.Event(), trio.Event()
        return batch

    def _put_back(self, batch: list[Entry]) -> None:
        self._pending[:0] = batch
        self._pending_bytes = sum(_size(entry) for entry in self._pending)
        self._queued.set()


@attrs.define(eq=False)
class _Ride:
    """A batch of a run's events that an agent's step carries (the store's ``Ride``, in
    ``store/_opening.py``)."""

    recorder: RunRecorder
    batch: list[Entry]
    sent: queue.Batch | None = None

    def write(self, db: object) -> None:
        """In the step's transaction, in the store's thread: sent, not read back (no
        round trip of its own); ``settle`` reads whether the node held the run."""
        recorder = self.recorder
        log = recorder._log
        self.sent = queue.write_batch(
            db,  # type: ignore[arg-type]  # the step's psycopg connection
            recorder._run.run_id,
            self.batch,
            log.max_events,
            log.max_bytes,
            held_by=recorder._node_id,
            stored=recorder._stored,
        )

    def settle(self, written: bool | None) -> None:
        # Written: the step's transaction committed, and its answers were read with it.
        stored = self.sent.stored() if written is True and self.sent is not None else None
        self.recorder._rode(self.batch, written, stored)


# Per store, how many event batches are written at once: a quarter of its pool, so that
# the runs' own writes (their journal, their conversation) always find connections free.
# Batches that wait meanwhile grow, so fewer are written.
_limiters: weakref.WeakKeyDictionary[PostgresStore, trio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _writers(store: PostgresStore) -> trio.CapacityLimiter:
    limiter = _limiters.get(store)
    if limiter is None:
        limiter = trio.CapacityLimiter(max(1, store.pool_size // 4))
        _limiters[store] = limiter
    return limiter


def _is_boundary(event: AgentEvent | RunResumed) -> bool:
    """Whether the event is a step's boundary, written at once (5 ms on): a call starting
    or ending, a retry, an approval, a wait for the model's limits. A run's start (or
    resumption) is followed at once by its model call, a turn's end by its calls'
    starts or the run's end, a validated answer by the run's end: those wait for the
    next boundary, the run's end (whose transaction writes them), or ``flush_interval``,
    whichever comes first, rather than cost a transaction of their own."""
    return not isinstance(event, (RunStart, RunResumed, TurnEnd, OutputValidated))


def _size(entry: _Pending) -> int:
    if isinstance(entry, int):
        return 0
    if isinstance(entry, _Delta):
        return sum(map(len, entry.parts))
    return len(entry[1])


async def expire_ended(store: PostgresStore, log: EventLog | None, result_retention: float) -> None:
    """Delete, about once a minute (or more often, if a retention is shorter), the
    queue's runs that ended more than ``result_retention`` seconds ago with their
    events, and the events of runs that ended more than ``log.retention`` ago. Runs
    until cancelled."""
    retentions = [result_retention] if log is None else [result_retention, log.retention]
    while True:
        await trio.sleep(min(*retentions, _EXPIRY_PERIOD))
        try:
            await expire_queue(store, result_retention)
            if log is not None:
                await purge_ended(store, older_than=log.retention)
        except StoreError:
            logger.warning("could not delete the queue's expired runs and events", exc_info=True)
