"""The events of the cluster's queued runs in PostgreSQL (``satsuma.cluster`` writes and
reads them; the tables are migration 4 of ``_postgres``).

The node that runs a queued run appends its events in batches: each batch is one
transaction that checks the node still holds the run (as every queue write does, so a
node declared dead writes nothing into a run another node took over), numbers the events
after the run's last one, keeps the run under its cap and NOTIFYs the run's channel.
Events are JSON text here; what they mean is ``satsuma.cluster``'s business.

The cap: when a run's stored events pass ``max_events`` or ``max_bytes``, the oldest are
deleted, text deltas first, then progress lines and updates, then the rest, down to nine
tenths of the cap (so that a run at its cap does not prune at every batch). A deleted
event leaves its seq unused: a reader sees the gap and says how many it missed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._dialect import NOW
from ._nodes import WATCH_CHANNEL
from ._postgres import PostgresStore

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Batch",
    "EventPage",
    "Stored",
    "append_ctes",
    "append_events",
    "batch_params",
    "channel_for",
    "may_pass_cap",
    "prune",
    "trim",
    "watch_run",
    "purge_ended",
    "read_events",
    "write_batch",
]


# Which go first when a run passes its cap.
KIND_DELTA: Final = 0
KIND_CHATTER: Final = 1
KIND_OTHER: Final = 2

Entry = tuple[int, str] | int
"""One slot of a batch: ``(kind, event JSON)``, or a number of events lost before they
reached the database (their seqs are skipped)."""


def channel_for(run_id: str) -> str:
    """The NOTIFY channel of one run's events: a channel per run, so that a watcher hears
    only of its own run, and short enough for PostgreSQL's 63-byte names whatever the
    run id."""
    return "satsuma_events_" + hashlib.blake2b(run_id.encode(), digest_size=12).hexdigest()


@attrs.frozen
class Stored:
    """What a run had stored after a batch (its stream row): events and bytes. The node
    that holds the run is its only writer, and a trim only lowers them: until its next
    batch they bound what is stored (``may_pass_cap``)."""

    events: int
    bytes: int


async def append_events(
    store: PostgresStore,
    run_id: str,
    node_id: str,
    entries: Sequence[Entry],
    *,
    max_events: int,
    max_bytes: int,
    stored: Stored | None = None,
) -> Stored | None:
    """Append a batch to the run's events: what the run stores with it, or None (nothing
    written) when the node no longer holds the run. ``stored``: what the run stored
    before, if known (``write_batch``)."""

    def work(db: psycopg.Connection[Any]) -> Batch:
        return write_batch(
            db, run_id, entries, max_events, max_bytes, held_by=node_id, stored=stored
        )

    return (await store.transaction(work)).stored()


@attrs.define
class Batch:
    """A batch sent in a transaction (``write_batch``); ``held`` or ``stored`` reads its
    answer (once)."""

    _cursor: Any  # psycopg's, of the batch's first statement
    _answer: Stored | None = None
    _read: bool = False

    def stored(self) -> Stored | None:
        """What the run stores with the batch, or None when the node did not hold the
        run (nothing was written). In a pipeline, read only after the transaction's
        answers came back (the store call returned, or the statement's answer is wanted
        now, at the cost of a round trip)."""
        if not self._read:
            row = self._cursor.fetchone()
            self._answer = None if row is None else Stored(row[1], row[2])
            self._read = True
        return self._answer

    def held(self) -> bool:
        """Whether the node held the run (else nothing was written); as ``stored``."""
        return self.stored() is not None


# The stream's row, made if missing, takes the batch (its seqs, counts and bytes) and
# says the seq of its first event; the events are inserted after it, in the same
# statement, their seqs that first one plus their places in the batch. Batches of one
# run are numbered one after the other: the row is locked by the first. ``{held}``: a
# condition of the batch being written at all (with the check that the node holds the
# run, FOR SHARE: a heartbeat that puts the run back in the queue waits for this
# batch, or this batch sees that the run is no longer the node's; then no row is made
# or changed, no event inserted, and no row returned). The events' JSON goes in binary
# (``%(texts)b``): as it is, where an array's text form escapes each of its quotes
# (psycopg calls a regex's template per quote: some 250 calls a run of two calls).
_APPEND_CTES: Final = (
    "stream AS ("
    " INSERT INTO run_event_streams AS s"
    " (run_id, next_seq, stored_events, stored_bytes, dropped, updated_at)"
    " SELECT %(run)s, %(seqs)s::bigint, %(count)s::integer, %(bytes)s::bigint,"
    f" %(lost)s::bigint, {NOW}{{held}}"
    " ON CONFLICT (run_id) DO UPDATE SET next_seq = s.next_seq + excluded.next_seq,"
    " stored_events = s.stored_events + excluded.stored_events,"
    " stored_bytes = s.stored_bytes + excluded.stored_bytes,"
    " dropped = s.dropped + excluded.dropped, updated_at = excluded.updated_at"
    " RETURNING next_seq - %(seqs)s::bigint AS first, stored_events, stored_bytes),"
    " added AS (INSERT INTO run_events (run_id, seq, kind, size, event)"
    " SELECT %(run)s, stream.first + e.at, e.kind, e.size, e.event FROM stream,"
    " unnest(%(at)s::bigint[], %(kinds)s::smallint[], %(sizes)s::integer[], %(texts)b::text[])"
    " AS e (at, kind, size, event))"
)
_HELD: Final = (
    " WHERE EXISTS (SELECT 1 FROM run_queue WHERE run_id = %(run)s "
    "AND node_id = %(node)s AND status IN ('claimed', 'running') FOR SHARE)"
)
# A run past its cap (with this batch) loses its oldest events, by kind then seq, down
# to nine tenths of it; the row says how many went. After the batch's statement, in
# the same transaction: it sees the row as that left it. A run under its cap (nearly
# always) costs a look at its row, and no round trip: nothing is read back; it is not
# sent at all when the node knows that the run stays under its cap (``may_pass_cap``).
_PRUNE: Final = (
    "WITH over AS (SELECT stored_events - %(keep_events)s::integer AS count,"
    " stored_bytes - %(keep_bytes)s::bigint AS bytes FROM run_event_streams"
    " WHERE run_id = %(run)s{held} AND (stored_events > %(max_events)s::integer"
    " OR stored_bytes > %(max_bytes)s::bigint)),"
    " ordered AS (SELECT seq, sum(size) OVER w - size AS bytes_before,"
    " row_number() OVER w - 1 AS count_before FROM run_events"
    " WHERE run_id = %(run)s AND EXISTS (SELECT 1 FROM over)"
    " WINDOW w AS (ORDER BY kind, seq ROWS UNBOUNDED PRECEDING)),"
    " pruned AS (DELETE FROM run_events e USING ordered o, over"
    " WHERE e.run_id = %(run)s AND e.seq = o.seq"
    " AND (o.bytes_before < over.bytes OR o.count_before < over.count) RETURNING e.size) "
    "UPDATE run_event_streams SET stored_events = stored_events - p.events,"
    " stored_bytes = stored_bytes - p.bytes, dropped = dropped + p.events"
    " FROM (SELECT count(*) AS events, coalesce(sum(size), 0) AS bytes FROM pruned) AS p"
    " WHERE run_id = %(run)s AND p.events > 0"
)
# The run's channel is NOTIFYed only while someone watches the run (``watched``, read
# from the row locked FOR SHARE: a watcher's UPDATE of it waits for this batch to
# commit, or this batch for it, and then reads it anew, so that a watcher either hears
# of the batch or reads it once it marked the run watched).
_CHECKED: Final = (
    "WITH held AS (SELECT watched FROM run_queue WHERE run_id = %(run)s "
    "AND node_id = %(node)s AND status IN ('claimed', 'running') FOR SHARE), "
    + _APPEND_CTES.format(held=" WHERE EXISTS (SELECT 1 FROM held)")
    + " SELECT CASE WHEN held.watched THEN pg_notify(%(channel)s, '') END,"
    " stored_events, stored_bytes FROM stream, held",
    _PRUNE.format(held=_HELD.replace(" WHERE ", " AND ", 1)),
)
_UNCHECKED_PRUNE: Final = _PRUNE.format(held="")


def append_ctes(condition: str) -> str:
    """The CTEs (``stream``, ``added``) that write a batch in a statement of another's
    (``batch_params``'s parameters, with the caller's own), if ``condition`` (SQL, such
    as ``EXISTS (SELECT 1 FROM done)``) holds; ``prune`` after that statement."""
    return _APPEND_CTES.format(held=f" WHERE {condition}")


def write_batch(
    db: psycopg.Connection[Any],
    run_id: str,
    entries: Sequence[Entry],
    max_events: int,
    max_bytes: int,
    *,
    held_by: str,
    stored: Stored | None = None,
) -> Batch:
    """Send a batch in the caller's transaction and NOTIFY the run's channel if it is
    watched (``watch_run``), then the trim of a run past its cap unless ``stored`` (what
    the run stored before, if known) shows that the batch cannot take it there: a
    statement or two, none read back, so that in a pipeline they cost no round trip of
    their own; nothing is written when ``held_by`` (a node id) no longer holds the run
    (``Batch.held`` says so)."""
    params = batch_params(run_id, entries)
    cursor = db.execute(_CHECKED[0], {**params, "node": held_by, "channel": channel_for(run_id)})
    trim(db, run_id, params, stored, max_events, max_bytes, held_by=held_by)
    return Batch(cursor)


def may_pass_cap(
    stored: Stored | None, params: dict[str, Any], max_events: int, max_bytes: int
) -> bool:
    """Whether a batch (its ``batch_params``) may take a run that stored ``stored``
    before it (None: not known) past its cap, so that the trim must follow it."""
    return (
        stored is None
        or stored.events + params["count"] > max_events
        or stored.bytes + params["bytes"] > max_bytes
    )


def trim(
    db: psycopg.Connection[Any],
    run_id: str,
    params: dict[str, Any],
    stored: Stored | None,
    max_events: int,
    max_bytes: int,
    *,
    held_by: str | None = None,
) -> None:
    """After a batch (``params``: its ``batch_params``) of a run that stored ``stored``
    before it (None: not known), send ``prune`` if the batch may take the run past its
    cap (``may_pass_cap``); else nothing."""
    if may_pass_cap(stored, params, max_events, max_bytes):
        prune(db, run_id, max_events, max_bytes, held_by=held_by)


def batch_params(run_id: str, entries: Sequence[Entry]) -> dict[str, Any]:
    """The parameters of ``append_ctes`` for ``entries``."""
    at: list[int] = []
    kinds: list[int] = []
    sizes: list[int] = []
    texts: list[str] = []
    seqs = lost = 0
    for entry in entries:
        if isinstance(entry, int):
            seqs += entry
            lost += entry
            continue
        kind, text = entry
        at.append(seqs)
        kinds.append(kind)
        sizes.append(len(text.encode()))
        texts.append(text)
        seqs += 1
    return {
        "run": run_id,
        "seqs": seqs,
        "count": len(texts),
        "bytes": sum(sizes),
        "lost": lost,
        "at": at,
        "kinds": kinds,
        "sizes": sizes,
        "texts": texts,
    }


def prune(
    db: psycopg.Connection[Any],
    run_id: str,
    max_events: int,
    max_bytes: int,
    *,
    held_by: str | None,
) -> None:
    """Send the prune of the run's events down to nine tenths of its cap, if a batch
    took it past the cap (nothing read back); ``held_by`` None: the caller's statement
    made sure that the node held the run."""
    db.execute(
        _UNCHECKED_PRUNE if held_by is None else _CHECKED[1],
        {
            "run": run_id,
            "node": held_by,
            "max_events": max_events,
            "max_bytes": max_bytes,
            "keep_events": max_events * 9 // 10,
            "keep_bytes": max_bytes * 9 // 10,
        },
    )


@attrs.frozen(kw_only=True)
class EventPage:
    """What a reader gets in one read: a consistent view (one statement, one snapshot).

    ``ended``: the run had ended when these were read, so that, with fewer events than
    asked for, no more will come. ``next_seq``: the seq its next event will have (events
    up to it that are missing were dropped).
    """

    agent_name: str
    status: str
    ended: bool
    events: tuple[tuple[int, str], ...]
    next_seq: int


async def read_events(
    store: PostgresStore, run_id: str, start: int, limit: int
) -> EventPage | None:
    """The run's events from seq ``start`` on (at most ``limit``), or None for a run the
    queue does not know."""

    def work(db: psycopg.Connection[Any]) -> EventPage | None:
        rows = db.execute(
            "SELECT q.agent_name, q.status, coalesce(s.next_seq, 0), e.seq, e.event "
            "FROM run_queue q "
            "LEFT JOIN run_event_streams s ON s.run_id = q.run_id "
            "LEFT JOIN LATERAL (SELECT seq, event FROM run_events "
            " WHERE run_id = q.run_id AND seq >= %s ORDER BY seq LIMIT %s) e ON true "
            "WHERE q.run_id = %s ORDER BY e.seq",
            (start, limit, run_id),
        ).fetchall()
        if not rows:
            return None
        agent_name, status, next_seq = rows[0][:3]
        return EventPage(
            agent_name=agent_name,
            status=status,
            ended=status in ("completed", "failed", "cancelled"),
            events=tuple((seq, event) for *_, seq, event in rows if seq is not None),
            next_seq=next_seq,
        )

    return await store.read(work)


async def watch_run(store: PostgresStore, run_id: str) -> None:
    """Mark the run watched while it is in flight (``QueuedRun.watched``): a node that
    claims it after this asks the model for answers as they are written; the node that
    holds it now hears it on ``WATCH_CHANNEL`` and does so from its next model call.
    Nothing for a run already watched, ended or unknown."""

    def work(db: psycopg.Connection[Any]) -> None:
        db.execute(
            "WITH w AS (UPDATE run_queue SET watched = true WHERE run_id = %(run)s "
            "AND NOT watched AND status IN ('queued', 'claimed', 'running') "
            "RETURNING node_id) SELECT pg_notify(%(channel)s, %(run)s) FROM w "
            "WHERE node_id IS NOT NULL",
            {"run": run_id, "channel": WATCH_CHANNEL},
        )

    await store.transaction(work)


async def purge_ended(store: PostgresStore, *, older_than: float, batch: int = 1000) -> int:
    """Delete the events of runs that ended more than ``older_than`` seconds ago (and of
    runs the queue no longer knows); how many runs' events went."""

    def work(db: psycopg.Connection[Any]) -> int:
        doomed = db.execute(
            "DELETE FROM run_event_streams s WHERE s.run_id IN ("
            " SELECT s2.run_id FROM run_event_streams s2"
            " LEFT JOIN run_queue q ON q.run_id = s2.run_id"
            " WHERE q.run_id IS NULL OR (q.status IN ('completed', 'failed', 'cancelled')"
            f"  AND q.ended_at < {NOW} - %s) LIMIT %s) RETURNING s.run_id",
            (older_than, batch),
        ).fetchall()
        if doomed:
            db.execute(
                "DELETE FROM run_events WHERE run_id = ANY(%s)",
                ([run_id for (run_id,) in doomed],),
            )
        return len(doomed)

    total = 0
    while True:
        purged = await store.transaction(work)
        total += purged
        if purged < batch:
            return total
