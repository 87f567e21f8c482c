"""Cluster: submit runs to the nodes of a cluster and wait for their results, from any
process (a web handler, a script)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from .._exceptions import RunNotAwaitingApproval, StoreError, StoreUnavailable
from ..agents import Agent, RunResult, internal
from ..store import PostgresStore, QueuedRun, QueuedRunStatus
from ..store import run_queue as queue
from ..tools import Approve, Deny
from ._decisions import encode_decisions
from ._events import EventStream
from ._results import decode_result, encode_result, queued_result, result_from_record
from ._shared_listen import subscribe

__all__ = ["Cluster"]

logger = logging.getLogger("satsuma.cluster")

_CANCELLED_WHILE_QUEUED: Final = "cancelled before a node started it"
# How often resume looks again at a run whose node is writing its pause to the queue.
_PAUSE_WRITE_POLL: Final = 0.05
_PAUSE_WRITE_WAIT: Final = 10.0


@final
class Cluster:
    """The client of a cluster: puts runs in the queue that the nodes serve and reads
    their results. It keeps no state of its own beyond the store: any number of them,
    in any processes, may share one database. The waits (``result``, ``run``, event
    streams) of all of them in one trio run share one LISTEN connection per database,
    opened by the first wait and closed 30 s after the last one, or when the trio run
    ends.

    Args:
        store: The cluster's PostgresStore (the nodes use the same database).
        poll_interval: Results arrive by LISTEN/NOTIFY; should a notification be lost
            (its connection broke), a waiting ``result`` still reads the run's state
            this often, in seconds (default 5).
    """

    def __init__(self, store: PostgresStore, *, poll_interval: float = 5.0) -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(f"a cluster runs on a PostgresStore, got: {type(store).__name__}")
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be positive, got: {poll_interval!r}")
        self.store = store
        self.poll_interval = poll_interval

    def __repr__(self) -> str:
        return f"Cluster({self.store!r})"

    async def submit(
        self, agent: type[Agent[Any]], agent_id: str, prompt: str, *, watched: bool = False
    ) -> str:
        """Queue a run of ``agent`` (a class some node serves) in the conversation
        ``agent_id``, and return its run id at once. Runs of one ``agent_id`` run one at
        a time, in the order they were submitted.

        ``watched``: you will stream its events (``events``) and want its text as it is
        written from the first answer on: its node then streams the model's answers.
        Otherwise it asks for each answer whole, which costs less, until an ``events``
        stream of the run opens (from the node's next model call on; before that, each
        answer's text comes in one piece when it is complete).

        Raises:
            TypeError: ``agent`` is not a concrete Agent subclass.
            ValueError: the prompt or the agent_id is empty.
            StoreError: the queue could not be written.
        """
        name = _checked(agent, agent_id, prompt)
        run_id = internal.new_run_id()
        await queue.enqueue(self.store, run_id, name, agent_id, prompt, watched=watched)
        return run_id

    async def lookup(self, run_id: str) -> tuple[QueuedRun, RunResult[Any] | None] | None:
        """The run as the queue has it now, with its result once it ended (or paused:
        a result ``awaiting_approval`` naming its pending calls); None for a run the
        queue does not hold (unknown, or past its retention). It waits for nothing.

        Raises:
            StoreError: the queue could not be read.
        """
        found = await queue.outcome(self.store, run_id)
        if found is None:
            return None
        run, text = found
        if run.status not in ("completed", "failed", "cancelled"):
            return run, None
        return run, queued_result(run, text)

    async def resume(self, run_id: str, decisions: Mapping[str, Approve | Deny]) -> None:
        """Go on with a run that paused ``awaiting_approval`` (its RunResult's
        ``pending`` names the calls): one decision per pending call, ``Approve()``,
        ``Approve(input={...})`` or ``Deny(reason)``, as ``AgentHandle.resume`` takes
        them. The run goes back to the queue and returns at once; the node that claims it
        resumes it (``result`` waits for its new end, ``events`` goes on after its
        pause). Of two resumes sent at once, one wins; the other raises.

        An edited input is checked by the node against the tool's schema; one the tool
        refuses leaves the run paused (``result`` gives it ``awaiting_approval`` again,
        with the reason in ``error``), and nothing runs.

        Raises:
            ValueError: no run has this id, or the decisions do not decide exactly its
                pending calls.
            RunNotAwaitingApproval: (a ValueError) the run is not paused awaiting
                approval: it runs, ended, or another resume took it first.
            TypeError: a decision is not Approve or Deny, or an edit is not JSON.
            StoreError: the queue could not be read or written.
        """
        record = await self.store.get_run(run_id)
        if record is None:
            if await queue.outcome(self.store, run_id) is None:
                raise ValueError(f"no run {run_id!r} in the cluster's queue")
            raise RunNotAwaitingApproval(run_id, "queued")  # no agent has started it yet
        if record.status != "awaiting_approval":
            raise RunNotAwaitingApproval(run_id, record.status)
        pending = await self.store.pending_calls(run_id)
        if not pending:
            # A paused run has a pending call: none means another resume took it between
            # the two reads (its node has claimed it already).
            raise RunNotAwaitingApproval(run_id)
        internal.check_decisions(run_id, pending, decisions)
        coded = encode_decisions(decisions)
        with trio.move_on_after(_PAUSE_WRITE_WAIT):
            while True:
                stood = await queue.requeue_decided(self.store, run_id, coded)
                if stood is None:
                    raise ValueError(f"no run {run_id!r} in the cluster's queue")
                what, recorded = stood
                if what == "requeued":
                    return
                if what == "taken":
                    raise RunNotAwaitingApproval(run_id)
                if what == "not paused":
                    raise RunNotAwaitingApproval(run_id, recorded)
                # Paused, and its node is writing that to the queue: a moment.
                await trio.sleep(_PAUSE_WRITE_POLL)
        # Its node stopped between the two writes; the next node to claim it ends it
        # paused in the queue too, and a resume then goes through.
        raise RunNotAwaitingApproval(run_id, "paused, but not yet in the queue")

    # The contract (DESIGN.md) names the option: a run outlives a caller's deadline, so a
    # TimeoutError that says the run goes on is clearer here than a cancelled wait.
    async def result(self, run_id: str, *, timeout: float | None = None) -> RunResult[Any]:  # noqa: ASYNC109
        """Wait for the run to end and return its RunResult (with whatever status the
        run ended: completed, failed, cancelled, ...). A run that no agent could answer
        (its agent could not be opened, say) ends ``failed`` with the reason in
        ``error``.

        Args:
            run_id: As ``submit`` returned it.
            timeout: Seconds to wait at most (None: as long as it takes).

        A run that ended longer ago than the queue keeps it (``Node(result_retention=
        ...)``, an hour by default) is read from its agent's run record instead: its
        output, status, usage, error and messages as the conversation keeps them
        (``iterations`` is 0; a typed answer is its JSON, as here always).

        Once the run was found, a database that goes away (a restart, a failover) pauses
        the wait rather than ending it: its state is read again every
        ``poll_interval`` seconds, each failure logged, until the database answers or
        ``timeout`` passes.

        ``timeout`` counts from the call, whatever the wait is doing when it passes:
        connecting the process's shared listener, reading the queue, or waiting; a
        database that stops answering (a network partition) cannot hold the caller
        longer (the store call in flight is abandoned, see ``PostgresStore``).

        Raises:
            ValueError: no run has this id (in the queue, or as a run record).
            TimeoutError: the run had not ended after ``timeout`` seconds (it goes on),
                or the database did not answer in that time to say whether it had.
            StoreError: the queue could not be read at the start; or, later, any store
                error but StoreUnavailable (the store was closed: StoreClosed; the run's
                row does not decode: StoreUnreadable).
        """
        return await self._wait(run_id, timeout)

    async def _wait(
        self,
        run_id: str,
        timeout: float | None,  # noqa: ASYNC109  (result's, see there)
        submit: Callable[[], Awaitable[None]] | None = None,
    ) -> RunResult[Any]:
        """``result``; with ``submit``, which queues the run once the wait listens: then
        the run cannot have ended before, and the first read waits for its end's
        NOTIFY (one read of the queue per run, rather than two)."""
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        known = False
        with trio.CancelScope(deadline=deadline):
            # Listening before the first read: an end committed after it is heard. The
            # listener is shared by every wait of this process (one connection, see
            # _shared_listen); a server that is away makes it ready at once, and the
            # loop below polls.
            channels = [queue.RESULT_CHANNEL, queue.DONE_CHANNEL]
            subscription = await subscribe(
                self.store, dict.fromkeys(channels, run_id), keep=channels
            )
            try:
                if submit is not None:
                    await submit()
                    known = True
                    await subscription.wait(self.poll_interval)
                while True:
                    told = _told(subscription.heard, run_id)
                    if told is not None:
                        # The node's end notice carried the result: nothing to read.
                        return decode_result(told)
                    try:
                        found = await queue.outcome(self.store, run_id)
                    except StoreError as exc:
                        # Only a database that is away is waited for: a closed store, or
                        # a row that does not decode, stays so however long one waits.
                        if not known or not isinstance(exc, StoreUnavailable):
                            raise
                        logger.warning("waiting for run %s, the database is away: %s", run_id, exc)
                        await subscription.wait(self.poll_interval)
                        continue
                    known = True
                    if found is None:
                        return await self._from_record(run_id)
                    run, text = found
                    if run.status in queue.ENDED:
                        return queued_result(run, text)
                    await subscription.wait(self.poll_interval)
            finally:
                subscription.close()
        unknown = "" if known else " (or the database did not answer in that time to say so)"
        raise TimeoutError(f"run {run_id} had not ended after {timeout:g}s{unknown}")

    async def _from_record(self, run_id: str) -> RunResult[Any]:
        """The result of a run the queue no longer keeps (it ended more than the nodes'
        ``result_retention`` ago), rebuilt from its agent's run record and conversation.

        Raises:
            ValueError: the agent has no record of it either (it never reached an
                agent, or its record was pruned).
        """
        record = await self.store.get_run(run_id)
        if record is None:
            raise ValueError(f"no run {run_id!r} in the cluster's queue")
        return result_from_record(record, await self.store.load_messages(record.agent_id))

    async def run(
        self, agent: type[Agent[internal.OutputT]], agent_id: str, prompt: str
    ) -> RunResult[internal.OutputT]:
        """Submit a run and wait for its result: ``submit`` then ``result``. An agent
        with an output_type gets its answer typed (``result`` alone, which does not
        know the class, gives the answer's JSON).

        If the caller is cancelled while it waits, the run is not: it goes on in the
        cluster (``cancel`` it to stop it).

        Raises:
            TypeError, ValueError, StoreError: as ``submit`` and ``result``; ValueError
                too when the answer does not fit the class's output type.
        """
        name = _checked(agent, agent_id, prompt)
        run_id = internal.new_run_id()

        async def submit() -> None:
            await queue.enqueue(self.store, run_id, name, agent_id, prompt)

        # Listening before the run is queued: its end's NOTIFY is the first thing read.
        result = await self._wait(run_id, None, submit)
        output = internal.spec_of(agent).output
        if output is None:
            return result
        if result.status != "completed":
            return attrs.evolve(result, output=internal.NO_ANSWER)  # its output raises NoOutput
        return attrs.evolve(result, output=output.from_json(result.output))

    def events(self, run_id: str, *, start: int = 0) -> EventStream:
        """The run's events as they happen, wherever it runs: an async iterator of the
        agent's events (``RunStart``, ``TextDelta``, ``ToolCallStart``, ...) as its node
        recorded them, from the run's beginning (or from ``start``, an
        ``EventStream.position`` kept from an earlier stream), ending with ``RunEnd``
        once the run has ended, however it ended. A run that ended already replays its
        events (while its nodes keep them, see ``EventLog``), then its ``RunEnd``; one
        that has left the queue (``Node(result_retention=...)``, an hour after it
        ended by default) is unknown here, as ``result`` reads it from its run record.

        The stream also has two events of its own: ``RunResumed`` where another node
        took the run over, and ``EventsDropped`` where events are missing (the run
        passed its node's cap, say). Consecutive text deltas may arrive merged into one.

        A stream of a run in flight marks it watched (``QueuedRun.watched``): its node
        streams the model's answers from its next model call on (an answer already
        asked for arrives in one piece). To have every answer as it is written, submit
        with ``submit(..., watched=True)`` or use ``stream``.

        Nothing is read until the stream is iterated. Leaving it does not cancel the run;
        use it in ``async with`` to stop its listening at once when you may leave
        early.

        Raises:
            ValueError: (when iterated) no run has this id in the queue.
            StoreError: (when iterated) the queue could not be read.
        """
        if start < 0:
            raise ValueError(f"start must be 0 or more, got: {start!r}")
        return EventStream(self.store, run_id, start=start, poll_interval=self.poll_interval)

    def stream(self, agent: type[Agent[Any]], agent_id: str, prompt: str) -> EventStream:
        """Submit a run and stream its events: ``submit`` then ``events``, as
        ``AgentHandle.stream`` is to ``run``. The run is submitted when the stream is
        entered (``async with``) or first iterated; its id is the stream's ``run_id``
        from the start. Leaving the stream does not cancel the run (``cancel`` it to
        stop it).

        Raises:
            TypeError: ``agent`` is not a concrete Agent subclass.
            ValueError: the prompt or the agent_id is empty.
            StoreError: (when iterated) the queue could not be written or read.
        """
        name = _checked(agent, agent_id, prompt)
        run_id = internal.new_run_id()

        async def submit() -> None:
            await queue.enqueue(self.store, run_id, name, agent_id, prompt, watched=True)

        return EventStream(
            self.store, run_id, start=0, poll_interval=self.poll_interval, before=submit
        )

    async def cancel(self, run_id: str) -> QueuedRunStatus:
        """Cancel a run: a queued one ends ``cancelled`` at once; the node of one in
        flight is told to cancel it (it ends ``cancelled`` as ``AgentHandle.cancel``
        ends a run: the calls in flight are cancelled and answered). A run that has
        ended is left as it is.

        Returns:
            The run's status after the call (``cancelled``, still ``claimed`` or
            ``running`` while its node cancels it, or how it had ended).

        Raises:
            ValueError: no run has this id.
            StoreError: the queue could not be written.
        """
        result = encode_result(
            RunResult(run_id=run_id, output="", status="cancelled", error=_CANCELLED_WHILE_QUEUED)
        )
        status = await queue.request_cancel(self.store, run_id, result)
        if status is None:
            raise ValueError(f"no run {run_id!r} in the cluster's queue")
        return status

    async def runs(
        self,
        agent_id: str | None = None,
        *,
        status: QueuedRunStatus | Sequence[QueuedRunStatus] = (),
        limit: int = 100,
    ) -> list[QueuedRun]:
        """The queue's runs, oldest first: the last ``limit`` submitted, of one
        conversation (``agent_id``) or all, with the given statuses (all by default).

        Raises:
            StoreError: the queue could not be read.
        """
        statuses = (status,) if isinstance(status, str) else tuple(status)
        return await queue.listing(self.store, agent_id, statuses, limit)


def _told(heard: Mapping[str, str], run_id: str) -> str | None:
    """The result of ``run_id`` that its end notice carried, if one was heard (one of a
    format this version does not read, or too long to be sent, is not)."""
    payload = heard.get(queue.RESULT_CHANNEL)
    notice = None if payload is None else queue.read_end_notice(payload)
    if notice is None or notice[0] != run_id:
        return None
    return notice[1]


def _checked(agent: type[Agent[Any]], agent_id: str, prompt: str) -> str:
    """The class's name, once the submission is known to be sound."""
    name = internal.spec_of(agent).name
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"a prompt must be a non-empty str, got: {prompt!r}")
    if not isinstance(agent_id, str) or not agent_id:
        raise ValueError(f"agent_id must be a non-empty str, got: {agent_id!r}")
    return name
