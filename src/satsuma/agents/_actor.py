"""The agent as an actor: a trio task tree that owns its conversation and serves a
mailbox. The handle through which the rest of the program talks to it, and
``open_agent``, are in ``_handle``.

Requests (runs, resets) wait in a bounded mailbox and are served one at a time, in order.
The conversation is owned by the actor's task; callers get copies.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from os import PathLike, fspath
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .. import _telemetry
from .._exceptions import AgentCrashed, AgentUnavailable, StoreError
from .._frozen import freeze
from .._messages import Message, Usage
from ..models import Model, limiter_for, resolve_model
from ..store import Owner, PendingApproval, RunRecord, Store
from ..tools import Approve, Approver, Deny
from ._agent import AgentSpec
from ._approval import claim_paused
from ._events import AgentEvent
from ._ids import distinct_ids
from ._loop import execute_run
from ._output import OutputSpec
from ._persist import Persistence, dangling_tool_uses, gone_past
from ._result import NO_ANSWER, RunResult
from ._verifiers import as_check

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["Actor", "Job", "Mailbox", "Request", "ResetRequest", "new_run_id"]

logger = logging.getLogger("satsuma.agents")


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:12]}"


@attrs.define(eq=False)
class Job:
    """One queued run."""

    prompt: str
    run_id: str
    sink: Callable[[AgentEvent], None] | None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: trio.Event = attrs.Factory(trio.Event)
    result: RunResult[Any] | None = None
    error: BaseException | None = None
    on_done: Callable[[], None] | None = None
    # Awaited by the run before each model call: a stream's reader that is far behind
    # holds the run there (agent.stream's backpressure); None: nothing to wait for.
    wait_for_reader: Callable[[], Awaitable[None]] | None = None
    resume: RunRecord | None = None  # set when the job resumes an interrupted run
    # Set when the job goes on with a run paused awaiting approval: the decisions given,
    # and (once the run is claimed) the calls the run waited on.
    decisions: Mapping[str, Approve | Deny] | None = None
    pending: tuple[PendingApproval, ...] = ()
    # A run's own output type and retries (agent.run(..., output_type=...)); None: the
    # agent's.
    output: tuple[OutputSpec | None, int] | None = None
    # The requester's OpenTelemetry context: the run happens in the agent's task, and its
    # span is the child of the caller's span (a tool's, for a sub-agent), not the agent's.
    trace_context: Context | None = attrs.Factory(_telemetry.current_context)
    # The store's error that failed the run, if one did: what a cluster's node decides
    # on by its type (try again later, or let the failure stand).
    store_error: StoreError | None = None

    def abandon(self) -> None:
        """The caller is gone (or asked to cancel): stop the run, or never start it."""
        self.scope.cancel()

    def complete(self, result: RunResult[Any]) -> None:
        self.result = result
        self._finish()

    def fail(self, error: BaseException) -> None:
        """The run will not be answered: its caller raises ``error``."""
        self.error = error
        self._finish()

    def _finish(self) -> None:
        self.done.set()
        if self.on_done is not None:
            self.on_done()

    def stopped(self) -> None:
        """The agent stopped (not crashed) before or while serving this job."""
        self.complete(
            RunResult(
                run_id=self.run_id,
                output=self.no_output(),
                status="cancelled",
                error="the agent stopped",
            )
        )

    def no_output(self) -> Any:
        """What ``output`` is for a run that ended without an answer: "" for text,
        NO_ANSWER for a typed one (known here only for a per-run type; the actor knows
        the rest)."""
        return "" if self.output is None or self.output[0] is None else NO_ANSWER


@attrs.define(eq=False)
class ResetRequest:
    done: trio.Event = attrs.Factory(trio.Event)
    error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        """The reset will not happen: its caller raises ``error``."""
        self.error = error
        self.done.set()


Request = Job | ResetRequest


@final
class Mailbox:
    """The queue of an agent's requests. ``open_agent``'s agent has its own; a
    supervised agent's belongs to its child and outlives each incarnation, so that runs
    queued behind one that crashed are served by the restarted agent."""

    def __init__(self, size: int) -> None:
        self.send, self.receive = trio.open_memory_channel[Request](size)

    def end_queued(self, crash: Callable[[], BaseException] | None, why: str, agent: str) -> None:
        """Answer every request still waiting, which will not be served: each raises a
        fresh ``crash()`` if given; otherwise a run ends ``cancelled`` (``the agent
        stopped``) and a reset raises AgentUnavailable saying ``why`` — a reset never
        pretends to have happened."""
        while True:
            try:
                request = self.receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            if crash is not None:
                request.fail(crash())
            elif isinstance(request, ResetRequest):
                request.fail(AgentUnavailable(agent, why))
            else:
                request.stopped()


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
            Persistence(store, agent_id, fence=self.is_current, owner=owner or Owner.new())
            if store is not None
            else None
        )
        self.interrupted: list[RunRecord] = []
        # Which runs await approval is not kept here: the store is the truth, read each
        # time the agent decides about them (Persistence.runs_left, claim_paused).
        # Tool servers list their tools once running: until serve() has started them,
        # the runner holds the other tools only.
        self.tool_sources = spec.tool_sources
        self.source_generations: tuple[int, ...] | None = None
        self.runner = spec.make_runner(with_sources=not self.tool_sources)
        self.tool_schemas = spec.tool_schemas
        self.verifiers = [check for check in map(as_check, spec.verifiers) if check is not None]
        self.context = dict(context or {})
        working_dir = self.context.get("working_dir")
        self.working_dir = (
            Path(fspath(working_dir)) if isinstance(working_dir, (str, PathLike)) else Path.cwd()
        )
        self.context_extra = {
            key: value
            for key, value in self.context.items()
            if key not in ("working_dir", "capabilities")
        }
        self.agent_id = agent_id
        # Shared with later incarnations when a supervisor restarts the agent.
        self.history: list[Message] = history if history is not None else []
        self.alive = True
        self.last_usage: Usage | None = None
        self.steering: list[str] = []
        self.steer_event = trio.Event()
        self.current: Job | None = None
        # A mailbox given by a supervised child outlives this incarnation; one made here
        # is this actor's own, closed when it stops.
        self.owns_mailbox = mailbox is None
        self.mailbox = mailbox if mailbox is not None else Mailbox(spec.mailbox_size)
        # What tools see as ctx.agent: the AgentHandle that addresses this agent, set by
        # whoever made the actor (open_agent, or a supervisor's child).
        self.handle: object = None

    # --- conversation -----------------------------------------------------------------

    def commit(self, message: Message) -> None:
        if self.persistence is not None:
            self.persistence.changed(len(self.history))
        self.history.append(message)

    def replace_last(self, message: Message) -> None:
        if self.persistence is not None:
            self.persistence.changed(len(self.history) - 1)
        self.history[-1] = message

    def changed_from(self, index: int) -> None:
        """The conversation changed from ``index`` on (a roll-back, a reset)."""
        if self.persistence is not None:
            self.persistence.changed(index)

    async def flush(self) -> None:
        """Write what changed in the conversation to the store (no-op without one).

        Raises:
            StoreError: the store could not write it.
        """
        if self.persistence is not None:
            await self.persistence.flush(self.history)

    def steer(self, text: str) -> None:
        self.steering.append(text)
        self.steer_event.set()

    def take_steering(self) -> list[str]:
        texts, self.steering = self.steering, []
        if self.steer_event.is_set():
            self.steer_event = trio.Event()
        return texts

    def has_steering(self) -> bool:
        return bool(self.steering)

    # --- serving ----------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the mailbox until cancelled. An exception raised here is a crash: the
        calls still waiting fail with AgentCrashed, and the exception goes on (to the
        supervisor, or out of ``open_agent``)."""
        persistence = self.persistence
        if persistence is None and not self.tool_sources:
            await self._serve_mailbox(task_status)
            return
        if persistence is not None:
            # Before the agent counts as started: a bad store, a history that cannot be
            # read, or an agent that another owner holds fails the start.
            messages, self.interrupted = await persistence.load()
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
                for source in self.tool_sources:
                    if not getattr(source, "running", False):
                        await background.start(source.serve_quietly)  # type: ignore[attr-defined]
                self.refresh_tools()
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

    def refresh_tools(self) -> None:
        """Rebuild the runner when a tool server's tool list has changed (or on the
        first call, once the servers run)."""
        if not self.tool_sources:
            return
        generations = tuple(getattr(source, "generation", 0) for source in self.tool_sources)
        if generations == self.source_generations:
            return
        self.runner = self.spec.make_runner()
        self.tool_schemas = tuple(map(freeze, self.runner.schemas()))
        self.source_generations = generations

    async def _serve_mailbox(self, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        crash: AgentCrashed | None = None
        try:
            if self.spec.resume_interrupted:
                for record in self.interrupted:
                    await self._serve_job(
                        Job(prompt=record.prompt, run_id=record.run_id, sink=None, resume=record)
                    )
            async for request in self.mailbox.receive:
                if isinstance(request, ResetRequest):
                    await self._reset()
                    request.done.set()
                    continue
                await self._serve_job(request)
        except Exception as exc:
            crash = AgentCrashed(self.spec.name, exc, agent_id=self.agent_id)
            raise
        finally:
            self.alive = False
            self._close_mailbox(crash)

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
        self.interrupted = []
        self.history.clear()
        self.changed_from(0)
        await self.flush()
        self.last_usage = None

    async def _serve_job(self, job: Job) -> None:
        if job.scope.cancel_called:
            # Abandoned while it waited: it never starts and leaves no trace.
            job.complete(RunResult(run_id=job.run_id, output=job.no_output(), status="cancelled"))
            return
        if job.decisions is not None:
            # Checked and claimed here, in the agent's own task, one job at a time, and
            # atomically in the store: of two resumes with decisions, one runs the calls
            # and the other is told the run is no longer awaiting approval.
            try:
                await claim_paused(self, job)
            except (ValueError, TypeError) as exc:
                job.fail(exc)
                return
        self.current = job
        returned = False
        try:
            result = await execute_run(self, job)
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
        mailbox.send.close()
        mailbox.end_queued(
            (lambda: AgentCrashed(self.spec.name, crash.cause, agent_id=self.agent_id))
            if crash is not None
            else None,
            "it stopped before the reset",
            self.spec.name,
        )
        mailbox.receive.close()

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
        try:
            await self.mailbox.send.send(request)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise AgentUnavailable(self.spec.name, "it has stopped") from None


def _always() -> bool:
    return True
