"""The Store interface: what an agent needs to survive a crash or a kill (``Store``), and
what every store of satsuma does the same way around its own storage (``BaseStore``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from .._messages import Message, Usage
from ._lease import Lease, Owner, hold
from ._records import (
    ApprovalDecision,
    ApprovalRecord,
    JournalEntry,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
)
from ._retention import PruneReport, seconds_of
from ._run_query import RunQuery
from ._step import Step
from ._summaries import Summary

__all__ = ["BaseStore", "Store"]


class Store(Protocol):
    """Where agents keep their conversations, run records and tool-call journal.

    Every method may be called concurrently from many agents. A store opens itself on
    first use; ``open`` opens it early (to see a bad file at start), ``aclose`` closes it.
    Implementations raise ``StoreError`` with a clear message for anything that goes
    wrong, and never leave a half-written change behind (each call is one transaction).
    Its subclass says what the caller does next: ``StoreUnavailable`` (the database is
    away or busy: try again later), ``LeaseLost`` (below: stop serving the agent),
    ``StoreUnreadable`` (a corrupt file or row, or a newer schema: a person must look)
    and ``StoreClosed`` (closed, or its file went away while open: this store is done).

    Ownership (see ``satsuma.store._lease``): an agent's writes carry its ``lease``; a
    store refuses (``LeaseLost``) a write whose lease is no longer the agent's current
    one. A write without a lease is not checked (tools and tests writing directly).
    """

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    # --- ownership --------------------------------------------------------------------

    async def acquire_lease(self, agent_id: str, owner: Owner, *, seconds: float) -> Lease:
        """Take the agent for ``owner`` (again, if it holds it already: the epoch grows).

        Raises:
            StoreError: another owner holds it and is not gone; the message names it.
        """
        ...

    async def renew_lease(self, lease: Lease, *, seconds: float) -> Lease:
        """Push the lease's expiry ``seconds`` ahead.

        Raises:
            LeaseLost: the lease is no longer the agent's current one.
        """
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Let the agent go (a no-op when the lease is no longer current)."""
        ...

    # --- conversations ------------------------------------------------------------------

    async def load_messages(self, agent_id: str) -> list[Message]:
        """The agent's conversation, oldest first (empty for an unknown agent).

        Raises:
            StoreUnreadable: a stored message cannot be read (it names the agent and the
                message); nothing is guessed.
        """
        ...

    async def write_tail(
        self, agent_id: str, start: int, messages: Sequence[Message], *, lease: Lease | None = None
    ) -> None:
        """Make the conversation from position ``start`` on exactly ``messages``
        (appending, replacing the last message, or cutting the tail), atomically."""
        ...

    async def add_summary(self, summary: Summary, *, lease: Lease | None = None) -> None:
        """Keep a summary of the conversation's messages before ``summary.through``
        (``satsuma.Compaction``'s), beside the messages, which stay as they are. A later
        ``write_tail`` that rewrites the conversation before ``through`` deletes it.

        Raises:
            StoreError: ``through`` is past the conversation's end, or it could not be
                written.
        """
        ...

    async def summaries(self, agent_id: str) -> list[Summary]:
        """The agent's summaries that still hold, by ``through``, oldest first."""
        ...

    # --- runs ---------------------------------------------------------------------------

    async def start_run(
        self,
        record: RunRecord,
        *,
        start: int | None = None,
        messages: Sequence[Message] = (),
        lease: Lease | None = None,
    ) -> None:
        """Add the run record; with ``start``, also make the conversation from ``start``
        on exactly ``messages`` (the run's prompt), in the same transaction: a prompt is
        never stored without its run."""
        ...

    async def end_run(
        self,
        run_id: str,
        *,
        status: RunRecordStatus,
        ended_at: float,
        usage: Usage,
        error: str | None,
        lease: Lease | None = None,
    ) -> None: ...

    async def runs(self, agent_id: str) -> list[RunRecord]:
        """The agent's run records, oldest first."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def find_runs(
        self,
        *,
        agent: str | None = None,
        agent_id: str | None = None,
        status: RunRecordStatus | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Run records across conversations, oldest first: those of the agent class
        named ``agent`` (``Agent.name``; a record written before satsuma kept the class
        has none, and only ``agent_id`` finds it), of the conversation ``agent_id``,
        ended with ``status``, started at or after ``since`` (seconds since the epoch);
        each None means any. ``limit`` keeps the newest so many.

        Raises:
            ValueError: an argument that is not what it should be (named).
        """
        ...

    async def mark_interrupted(
        self, agent_id: str, *, lease: Lease | None = None
    ) -> list[RunRecord]:
        """Mark the agent's runs still ``running`` as ``interrupted`` (the agent starting
        again knows no run of its is running) and return them."""
        ...

    # --- runs awaiting approval -----------------------------------------------------------

    async def pause_run(
        self,
        run_id: str,
        pending: Sequence[PendingApproval],
        *,
        usage: Usage,
        lease: Lease | None = None,
    ) -> None:
        """Mark the run ``awaiting_approval`` and keep its pending calls, in place of any
        undecided ones it had before (the decided calls of an earlier pause of the run
        stay, as a record), in one transaction."""
        ...

    async def pending_calls(self, run_id: str) -> list[PendingApproval]:
        """The calls the run waits on, in the order they were made: its undecided calls
        while it is ``awaiting_approval``, none once it is resumed or gone past."""
        ...

    async def runs_awaiting_approval(self, agent_id: str | None = None) -> list[RunRecord]:
        """Every run ``awaiting_approval``, oldest first: what waits on a person (an
        approval inbox, a service listing them after a restart). With ``agent_id``, that
        agent's only: what the agent reads each time it decides about its paused runs
        (the store is the truth; the agent keeps no list of its own)."""
        ...

    async def claim_paused_run(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        lease: Lease | None = None,
    ) -> bool:
        """Mark the run ``running`` again if it is ``awaiting_approval``, atomically: True
        for the one caller that did, False for any other (the run was decided already, or
        never paused). This is what keeps two decisions from both running a call.

        ``decisions`` (by call id) are recorded on the run's pending calls in the same
        transaction, and only by the caller that wins (see ``approvals``)."""
        ...

    async def propose_decision(
        self, run_id: str, tool_use_id: str, decision: ApprovalDecision
    ) -> bool:
        """Keep a decision taken on one pending call of a paused run ahead of its resume
        (a service that takes decisions one call at a time, across restarts and
        processes): True if kept, False if the call has one already or is not pending
        (the run was resumed, gone past, or never paused). It stays a proposal: the
        call is still pending until the run is resumed with it (``claim_paused_run``)."""
        ...

    async def proposed_decisions(self, run_id: str) -> dict[str, ApprovalDecision]:
        """The decisions kept ahead on the run's pending calls, by call id; empty once
        the run is no longer ``awaiting_approval``."""
        ...

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        """Every call the run paused on, in the order they were made (earlier pauses
        first), each with the decision it was resumed with, or None: who approved,
        edited or denied what, and when."""
        ...

    # --- the tool-call journal ------------------------------------------------------------

    async def call_started(
        self,
        run_id: str,
        tool_use_id: str,
        tool_name: str,
        input: Any,
        *,
        lease: Lease | None = None,
    ) -> None: ...

    async def call_finished(
        self,
        run_id: str,
        tool_use_id: str,
        *,
        content: Any,
        is_error: bool,
        error_kind: str | None,
        lease: Lease | None = None,
    ) -> None: ...

    async def calls(self, run_id: str) -> list[JournalEntry]:
        """The run's journal, in the order the calls started."""
        ...

    # --- retention --------------------------------------------------------------------------

    async def prune(
        self,
        *,
        older_than: float | timedelta,
        conversations: bool = False,
        dry_run: bool = False,
    ) -> PruneReport:
        """Delete what is kept of runs that ended more than ``older_than`` (seconds, or a
        timedelta) ago: their run records, tool-call journals and approvals (pending or
        decided), and on PostgreSQL their rows in a cluster's queue and their recorded
        events. A run ``running``, ``interrupted`` or ``awaiting_approval`` is never
        touched, however old: it can still be resumed or decided.

        Conversations stay unless ``conversations`` is True: then the conversation of
        every agent left with no run record (each of its runs ended before the cut and
        was pruned, or it never had one), that no process holds open (no lease held)
        and that has no run queued or in flight in a cluster is deleted too: its
        messages, and its released lease row. An agent opened later under that id
        starts a new conversation.

        The budgets' ledgers go too: the day ledgers of UTC days before the cut's that
        no call in flight holds money on, and the reservations that expired.

        Safe while agents and nodes run: it deletes in batches of a few hundred rows,
        one short transaction each, and skips rows another transaction holds (they go at
        the next prune).

        Args:
            older_than: How long after its end a run is kept (0: every ended run).
            conversations: Also delete the conversations of agents idle since the cut.
            dry_run: Delete nothing; count what would go.

        Returns:
            What was deleted (or would be), by table.

        Raises:
            ValueError: ``older_than`` is negative.
            StoreError: the store could not be read or written; the batches committed
                before stay deleted.
        """
        ...


