"""``LocalRuns``: the ``Runs`` of agents in this process, over a SQLite or memory store
(made by ``open_local_runs``, in ``_open_runs``).

A conversation ``(name, agent_id)`` is one supervised agent child, opened on first use
and closed once idle. The store keys conversations by ``agent_id`` alone, so the served
agent is opened with the stored id ``"{name}/{agent_id}"``: two served classes sharing
an ``agent_id`` never read each other's history, and since neither a name nor a served
``agent_id`` may contain ``/`` the stored id says which conversation it is.

A run is driven by a task of the server's own nursery, never by the request's: ``start``
returns once the run exists and nothing but ``cancel`` (or the server's end) cancels it.
The runs of one conversation run one after another, in the order they were started.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing, suppress
from typing import Any

import attrs
import trio

from .._exceptions import RunNotAwaitingApproval, StoreError
from ..agents import Agent, AgentEvent, AgentHandle, RunResult, internal
from ..models import Model
from ..store import ApprovalDecision, RunRecord, Store
from ..supervisor import Supervisor
from ..tools import Approve, Deny
from ._driven import DrivenRun
from ._eventlog import EventLog, first_id_now
from ._refusal import is_open, start_agent
from ._runs import (
    AlreadyDecided,
    BadDecision,
    Busy,
    IfBusy,
    NotResumed,
    PendingView,
    RunEvent,
    RunView,
    UnknownAgent,
    UnknownRun,
)
from ._views import (
    error_json,
    is_paused,
    json_values,
    pending_view,
    split_stored_id,
    stored_id,
    stored_pending,
    undecided,
    usage_json,
)

__all__ = ["LocalRuns"]

log = logging.getLogger("satsuma.serve")


class _NotTaken(Exception):
    """A resume whose claim the store refused: the run is ``view`` again, paused."""

    def __init__(self, view: RunView) -> None:
        super().__init__(view.run_id)
        self.view = view


def _same(kept: ApprovalDecision | None, sent: ApprovalDecision) -> bool:
    """Whether ``sent`` is the decision ``kept`` on the call (whoever sent it, and when)."""
    fields = ("verdict", "input", "reason")
    return kept is not None and all(getattr(kept, f) == getattr(sent, f) for f in fields)


@attrs.define(eq=False)
class _Conversation:
    """One served conversation: its supervised agent and the runs it still has."""

    agent: str
    agent_id: str
    child_id: str
    handle: AgentHandle[Any]
    # The done-event of the last run started: the next one waits for it (order).
    tail: trio.Event
    active: int = 0
    last_used: float = 0.0
    current: DrivenRun | None = None


class LocalRuns:
    """The ``Runs`` of agents in this process. Made by ``open_local_runs``."""

    def __init__(
        self,
        agents: Sequence[type[Agent[Any]]],
        *,
        store: Store,
        supervisor: Supervisor,
        nursery: trio.Nursery,
        model: Model | Mapping[str, Model] | None,
        idle_seconds: float,
        retention_seconds: float,
        event_limit: int,
    ) -> None:
        self._agents: dict[str, type[Agent[Any]]] = {}
        for cls in agents:
            name = internal.spec_of(cls).name
            if "/" in name or not name:
                raise ValueError(f"agent name {name!r} cannot be served: it contains '/'")
            if name in self._agents:
                raise ValueError(f"two served agent classes are named {name!r}")
            self._agents[name] = cls
        self._store = self.store = store  # public too: the console reads both
        self._supervisor = self.supervisor = supervisor
        self._nursery = nursery
        self._model = model
        self._idle = idle_seconds
        self._retention = retention_seconds
        self._event_limit = event_limit
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._opening: dict[tuple[str, str], trio.Lock] = {}
        self._runs: dict[str, DrivenRun] = {}
        self._deciding: dict[str, trio.Lock] = {}  # one decision at a time, per run

    @property
    def agents(self) -> Mapping[str, type[Agent[Any]]]:
        """The served agent classes, by ``Agent.name``."""
        return dict(self._agents)

    # --- conversations -------------------------------------------------------------------

    def _agent_class(self, agent: str) -> type[Agent[Any]]:
        try:
            return self._agents[agent]
        except KeyError:
            raise UnknownAgent(f"no agent named {agent!r} is served") from None

    async def _open(self, agent: str, agent_id: str) -> _Conversation:
        cls = self._agent_class(agent)
        key = (agent, agent_id)
        conversation = self._conversations.get(key)
        if conversation is not None and is_open(self._supervisor, conversation.child_id):
            # Open already: no lock, no checkpoint (a pass of trio's scheduler per run).
            conversation.last_used = trio.current_time()
            return conversation
        lock = self._opening.get(key) or self._opening.setdefault(key, trio.Lock())
        async with lock:
            conversation = self._conversations.get(key)
            # New, or its own supervisor gave up (a crash loop): opened anew.
            if conversation is None or not is_open(self._supervisor, conversation.child_id):
                sid = stored_id(agent, agent_id)
                options: dict[str, Any] = {"agent_id": sid, "store": self._store}
                model = self._model.get(agent) if isinstance(self._model, Mapping) else self._model
                if model is not None:
                    options["model"] = model
                handle = await start_agent(self._supervisor, cls, (agent, agent_id), options)
                done = trio.Event()
                done.set()
                conversation = _Conversation(agent, agent_id, sid, handle, tail=done)
                self._conversations[key] = conversation
        conversation.last_used = trio.current_time()
        return conversation

    async def close_idle_agents(self) -> None:
        """Close the agents idle past ``idle_seconds`` and forget runs past retention, for
        as long as it runs (``open_local_runs`` runs it beside the runs)."""
        while True:
            await trio.sleep(max(min(self._idle, self._retention) / 4, 0.01))
            now = trio.current_time()
            for key, conversation in list(self._conversations.items()):
                if conversation.active == 0 and now - conversation.last_used >= self._idle:
                    del self._conversations[key]
                    with suppress(KeyError):  # its supervisor gave up: forgotten already
                        await self._supervisor.terminate_child(conversation.child_id)
                        await self._supervisor.delete_child(conversation.child_id)
            for run_id, run in list(self._runs.items()):
                if run.settled_at is not None and now - run.settled_at >= self._retention:
                    del self._runs[run_id]

    # --- runs ----------------------------------------------------------------------------

    async def start(
        self, agent: str, agent_id: str, prompt: str, *, if_busy: IfBusy = "enqueue"
    ) -> RunView:
        """See ``Runs.start``."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt must be a non-empty string")
        if if_busy not in ("enqueue", "reject", "interrupt"):
            raise ValueError(f"if_busy must be enqueue, reject or interrupt, got: {if_busy!r}")
        conversation = await self._open(agent, agent_id)
        paused = if_busy == "reject" and not conversation.active
        if paused and await is_paused(self._store, agent, agent_id):
            raise Busy(f"conversation {agent_id} of {agent} has a run awaiting approval")
        if conversation.active:
            if if_busy == "reject":
                raise Busy(f"conversation {agent_id} of {agent} has a run in progress")
            current = conversation.current
            if if_busy == "interrupt" and current is not None:
                await conversation.handle.steer(prompt)
                return current.view
        run_id = internal.new_run_id()
        view = RunView(
            run_id=run_id, agent=agent, agent_id=agent_id, status="queued", prompt=prompt
        )
        run = self._runs[run_id] = DrivenRun(view=view, log=EventLog(self._event_limit))
        previous, conversation.tail = conversation.tail, run.done
        conversation.active += 1

        async def drive() -> RunResult[Any]:
            if not previous.is_set():  # a set event's wait is a checkpoint, for nothing
                await previous.wait()
            conversation.current = run
            result, _ = await internal.run_with_id(
                conversation.handle, prompt, run_id, events=run.record
            )
            return result

        self._nursery.start_soon(self._drive, conversation, run, drive)
        return run.view

    async def _drive(
        self, conversation: _Conversation, run: DrivenRun, body: Callable[[], Any]
    ) -> None:
        """Run ``body`` (a run or a resume) as the server's, and settle the run's view."""
        run.log.unsettle()
        result: RunResult[Any] | None = None
        failure: BaseException | None = None
        paused: RunView | None = None
        try:
            with run.scope:
                result = await body()
        except _NotTaken as exc:  # a resume the store refused: the run still waits
            paused = exc.view
        except Exception as exc:  # the run failed to run (the agent stopped, crashed)
            failure = exc
        finally:
            conversation.active -= 1
            conversation.last_used = trio.current_time()
            if conversation.current is run:
                conversation.current = None
            if paused is not None:
                run.pause_again(paused)
            else:
                run.settle(result, failure)
            run.done.set()

    def when_stopped(self, run_id: str, callback: Callable[[], None]) -> bool:
        """Call ``callback`` when run ``run_id`` next stops (when ``wait`` would return);
        False, and never called, for a run not driven here or stopped already."""
        run = self._runs.get(run_id)
        if run is None or run.stopped.is_set():
            return False
        run.on_stop.append(callback)
        return True

    async def wait(self, run_id: str) -> RunView:
        """See ``Runs.wait``."""
        run = self._runs.get(run_id)
        if run is None:
            return await self.get(run_id)
        await run.stopped.wait()
        return await self.get(run_id)

    async def get(self, run_id: str) -> RunView:
        """See ``Runs.get``: ``pending`` leaves out the calls decided already, unless
        every call is (its resume failed on the store: they are to be decided again)."""
        return await undecided(await self._view(run_id), self._store, stranded=True)

    async def _view(self, run_id: str) -> RunView:
        run = self._runs.get(run_id)
        if run is None:
            return await self._stored_view(run_id)
        if run.view.status == "awaiting_approval" and run.done.is_set():
            # Paused, it may have been gone past (a later run of its conversation ends
            # it cancelled) or taken up elsewhere: the store says which.
            record = await self._store.get_run(run_id)
            if record is not None and record.status != "awaiting_approval":
                run.view = attrs.evolve(
                    run.view,
                    status=record.status,
                    pending=(),
                    ended_at=record.ended_at,
                    error=error_json(record.error),
                )
        return run.view

    async def _record(self, run_id: str) -> tuple[RunRecord, str, str]:
        record = await self._store.get_run(run_id)
        parts = split_stored_id(record.agent_id) if record is not None else None
        if record is None or parts is None or parts[0] not in self._agents:
            raise UnknownRun(f"no run {run_id!r}")
        return record, parts[0], parts[1]

    async def _stored_view(self, run_id: str) -> RunView:
        record, agent, agent_id = await self._record(run_id)
        if record.status == "running":  # another process's: if killed, its agent opening
            with suppress(Busy):  # marks it interrupted; if live, it holds the agent (Busy)
                await self._open(agent, agent_id)
                record, agent, agent_id = await self._record(run_id)
        view = RunView(
            run_id=run_id,
            agent=agent,
            agent_id=agent_id,
            status=record.status,
            prompt=record.prompt,
            error=error_json(record.error),
            usage=usage_json(record.usage),
            started_at=record.started_at,
            ended_at=record.ended_at,
        )
        if record.status == "awaiting_approval":
            calls = await self._store.pending_calls(run_id)
            return attrs.evolve(view, pending=tuple(pending_view(view, c) for c in calls))
        if record.status in ("completed", "max_iterations", "deadline_exceeded"):
            try:
                conversation = await self._open(agent, agent_id)
                result = await conversation.handle.result(run_id)
            except (ValueError, Busy):  # not kept, or its agent is another process's
                return view
            return attrs.evolve(view, output=internal.output_to_json(internal.raw_output(result)))
        return view

    async def events(self, run_id: str, *, after: int = 0) -> AsyncGenerator[RunEvent, None]:
        """See ``Runs.events``. A run this server no longer holds in memory (past its
        retention, or from before a restart) gives its ``RunEnd`` alone when it ended."""
        run = self._runs.get(run_id)
        if run is None:
            view = await self._stored_view(run_id)
            if after < 1 and view.ended:
                yield RunEvent(1, {"type": "RunEnd", "run_id": run_id, "status": view.status})
            return
        async with aclosing(run.log.follow(after)) as events:
            async for event in events:
                yield event

    async def cancel(self, run_id: str) -> RunView:
        """See ``Runs.cancel``."""
        run = self._runs.get(run_id)
        if run is not None and not run.done.is_set():
            run.scope.cancel()
            await run.done.wait()
            return run.view
        view = await self._view(run_id)  # every pending call, decided or not: each is denied
        if view.status != "awaiting_approval":
            return view
        return await self._cancel_paused(view)

    async def _cancel_paused(self, view: RunView) -> RunView:
        """A paused run is cancelled by denying its calls and cancelling the resumed run
        before its next model call: the conversation stays valid (every tool_use has
        its result) and the record ends ``cancelled``."""
        denial = Deny("the run was cancelled")
        decisions: dict[str, Approve | Deny] = {call.call_id: denial for call in view.pending}
        try:
            resumed = await self._resume(view, decisions, cancel=True)
        except AlreadyDecided:
            return await self.get(view.run_id)
        run = self._runs[resumed.run_id]
        await run.done.wait()
        return run.view

    async def runs(
        self, agent: str | None = None, agent_id: str | None = None, *, limit: int = 100
    ) -> list[RunView]:
        """See ``Runs.runs``: the runs held in memory and the store's, newest first."""
        if agent is not None:
            self._agent_class(agent)
        found: dict[str, RunView] = {}
        for view in (run.view for run in self._runs.values()):
            if agent in (None, view.agent) and agent_id in (None, view.agent_id):
                found[view.run_id] = view
        if agent is not None and agent_id is not None:
            for record in await self._store.runs(stored_id(agent, agent_id)):
                if record.run_id not in found:
                    found[record.run_id] = await self._stored_view(record.run_id)
        ordered = sorted(found.values(), key=lambda v: v.started_at or float("inf"), reverse=True)
        return ordered[: max(0, limit)]

    async def messages(self, agent: str, agent_id: str) -> list[dict[str, Any]]:
        """See ``Runs.messages``."""
        self._agent_class(agent)
        stored = await self._store.load_messages(stored_id(agent, agent_id))
        return [{"role": m.role, "content": json_values(m.content)} for m in stored]

    async def pending(self, agent: str | None = None) -> list[PendingView]:
        """See ``Runs.pending``: read from the store, so it survives a restart. Calls
        decided already (the run waits on others) are left out; a run whose every call
        is decided still waits when its resume failed on the store: its calls are listed,
        for the same decision to be sent again."""
        if agent is not None:
            self._agent_class(agent)
        return await stored_pending(self._store, self._agents, agent, stranded=True)

    async def decide(self, run_id: str, call_id: str, decision: Approve | Deny) -> RunView | None:
        """See ``Runs.decide``."""
        if not isinstance(decision, Approve | Deny):
            raise TypeError(f"a decision is Approve or Deny, got: {type(decision).__name__}")
        lock = self._deciding.setdefault(run_id, trio.Lock())
        async with lock:
            view = await self._view(run_id)  # every pending call: a resume takes them all
            if view.status != "awaiting_approval":
                raise AlreadyDecided(f"run {run_id} is not awaiting approval (it is {view.status})")
            calls = await self._store.pending_calls(run_id)
            call = next((c for c in calls if c.tool_use_id == call_id), None)
            if call is None:
                raise BadDecision(f"run {run_id} has no call {call_id!r} waiting for a decision")
            if isinstance(decision, Approve) and decision.input is not None:
                conversation = await self._open(view.agent, view.agent_id)
                try:
                    conversation.handle.check_edit(call, decision.input)
                except (ValueError, TypeError) as exc:
                    raise BadDecision(str(exc)) from None
            # Kept in the store as it is taken: it outlives a restart, and every process
            # on the store sees it (Store.propose_decision takes one per call, once).
            stored = internal.stored_decisions({call_id: decision}, time.time())[call_id]
            kept = await self._store.propose_decision(run_id, call_id, stored)
            decided = await self._store.proposed_decisions(run_id)
            waiting = any(c.tool_use_id not in decided for c in calls)
            # Every call decided, yet the run still waits: its resume failed on the store
            # (NotResumed). The same decision again takes it up with the decisions kept.
            if not kept and (waiting or not _same(decided.get(call_id), stored)):
                raise AlreadyDecided(f"call {call_id} of run {run_id} was decided already")
            if waiting:
                return None
            decisions = {call: internal.decision_of(taken) for call, taken in decided.items()}
            return await self._resume(view, decisions)

    async def _resume(
        self, view: RunView, decisions: dict[str, Approve | Deny], *, cancel: bool = False
    ) -> RunView:
        """Resume a paused run with every call decided, in a server-owned task."""
        conversation = await self._open(view.agent, view.agent_id)
        run = self._runs.get(view.run_id)
        if run is None:  # paused before this server started: a fresh log, numbered past it
            run = DrivenRun(view=view, log=EventLog(self._event_limit, first_id=first_id_now()))
            self._runs[view.run_id] = run
        paused = run.view = view
        run.view = attrs.evolve(view, status="running", pending=())
        run.stopped = trio.Event()
        run.done = trio.Event()
        run.scope = trio.CancelScope()
        run.settled_at = None
        run.log.unsettle()
        previous, conversation.tail = conversation.tail, run.done
        conversation.active += 1
        claimed = trio.Event()
        refused: list[BaseException] = []
        not_taken: list[StoreError] = []

        async def drive() -> RunResult[Any]:
            await previous.wait()
            conversation.current = run
            record = run.record

            def events(event: AgentEvent) -> None:
                claimed.set()
                record(event)
                if cancel:
                    run.scope.cancel()  # the denials are recorded; no model call follows

            try:
                return await conversation.handle.resume(
                    view.run_id, decisions=decisions, events=events
                )
            except RunNotAwaitingApproval as exc:
                refused.append(exc)
                raise
            except StoreError as exc:
                if claimed.is_set():  # taken up, then failed: the run failed
                    raise
                # Its claim failed (the agent's resume says so, and ran nothing): the run
                # is paused again here as it is in the store, its decisions kept.
                not_taken.append(exc)
                raise _NotTaken(paused) from exc
            finally:
                claimed.set()

        self._nursery.start_soon(self._drive, conversation, run, drive)
        await claimed.wait()
        if refused:
            raise AlreadyDecided(str(refused[0]))
        if not_taken:
            await run.done.wait()
            log.warning("the store failed: %s", not_taken[0])
            raise NotResumed(view.run_id, not_taken[0])
        return run.view

    async def ready(self) -> bool:
        """See ``Runs.ready``."""
        try:
            await self._store.get_run("readiness-check")
        except Exception:
            return False
        return True
