"""One claimed run on a node: its agent opened with the store (taking the agent's lease),
the run run or resumed from its journal, and its end written to the queue, or the run
handed back for another node; writes the database does not take are tried again while
the node serves."""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, Protocol

import attrs
import trio

from .._exceptions import (
    AgentCrashed,
    LeaseLost,
    StoreClosed,
    StoreError,
    StoreUnavailable,
    StoreUnreadable,
)
from .._text import MESSAGE_LIMIT, describe_exception
from ..agents import Agent, AgentHandle, RunResult, internal
from ..models import Model
from ..store import (
    Lease,
    Owner,
    PostgresStore,
    QueuedRun,
    QueuedRunStatus,
    RunRecord,
    Taken,
    take_back_claim,
    undo_lost_claim,
)
from ..store import run_queue as queue
from ..tools import PendingCall
from ._decisions import decode_decisions
from ._inflight import InFlight
from ._recording import EventLog, RunRecorder
from ._results import encode_result, failed_result, result_from_record

__all__ = ["STOP_WRITE_SECONDS", "RunAttempts"]

logger = logging.getLogger("satsuma.cluster")

# A run whose agent another owner still holds (its node died on another host, and the
# agent's lease has not expired yet) goes back to the queue for this long; after this
# many claims it fails rather than circulate for ever.
_HELD_ELSEWHERE_DELAY: Final = 1.0
_MAX_ATTEMPTS: Final = 100
# Store writes made while stopping (hand-backs, leaving the node table) are bounded.
STOP_WRITE_SECONDS: Final = 5.0
# A run's end or hand-back that the database did not take (it is away) is tried again
# after this long, doubling up to the most, for as long as the node serves: the run
# stays the node's meanwhile, and giving up would leave it so for good.
_RETRY_FIRST: Final = 0.2
_RETRY_MOST: Final = 5.0


class NodeSettings(Protocol):
    """What a node's runs read of their node, as it is when they read it."""

    @property
    def store(self) -> PostgresStore: ...

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> Model | None: ...

    @property
    def context(self) -> Mapping[str, Any]: ...

    @property
    def event_log(self) -> EventLog | None: ...