class BaseStore(abc.ABC):
    """The contract's checks, for MemoryStore, SQLiteStore and PostgresStore alike: the
    arguments a store refuses before it touches its storage, and the process's own
    record of the leases it holds (``_lease``). Each store keeps the rest (``_sql`` for
    the two SQL stores)."""

    async def acquire_lease(self, agent_id: str, owner: Owner, *, seconds: float) -> Lease:
        """See ``Store.acquire_lease``."""
        lease = await self._take_lease(agent_id, owner, seconds)
        hold(owner)  # let go by release_lease
        return lease

    async def prune(
        self,
        *,
        older_than: float | timedelta,
        conversations: bool = False,
        dry_run: bool = False,
    ) -> PruneReport:
        """See ``Store.prune``."""
        # Checked before anything is read: a bad age deletes nothing.
        seconds = seconds_of(older_than)
        return await self._prune(seconds, conversations=conversations, dry_run=dry_run)

    async def find_runs(
        self,
        *,
        agent: str | None = None,
        agent_id: str | None = None,
        status: RunRecordStatus | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """See ``Store.find_runs``."""
        return await self._find_runs(RunQuery.checked(agent, agent_id, status, since, limit))

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    @abc.abstractmethod
    async def write_step(self, step: Step, *, lease: Lease | None = None) -> None:
        """Write ``step``'s writes in one transaction: all of them, or, when any fails,
        none (``satsuma.store._step``; agents call ``_write_step.write_step``, which makes the
        same writes one call each on a store that is not one of these)."""

    @abc.abstractmethod
    async def _take_lease(self, agent_id: str, owner: Owner, seconds: float) -> Lease:
        """Take the agent for ``owner`` in the store (``Store.acquire_lease``)."""

    @abc.abstractmethod
    async def _find_runs(self, query: RunQuery) -> list[RunRecord]:
        """``Store.find_runs``, its arguments checked."""

    @abc.abstractmethod
    async def _prune(self, older_than: float, *, conversations: bool, dry_run: bool) -> PruneReport:
        """``Store.prune``, ``older_than`` checked and in seconds."""
