"""An agent's link to its store: the conversation written back before each model call and
before tools run, run records, the tool-call journal; and a run read back as the store
kept it (its part of the conversation, its answer). The repair of calls that a crash or a
kill left without a result is ``_repair``'s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import attrs
import trio

from .._exceptions import LeaseLost, StoreClosed, StoreError
from .._messages import Message, Usage
from ..store import (
    DEFAULT_LEASE_SECONDS,
    ApprovalDecision,
    Lease,
    Owner,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
    Store,
    Summary,
)
from ..tools import PendingCall, ToolCall, ToolOutcome
from ._output import ANSWER_TAKEN_TEXT, OUTPUT_TOOL, OutputSpec, answer_json
from ._result import NO_ANSWER, RunResult, RunStatus

__all__ = [
    "Persistence",
    "own_answer",
    "run_part",
    "stored_answer",
    "stored_result",
]

logger = logging.getLogger("satsuma.agents")


def own_answer(
    record: RunRecord, runs: Sequence[RunRecord], history: Sequence[Message]
) -> str | None:
    """The answer of an interrupted run that later runs went past (its end could not be
    written before the process stopped), found in its own part of the conversation:
    from its prompt to where the next run starts. None when no later run started, so
    that the run's part is the conversation's end (it is resumed there).

    Raises:
        ValueError: a later run went past it before it had an answer.
    """
    if record.position is None:
        return None  # recorded by an older satsuma: where it starts is not known
    order = [r.run_id for r in runs]
    if record.run_id not in order:
        return None
    later = [r.position for r in runs[order.index(record.run_id) + 1 :] if r.position is not None]
    if not later:
        return None
    part = history[record.position : max(record.position, min(later[0], len(history)))]
    if part and part[-1].role == "assistant" and not part[-1].tool_uses:
        return part[-1].text
    raise ValueError(
        f"run {record.run_id} can no longer be resumed: a later run went past it before "
        "it had an answer"
    )


def run_part(record: RunRecord, history: Sequence[Message]) -> list[Message]:
    """The messages a run added to the conversation: from its prompt to the next run's
    prompt (a user message with text) or the end; empty when its position is unknown.

    A run that ended on tool results (a typed answer's) had the next prompt joined to
    that message (roles alternate): the run's part gets the results back alone, as the
    run itself left them."""
    part: list[Message] = []
    if record.position is not None and record.position < len(history):
        part.append(history[record.position])
        for message in history[record.position + 1 :]:
            if message.role == "user" and any(
                block.get("type") == "text" for block in message.content
            ):
                # The next run's prompt.
                results = message.tool_results
                if results:
                    part.append(Message(role="user", content=results))
                break
            part.append(message)
    return part


def stored_answer(part: Sequence[Message]) -> tuple[Any] | None:
    """The typed answer a run took, as the model sent it (in a 1-tuple, since
    None may be an answer), found in the run's part of the conversation: the input of
    the final_answer call that was answered as taken (its input: a type that is not an
    object is wrapped as ``{"value": ...}``). None when the run took none."""
    for index in range(len(part) - 1, 0, -1):
        results = part[index].tool_results if part[index].role == "user" else []
        taken = {
            result["tool_use_id"]
            for result in results
            if not result.get("is_error") and result.get("content") == ANSWER_TAKEN_TEXT
        }
        if not taken:
            continue
        for block in part[index - 1].tool_uses:
            if block.get("id") in taken and block.get("name") == OUTPUT_TOOL:
                return (block.get("input"),)
    return None


def stored_result(
    record: RunRecord,
    history: Sequence[Message],
    pending: Sequence[PendingApproval],
    output: OutputSpec | None,
) -> RunResult[Any]:
    """A run's result rebuilt from its record and its part of the conversation: its
    typed answer read as ``output`` (the type to read it as; None: text).
    ``iterations`` is counted from the run's assistant messages.

    Raises:
        ValueError: the run has not ended (running, interrupted); its stored answer does
            not fit ``output``; or it completed with another kind of answer than
            ``output`` reads (text for a type, or a typed answer read as text): it was
            asked for another type with ``run(..., output_type=X)``.
    """
    if record.status in ("running", "interrupted"):
        raise ValueError(
            f"run {record.run_id} has not ended ({record.status}): it has no result yet"
        )
    part = run_part(record, history)
    found = stored_answer(part)
    value: Any
    if found is not None and output is None:
        raise ValueError(
            f"run {record.run_id} completed with a typed answer (its final_answer input: "
            f"{answer_json(found[0])}), not text: read it with result(run_id, "
            "output_type=X), X the type it was asked for"
        )
    if found is not None:
        assert output is not None
        value = output.from_input(found[0])
    elif output is not None and record.status == "completed":
        raise ValueError(
            f"run {record.run_id} completed with a text answer, not a typed one (it was "
            "asked for text: output_type=str); read it with result(run_id, output_type=str)"
        )
    elif output is not None:
        value = NO_ANSWER
    else:
        value = next((m.text for m in reversed(part) if m.role == "assistant" and m.text), "")
    return RunResult(
        run_id=record.run_id,
        output=value,
        status=cast("RunStatus", record.status),
        messages=tuple(part),
        usage=record.usage,
        iterations=sum(1 for message in part if message.role == "assistant"),
        error=record.error,
        pending=tuple(
            PendingCall(id=p.tool_use_id, tool_name=p.tool_name, input=p.input, reason=p.reason)
            for p in pending
        ),
    )


def gone_past(record: RunRecord, when: str) -> str:
    """Why a run a new run or a reset goes past ends ``cancelled`` (see runs_left)."""
    if record.status == "awaiting_approval":
        return f"awaiting approval, and not decided {when}"
    return (
        "decided through the store without the agent's lease (Store.claim_paused_run), "
        f"so nothing ran its calls; closed {when}"
    )


@attrs.frozen
class _End:
    """A run's end that could not be written yet."""

    status: RunRecordStatus
    ended_at: float
    usage: Usage
    error: str | None


@attrs.define(eq=False)
class Persistence:
    """Writes one agent's state to its store, under the agent's lease (see
    ``satsuma.store``'s lease rules): taken when the agent loads, renewed while it runs, let go
    when it stops. Every write carries the lease, so a store refuses the writes of an
    owner that lost it."""

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
    unwritten_ends: dict[str, _End] = attrs.Factory(dict)

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
        self.lease = await self.store.acquire_lease(
            self.agent_id, self.owner, seconds=self.lease_seconds
        )
        try:
            messages = await self.store.load_messages(self.agent_id)
            await self.store.mark_interrupted(self.agent_id, lease=self.lease)
            # Every run still interrupted, also one an earlier start found and did not
            # resume.
            runs = await self.store.runs(self.agent_id)
        except BaseException:
            await self.release()
            raise
        return messages, [record for record in runs if record.status == "interrupted"]

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
        """Write the changed tail of the conversation (one transaction). On failure the
        tail stays marked, and the next flush writes it again."""
        start = self.dirty_from
        if start is None:
            return
        self._check_fence("the conversation")
        start = min(start, len(history))
        await self.store.write_tail(self.agent_id, start, history[start:], lease=self.lease)
        self.dirty_from = None

    async def start_run(self, run_id: str, prompt: str, history: Sequence[Message]) -> None:
        """Record a new run together with the conversation's changed tail (its prompt),
        in one transaction: a prompt is never stored without its run. Ends of earlier
        runs that could not be written are tried again first."""
        self._check_fence("a run record")
        await self._write_unwritten_ends()
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
        self, run_id: str, status: RunRecordStatus, usage: Usage, error: str | None
    ) -> None:
        """Record how a run ended. If the store cannot, the end is kept and written
        before the next run starts; should the process stop first, the run is found
        ``interrupted`` when the agent opens again.

        Raises:
            StoreError: the store could not write it (now).
        """
        self._check_fence("a run's end")
        end = _End(status=status, ended_at=time.time(), usage=usage, error=error)
        self.unwritten_ends[run_id] = end
        await self._write_end(run_id, end)

    async def _write_end(self, run_id: str, end: _End) -> None:
        await self.store.end_run(
            run_id,
            status=end.status,
            ended_at=end.ended_at,
            usage=end.usage,
            error=end.error,
            lease=self.lease,
        )
        self.unwritten_ends.pop(run_id, None)

    async def _write_unwritten_ends(self) -> None:
        for run_id, end in list(self.unwritten_ends.items()):
            try:
                await self._write_end(run_id, end)
            except StoreError:
                logger.warning(
                    "agent %s: still cannot record the end of run %s",
                    self.agent_id,
                    run_id,
                    exc_info=True,
                )
                return

    async def pause_run(
        self, run_id: str, pending: Sequence[PendingApproval], usage: Usage
    ) -> None:
        """Record that the run waits for decisions on ``pending``.

        Raises:
            StoreError: the store could not record it (the run then fails).
        """
        self._check_fence("a paused run")
        await self.store.pause_run(run_id, pending, usage=usage, lease=self.lease)

    async def claim_paused_run(
        self, run_id: str, decisions: Mapping[str, ApprovalDecision]
    ) -> bool:
        """Take a paused run up again, recording the decisions on its calls in the same
        transaction; False if another decision took it first."""
        self._check_fence("a paused run")
        return await self.store.claim_paused_run(run_id, decisions=decisions, lease=self.lease)

    async def calls_started(self, run_id: str, calls: Sequence[ToolCall]) -> None:
        """Journal a turn's calls as started, before any of them runs.

        Raises:
            StoreError: the store could not record them (the run then fails with the
                store's reason, before any tool runs: never a denial the model reads).
        """
        self._check_fence("the journal")
        for call in calls:
            await self.store.call_started(run_id, call.id, call.name, call.input, lease=self.lease)

    async def call_finished(self, run_id: str, outcome: ToolOutcome) -> None:
        """Journal a call's final outcome, as the model reads it. A store that cannot
        record it is logged: the outcome stands, and on resume the call counts as
        unfinished."""
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