@attrs.frozen(eq=False)
class RunAttempts:
    """Runs a node's claimed runs: ``node`` gives the store and the options their agents
    are opened with, ``classes`` the agent classes it serves, by name."""

    node: NodeSettings
    classes: Mapping[str, type[Agent[Any]]]

    async def attempt(self, run: QueuedRun, entry: InFlight) -> None:
        """Run (or resume) a claimed run and write how it ended, or hand it back."""
        taken = entry.taken
        if taken is None:
            await self._not_taken(run, entry)
            return
        result: RunResult | None = None
        # The store's error that failed the run, if one did: its type decides (below).
        store_error: StoreError | None = None
        handed_back = False
        node_id = entry.node_id
        recorder: RunRecorder | None = None
        # The run's end was written before its agent closed (with the agent's lease let
        # go in the same transaction): nothing that closing does changes it.
        finished = False
        try:
            # The agent opens with the lease and state taken with the claim (the run is
            # marked running in that transaction too): no store call of its own.
            async with internal.open_taken(
                self.classes[run.agent_name],
                taken,
                store=self.node.store,
                model=self.node.model,
                context=self.node.context,
            ) as handle:
                entry.handle = handle
                record = next((r for r in taken.loaded.runs if r.run_id == run.run_id), None)
                if entry.cancel_requested:
                    result = RunResult(run_id=run.run_id, output="", status="cancelled")
                elif self.node.event_log is None:
                    result, store_error = await self._run(handle, run, None, record)
                else:
                    recorder = RunRecorder(
                        self.node.store, run, node_id, self.node.name, self.node.event_log
                    )
                    recorder.watched = entry.watched
                    entry.recorder = recorder
                    # The agent's steps carry its waiting events in their transactions.
                    taken.events = recorder
                    # Its last events are written with its result (_finish, below).
                    async with recorder.recording():
                        result, store_error = await self._run(handle, run, recorder, record)
                if store_error is None and not entry.lost:
                    # Before the agent closes: the caller need not wait for its lease to be
                    # let go, which the end's transaction does.
                    taken.released = await self._finish(run, node_id, result, recorder, taken.lease)
                    finished = True
        except StoreClosed:
            raise  # the node stops (serve): nothing it does can be written any more
        except StoreError as exc:
            if result is not None:
                # Closing the agent failed after its run ended: the result stands.
                logger.warning(
                    "node %s: closing the agent of run %s: %s", self.node.name, run.run_id, exc
                )
            elif isinstance(exc, StoreUnreadable) or run.attempts >= _MAX_ATTEMPTS:
                # Its conversation or records cannot be read: no later attempt can either.
                result = failed_result(run.run_id, f"its agent could not be opened: {exc}")
            else:
                # Its agent could not be opened: held by another owner (a node that died
                # on another host, before its lease expired) or the store is away. Later.
                logger.warning("node %s: run %s handed back: %s", self.node.name, run.run_id, exc)
                handed_back = await self.hand_back(run, node_id, "keep", _HELD_ELSEWHERE_DELAY)
        except AgentCrashed as exc:
            if isinstance(exc.cause, StoreClosed):
                raise exc.cause from exc
            if finished and isinstance(exc.cause, LeaseLost):
                # Its lease was let go with the run's end: a renewal in between is refused.
                logger.debug(
                    "node %s: run %s ended; its agent closed: %s",
                    self.node.name,
                    run.run_id,
                    exc.cause,
                )
            elif isinstance(exc.cause, LeaseLost):
                # Another owner took the agent mid-run (this node was counted dead, or
                # the lease lapsed while the database was away): the run is not failed;
                # it goes back to the queue, and whoever claims it resumes it.
                logger.warning(
                    "node %s: run %s stopped, its agent's lease was lost: %s",
                    self.node.name,
                    run.run_id,
                    exc.cause,
                )
                result, store_error = None, exc.cause
            else:
                result = self._crashed(run, exc, result)
        except Exception as exc:
            result = self._crashed(run, exc, result)
        finally:
            if not taken.adopted:
                # Its agent never opened (a bad configuration, a cancellation): the
                # lease taken with the claim is let go here.
                await self.let_go(taken)
            if result is not None and isinstance(store_error, StoreUnavailable) and not entry.lost:
                # The database went away under the run (a write failed): not the run's
                # failure. It goes back to the queue, and is resumed from its journal by
                # whichever node claims it once the database is back (its agent wrote no
                # end: its record stays running, found interrupted at the next open).
                # Any other store error (a row that does not decode, a refused write)
                # is the run's end.
                logger.warning(
                    "node %s: run %s stopped, the database is away (%s); it goes on when "
                    "the database is back",
                    self.node.name,
                    run.run_id,
                    result.error,
                )
                result = None
            if entry.lost:
                # Another node has the run (and its agent) now: nothing here is written.
                result, handed_back = None, True
            if result is None and not handed_back:
                # Cancelled (the drain's deadline) before it ended, or stopped on the
                # store: another node goes on, after the events of this attempt.
                if recorder is not None:
                    await recorder.flush_last()
                await self.hand_back(
                    run, node_id, "keep" if store_error is not None else "auto", 0.0
                )
        if result is not None and not finished:
            await self._finish(run, node_id, result, recorder)

    async def _not_taken(self, run: QueuedRun, entry: InFlight) -> None:
        """A claimed run whose agent the claim did not take: held by another owner (a
        node that died on another host, before its lease expired), handed back for
        later; or unreadable (or claimed too often), failed."""
        exc = entry.refusal
        assert exc is not None  # claim_and_take gives a refusal with a run it did not take
        if isinstance(exc, StoreUnreadable) or run.attempts >= _MAX_ATTEMPTS:
            # Its conversation or records cannot be read: no later attempt can either.
            result = failed_result(run.run_id, f"its agent could not be opened: {exc}")
            await self._finish(run, entry.node_id, result, None)
            return
        logger.warning("node %s: run %s handed back: %s", self.node.name, run.run_id, exc)
        await self.hand_back(run, entry.node_id, "keep", _HELD_ELSEWHERE_DELAY)

    async def undo_lost_claim(self, node_id: str, owner: Owner, keep: list[str]) -> None:
        """Put back what a claim whose answer was lost may have claimed and taken
        (tried again while the database is away)."""

        async def undo() -> bool:
            await undo_lost_claim(self.node.store, node_id, owner, keep=keep)
            return True

        await self._retrying("put back what a lost claim may have claimed", undo)

    async def let_go(self, taken: Taken) -> None:
        """Let go a lease taken with a claim whose agent never opened (shielded and
        bounded, as an agent's own release)."""
        with trio.move_on_after(STOP_WRITE_SECONDS, shield=True):
            try:
                await self.node.store.release_lease(taken.lease)
            except StoreError as exc:
                logger.warning(
                    "node %s: could not let agent %s go: %s",
                    self.node.name,
                    taken.lease.agent_id,
                    exc,
                )

    def _crashed(self, run: QueuedRun, exc: Exception, result: RunResult | None) -> RunResult:
        """Log the agent's crash with its traceback, and give the run's result: the one
        it had (the crash came as the agent closed), or a failed one naming the crash."""
        crash = _crash_of(exc)
        described = describe_exception(crash, limit=MESSAGE_LIMIT)
        # Logged with its traceback: the result's error is all the client sees, and
        # without this line nothing anywhere said where the crash came from. A store
        # that went away under the agent is not a bug to trace: the lines that follow
        # (and the store's own) say what happens to the run.
        away = isinstance(crash, StoreError)
        logger.log(
            logging.WARNING if away else logging.ERROR,
            "node %s: the agent of run %s (%s %r) crashed%s: %s",
            self.node.name,
            run.run_id,
            run.agent_name,
            run.agent_id,
            " after the run ended" if result is not None else "",
            described,
            exc_info=None if away else crash,
        )
        if result is not None:
            return result
        return failed_result(run.run_id, f"the agent crashed: {described}")

    async def _run(
        self,
        handle: AgentHandle,
        run: QueuedRun,
        events: RunRecorder | None,
        record: RunRecord | None,
    ) -> tuple[RunResult, StoreError | None]:
        """Run the queued run, or go on with it where an earlier attempt stopped; with
        the store's error that failed it, if one did. ``record``: its agent's record of
        it, if any (loaded with the claim, under the agent's lease: no one else makes or
        changes one meanwhile)."""
        if record is None:
            return await internal.run_with_id(
                handle, run.prompt, run.run_id, events=events, hands_back=True
            )
        if record.status == "awaiting_approval":
            return await self._decided(handle, run, record, events)
        if record.status == "interrupted":
            # A node died (or handed it back) mid-run: finished calls keep their
            # journaled outcomes, in-doubt ones re-run only when idempotent.
            try:
                return await internal.resume_with_id(
                    handle, run.run_id, events=events, hands_back=True
                )
            except ValueError as exc:
                return failed_result(run.run_id, str(exc)), None
        # Its agent recorded its end; the queue never heard of it. Its answer is read by
        # its class's output type, as the run's own end would have written it.
        output = internal.spec_of(self.classes[run.agent_name]).output
        return result_from_record(record, handle.history, output), None

    async def _decided(
        self,
        handle: AgentHandle,
        run: QueuedRun,
        record: RunRecord,
        events: RunRecorder | None,
    ) -> tuple[RunResult, StoreError | None]:
        """Resume a paused run with the decisions ``Cluster.resume`` queued with it. A
        run whose decisions the agent refuses (an edit its tool does not take) stays
        paused, the reason in its result's ``error``; nothing ran. One stopped by
        ``StoreUnavailable`` is handed back (as any run, by ``attempt``)."""
        coded = await queue.decisions(self.node.store, run.run_id)
        paused = result_from_record(record, handle.history)
        if coded is None:
            # Handed back between its pause and the queue's record of it: it ends
            # paused in the queue too, where a resume finds it.
            return attrs.evolve(paused, pending=await _pending(self.node.store, run.run_id)), None
        decisions = decode_decisions(coded)
        try:
            result, error, began = await internal.resume_decided(
                handle, run.run_id, decisions, events=events
            )
        except (ValueError, TypeError) as exc:
            logger.warning(
                "node %s: the decisions for run %s were refused: %s",
                self.node.name,
                run.run_id,
                exc,
            )
            pending = await _pending(self.node.store, run.run_id)
            return attrs.evolve(paused, pending=pending, error=f"decisions refused: {exc}"), None
        if isinstance(error, StoreUnavailable) and not began and run.node_id is not None:
            # Stopped on the store before any decided call ran: the run awaits approval
            # again, and the next attempt claims it with the same decisions (the queue
            # keeps them), so they apply once. Tried once: if not taken back, the next
            # attempt resumes it interrupted, its decided calls in doubt.
            with trio.move_on_after(STOP_WRITE_SECONDS, shield=True):
                try:
                    await take_back_claim(self.node.store, run.run_id, run.node_id, decisions)
                except StoreError as exc:
                    logger.warning(
                        "node %s: could not take back the claim of run %s: %s",
                        self.node.name,
                        run.run_id,
                        exc,
                    )
        return result, error

    async def hand_back(
        self, run: QueuedRun, node_id: str, agent_record: Literal["keep", "auto"], delay: float
    ) -> bool:
        try:
            return await self._retrying(
                f"hand run {run.run_id} back",
                lambda: queue.hand_back(
                    self.node.store, run, node_id, agent_record=agent_record, delay=delay
                ),
            )
        except trio.Cancelled:
            # Stopping, with the database away: the node's row goes (or expires) with
            # the run, which another node then takes.
            logger.warning(
                "node %s: stopped before run %s could be handed back", self.node.name, run.run_id
            )
            raise

    async def _retrying(self, what: str, write: Callable[[], Awaitable[bool]]) -> bool:
        """Make a queue write until the database takes it (the run stays this node's
        until then, so giving up would strand it). Each try is shielded (at most
        STOP_WRITE_SECONDS: it runs while the node drains too); the waits between tries
        are not, so a drain's deadline ends them."""
        delay = _RETRY_FIRST
        for attempt in itertools.count(1):
            with trio.move_on_after(STOP_WRITE_SECONDS, shield=True):
                try:
                    return await write()
                except StoreClosed:
                    raise  # no later try can succeed
                except StoreError as exc:
                    logger.warning(
                        "node %s: could not %s (try %d; again in %gs): %s",
                        self.node.name,
                        what,
                        attempt,
                        delay,
                        exc,
                    )
            await trio.sleep(delay)
            delay = min(delay * 2, _RETRY_MOST)
        raise AssertionError("unreachable")

    async def _finish(
        self,
        run: QueuedRun,
        node_id: str,
        result: RunResult,
        recorder: RunRecorder | None,
        release: Lease | None = None,
    ) -> bool:
        """Write the run's end (tried again while the database is away); whether it was
        written (not: the run is another node's now)."""
        status: QueuedRunStatus = (
            "cancelled"
            if result.status == "cancelled"
            else "failed"
            if result.status == "failed"
            else "completed"
        )
        # The run's last events are written with its end, in one transaction.
        events = None if recorder is None else recorder.last_events()

        async def write() -> bool:
            nonlocal events
            end = functools.partial(
                queue.finish,
                self.node.store,
                run,
                node_id,
                status=status,
                result=encode_result(result),
                error=result.error if status == "failed" else None,
                release=release,
            )
            try:
                return await end(events=events)
            except (StoreClosed, StoreUnavailable):
                raise  # the database is away: tried again, events and all
            # Any other Exception (a refused write, a bug): as for any batch, the run
            # must not fail, nor wait, because its events could not be written.
            except Exception as exc:
                if events is None:
                    raise
                logger.warning(
                    "run %s: its last %d events could not be written; a stream of it "
                    "goes without them (%s)",
                    run.run_id,
                    len(events.entries),
                    exc,
                    exc_info=not isinstance(exc, StoreError),
                )
                events = None
                return await end()

        # Tried again while the store is away (the run stays this node's meanwhile); a
        # drain's deadline ends the tries, and the run goes back to the queue with the
        # node's row (its agent's record has its end, which the next node reads).
        written = await self._retrying(f"record the end of run {run.run_id}", write)
        if not written:
            logger.warning(
                "node %s: run %s ended here after it went to another node; its result "
                "here is dropped",
                self.node.name,
                run.run_id,
            )
        return written


def _crash_of(exc: Exception) -> BaseException:
    """What crashed the agent: an AgentCrashed names its agent and run, which the node's
    own line says already, and carries the exception (with its traceback) as ``cause``."""
    if isinstance(exc, AgentCrashed):
        return exc.cause
    return exc


async def _pending(store: PostgresStore, run_id: str) -> tuple[PendingCall, ...]:
    """The calls a paused run waits on, as its RunResult names them."""
    return tuple(
        PendingCall(
            id=call.tool_use_id, tool_name=call.tool_name, input=call.input, reason=call.reason
        )
        for call in await store.pending_calls(run_id)
    )
