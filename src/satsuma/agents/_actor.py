"""The agent as an actor: a trio task tree that owns its conversation and serves a
mailbox, and the handle through which the rest of the program talks to it.

Requests (runs, resets) wait in a bounded mailbox and are served one at a time, in order.
The conversation is owned by the actor's task; callers get copies.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from os import PathLike, fspath
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs
import trio

from .. import _telemetry
from .._exceptions import AgentCrashed, AgentUnavailable
from .._messages import Message, Usage
from ..store import RunRecord, Store
from ._agent import AgentSpec, spec_of
from ._aliases import resolve_model
from ._events import AgentEvent
from ._loop import execute_run
from ._model import Model
from ._persist import Persistence
from ._result import RunResult
from ._verifiers import as_check

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["AgentHandle", "open_agent"]

logger = logging.getLogger("satsuma.agents")

_run_numbers = itertools.count(1)


def _new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:12]}"


@attrs.define(eq=False)
class Job:
    """One queued run."""

    prompt: str
    run_id: str
    sink: Callable[[AgentEvent], None] | None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: trio.Event = attrs.Factory(trio.Event)
    result: RunResult | None = None
    error: BaseException | None = None
    on_done: Callable[[], None] | None = None
    resume: RunRecord | None = None  # set when the job resumes an interrupted run
    # The requester's OpenTelemetry context: the run happens in the agent's task, and its
    # span is the child of the caller's span (a tool's, for a sub-agent), not the agent's.
    trace_context: Context | None = attrs.Factory(_telemetry.current_context)

    def abandon(self) -> None:
        """The caller is gone (or asked to cancel): stop the run, or never start it."""
        self.scope.cancel()

    def complete(self, result: RunResult) -> None:
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
            RunResult(run_id=self.run_id, output="", status="cancelled", error="the agent stopped")
        )


@attrs.define(eq=False)
class _Reset:
    done: trio.Event = attrs.Factory(trio.Event)
    error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        """The reset will not happen: its caller raises ``error``."""
        self.error = error
        self.done.set()


Request = Job | _Reset


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
            elif isinstance(request, _Reset):
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
        handle_target: Target | None = None,
        store: Store | None = None,
        mailbox: Mailbox | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.spec = spec
        self.model = model
        self.model_id = resolve_model(spec.model) or spec.model
        # True while this incarnation is the agent's newest (a supervisor's fencing
        # token): once a newer one has started, this one's store writes are refused.
        self.is_current: Callable[[], bool] = fence if fence is not None else _always
        self.persistence = (
            Persistence(store, agent_id, fence=self.is_current) if store is not None else None
        )
        self.interrupted: list[RunRecord] = []
        # Tool servers list their tools once running: until serve() has started them,
        # the runner holds the other tools only.
        self.tool_sources = spec.tool_sources
        self.source_generations: tuple[int, ...] | None = None
        self.runner = spec.make_runner(with_sources=not self.tool_sources)
        self.tool_schemas = tuple(self.runner.schemas())
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
        self.handle = AgentHandle(handle_target if handle_target is not None else self)

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
        if self.persistence is not None:
            # Loaded before the agent counts as started: a bad store fails the start.
            messages, self.interrupted = await self.persistence.load()
            self.history[:] = messages
        if not self.tool_sources:
            await self._serve_mailbox(task_status)
            return
        try:
            async with trio.open_nursery() as sources:
                # Tool servers not already running start with the agent and stop with
                # it; one that cannot start fails the agent's start.
                for source in self.tool_sources:
                    if not getattr(source, "running", False):
                        await sources.start(source.serve_quietly)  # type: ignore[attr-defined]
                self.refresh_tools()
                try:
                    await self._serve_mailbox(task_status)
                finally:
                    sources.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The servers end quietly when cancelled, so the one exception is the
            # agent's own (a crash, a server that could not start): raised as it is,
            # as it would be without servers.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def refresh_tools(self) -> None:
        """Rebuild the runner when a tool server's tool list has changed (or on the
        first call, once the servers run)."""
        if not self.tool_sources:
            return
        generations = tuple(getattr(source, "generation", 0) for source in self.tool_sources)
        if generations == self.source_generations:
            return
        self.runner = self.spec.make_runner()
        self.tool_schemas = tuple(self.runner.schemas())
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
                if isinstance(request, _Reset):
                    self.history.clear()
                    self.changed_from(0)
                    await self.flush()
                    self.last_usage = None
                    request.done.set()
                    continue
                await self._serve_job(request)
        except Exception as exc:
            crash = AgentCrashed(self.spec.name, exc, agent_id=self.agent_id)
            raise
        finally:
            self.alive = False
            self._close_mailbox(crash)

    async def _serve_job(self, job: Job) -> None:
        if job.scope.cancel_called:
            # Abandoned while it waited: it never starts and leaves no trace.
            job.complete(RunResult(run_id=job.run_id, output="", status="cancelled"))
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
        try:
            await self.mailbox.send.send(request)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise AgentUnavailable(self.spec.name, "it has stopped") from None


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
class AgentHandle:
    """How a program talks to a running agent. Returned by ``open_agent`` and by a
    supervisor's ``start_child`` — in which case it addresses the child, not one
    incarnation of it, and stays valid across restarts.

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

    async def run(
        self, prompt: str, *, events: Callable[[AgentEvent], object] | None = None
    ) -> RunResult:
        """Run the agent on ``prompt`` and return how the run ended.

        If the caller is cancelled while the run waits or runs, the run is cancelled too
        (it ends ``cancelled`` with a valid history).

        Args:
            prompt: The user's message.
            events: Called with each event of the run, on the trio thread.

        Raises:
            AgentUnavailable: the agent has stopped (or, supervised, did not come back
                from a restart in time).
            AgentCrashed: the agent crashed before answering; ``cause`` says why.
        """
        _check_prompt(prompt)
        job = Job(prompt=prompt, run_id=_new_run_id(), sink=_callback_sink(events))
        return await self._serve(job)

    async def resume(
        self, run_id: str, *, events: Callable[[AgentEvent], object] | None = None
    ) -> RunResult:
        """Go on with a run that a crash or a kill interrupted (its record says
        ``interrupted``): calls it had finished keep their journaled outcomes, calls it
        had not are run again only for tools declared ``idempotent = True`` (the others
        are answered ``Error: Interrupted: ...``), and the loop goes on.

        Raises:
            ValueError: the agent has no store, or the run is not an interrupted run of
                this agent.
            AgentUnavailable: the agent has stopped.
        """
        actor = await self._target.acquire()
        if actor.persistence is None:
            raise ValueError(f"agent {self.name} has no store: only a stored run can be resumed")
        record = await actor.persistence.store.get_run(run_id)
        if record is None or record.agent_id != actor.agent_id:
            raise ValueError(f"agent {actor.agent_id} has no run {run_id!r}")
        if record.status != "interrupted":
            raise ValueError(
                f"run {run_id} ended {record.status}; only an interrupted run can be resumed"
            )
        # Only while no later run has gone past it (that run answered its open calls).
        if record.run_id not in {r.run_id for r in actor.interrupted}:
            raise ValueError(f"run {run_id} can no longer be resumed: a later run went past it")
        job = Job(prompt=record.prompt, run_id=run_id, sink=_callback_sink(events), resume=record)
        return await self._serve(job)

    async def _serve(self, job: Job) -> RunResult:
        actor = await self._target.acquire()
        await actor.submit(job)
        try:
            await job.done.wait()
        finally:
            await _abandon(job)
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    async def stream(self, prompt: str) -> AsyncIterator[AgentEvent]:
        """Run the agent on ``prompt``, yielding its events as they happen; the last one
        is ``RunEnd``. Leaving the loop early cancels the run.

        Raises:
            AgentUnavailable: the agent has stopped.
            AgentCrashed: the agent crashed before the run ended.
        """
        _check_prompt(prompt)
        # Unbounded: a run's events are bounded by its own output, and the agent must
        # never wait on a slow reader.
        send, receive = trio.open_memory_channel[AgentEvent](math.inf)

        def deliver(event: AgentEvent) -> None:
            # The reader may have left (and closed its end): the run is being cancelled.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                send.send_nowait(event)

        job = Job(prompt=prompt, run_id=_new_run_id(), sink=deliver, on_done=send.close)
        actor = await self._target.acquire()
        await actor.submit(job)
        try:
            async with receive:
                async for event in receive:
                    yield event
        finally:
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
        _check_prompt(text)
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

        Raises:
            AgentUnavailable: the agent stopped (or its supervisor gave up) before it.
            AgentCrashed: the agent crashed before it, and will not be restarted.
        """
        request = _Reset()
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


def _always() -> bool:
    return True


def _check_prompt(text: object) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a prompt must be a non-empty str, got: {text!r}")


def _callback_sink(
    events: Callable[[AgentEvent], object] | None,
) -> Callable[[AgentEvent], None] | None:
    if events is None:
        return None
    if not callable(events):
        raise TypeError(f"events must be a callable, got: {type(events).__name__}")

    def sink(event: AgentEvent) -> None:
        try:
            events(event)
        except Exception:  # an observer's bug must not end the run or the agent
            logger.exception("satsuma event callback %r raised on %r", events, event)

    return sink


@asynccontextmanager
async def open_agent(
    agent: type[Any],
    *,
    model: Model | None = None,
    context: Mapping[str, Any] | None = None,
    agent_id: str | None = None,
    store: Store | None = None,
) -> AsyncIterator[AgentHandle]:
    """Start an agent inside the caller's structured concurrency.

    ``async with satsuma.open_agent(CodingAgent) as agent: await agent.run("...")``. The
    agent runs until the block exits; a run still in progress then ends ``cancelled``.

    Args:
        agent: An Agent subclass.
        model: The model provider (default: ``AnthropicModel()``, from the environment's
            ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL). Tests pass a ScriptedModel.
        context: The tools' context mapping (``working_dir``, ``capabilities``, extras).
        agent_id: This agent's id (made up if not given). With a store, the id under
            which its conversation is kept: an agent started again with the same id
            loads it and goes on.
        store: Where the conversation, the run records and the tool-call journal are
            kept (a SQLiteStore, a MemoryStore); none by default.

    Raises:
        TypeError: ``agent`` is not a concrete Agent subclass.
    """
    spec = spec_of(agent)
    owned = None
    if model is None:
        from ._anthropic import AnthropicModel

        model = owned = AnthropicModel()
    if store is not None and agent_id is None:
        raise ValueError("an agent with a store needs an agent_id, to find its conversation again")
    if store is not None:
        await store.open()  # a bad file is a plain StoreError here, before anything starts
    actor = Actor(
        spec, model, context, agent_id or f"{spec.name}-{next(_run_numbers)}", store=store
    )
    started = False
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.serve)
            started = True
            try:
                yield actor.handle
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # A start that failed (a tool server that cannot start) is one plain exception,
        # as a bad store is: the block never ran.
        if not started and len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        if owned is not None:
            # The client built here is closed here; one passed in belongs to the caller.
            with trio.CancelScope(shield=True):
                await owned.aclose()
