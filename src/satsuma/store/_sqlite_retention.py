"""``SQLiteStore.prune``: what the retention policy deletes in a SQLite file (see
``_retention``), in batches of one short transaction each.

The store has one writer at a time, so a batch needs no row locks: an agent that writes
meanwhile waits for one batch at most. The cut is on this machine's clock.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Final

from ._dialect import SQLITE
from ._ledger_expiry import prune as prune_ledgers
from ._ledger_expiry import prune_counts
from ._retention import PRUNE_BATCH, PruneReport, batches, cut_before, ended_before, idle

if TYPE_CHECKING:
    from ._sql import SQLStore

__all__ = ["prune"]

_ENDED_BEFORE: Final = ended_before("runs", "?")
_IDLE: Final = idle("?")
# The ids a batch deletes, given as one JSON list.
_CHOSEN: Final = "IN (SELECT value FROM json_each(?))"


async def prune(
    store: SQLStore, older_than: float, *, conversations: bool, dry_run: bool
) -> PruneReport:
    """``Store.prune`` on SQLite; ``older_than`` in seconds."""
    cut = cut_before(older_than)
    now = cut + older_than
    if dry_run:
        return await store.transaction(lambda db: _counts(db, cut, now, conversations))
    report = await batches(store.transaction, _runs_batch, cut)
    if conversations:
        report += await batches(store.transaction, _conversations_batch, cut)
    return report + await prune_ledgers(store, SQLITE, cut, now)


def _counts(db: sqlite3.Connection, cut: float, now: float, conversations: bool) -> PruneReport:
    doomed = f"SELECT run_id FROM runs WHERE {_ENDED_BEFORE}"
    (runs,) = db.execute(f"SELECT count(*) FROM runs WHERE {_ENDED_BEFORE}", (cut,)).fetchone()
    (calls,) = db.execute(
        f"SELECT count(*) FROM tool_calls WHERE run_id IN ({doomed})", (cut,)
    ).fetchone()
    (approvals,) = db.execute(
        f"SELECT count(*) FROM approvals WHERE run_id IN ({doomed})", (cut,)
    ).fetchone()
    agents = messages = 0
    if conversations:
        agents, messages = db.execute(
            f"SELECT count(DISTINCT agent_id), count(*) FROM messages m WHERE {_IDLE}", (cut,)
        ).fetchone()
    ledgers, holds = prune_counts(db, SQLITE, cut, now)
    return PruneReport(
        dry_run=True,
        cut=cut,
        runs=runs,
        tool_calls=calls,
        approvals=approvals,
        conversations=agents,
        messages=messages,
        budget_ledgers=ledgers,
        budget_holds=holds,
    )


def _runs_batch(cut: float, after: str, db: sqlite3.Connection) -> tuple[PruneReport, str]:
    """One batch of ended runs, and the run_id to go on after ("" when done)."""
    ids = [
        run_id
        for (run_id,) in db.execute(
            f"SELECT run_id FROM runs WHERE run_id > ? AND {_ENDED_BEFORE} ORDER BY run_id LIMIT ?",
            (after, cut, PRUNE_BATCH),
        )
    ]
    listed = (json.dumps(ids),)
    report = PruneReport(
        dry_run=False,
        cut=cut,
        tool_calls=db.execute(f"DELETE FROM tool_calls WHERE run_id {_CHOSEN}", listed).rowcount,
        approvals=db.execute(f"DELETE FROM approvals WHERE run_id {_CHOSEN}", listed).rowcount,
        runs=db.execute(f"DELETE FROM runs WHERE run_id {_CHOSEN}", listed).rowcount,
    )
    return report, (ids[-1] if len(ids) == PRUNE_BATCH else "")


def _conversations_batch(cut: float, after: str, db: sqlite3.Connection) -> tuple[PruneReport, str]:
    """One batch of agents looked at, and the agent_id to go on after ("" when done)."""
    candidates = [
        agent_id
        for (agent_id,) in db.execute(
            "SELECT DISTINCT agent_id FROM messages WHERE agent_id > ? ORDER BY agent_id LIMIT ?",
            (after, PRUNE_BATCH),
        )
    ]
    idle_ids = [
        agent_id
        for (agent_id,) in db.execute(
            f"SELECT m.agent_id FROM (SELECT value AS agent_id FROM json_each(?)) m WHERE {_IDLE}",
            (json.dumps(candidates), cut),
        )
    ]
    listed = (json.dumps(idle_ids),)
    messages = db.execute(f"DELETE FROM messages WHERE agent_id {_CHOSEN}", listed).rowcount
    db.execute(f"DELETE FROM summaries WHERE agent_id {_CHOSEN}", listed)  # Compaction's
    # A released lease row (no holder) goes with the conversation. The next owner's
    # epoch starts again at 1, which lets no stale write in: a write is checked against
    # the holder's own id (unique to the opened agent) as well as the epoch.
    db.execute(f"DELETE FROM leases WHERE owner_id IS NULL AND agent_id {_CHOSEN}", listed)
    report = PruneReport(dry_run=False, cut=cut, conversations=len(idle_ids), messages=messages)
    return report, (candidates[-1] if len(candidates) == PRUNE_BATCH else "")
