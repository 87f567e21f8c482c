"""An agent's link to its store: the conversation written back before each model call and
before tools run, run records, the tool-call journal, each step's writes together. A run
read back as the store kept it is ``_stored``'s (its names are here too, for the modules
that read them from here); the repair of calls that a crash or a kill left without a
result is ``_repair``'s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

import attrs
import trio

from .._exceptions import LeaseLost, StoreClosed, StoreError
from .._messages import Message, Usage
from ..store import (
    DEFAULT_LEASE_SECONDS,
    ApprovalDecision,
    JournalEntry,
    Lease,
    Owner,
    PendingApproval,
    RunEnd,
    RunRecord,
    RunRecordStatus,
    Step,
    Store,
    Summary,
    Taken,
    load_agent,
    write_step,
)
from ..tools import ToolCall, ToolOutcome
from ._stored import gone_past, own_answer, run_part, stored_answer, stored_result

__all__ = [
    "Persistence",
    "gone_past",
    "own_answer",
    "run_part",
    "stored_answer",
    "stored_result",
]

logger = logging.getLogger("satsuma.agents")


@attrs.define(eq=False)
class Persistence:
    """Writes one agent's state to its store, under the agent's lease (see
    ``satsuma.store``'s lease rules): taken when the agent loads, renewed while it runs, let go
    when it stops. Every write carries the lease, so a store refuses the writes of an
    owner that lost it.

    Writes that must be durable before the same next thing go as one step
    (``satsuma.store.Step``: one transaction on satsuma's stores): the ``tool_use``
    message with the calls journaled as started, before any tool runs; the outcome of a
    turn's last call with the conversation written next (its results, before the model
    is called); a run's last messages with its end. The outcome of a call that finishes
    while others of its turn still run is written at once, as it always was."""

    store: Store
    agent_id: str
    # False once a newer incarnation of the agent has started (see Actor.is_current).
    fence: Callable[[], bool] = attrs.field(default=lambda: True, kw_only=True)
    # Who holds the agent: one per opened agent, or one per supervisor's child that all
    # its incarnations share (a restarted one takes the lease over with a new epoch).
    owner: Owner = attrs.field(factory=Owner.new, kw_only=True)
    lease_seconds: float = attrs.field(default=DEFAULT_LEASE_SECONDS, kw_only=True)
    # The agent class's name, kept on each run record (what evals select runs by).
    agent: str | None = attrs.field(default=None, kw_only=True)
    lease: Lease | None = None
    dirty_from: int | None = None  # the first message not yet written as it stands
    # Ends of runs that could not be written: tried again before the next run starts.
    unwritten_ends: dict[str, RunEnd] = attrs.Factory(dict)
    # Outcomes of a turn's last calls, written with the next write (the turn's results).
    unwritten_outcomes: list[JournalEntry] = attrs.Factory(list)
    # (run id, call id) of the calls journaled as started that have not finished.
    running: set[tuple[str, str]] = attrs.Factory(set)
    # From a load that found no run awaiting approval until the first ``runs_left``,
    # which then answers without asking: none can have appeared in between (only the
    # lease's holder pauses a run, a claim through the store needs a paused one, and the
    # load marked every running run interrupted), so a first run does not read again
    # what its agent's open has just read.
    none_left: bool = False
    # What a cluster's node took for the agent with its run's claim: its lease and state,
    # which the load starts from (``satsuma.store.Taken``).
    taken: Taken | None = attrs.field(default=None, kw_only=True)

    def _check_fence(self, what: str) -> None:
        if self.fence():
            return
        logger.warning(
            "agent %s: refused a write (%s) from an incarnation that a newer one replaced",
            self.agent_id,
            what,
        )
        raise LeaseLost(
            f"agent {self.agent_id}",
            f"this incarnation was replaced by a newer one; its write ({what}) was refused",
        )

    def changed(self, index: int) -> None:
        if self.dirty_from is None or index < self.dirty_from:
            self.dirty_from = max(index, 0)

    async def load(self) -> tuple[list[Message], list[RunRecord]]:
        """Take the agent's lease and load its conversation and its interrupted runs.
        Its runs awaiting approval stay as they are (a restart decides nothing), and are
        read from the store whenever the agent decides about them (``runs_left``).

        Raises:
            StoreError: another owner holds the agent, or its history cannot be read.
        """
        if self.taken is not None and not self.taken.adopted:
            self.lease, loaded = self.taken.lease, self.taken.adopt()  # taken with a claim
        else:
            self.lease = await self.store.acquire_lease(
                self.agent_id, self.owner, seconds=self.lease_seconds
            )
            try:
                # One transaction on satsuma's stores (store.load_agent).
                loaded = await load_agent(self.store, self.agent_id, lease=self.lease)
            except BaseException:
                await self.release()
                raise
        self.none_left = all(record.status != "awaiting_approval" for record in loaded.runs)
        # Every run still interrupted, also one an earlier start found and did not resume.
        interrupted = [record for record in loaded.runs if record.status == "interrupted"]
        return list(loaded.messages), interrupted

    async def add_summary(self, summary: Summary) -> None:
        """Store a summary of the conversation (``Compaction``'s), under the lease.

        Raises:
            StoreError: it could not be written (``LeaseLost``: another owner has the
                agent).
        """
        self._check_fence("a summary")
        await self.store.add_summary(summary, lease=self.lease)

    async def runs_left(self, running: str | None, *, claimed: bool) -> list[RunRecord]:
        """The agent's runs that a new run or a reset goes past, as the store has them
        now, oldest first: those ``awaiting_approval``, and with ``claimed`` (only worth
        a query when the conversation ends with unanswered calls) those the store shows
        ``running`` that this agent is not running (``running`` is the one it is): taken
        up through the store by someone without the agent's lease
        (``Store.claim_paused_run(lease=None)``), so that nothing runs their calls.

        Raises:
            StoreError: the store could not be read.
        """
        if self.none_left:
            self.none_left = False
            return []
        # A run whose end this agent could not write yet has ended: the store is only
        # behind (the end is written with the next flush), and the end stands.
        paused = [
            record
            for record in await self.store.runs_awaiting_approval(self.agent_id)
            if record.run_id not in self.unwritten_ends
        ]
        if not claimed:
            return paused
        orphans = [
            record
            for record in await self.store.runs(self.agent_id)
            if record.status == "running"
            and record.run_id != running
            and record.run_id not in self.unwritten_ends
        ]
        return sorted([*paused, *orphans], key=lambda record: record.started_at)

    async def keep_lease(self) -> None:
        """Renew the lease every third of its time, until cancelled.

        Raises:
            LeaseLost: another owner has taken the agent: the agent stops at once.
            StoreClosed: the store was closed, or its file went away: no renewal can
                succeed, the agent stops at once.
            StoreError: it could not be renewed before it expired (another owner may
                have taken the agent): the agent stops.
        """
        while True:
            await trio.sleep(self.lease_seconds / 3)
            lease = self.lease
            if lease is None:
                return
            try:
                self.lease = await self.store.renew_lease(lease, seconds=self.lease_seconds)
            except (LeaseLost, StoreClosed):
                raise  # no later try can succeed: waiting for the expiry would only delay
            except StoreError:
                if time.time() >= lease.expires_at:
                    raise
                logger.warning(
                    "agent %s: could not renew its lease (will try again)",
                    self.agent_id,
                    exc_info=True,
                )

    async def release(self) -> None:
        """Let the agent go (shielded and bounded: it runs while the agent stops)."""
        lease, self.lease = self.lease, None
        if lease is None:
            return
        if self.taken is not None and self.taken.released_by_end(lease):
            return  # the run's end let it go (satsuma.store.Taken)
        with trio.move_on_after(_RELEASE_SECONDS, shield=True):
            try:
                await self.store.release_lease(lease)
            except StoreError:
                # Left behind: this process counts it as let go, and so may take it again;
                # another process sees it gone once this one is.
                logger.warning(
                    "agent %s: could not release its lease", self.agent_id, exc_info=True
                )

    async def flush(self, history: Sequence[Message]) -> None:
        """Write the changed tail of the conversation, and the outcomes waiting to go with
        it (one transaction). On failure the tail stays marked, and the next flush writes
        it again."""
        if self.dirty_from is None and not self.unwritten_outcomes:
            return
        self._check_fence("the conversation")
        await self._write(history)

    async def _write(
        self,
        history: Sequence[Message] | None,
        *,
        started: Sequence[JournalEntry] = (),
        ends: Sequence[RunEnd] = (),
        upto: int | None = None,
    ) -> None:
        """One step: the outcomes waiting, the changed tail of ``history`` (None: not
        written; ``upto``: only the messages before it), ``started`` and ``ends``. On
        failure the outcomes wait still, and the tail stays marked.

        Raises:
            StoreError: it could not be written.
        """
        start = self.dirty_from if history is not None else None
        end = len(history) if history is not None and upto is None else upto
        if start is not None:
            assert history is not None and end is not None
            start = min(start, end)
            if upto is not None and start >= upto:
                start = None  # nothing before ``upto`` changed
        finished = tuple(self.unwritten_outcomes)
        step = Step(
            agent_id=self.agent_id,
            finished=finished,
            start=start,
            messages=history[start:end] if history is not None and start is not None else (),
            started=started,
            ends=ends,
        )
        await write_step(self.store, step, lease=self.lease, rider=self.taken)
        del self.unwritten_outcomes[: len(finished)]
        if start is not None:
            self.dirty_from = upto

    async def start_run(self, run_id: str, prompt: str, history: Sequence[Message]) -> None:
        """Record a new run together with the conversation's changed tail (its prompt),
        in one transaction: a prompt is never stored without its run. Ends of earlier
        runs that could not be written are tried again first."""
        self._check_fence("a run record")
        # Written with the conversation before the prompt: an end never stands before
        # the messages of its run.
        await self._write_unwritten_ends(history, upto=len(history) - 1)
        start = self.dirty_from
        if start is not None:
            start = min(start, len(history))
        position = len(history) - 1
        await self.store.start_run(
            RunRecord(
                run_id=run_id,
                agent_id=self.agent_id,
                status="running",
                prompt=prompt,
                started_at=time.time(),
                position=max(position, 0),
                agent=self.agent,
            ),
            start=start,
            messages=history[start:] if start is not None else (),
            lease=self.lease,
        )
        self.dirty_from = None

    async def end_run(
        self,
        run_id: str,
        status: RunRecordStatus,
        usage: Usage,
        error: str | None,
        *,
        history: Sequence[Message] | None = None,
    ) -> None:
        """Record how a run ended; with ``history``, together with the conversation's
        changed tail (one transaction). If the store cannot, the end is kept and
        written before the next run starts, with those messages; should the process
        stop first, the run is found ``interrupted`` when the agent opens again.

        Raises:
            StoreError: the store could not write it (now).
        """
        self._check_fence("a run's end")
        end = RunEnd(run_id=run_id, status=status, ended_at=time.time(), usage=usage, error=error)
        self.running = {key for key in self.running if key[0] != run_id}
        self.unwritten_ends[run_id] = end
        await self._write(history, ends=[end])
        self.unwritten_ends.pop(run_id, None)

    async def _write_unwritten_ends(self, history: Sequence[Message], *, upto: int) -> None:
        ends = list(self.unwritten_ends.values())
        if not ends:
            return
        try:
            await self._write(history, ends=ends, upto=upto)
        except StoreError:
            logger.warning(
                "agent %s: still cannot record the end of runs %s",
                self.agent_id,
                ", ".join(end.run_id for end in ends),
                exc_info=True,
            )
            return
        for end in ends:
            self.unwritten_ends.pop(end.run_id, None)

    async def pause_run(
        self, run_id: str, pending: Sequence[PendingApproval], usage: Usage
    ) -> None:
        """Record that the run waits for decisions on ``pending``.

        Raises:
            StoreError: the store could not record it (the run then fails).
        """
        self._check_fence("a paused run")
        self.running = {key for key in self.running if key[0] != run_id}
        self.none_left = False
        await self.store.pause_run(run_id, pending, usage=usage, lease=self.lease)

    async def claim_paused_run(
        self, run_id: str, decisions: Mapping[str, ApprovalDecision]
    ) -> bool:
        """Take a paused run up again, recording the decisions on its calls in the same
        transaction; False if another decision took it first."""
        self._check_fence("a paused run")
        return await self.store.claim_paused_run(run_id, decisions=decisions, lease=self.lease)

    async def calls_started(
        self, run_id: str, calls: Sequence[ToolCall], history: Sequence[Message] | None = None
    ) -> None:
        """Journal a turn's calls as started, before any of them runs; with ``history``,
        together with the conversation's changed tail (the ``tool_use`` message), in one
        transaction.

        Raises:
            StoreError: the store could not record them (the run then fails with the
                store's reason, before any tool runs: never a denial the model reads).
        """
        self._check_fence("the journal")
        started = [
            JournalEntry(run_id=run_id, tool_use_id=call.id, tool_name=call.name, input=call.input)
            for call in calls
        ]
        await self._write(history, started=started)
        self.running.update((run_id, call.id) for call in calls)

    async def call_finished(self, run_id: str, outcome: ToolOutcome) -> None:
        """Journal a call's final outcome, as the model reads it: at once while other
        calls of its turn still run; the turn's last ones (those that end together) with
        the next write, which comes before anything else happens (the results, before
        the model is called).
        A store that cannot record it is logged: the outcome stands, and on resume the
        call counts as unfinished."""
        entry = JournalEntry(
            run_id=run_id,
            tool_use_id=outcome.tool_use_id,
            tool_name=outcome.tool_name,
            input=None,
            finished=True,
            content=outcome.content,
            is_error=outcome.is_error,
            error_kind=outcome.error_kind,
        )
        self.running.discard((run_id, outcome.tool_use_id))
        if any(key[0] == run_id for key in self.running):
            # Calls of a turn often end together (quick ones, run at once): those that
            # end while this one lets them go on go with it, and with the results.
            await trio.lowlevel.checkpoint()
        if not any(key[0] == run_id for key in self.running):
            self.unwritten_outcomes.append(entry)
            return
        try:
            self._check_fence("the journal")
            await self.store.call_finished(
                run_id,
                outcome.tool_use_id,
                content=outcome.content,
                is_error=outcome.is_error,
                error_kind=outcome.error_kind,
                lease=self.lease,
            )
        except StoreError:
            logger.warning(
                "could not journal the outcome of call %s", outcome.tool_use_id, exc_info=True
            )


_RELEASE_SECONDS = 5.0
