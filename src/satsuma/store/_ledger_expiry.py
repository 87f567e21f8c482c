"""How the budgets' ledgers (``_ledger``) end: a hold left by a process that died is
given back once expired, and ``Store.prune`` deletes the day ledgers of days that ended
before its cut with the holds that expired.

A day ledger (``day:<agent_id>:<YYYY-MM-DD>``) is charged on its UTC day only, so once
the day is over it is read by nobody's reservation: without a prune a service that runs
for months keeps one row per agent per day. A ledger with a live hold is never deleted
(a call in flight settles on it), nor is a ledger of the day the cut falls on.
Lifetime ledgers (``agent:<agent_id>``) are kept: they are an agent's budget for good.

The SQL is written with ``?`` markers, for ``Dialect.sql``.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any, Final, Protocol

from ._dialect import Connection, Dialect
from ._retention import PRUNE_BATCH, PruneReport, batches

__all__ = ["PrunedLedgers", "changed", "day_ended", "day_of", "give_back", "prune", "prune_counts"]

_DAY: Final = "day:"
_EXPIRED: Final = "SELECT hold_id, amount FROM budget_holds WHERE ledger = ? AND expires_at < ?"
_DROP_HOLD: Final = "DELETE FROM budget_holds WHERE hold_id = ? AND ledger = ?"
_UNRESERVE: Final = "UPDATE budget_ledgers SET reserved = reserved - ? WHERE ledger = ?"
# A ledger prune deletes (parameters: the cut's day, now): a day ledger of a day before
# the cut's (ISO dates compare as text), on which no call holds money.
_ENDED: Final = (
    f"substr(ledger, 1, {len(_DAY)}) = '{_DAY}' AND substr(ledger, length(ledger) - 9) < ? "
    "AND NOT EXISTS (SELECT 1 FROM budget_holds h WHERE h.ledger = budget_ledgers.ledger "
    "AND h.expires_at >= ?)"
)


class PrunedLedgers(Protocol):
    """Ledgers kept in memory beside a MemoryStore, which its prune reaches."""

    def prune(self, day: str, now: float, *, dry_run: bool) -> tuple[int, int]:
        """Delete the holds expired before ``now`` and the day ledgers of days before
        ``day`` that no live hold is on; how many of each went (or would)."""
        ...


def day_of(cut: float) -> str:
    """The UTC day (``YYYY-MM-DD``) the cut falls on: the ledgers of days before it go."""
    return datetime.datetime.fromtimestamp(cut, datetime.UTC).date().isoformat()


def day_ended(ledger: str, day: str) -> bool:
    """Whether ``ledger`` is a day ledger of a day before ``day`` (holds aside)."""
    return ledger.startswith(_DAY) and ledger[-10:] < day


def changed(db: Connection, dialect: Dialect, template: str, params: tuple[Any, ...]) -> bool:
    """Whether the write changed a row. PostgreSQL's pipeline knows a rowcount only once
    the result is read: RETURNING reads it."""
    if dialect.returning:
        return db.execute(dialect.sql(template + " RETURNING 1"), params).fetchone() is not None
    return bool(db.execute(dialect.sql(template), params).rowcount == 1)


def give_back(db: Connection, dialect: Dialect, ledger: str, now: float) -> int:
    """Delete the holds on ``ledger`` that expired before ``now`` and give their amounts
    back; how many went."""
    gone = 0
    for expired, held in db.execute(dialect.sql(_EXPIRED), (ledger, now)).fetchall():
        # One row at a time: of two transactions giving back the same hold (a
        # reservation, a prune), only the one that deletes it gives the amount back.
        if changed(db, dialect, _DROP_HOLD, (expired, ledger)):
            db.execute(dialect.sql(_UNRESERVE), (held, ledger))
            gone += 1
    return gone


def prune_counts(db: Connection, dialect: Dialect, cut: float, now: float) -> tuple[int, int]:
    """What a prune would delete: day ledgers, expired holds."""
    (holds,) = db.execute(
        dialect.sql("SELECT count(*) FROM budget_holds WHERE expires_at < ?"), (now,)
    ).fetchone()
    (ledgers,) = db.execute(
        dialect.sql(f"SELECT count(*) FROM budget_ledgers WHERE {_ENDED}"), (day_of(cut), now)
    ).fetchone()
    return ledgers, holds


async def prune(store: Any, dialect: Dialect, cut: float, now: float) -> PruneReport:
    """Delete the expired holds, then the day ledgers of days before the cut's, in
    batches of one short transaction each (``store.transaction``)."""
    report = await batches(store.transaction, functools.partial(_holds_batch, dialect, now), cut)
    return report + await batches(
        store.transaction, functools.partial(_ledgers_batch, dialect, now), cut
    )


def _holds_batch(
    dialect: Dialect, now: float, cut: float, after: str, db: Connection
) -> tuple[PruneReport, str]:
    """The expired holds of one batch of ledgers, and the ledger to go on after."""
    ledgers = [
        ledger
        for (ledger,) in db.execute(
            dialect.sql(
                "SELECT DISTINCT ledger FROM budget_holds WHERE ledger > ? AND expires_at < ? "
                "ORDER BY ledger LIMIT ?"
            ),
            (after, now, PRUNE_BATCH),
        ).fetchall()
    ]
    gone = sum(give_back(db, dialect, ledger, now) for ledger in ledgers)
    report = PruneReport(dry_run=False, cut=cut, budget_holds=gone)
    return report, (ledgers[-1] if len(ledgers) == PRUNE_BATCH else "")


def _ledgers_batch(
    dialect: Dialect, now: float, cut: float, after: str, db: Connection
) -> tuple[PruneReport, str]:
    """One batch of ended day ledgers, and the ledger to go on after."""
    day = day_of(cut)
    ledgers = [
        ledger
        for (ledger,) in db.execute(
            dialect.sql(
                f"SELECT ledger FROM budget_ledgers WHERE ledger > ? AND {_ENDED} "
                "ORDER BY ledger LIMIT ?"
            ),
            (after, day, now, PRUNE_BATCH),
        ).fetchall()
    ]
    # The condition again as each goes: a hold taken since the select keeps its ledger.
    delete = f"DELETE FROM budget_ledgers WHERE ledger = ? AND {_ENDED}"
    gone = sum(changed(db, dialect, delete, (ledger, day, now)) for ledger in ledgers)
    report = PruneReport(dry_run=False, cut=cut, budget_ledgers=gone)
    return report, (ledgers[-1] if len(ledgers) == PRUNE_BATCH else "")
