"""What ``Store.prune`` deletes and how it reports it: the retention policy's shared
pieces (which runs count as ended, the cut, durations as a person writes them).

A store never deletes on its own what a person may want to read again (run records,
journals, approvals, conversations): an owner prunes, with ``Store.prune`` or ``satsuma
store prune``. Only the cluster's queue rows and events, copies kept for the clients
that wait on a run, go by themselves (``satsuma.cluster.Node(result_retention=...)``
and ``EventLog.retention``). docs/persistence.md states the policy.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final

import attrs

__all__ = [
    "LIVE_STATUSES",
    "PRUNE_BATCH",
    "Batch",
    "PruneReport",
    "batches",
    "cut_before",
    "ended_before",
    "idle",
    "seconds_of",
]

# A run in one of these is never pruned, however old: it may still be resumed, decided
# or be running (an interrupted run's journal is what a resume reuses).
LIVE_STATUSES: Final = ("running", "interrupted", "awaiting_approval")

# Runs (or agents) deleted per transaction: a batch holds its locks for tens of
# milliseconds (benchmarks/retention.py), so agents and nodes writing meanwhile wait at
# most that long, never for the whole prune.
PRUNE_BATCH: Final = 500

_LIVE: Final = ", ".join(f"'{status}'" for status in LIVE_STATUSES)


@attrs.frozen(kw_only=True)
class PruneReport:
    """What ``Store.prune`` deleted (or, for a dry run, would delete), by table.

    Attributes:
        dry_run: True when nothing was deleted and the counts say what would be.
        cut: The moment (seconds since the epoch) before which ended runs were pruned.
        runs: Run records.
        tool_calls: Entries of those runs' tool-call journals.
        approvals: Pending or decided approvals of those runs.
        run_queue: Ended runs of a cluster's queue (PostgreSQL only).
        run_events: Recorded events of those queued runs (PostgreSQL only).
        conversations: Agents whose conversation was deleted (``conversations=True``).
        messages: The messages of those conversations.
        budget_ledgers: Budgets' day ledgers of days that ended before the cut's day.
        budget_holds: Budgets' holds that had expired (left by processes that died).
    """

    dry_run: bool
    cut: float
    runs: int = 0
    tool_calls: int = 0
    approvals: int = 0
    run_queue: int = 0
    run_events: int = 0
    conversations: int = 0
    messages: int = 0
    budget_ledgers: int = 0
    budget_holds: int = 0

    def counts(self) -> dict[str, int]:
        """The counts by table name, in a fixed order (what the CLI prints)."""
        return {
            "runs": self.runs,
            "tool_calls": self.tool_calls,
            "approvals": self.approvals,
            "run_queue": self.run_queue,
            "run_events": self.run_events,
            "conversations": self.conversations,
            "messages": self.messages,
            "budget_ledgers": self.budget_ledgers,
            "budget_holds": self.budget_holds,
        }

    def __add__(self, other: PruneReport) -> PruneReport:
        added = {key: value + getattr(other, key) for key, value in self.counts().items()}
        return PruneReport(dry_run=self.dry_run, cut=self.cut, **added)


def seconds_of(older_than: float | timedelta) -> float:
    """``older_than`` in seconds, checked.

    Raises:
        ValueError: it is negative, not finite or not a number.
    """
    seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 <= seconds < 1e12
    ):
        raise ValueError(f"older_than must be 0 or more seconds, got: {older_than!r}")
    return float(seconds)


def cut_before(older_than: float | timedelta, now: float | None = None) -> float:
    """The cut: ``older_than`` before ``now`` (this machine's clock by default)."""
    return (time.time() if now is None else now) - seconds_of(older_than)


# --- in SQL (SQLite's and PostgreSQL's prune, _sqlite_retention and _postgres_retention) ---


def ended_before(runs: str, cut: str) -> str:
    """A run (of ``runs``, a table or alias) that prune deletes: ended before the cut,
    the clause's one parameter (``cut``, its marker)."""
    return (
        f"{runs}.status NOT IN ({_LIVE}) AND {runs}.ended_at IS NOT NULL "
        f"AND {runs}.ended_at < {cut}"
    )


def idle(cut: str) -> str:
    """An agent (``m.agent_id``) whose conversation prune(conversations=True) deletes: no
    run of its outlives the prune, and no process holds it (one parameter: the cut)."""
    return (
        "NOT EXISTS (SELECT 1 FROM runs r WHERE r.agent_id = m.agent_id "
        f"AND NOT ({ended_before('r', cut)})) "
        "AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.agent_id = m.agent_id "
        "AND l.owner_id IS NOT NULL)"
    )


Batch = Callable[[float, str, Any], tuple[PruneReport, str]]
"""One batch of a prune, in one transaction: ``(cut, after, connection)`` to its report
and the key to go on after ("" when done)."""


async def batches(
    transaction: Callable[
        [Callable[[Any], tuple[PruneReport, str]]], Awaitable[tuple[PruneReport, str]]
    ],
    step: Batch,
    cut: float,
) -> PruneReport:
    """Run ``step`` batch after batch, each one ``transaction`` of the store's, until it
    says it is done. Batches walk a primary key from where the last one stopped: each is
    one short transaction, so an agent writing meanwhile waits for one batch at most,
    and the whole prune reads each table once."""
    report = PruneReport(dry_run=False, cut=cut)
    after = ""
    while True:
        batch, after = await transaction(functools.partial(step, cut, after))
        report += batch
        if not after:
            return report
