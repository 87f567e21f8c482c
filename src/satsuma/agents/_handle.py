"""AgentHandle, how the rest of the program talks to an agent. ``open_agent``, which
starts one inside the caller's structured concurrency, is in ``_open``; the actor
itself is in ``_actor``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Generic, Protocol, TypedDict, TypeVar, Unpack, final, overload

import trio

from .._exceptions import AgentUnavailable, StoreError
from .._messages import Message
from ..models import Model
from ..store import PendingApproval, RunRecord
from ..tools import Approve, Deny, PendingCall
from ._actor import Actor, new_run_id
from ._agent import KEEP_OUTPUT, check_output_options
from ._approval import check_edit
from ._compaction import compacted_view
from ._events import AgentEvent
from ._job import Job, ResetRequest, callback_sink, checked_prompt
from ._output import compile_output
from ._persist import own_answer, stored_result
from ._result import OutputT, RunResult
from ._stream import EventBuffer

__all__ = ["AgentHandle", "Target", "resume_decided", "resume_with_id", "run_with_id"]

logger = logging.getLogger("satsuma.agents")

# The output type a run asks for instead of its agent's (agent.run(..., output_type=X)).
RunOutputT = TypeVar("RunOutputT")


class _RunOptions(TypedDict, total=False):
    """The options of ``AgentHandle.run`` that do not change its result's type, declared
    once for its overloads."""

    events: Callable[[AgentEvent], object] | None
    output_retries: int | None


class Target(Protocol):
    """What an AgentHandle addresses: one actor (``open_agent``), or a supervised child
    whose actor changes with each restart."""

    @property
    def name(self) -> str: ...

    @property
    def agent_id(self) -> str: ...

    async def acquire(self) -> Actor:
        """The actor to serve a call now, waiting for a restart if need be.

        Raises:
            AgentUnavailable: there is none (stopped, or not back in time).
        """
        ...

    def current_actor(self) -> Actor | None: ...

    def conversation(self) -> list[Message]: ...


@final
class AgentHandle(Generic[OutputT]):
    """How a program talks to a running agent. Returned by ``open_agent`` and by a
    supervisor's ``start_child`` — in which case it addresses the child, not one
    incarnation of it, and stays valid across restarts. ``AgentHandle[Invoice]`` for an
    agent declared ``satsuma.Agent[Invoice]``: its runs' output is an Invoice.

    Every method may be called from any task of the trio run. Runs queue in the agent's
    mailbox and are served one at a time, in order.
    """

    def __init__(self, target: Target) -> None:
        self._target = target

    @property
    def name(self) -> str:
        """The agent's declared name."""
        return self._target.name

    @property
    def agent_id(self) -> str:
        """This agent's id (given when it was started, or made up)."""
        return self._target.agent_id

    @property
    def history(self) -> tuple[Message, ...]:
        """A copy of the conversation so far."""
        return tuple(self._target.conversation())

    @property
    def compacted_history(self) -> tuple[Message, ...]:
        """The conversation as a ``Compaction`` history sends it: the summary in force at
        the head of the first message it kept, then the messages after it. The whole
        conversation (as ``history``) when no summary is in force, or before the running
        incarnation's first call has read it from the store."""
        actor = self._target.current_actor()
        if actor is None:
            return self.history
        return tuple(compacted_view(actor.dialogue.compaction, actor.dialogue.messages))

    @property
    def model(self) -> Model:
        """The model provider the agent's running incarnation uses (a sub-agent started
        from one of its tools uses it too, unless given its own).

        Raises:
            AgentUnavailable: the agent is not running.
        """
        actor = self._target.current_actor()
        if actor is None:
            raise AgentUnavailable(self.name, "it is not running")
        return actor.model

    @property
    def interrupted(self) -> tuple[RunRecord, ...]:
        """This agent's runs that a crash or a kill interrupted and that can still be
        resumed (``resume(run_id)``), oldest first; empty without a store. A new run goes
        past them: their open calls are answered ``Interrupted`` and they can no longer
        be resumed.

        Raises:
            AgentUnavailable: the agent is not running.
        """
        actor = self._target.current_actor()
        if actor is None:
            raise AgentUnavailable(self.name, "it is not running")
        return tuple(actor.interrupted)

    @overload
    async def run(self, prompt: str, **options: Unpack[_RunOptions]) -> RunResult[OutputT]: ...

    @overload
    async def run(
        self, prompt: str, *, output_type: type[RunOutputT], **options: Unpack[_RunOptions]
    ) -> RunResult[RunOutputT]: ...

    @overload
    async def run(
        self, prompt: str, *, output_type: object, **options: Unpack[_RunOptions]
    ) -> RunResult[Any]: ...

    async def run(
        self,
        prompt: str,
        *,
        output_type: object = KEEP_OUTPUT,
        events: Callable[[AgentEvent], object] | None = None,
        output_retries: int | None = None,
    ) -> RunResult[Any]:
        """Run the agent on ``prompt`` and return how the run ended.

        If the caller is cancelled while the run waits or runs, the run is cancelled too
        (it ends ``cancelled`` with a valid history).

        Args:
            prompt: The user's message.
            events: Called with each event of the run, on the trio thread.
            output_type: This run's answer type instead of the agent's (``str`` for the
                final text); see docs/output.md. A type checker knows it for a class
                (``output_type=Invoice`` gives ``RunResult[Invoice]``).
            output_retries: How many invalid answers the model may correct in this run
                (default: the agent's ``output_retries``).

        Raises:
            TypeError: ``output_type`` is not supported.
            ValueError: ``output_retries`` is below 0, or a tool of the agent is named
                ``final_answer``.
            AgentUnavailable: the agent has stopped (or, supervised, did not come back
                from a restart in time).
            AgentCrashed: the agent crashed before answering; ``cause`` says why.
        """
        prompt = checked_prompt(prompt)
        job = Job(prompt=prompt, run_id=new_run_id(), sink=callback_sink(events))
        return await self._serve(job, output_type, output_retries)

    async def resume(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Approve | Deny] | None = None,
        events: Callable[[AgentEvent], object] | None = None,
    ) -> RunResult[OutputT]:
        """Go on with a run that a crash or a kill interrupted (its record says
        ``interrupted``): calls it had finished keep their journaled outcomes, calls it
        had not are run again only for tools declared ``idempotent = True`` (the others
        are answered ``Error: Interrupted: ...``), and the loop goes on.

        With ``decisions``, go on with a run paused ``awaiting_approval`` instead: one
        decision (``Approve()``, ``Approve(input={...})`` or ``Deny(reason)``) per id of
        its ``pending`` calls. The calls of that turn that needed no decision keep their
        journaled outcomes; the pending ones run (or are denied) once, however many
        resumes race: the first takes the run (and the store records its decisions, see
        ``Store.approvals``), the others raise ``RunNotAwaitingApproval``.

        Raises:
            RunNotAwaitingApproval: (a ValueError) with decisions, the run is not
                awaiting approval: another decision took it first, or it was resumed,
                gone past or never paused.
            ValueError: the agent has no store; the run is not an interrupted run of this
                agent (or, with decisions, not a run of this agent); a decision names a
                call the run does not wait on, a pending call has none, or an
                ``Approve(input=...)`` is not valid input for its tool (nothing is run;
                the run still waits).
            TypeError: a decision is not Approve or Deny.
            StoreError: with decisions, the store failed as the run was taken up:
                nothing ran, and the run still awaits approval (resume it again later).
            AgentUnavailable: the agent has stopped.
            AgentCrashed: the agent's lease was lost or its store closed (it stops).
        """
        if decisions is not None:
            # Checked, and the run claimed, by the agent's own task (see Actor._serve_job).
            job = Job(prompt="", run_id=run_id, sink=callback_sink(events), decisions=decisions)
            return await self._serve(job)
        return await self._serve(await self._resume_job(run_id, events))

    async def _resume_job(self, run_id: str, events: Callable[[AgentEvent], object] | None) -> Job:
        """The job that resumes an interrupted run, once checked (see ``resume``)."""
        actor = await self._target.acquire()
        if actor.persistence is None:
            raise ValueError(f"agent {self.name} has no store: only a stored run can be resumed")
        record = await actor.persistence.store.get_run(run_id)
        if record is None or record.agent_id != actor.agent_id:
            raise ValueError(f"agent {actor.agent_id} has no run {run_id!r}")
        if record.status == "awaiting_approval":
            raise ValueError(
                f"run {run_id} is awaiting approval: resume it with decisions={{...}} for "
                "its pending calls"
            )
        if record.status == "running":
            current = actor.current.run_id if actor.current is not None else None
            if run_id == current:
                raise ValueError(f"run {run_id} is running; only an interrupted run can be resumed")
            # The agent runs one run at a time: the store says running, nothing runs it.
            raise ValueError(
                f"run {run_id} is running in the store, but this agent is not running it: it "
                "was taken up without the agent's lease (Store.claim_paused_run), and nothing "
                "runs its calls; the next run or a reset closes it"
            )
        if record.status != "interrupted":
            raise ValueError(
                f"run {run_id} ended {record.status}; only an interrupted run can be resumed"
            )
        # Only while no later run has gone past it (that run answered its open calls).
        if record.run_id not in {r.run_id for r in actor.interrupted}:
            raise ValueError(f"run {run_id} can no longer be resumed: a later run went past it")
        # One whose end was lost after later runs went past it: it must have its answer.
        own_answer(record, await actor.persistence.store.runs(actor.agent_id), actor.history)
        return Job(prompt=record.prompt, run_id=run_id, sink=callback_sink(events), resume=record)

    def check_edit(self, call: PendingCall | PendingApproval, input: Mapping[str, Any]) -> None:
        """Check ``input`` as an edit of a pending call, as ``resume`` will check an
        ``Approve(input=...)`` (its tool's validation, and JSON values only), deciding
        nothing: a service that takes decisions one call at a time refuses a bad edit
        (a 400) before the person's decision is spent. ``call`` is one of a result's
        ``pending`` or of ``Store.pending_calls``.

        Raises:
            ValueError: ``input`` is not valid input for the call's tool; the message
                names the call (and its run, for a PendingApproval) and what is wrong,
                with its path (``expected amount to be an integer, got: string``).
            TypeError: ``input`` is not a mapping.
            AgentUnavailable: the agent is not running.
        """
        actor = self._target.current_actor()
        if actor is None:
            raise AgentUnavailable(self.name, "it is not running")
        check_edit(call, input, actor.tools.runner.definitions)

    @overload
    async def result(self, run_id: str) -> RunResult[OutputT]: ...

    @overload
    async def result(
        self, run_id: str, *, output_type: type[RunOutputT]
    ) -> RunResult[RunOutputT]: ...

    @overload
    async def result(self, run_id: str, *, output_type: object) -> RunResult[Any]: ...

    async def result(self, run_id: str, *, output_type: object = KEEP_OUTPUT) -> RunResult[Any]:
        """A run of this agent that ended, as its store kept it: its record (status,
        usage, error) and its part of the conversation. Its typed answer comes back
        typed by the class's output type, or by ``output_type`` (the type a run was
        asked for with ``run(..., output_type=X)``, which the store does not keep;
        ``str`` reads a text answer).

        Raises:
            ValueError: the agent has no store; the run is not one of its runs, has not
                ended, or its stored answer does not fit the type (the run was asked for
                another type: name it with ``output_type``).
            TypeError: ``output_type`` is not supported.
            AgentUnavailable: the agent has stopped.
        """
        spec = None
        if output_type is not KEEP_OUTPUT:
            spec = compile_output(output_type)  # TypeError: not supported
        actor = await self._target.acquire()
        if actor.persistence is None:
            raise ValueError(f"agent {self.name} has no store: only a stored run can be read")
        store = actor.persistence.store
        record = await store.get_run(run_id)
        if record is None or record.agent_id != actor.agent_id:
            raise ValueError(f"agent {actor.agent_id} has no run {run_id!r}")
        pending = await store.pending_calls(run_id) if record.status == "awaiting_approval" else ()
        if output_type is KEEP_OUTPUT:
            spec = actor.spec.output
        return stored_result(record, actor.history, pending, spec)

    async def _serve(
        self, job: Job, output_type: object = KEEP_OUTPUT, output_retries: int | None = None
    ) -> RunResult[Any]:
        actor = await self._target.acquire()
        job.output = check_output_options(actor.spec, output_type, output_retries)
        await actor.submit(job)
        try:
            await job.done.wait()
        finally:
            await _abandon(job)
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    async def stream(
        self, prompt: str, *, output_type: object = KEEP_OUTPUT, output_retries: int | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Run the agent on ``prompt``, yielding its events as they happen; the last one
        is ``RunEnd``. Leaving the loop early cancels the run. ``output_type`` and
        ``output_retries`` as for ``run``.

        The events wait for the reader in a bounded buffer: a reader 256 events behind
        makes the run wait before its next model call, and while it is that far behind,
        text deltas are merged and a tool's progress and partial results keep their
        latest only (docs/agents.md, "A slow reader").

        Raises:
            TypeError, ValueError: as for ``run``.
            AgentUnavailable: the agent has stopped.
            AgentCrashed: the agent crashed before the run ended.
        """
        prompt = checked_prompt(prompt)
        # Bounded, with backpressure on the run: see _stream and docs/agents.md.
        buffer = EventBuffer()
        job = Job(
            prompt=prompt,
            run_id=new_run_id(),
            sink=buffer.put,
            on_done=buffer.end,
            wait_for_reader=buffer.wait_for_room,
        )
        actor = await self._target.acquire()
        job.output = check_output_options(actor.spec, output_type, output_retries)
        await actor.submit(job)
        try:
            while True:
                try:
                    event = await buffer.get()
                except trio.EndOfChannel:
                    break
                yield event
        finally:
            buffer.leave()
            await _abandon(job)
        if job.error is not None:
            raise job.error

    async def steer(self, text: str) -> None:
        """Send a user message that the model reads at its next turn.

        Tool calls of the current turn not yet started are skipped (the model reads
        ``Error: Skipped due to queued user message.``). When no run is in progress, the
        message goes with the next run's prompt.

        Raises:
            AgentUnavailable: the agent is not running.
        """
        text = checked_prompt(text)
        actor = self._target.current_actor()
        if actor is None:
            raise AgentUnavailable(self.name, "it is not running")
        actor.steer(text)

    async def cancel(self) -> None:
        """End the current run as ``cancelled`` (queued runs are not touched)."""
        actor = self._target.current_actor()
        if actor is not None and actor.current is not None:
            actor.current.abandon()

    async def reset(self) -> None:
        """Forget the conversation, after the runs queued before this call. It returns
        only once the conversation is forgotten: if the agent crashes first, a
        supervised agent's next incarnation does it; otherwise it raises.

        A run paused awaiting approval (or interrupted) goes with the conversation, as
        when a new run goes past it: its record ends ``cancelled``, and resuming it
        raises (``RunNotAwaitingApproval``).

        Raises:
            AgentUnavailable: the agent stopped (or its supervisor gave up) before it.
            AgentCrashed: the agent crashed before it, and will not be restarted.
        """
        request = ResetRequest()
        actor = await self._target.acquire()
        await actor.submit(request)
        await request.done.wait()
        if request.error is not None:
            raise request.error

    def __repr__(self) -> str:
        return f"<AgentHandle {self.name} {self.agent_id}>"


# How long a caller that leaves (cancelled, or out of a stream) waits for its run to wind
# down. Winding down is prompt — tools are cancelled, pending calls answered — so this
# only bounds a pathological case.
_WIND_DOWN_SECONDS = 5.0


async def _abandon(job: Job) -> None:
    """If the caller leaves before its run ended, cancel the run and wait (shielded,
    bounded) until it has: when run() or a stream ends, so has the run, and the history
    is whole again."""
    if job.done.is_set():
        return
    job.abandon()
    with trio.move_on_after(_WIND_DOWN_SECONDS, shield=True):
        await job.done.wait()


async def run_with_id(
    handle: AgentHandle[Any],
    prompt: str,
    run_id: str,
    *,
    events: Callable[[AgentEvent], object] | None = None,
    hands_back: bool = False,
) -> tuple[RunResult[Any], StoreError | None]:
    """``handle.run(prompt, events=events)`` under a run id the caller chose: a cluster's
    queued run keeps its id in the agent's own records, so that a node taking it over
    after a failover finds the run (and its journal) by that id.

    Returns the result, and the store's error that failed the run (None if the run did
    not fail on the store): a node decides by its type whether the failure stands. With
    ``hands_back`` (a node's), a run stopped by ``StoreUnavailable`` has no end written:
    its record stays ``running`` and its conversation as last committed, for the node
    to hand it back and the next attempt to resume it from its journal.
    """
    prompt = checked_prompt(prompt)
    job = Job(prompt=prompt, run_id=run_id, sink=callback_sink(events), hands_back=hands_back)
    return await handle._serve(job), job.store_error


async def resume_with_id(
    handle: AgentHandle[Any],
    run_id: str,
    *,
    events: Callable[[AgentEvent], object] | None = None,
    hands_back: bool = False,
) -> tuple[RunResult[Any], StoreError | None]:
    """``handle.resume(run_id, events=events)`` (an interrupted run), returning what
    ``run_with_id`` returns (``hands_back``: as for ``run_with_id``).

    Raises:
        ValueError: as ``resume`` (the run cannot be resumed).
    """
    job = await handle._resume_job(run_id, events)
    job.hands_back = hands_back
    return await handle._serve(job), job.store_error


async def resume_decided(
    handle: AgentHandle[Any],
    run_id: str,
    decisions: Mapping[str, Approve | Deny],
    *,
    events: Callable[[AgentEvent], object] | None = None,
) -> tuple[RunResult[Any], StoreError | None, bool]:
    """``handle.resume(run_id, decisions=decisions, events=events)`` for a cluster's
    node, which hands the run back when the store goes away (as ``run_with_id`` with
    ``hands_back``). Returns the result, the store's error that stopped the run (None
    if none did), and whether its decided calls began to run: if not, nothing ran, and
    the node may take the claim back (the run paused again, its calls undecided).

    Raises:
        ValueError, TypeError: as ``resume`` (the decisions do not fit the run:
            RunNotAwaitingApproval among them).
    """
    job = Job(prompt="", run_id=run_id, sink=callback_sink(events), decisions=decisions)
    job.hands_back = True
    return await handle._serve(job), job.store_error, job.decided_began
