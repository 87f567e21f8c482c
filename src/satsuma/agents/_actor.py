"""The agent as an actor: a trio task tree that owns its conversation and serves a
mailbox. The handle through which the rest of the program talks to it is in ``_handle``,
``open_agent`` in ``_open``.

Requests (runs, resets) wait in a bounded mailbox (``_mailbox``) and are served one at a
time, in order: by one task throughout (``serve``: a supervised agent, one with a store
or tool servers), or by a task started for each burst of requests (``serve_in``: what
``open_agent`` does for the others, so that an idle agent holds no task). The
conversation is owned by the actor's tasks; callers get copies. Each run sees the
agent through the ``RunContext`` the actor builds for it (``_run``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from os import PathLike, fspath
from pathlib import Path
from typing import Any, final

import trio
import trio.lowlevel

from .._exceptions import (
    AgentCrashed,
    AgentUnavailable,
    LeaseLost,
    StoreClosed,
    StoreError,
    StoreUnavailable,
)
from .._messages import Message
from ..models import Model, limiter_for, resolve_model
from ..store import Owner, RunRecord, Store, Taken
from ..tools import Approver
from ._agent import AgentSpec
from ._approval import ClaimInDoubt, claim_paused, not_resumed
from ._conversation import Conversation, Steering
from ._ids import distinct_ids
from ._job import Job, Request, ResetRequest
from ._mailbox import Mailbox, MailboxClosed
from ._persist import Persistence, gone_past
from ._repair import dangling_tool_uses
from ._result import RunResult
from ._run import execute_run
from ._runcontext import RunContext
from ._runstate import said
from ._toolbox import Toolbox
from ._verifiers import as_check

__all__ = ["Actor", "new_run_id"]

logger = logging.getLogger("satsuma.agents")


def new_run_id() -> str:
    # 48 random bits, as the first 12 hex digits of a uuid4 were, at a tenth of its cost.
    return f"run_{os.urandom(6).hex()}"


@final
class Actor:
    """The agent's own state, touched only by its task (and by the handle's quick,
    synchronous methods, which trio never interleaves)."""

    def __init__(
        self,
        spec: AgentSpec,
        model: Model,
        context: Mapping[str, Any] | None,
        agent_id: str,
        history: list[Message] | None = None,
        store: Store | None = None,
        mailbox: Mailbox | None = None,
        fence: Callable[[], bool] | None = None,
        owner: Owner | None = None,
        approver: Approver | None = None,
        taken: Taken | None = None,
    ) -> None:
        self.spec = spec
        self.approver = approver if approver is not None else spec.approver
        self.model = model
        self.model_id = resolve_model(spec.model) or spec.model
        # The configuration's limiter (docs/limits.md), shared with every agent of the
        # run that uses it; None, and nothing to pay per call, without limits.
        self.limiter = limiter_for(model, spec.model)
        # True while this incarnation is the agent's newest (a supervisor's fencing
        # token): once a newer one has started, this one's store writes are refused.
        self.is_current: Callable[[], bool] = fence if fence is not None else _always
        self.persistence = (
            Persistence(
                store,
                agent_id,
                fence=self.is_current,
                owner=taken.lease.owner if taken is not None else owner or Owner.new(),
                agent=spec.name,
                taken=taken,
            )
            if store is not None
            else None
        )
        # Changed in place only: runs hold the list (RunContext.interrupted).
        self.interrupted: list[RunRecord] = []
        # Which runs await approval is not kept here: the store is the truth, read each
        # time the agent decides about them (Persistence.runs_left, claim_paused).
        # Claims of paused runs that failed on the store, by run id (see claim_paused).
        self.claims_in_doubt: dict[str, ClaimInDoubt] = {}
        self.tools = Toolbox(spec)
        self.verifiers = [check for check in map(as_check, spec.verifiers) if check is not None]
        self.context = dict(context or {})
        working_dir = self.context.get("working_dir")
        self.working_dir = (
            Path(fspath(working_dir)) if isinstance(working_dir, (str, PathLike)) else _cwd()
        )
        self.context_extra = {
            key: value
            for key, value in self.context.items()
            if key not in ("working_dir", "capabilities")
        }
        self.agent_id = agent_id
        # Its messages are shared with later incarnations when a supervisor restarts
        # the agent. (Not named conversation: that is the Target method below.)
        self.dialogue = Conversation(history if history is not None else [], self.persistence)
        self.alive = True
        self.steering = Steering()
        self.current: Job | None = None
        # A mailbox given by a supervised child outlives this incarnation; one made here
        # is this actor's own, closed when it stops.
        self.owns_mailbox = mailbox is None
        self.mailbox = mailbox if mailbox is not None else Mailbox(spec.mailbox_size)
        # What tools see as ctx.agent: the AgentHandle that addresses this agent, set by
        # whoever made the actor (open_agent, or a supervisor's child).
        self.handle: object = None
        # Where the tasks that serve the mailbox start as requests come, for an agent
        # served in bursts (``serve_in``); None when one task serves it throughout.
        self.spawner: trio.Nursery | None = None
        self.serving = False  # whether a burst's task is serving (or about to)

    @property
    def history(self) -> list[Message]:
        """The conversation's messages (the list itself: the actor's task edits it)."""
        return self.dialogue.messages

    def steer(self, text: str) -> None:
        self.steering.add(text)

    def run_context(self) -> RunContext:
        """What a run needs from this agent, and all it sees of it."""
        return RunContext(
            spec=self.spec,
            agent_id=self.agent_id,
            is_current=self.is_current,
            model=self.model,
            model_id=self.model_id,
            limiter=self.limiter,
            conversation=self.dialogue,
            steering=self.steering,
            persistence=self.persistence,
            interrupted=self.interrupted,
            tools=self.tools,
            approver=self.approver,
            tool_context=self.context,
            handle=self.handle,
            verifiers=self.verifiers,
            working_dir=self.working_dir,
            context_extra=self.context_extra,
        )

    # --- serving ----------------------------------------------------------------------

    @property
    def starts_at_once(self) -> bool:
        """Whether ``serve`` has nothing to do before it serves the mailbox (no store to
        load, no tool server to start), so that nothing can fail its start: whoever
        starts it need not wait for it, and ``open_agent`` serves it in bursts
        (``serve_in``)."""
        return self.persistence is None and not self.tools.sources

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the mailbox until cancelled, or until it is closed. An exception raised here is a crash: the calls still waiting fail with
        AgentCrashed, and the exception goes on (to the supervisor, or out of
        ``open_agent``)."""
        persistence = self.persistence
        if self.starts_at_once:
            await self._serve_mailbox(task_status)
            return
        if persistence is not None:
            # Before the agent counts as started: a bad store, a history that cannot be
            # read, or an agent that another owner holds fails the start.
            messages, interrupted = await persistence.load()
            self.interrupted[:] = interrupted
            # An older satsuma stored ids as providers sent them, reused ones too: each
            # call gets its own before anything reads the journal by id.
            renamed = distinct_ids(messages)
            self.history[:] = messages
            if renamed is not None:
                persistence.changed(renamed)  # written back with the next flush
        try:
            async with trio.open_nursery() as background:
                if persistence is not None:
                    background.start_soon(persistence.keep_lease)
                # Tool servers not already running start with the agent and stop with
                # it; one that cannot start fails the agent's start.
                for source in self.tools.sources:
                    if not source.running:
                        await background.start(source.serve_quietly)
                self.tools.refresh()
                try:
                    await self._serve_mailbox(task_status)
                finally:
                    background.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The servers and the lease's renewal end quietly when cancelled, so the one
            # exception is the agent's own (a crash, a server that could not start, a
            # lease lost): raised as it is, as it would be without them.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:
            if persistence is not None:
                await persistence.release()

    def serve_in(self, nursery: trio.Nursery) -> None:
        """Serve the mailbox in bursts, from tasks of ``nursery`` (the caller's, which
        ``open_agent`` holds open for its block): a request sent to an idle agent starts
        a task that serves it and whatever queued behind it, and ends when the mailbox
        is empty. Only for an agent whose start has nothing to do
        (``starts_at_once``) and whose mailbox is its own.

        An idle agent then holds no task, and closing it (``stop_if_idle``) wakes
        nothing: a task parked on the mailbox would cost the close a batch of the
        scheduler to end, and the block's exit another to learn of it. A crash or a
        cancellation of a burst ends the agent as the end of ``serve`` does."""
        assert self.starts_at_once and self.owns_mailbox
        self.spawner = nursery

    async def _serve_burst(self) -> None:
        mailbox = self.mailbox
        crash: AgentCrashed | None = None
        idle = False
        try:
            while True:
                # As Mailbox.take: a stopping agent leaves queued requests to
                # end_queued.
                await trio.lowlevel.checkpoint_if_cancelled()
                request = mailbox.take_nowait()
                if request is None:
                    idle = True
                    return
                await self._serve_request(request)
        except Exception as exc:
            crash = AgentCrashed(self.spec.name, exc, agent_id=self.agent_id)
            raise
        finally:
            self.serving = False
            if not idle:
                self.alive = False
                self.spawner = None
                self._close_mailbox(crash)

    async def _serve_mailbox(self, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        crash: AgentCrashed | None = None
        try:
            if self.spec.resume_interrupted:
                for record in self.interrupted:
                    await self._serve_job(
                        Job(prompt=record.prompt, run_id=record.run_id, sink=None, resume=record)
                    )
            while (request := await self.mailbox.take()) is not None:
                await self._serve_request(request)
        except Exception as exc:
            crash = AgentCrashed(self.spec.name, exc, agent_id=self.agent_id)
            raise
        finally:
            self.alive = False
            self._close_mailbox(crash)

    async def _serve_request(self, request: Request) -> None:
        if isinstance(request, ResetRequest):
            await self._reset()
            request.done.set()
        else:
            await self._serve_job(request)

    def stop_if_idle(self) -> bool:
        """Stop without a cancellation when there is nothing to cancel: an agent served
        in bursts (``serve_in``) with no burst serving and nothing in its mailbox. Its
        mailbox is closed and it counts as stopped; it has no task to end. Returns
        whether it did; if not, the caller cancels it.

        Cancelling a task costs trio an exception and an exception group to unwind it,
        about twice what the rest of opening and closing an agent costs; a run asked
        for from now on is refused (AgentUnavailable), as it is once the agent has
        stopped."""
        if self.spawner is None or self.serving or not self.mailbox.is_empty():
            return False
        self.spawner = None
        self.alive = False
        self.mailbox.close()
        return True

    async def _reset(self) -> None:
        """Forget the conversation. The runs paused awaiting approval and the
        interrupted ones are gone past first, as a new run goes past them (their record
        ends ``cancelled``): resumed after the reset, they would go on from a
        conversation that no longer holds their calls. Written before the conversation
        is cleared: a store failing in between never leaves a paused run waiting on
        calls that are gone."""
        if self.persistence is not None:
            # Read from the store now (the truth), as a new run reads them.
            left = await self.persistence.runs_left(
                None, claimed=bool(dangling_tool_uses(self.history))
            )
            for record in left:
                await self.persistence.end_run(
                    record.run_id,
                    "cancelled",
                    record.usage,
                    gone_past(record, "before the conversation was reset"),
                )
            for record in self.interrupted:
                await self.persistence.end_run(
                    record.run_id,
                    "cancelled",
                    record.usage,
                    "interrupted, and not resumed before the conversation was reset",
                )
        self.interrupted.clear()
        conversation = self.dialogue
        conversation.messages.clear()
        conversation.changed_from(0)
        await conversation.flush()
        conversation.last_usage = None

    async def _serve_job(self, job: Job) -> None:
        if job.scope.cancel_called:
            # Abandoned while it waited: it never starts and leaves no trace.
            job.complete(RunResult(run_id=job.run_id, output=job.no_output(), status="cancelled"))
            return
        ctx = self.run_context()
        if job.decisions is not None:
            # Checked and claimed here, in the agent's own task, one job at a time, and
            # atomically in the store: of two resumes with decisions, one runs the calls
            # and the other is told the run is no longer awaiting approval.
            try:
                await claim_paused(ctx, job, self.claims_in_doubt)
            except (ValueError, TypeError) as exc:
                job.fail(exc)
                return
            except StoreError as exc:
                if isinstance(exc, (LeaseLost, StoreClosed)) and self.is_current():
                    # As in a run (_run._phases): no later write of this agent can
                    # succeed, so it stops; its caller is told why.
                    job.fail(AgentCrashed(self.spec.name, exc, agent_id=self.agent_id))
                    raise
                if not job.hands_back:
                    # That resume fails, not the agent: nothing ran, the run still
                    # awaits approval, and other runs go on (docs/approval.md).
                    job.fail(not_resumed(job.run_id, exc))
                    return
                if not isinstance(exc, StoreUnavailable):
                    job.fail(AgentCrashed(self.spec.name, exc, agent_id=self.agent_id))
                    raise
                # A node's: the claim may or may not have committed, and nothing ran;
                # the node takes the claim back and hands the run back (not failed).
                job.store_error = exc
                job.complete(
                    RunResult(
                        run_id=job.run_id, output=job.no_output(), status="failed", error=said(exc)
                    )
                )
                return
        self.current = job
        returned = False
        try:
            result = await execute_run(ctx, job)
            returned = True
        except Exception as exc:
            job.fail(AgentCrashed(self.spec.name, exc, agent_id=self.agent_id))
            raise
        finally:
            self.current = None
            if not returned and not job.done.is_set():
                job.stopped()  # torn down mid-run: an outer cancellation
        job.complete(result)

    def _close_mailbox(self, crash: AgentCrashed | None) -> None:
        if not self.owns_mailbox:
            # A supervised child's: what waits there is served by the next incarnation,
            # or failed by the child if none comes.
            return
        mailbox = self.mailbox
        mailbox.close()
        mailbox.end_queued(
            (lambda: AgentCrashed(self.spec.name, crash.cause, agent_id=self.agent_id))
            if crash is not None
            else None,
            "it stopped before the reset",
            self.spec.name,
        )

    # The target protocol (see AgentHandle): an open_agent handle addresses this actor.

    @property
    def name(self) -> str:
        return self.spec.name

    async def acquire(self) -> Actor:
        if not self.alive:
            raise AgentUnavailable(self.spec.name, "it has stopped")
        return self

    def current_actor(self) -> Actor | None:
        return self if self.alive else None

    def conversation(self) -> list[Message]:
        return self.history

    async def submit(self, request: Request) -> None:
        if isinstance(request, Job) and request.output is None:
            # Known from here on, so that a run ended before it starts has the right
            # kind of output (None for a typed one, "" for text).
            request.output = (self.spec.output, self.spec.output_retries)
        mailbox = self.mailbox
        # As a channel's send() does, less its schedule point when there is room: the
        # caller goes on to wait for its answer, which is one anyway.
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            if not mailbox.put_nowait(request):
                await mailbox.put(request)  # the mailbox is full: wait for room
        except MailboxClosed:
            raise AgentUnavailable(self.spec.name, "it has stopped") from None
        spawner = self.spawner
        if spawner is not None and not self.serving:
            # An idle agent served in bursts: this request starts the next one.
            self.serving = True
            spawner.start_soon(self._serve_burst)


def _always() -> bool:
    return True


_last_cwd: tuple[str, Path] = ("", Path())


def _cwd() -> Path:
    """The current directory as a Path, made again only when it has changed (making a
    Path costs more than the rest of an agent's context)."""
    global _last_cwd
    current = os.getcwd()
    if _last_cwd[0] != current:
        _last_cwd = (current, Path(current))
    return _last_cwd[1]
