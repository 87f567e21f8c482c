"""MemoryStore: the Store interface kept in memory, for tests (nothing survives the
process)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, final

import attrs
import trio

from .._exceptions import LeaseLost, StoreError
from .._messages import Message, Usage
from ._base import BaseStore
from ._lease import Lease, Owner, let_go, owner_text, refuse_takeover
from ._ledger_expiry import PrunedLedgers, day_of
from ._load_agent import Loaded
from ._records import (
    ApprovalDecision,
    ApprovalRecord,
    JournalEntry,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
    outcome_entry,
)
from ._retention import LIVE_STATUSES, PruneReport, cut_before
from ._run_query import RunQuery, chosen
from ._step import RunEnd, Step
from ._summaries import Summary
from ._unclaim import MemoryClaims

__all__ = ["MemoryStore"]

_L = TypeVar("_L", bound=PrunedLedgers)


@final
class MemoryStore(MemoryClaims, BaseStore):
    """A Store in memory. Values are frozen, so what it hands out cannot be changed
    behind its back."""

    def __init__(self) -> None:
        self._messages: dict[str, list[Message]] = {}
        self._runs: dict[str, RunRecord] = {}
        # agent_id -> its run ids (a dict for its order): opening an agent and starting a
        # run read that agent's runs, which a scan of every run made quadratic in a
        # server holding thousands of conversations.
        self._agent_runs: dict[str, dict[str, None]] = {}
        # The ids of the runs awaiting approval, of any agent.
        self._paused: set[str] = set()
        self._calls: dict[str, dict[str, JournalEntry]] = {}
        self._approvals: dict[str, list[ApprovalRecord]] = {}
        self._proposed: dict[str, dict[str, ApprovalDecision]] = {}
        self._summaries: dict[str, dict[int, Summary]] = {}  # agent_id -> through -> it
        # agent_id -> (holder or None once released, epoch, expires_at)
        self._leases: dict[str, tuple[Owner | None, int, float]] = {}
        # The budgets' ledgers of this store, once an agent charged them (set by
        # ``_ledger.ledgers_of``, which imports this module): what prune reaches of them.
        self._budget_ledgers: PrunedLedgers | None = None

    # --- read-only views, for the store room's own readers (_browse, _ledger) -----------

    @property
    def held_runs(self) -> Mapping[str, RunRecord]:
        """Every run record held, by run id (read-only)."""
        return MappingProxyType(self._runs)

    @property
    def held_messages(self) -> Mapping[str, Sequence[Message]]:
        """Every conversation's messages, by agent_id (read-only)."""
        return MappingProxyType(self._messages)

    @property
    def held_approvals(self) -> Mapping[str, Sequence[ApprovalRecord]]:
        """Every run's approval records, by run id (read-only)."""
        return MappingProxyType(self._approvals)

    def kept_ledgers(self, make: Callable[[], _L]) -> _L | PrunedLedgers:
        """This store's budget ledgers, made by ``make`` the first time: kept here, so
        that ``prune`` reaches them."""
        if self._budget_ledgers is None:
            self._budget_ledgers = make()
        return self._budget_ledgers

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> MemoryStore:
        return self

    # --- ownership (the rule of _lease.py, as SQLiteStore applies it) ---------------------

    def _check(self, lease: Lease | None) -> None:
        if lease is None:
            return
        holder, epoch, _ = self._leases.get(lease.agent_id, (None, 0, 0.0))
        if holder is not None and holder.owner_id == lease.owner.owner_id and epoch == lease.epoch:
            return
        now = "no one holds it now" if holder is None else f"{owner_text(holder)} holds it now"
        raise LeaseLost(
            "in memory",
            f"agent {lease.agent_id!r}: a write under a lease it no longer has (epoch "
            f"{lease.epoch}) was refused; {now} (epoch {epoch})",
        )

    async def _take_lease(self, agent_id: str, owner: Owner, seconds: float) -> Lease:
        await trio.lowlevel.checkpoint()
        holder, epoch, expires_at = self._leases.get(agent_id, (None, 0, 0.0))
        refuse_takeover("in memory", agent_id, owner, holder, expires_at)
        lease = Lease(
            agent_id=agent_id, owner=owner, epoch=epoch + 1, expires_at=time.time() + seconds
        )
        self._leases[agent_id] = (owner, lease.epoch, lease.expires_at)
        return lease

    async def renew_lease(self, lease: Lease, *, seconds: float) -> Lease:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        renewed = attrs.evolve(lease, expires_at=time.time() + seconds)
        self._leases[lease.agent_id] = (lease.owner, lease.epoch, renewed.expires_at)
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        await trio.lowlevel.checkpoint()
        let_go(lease.owner)
        holder, epoch, expires_at = self._leases.get(lease.agent_id, (None, 0, 0.0))
        if holder is not None and holder.owner_id == lease.owner.owner_id and epoch == lease.epoch:
            self._leases[lease.agent_id] = (None, epoch, expires_at)

    # --- conversations ------------------------------------------------------------------

    async def load_messages(self, agent_id: str) -> list[Message]:
        await trio.lowlevel.checkpoint()
        return list(self._messages.get(agent_id, ()))

    async def write_tail(
        self, agent_id: str, start: int, messages: Sequence[Message], *, lease: Lease | None = None
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        self._write_tail(agent_id, start, messages)

    def _write_tail(self, agent_id: str, start: int, messages: Sequence[Message]) -> None:
        stored = self._messages.setdefault(agent_id, [])
        if start > len(stored):
            raise ValueError(f"write_tail at {start} past the end ({len(stored)}) for {agent_id!r}")
        del stored[start:]
        stored.extend(messages)
        summaries = self._summaries.get(agent_id, {})
        for through in [through for through in summaries if through > start]:
            del summaries[through]

    async def add_summary(self, summary: Summary, *, lease: Lease | None = None) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        count = len(self._messages.get(summary.agent_id, ()))
        if summary.through > count:
            raise StoreError(
                "MemoryStore",
                f"a summary through message {summary.through} of agent {summary.agent_id!r}, "
                f"whose conversation has {count} messages",
            )
        self._summaries.setdefault(summary.agent_id, {})[summary.through] = summary

    async def summaries(self, agent_id: str) -> list[Summary]:
        await trio.lowlevel.checkpoint()
        return sorted(self._summaries.get(agent_id, {}).values(), key=lambda s: s.through)

    async def start_run(
        self,
        record: RunRecord,
        *,
        start: int | None = None,
        messages: Sequence[Message] = (),
        lease: Lease | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        if start is not None:
            self._write_tail(record.agent_id, start, messages)
        self._runs[record.run_id] = record
        self._agent_runs.setdefault(record.agent_id, {})[record.run_id] = None
        self._set_paused(record)

    async def end_run(
        self,
        run_id: str,
        *,
        status: RunRecordStatus,
        ended_at: float,
        usage: Usage,
        error: str | None,
        lease: Lease | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        self._end_run(
            RunEnd(run_id=run_id, status=status, ended_at=ended_at, usage=usage, error=error)
        )

    def _end_run(self, end: RunEnd) -> None:
        record = self._runs[end.run_id]
        self._runs[end.run_id] = ended = attrs.evolve(
            record, status=end.status, ended_at=end.ended_at, usage=end.usage, error=end.error
        )
        self._set_paused(ended)

    async def write_step(self, step: Step, *, lease: Lease | None = None) -> None:
        """Write ``step`` at once: checked whole first, so nothing of it is written if
        any of it is refused."""
        await trio.lowlevel.checkpoint()
        self._check(lease)
        if step.start is not None:
            stored = len(self._messages.get(step.agent_id, ()))
            if step.start > stored:
                raise ValueError(
                    f"write_tail at {step.start} past the end ({stored}) for {step.agent_id!r}"
                )
        for end in step.ends:
            if end.run_id not in self._runs:
                raise KeyError(end.run_id)
        for entry in step.finished:
            self._finish_call(entry)
        if step.start is not None:
            self._write_tail(step.agent_id, step.start, step.messages)
        for entry in step.started:
            self._start_call(entry)
        for end in step.ends:
            self._end_run(end)

    async def runs(self, agent_id: str) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        mine = [self._runs[run_id] for run_id in self._agent_runs.get(agent_id, ())]
        return sorted(mine, key=lambda r: r.started_at)

    def _set_paused(self, record: RunRecord) -> None:
        """Keep ``_paused`` in step with ``record``, just written to ``_runs``."""
        if record.status == "awaiting_approval":
            self._paused.add(record.run_id)
        else:
            self._paused.discard(record.run_id)

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._runs.get(run_id)

    async def mark_interrupted(
        self, agent_id: str, *, lease: Lease | None = None
    ) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        return self._interrupt(agent_id)

    def _interrupt(self, agent_id: str) -> list[RunRecord]:
        marked = []
        for run_id in self._agent_runs.get(agent_id, ()):
            record = self._runs[run_id]
            if record.status == "running":
                self._runs[run_id] = marked_record = attrs.evolve(record, status="interrupted")
                marked.append(marked_record)
        return sorted(marked, key=lambda r: r.started_at)

    async def load_agent(self, agent_id: str, *, lease: Lease | None = None) -> Loaded:
        """``_load_agent.load_agent`` at once."""
        await trio.lowlevel.checkpoint()
        self._check(lease)
        self._interrupt(agent_id)
        mine = [self._runs[run_id] for run_id in self._agent_runs.get(agent_id, ())]
        return Loaded(
            messages=tuple(self._messages.get(agent_id, ())),
            runs=tuple(sorted(mine, key=lambda r: r.started_at)),
        )

    async def pause_run(
        self,
        run_id: str,
        pending: Sequence[PendingApproval],
        *,
        usage: Usage,
        lease: Lease | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        self._runs[run_id] = attrs.evolve(
            self._runs[run_id], status="awaiting_approval", usage=usage
        )
        self._paused.add(run_id)
        self._proposed.pop(run_id, None)  # a new pause: its calls are undecided
        decided = [a for a in self._approvals.get(run_id, ()) if a.decision is not None]
        self._approvals[run_id] = decided + [
            ApprovalRecord(
                run_id=run_id,
                tool_use_id=p.tool_use_id,
                tool_name=p.tool_name,
                input=p.input,
                reason=p.reason,
            )
            for p in pending
        ]

    async def pending_calls(self, run_id: str) -> list[PendingApproval]:
        await trio.lowlevel.checkpoint()
        record = self._runs.get(run_id)
        if record is None or record.status != "awaiting_approval":
            return []
        return [
            PendingApproval(
                run_id=run_id,
                tool_use_id=a.tool_use_id,
                tool_name=a.tool_name,
                input=a.input,
                reason=a.reason,
            )
            for a in self._approvals.get(run_id, ())
            if a.decision is None
        ]

    async def runs_awaiting_approval(self, agent_id: str | None = None) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        paused = [
            r for r in map(self._runs.__getitem__, self._paused) if agent_id in (None, r.agent_id)
        ]
        return sorted(paused, key=lambda r: r.started_at)

    async def claim_paused_run(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        lease: Lease | None = None,
    ) -> bool:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        record = self._runs.get(run_id)
        if record is None or record.status != "awaiting_approval":
            return False
        self._runs[run_id] = attrs.evolve(record, status="running")
        self._paused.discard(run_id)
        decisions = decisions or {}
        self._approvals[run_id] = [
            attrs.evolve(a, decision=decisions[a.tool_use_id])
            if a.decision is None and a.tool_use_id in decisions
            else a
            for a in self._approvals.get(run_id, ())
        ]
        return True

    async def propose_decision(
        self, run_id: str, tool_use_id: str, decision: ApprovalDecision
    ) -> bool:
        await trio.lowlevel.checkpoint()
        pending = {call.tool_use_id for call in await self.pending_calls(run_id)}
        proposed = self._proposed.setdefault(run_id, {})
        if tool_use_id not in pending or tool_use_id in proposed:
            return False
        proposed[tool_use_id] = decision
        return True

    async def proposed_decisions(self, run_id: str) -> dict[str, ApprovalDecision]:
        pending = {call.tool_use_id for call in await self.pending_calls(run_id)}
        proposed = self._proposed.get(run_id, {})
        return {call_id: d for call_id, d in proposed.items() if call_id in pending}

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        await trio.lowlevel.checkpoint()
        return list(self._approvals.get(run_id, ()))

    async def call_started(
        self,
        run_id: str,
        tool_use_id: str,
        tool_name: str,
        input: Any,
        *,
        lease: Lease | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        self._start_call(
            JournalEntry(run_id=run_id, tool_use_id=tool_use_id, tool_name=tool_name, input=input)
        )

    def _start_call(self, entry: JournalEntry) -> None:
        # dicts keep insertion order: a call run again keeps its place in the journal.
        self._calls.setdefault(entry.run_id, {})[entry.tool_use_id] = entry

    async def call_finished(
        self,
        run_id: str,
        tool_use_id: str,
        *,
        content: Any,
        is_error: bool,
        error_kind: str | None,
        lease: Lease | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._check(lease)
        self._finish_call(
            outcome_entry(
                run_id, tool_use_id, content=content, is_error=is_error, error_kind=error_kind
            )
        )

    def _finish_call(self, outcome: JournalEntry) -> None:
        entry = self._calls.get(outcome.run_id, {}).get(outcome.tool_use_id)
        if entry is None:
            return  # never journaled as started: nothing to finish (as SQLiteStore does)
        self._calls[outcome.run_id][outcome.tool_use_id] = attrs.evolve(
            entry,
            finished=True,
            content=outcome.content,
            is_error=outcome.is_error,
            error_kind=outcome.error_kind,
        )

    async def calls(self, run_id: str) -> list[JournalEntry]:
        await trio.lowlevel.checkpoint()
        return list(self._calls.get(run_id, {}).values())

    async def _find_runs(self, query: RunQuery) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        return chosen(query, list(self._runs.values()))

    # --- retention --------------------------------------------------------------------------

    async def _prune(self, older_than: float, *, conversations: bool, dry_run: bool) -> PruneReport:
        cut = cut_before(older_than)
        await trio.lowlevel.checkpoint()
        ledgers = holds = 0
        if self._budget_ledgers is not None:
            ledgers, holds = self._budget_ledgers.prune(
                day_of(cut), cut + older_than, dry_run=dry_run
            )
        doomed = [
            r.run_id
            for r in self._runs.values()
            if r.status not in LIVE_STATUSES and r.ended_at is not None and r.ended_at < cut
        ]
        report = PruneReport(
            dry_run=dry_run,
            cut=cut,
            runs=len(doomed),
            tool_calls=sum(len(self._calls.get(run_id, ())) for run_id in doomed),
            approvals=sum(len(self._approvals.get(run_id, ())) for run_id in doomed),
            budget_ledgers=ledgers,
            budget_holds=holds,
        )
        gone = set(doomed)
        kept_agents = {r.agent_id for r in self._runs.values() if r.run_id not in gone}
        idle = []
        if conversations:
            idle = [
                agent_id
                for agent_id in self._messages
                if agent_id not in kept_agents and self._leases.get(agent_id, (None,))[0] is None
            ]
            report = attrs.evolve(
                report,
                conversations=len(idle),
                messages=sum(len(self._messages[agent_id]) for agent_id in idle),
            )
        if not dry_run:
            for run_id in doomed:
                del self._agent_runs[self._runs.pop(run_id).agent_id][run_id]
                self._paused.discard(run_id)
                self._calls.pop(run_id, None)
                self._approvals.pop(run_id, None)
                self._proposed.pop(run_id, None)
            for agent_id in idle:
                del self._messages[agent_id]
                self._summaries.pop(agent_id, None)
                if agent_id in self._leases:
                    del self._leases[agent_id]
        return report
