"""ClusterRuns: the runs of a server in front of a cluster (a ``PostgresStore``).

The server runs nothing itself: it submits runs to the cluster's queue, and any node
that serves the class runs them (``satsuma serve --node`` also runs one in the same
process). Everything it answers is read from the database that every front shares, so
any front answers for any run: its state and result from the queue, its events from
the events its node recorded, its pending calls from the store.

A run's events are numbered by their place in what its node recorded (1, 2, ...); the
``RunEnd`` that closes a stream is the queue's, not recorded, and carries the number of
the event before it (a run resumed after approval goes on numbering from there).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, final

import attrs
import trio

from .._exceptions import RunNotAwaitingApproval
from ..agents import Agent, RunEnd, RunResult, event_to_json, internal
from ..cluster import Cluster, QueuedRun, QueuedRunStatus
from ..store import PostgresStore
from ..tools import Approve, Deny
from ._runs import (
    AlreadyDecided,
    BadDecision,
    Busy,
    IfBusy,
    PendingView,
    RunEvent,
    RunView,
    UnknownAgent,
    UnknownRun,
)
from ._views import (
    is_paused,
    pending_view,
    public_event,
    public_text,
    split_stored_id,
    stored_id,
    stored_pending,
    undecided,
    usage_json,
)

__all__ = ["ClusterRuns"]

_IN_FLIGHT: tuple[QueuedRunStatus, ...] = ("queued", "claimed", "running")


@final
class ClusterRuns:
    """The ``Runs`` of a cluster front.

    Args:
        agents: The served classes (some node must serve each, by ``Agent.name``).
        store: The cluster's store.
    """

    def __init__(self, agents: Sequence[type[Agent[Any]]], store: PostgresStore) -> None:
        self._agents = {internal.spec_of(cls).name: cls for cls in agents}
        self.store = store
        self.cluster = Cluster(store)

    @property
    def agents(self) -> Mapping[str, type[Agent[Any]]]:
        return self._agents

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the store, then wait: the runs are the nodes' (nothing here to stop)."""
        await self.store.open()
        task_status.started()
        await trio.sleep_forever()

    async def start(
        self, agent: str, agent_id: str, prompt: str, *, if_busy: IfBusy = "enqueue"
    ) -> RunView:
        cls = self._class(agent)
        if if_busy != "enqueue":
            in_flight = await self.cluster.runs(
                stored_id(agent, agent_id), status=_IN_FLIGHT, limit=1
            )
            if in_flight and if_busy == "reject":
                raise Busy(f"conversation {agent_id!r} of {agent} has a run in progress")
            if if_busy == "reject" and await is_paused(self.store, agent, agent_id):
                raise Busy(f"conversation {agent_id!r} of {agent} has a run awaiting approval")
            if in_flight:
                raise ValueError(
                    "if_busy 'interrupt' steers the run in progress on its node: not built "
                    "for a cluster yet (use 'enqueue' or 'reject')"
                )
        # Watched: a served run is streamed by whoever asks (an SSE client, the console)
        # from its first answer on.
        run_id = await self.cluster.submit(cls, stored_id(agent, agent_id), prompt, watched=True)
        return RunView(
            run_id=run_id, agent=agent, agent_id=agent_id, status="queued", prompt=prompt
        )

    async def wait(self, run_id: str) -> RunView:
        found = await self.cluster.lookup(run_id)
        if found is None:
            raise UnknownRun(f"no run {run_id!r}")
        run, result = found
        if result is None:
            result = await self.cluster.result(run_id)
        return await self._view(run, result)

    async def get(self, run_id: str) -> RunView:
        found = await self.cluster.lookup(run_id)
        if found is None:
            raise UnknownRun(f"no run {run_id!r}")
        return await self._view(*found)

    async def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[RunEvent]:
        if await self.cluster.lookup(run_id) is None:
            raise UnknownRun(f"no run {run_id!r}")
        async with self.cluster.events(run_id, start=after) as stream:
            async for event in stream:
                number = stream.position
                if isinstance(event, RunEnd) and number <= after:
                    continue  # the end was given already, with the last event before it
                yield RunEvent(number, public_event(event_to_json(event)))  # type: ignore[arg-type]

    async def cancel(self, run_id: str) -> RunView:
        view = await self.get(run_id)
        if view.ended:
            return view
        if view.status == "awaiting_approval":
            raise AlreadyDecided(
                f"run {run_id} is awaiting approval: deny its calls to end it, or start the "
                "conversation's next run, which goes past it"
            )
        await self.cluster.cancel(run_id)
        return await self.wait(run_id)

    async def runs(
        self, agent: str | None = None, agent_id: str | None = None, *, limit: int = 100
    ) -> list[RunView]:
        stored = None if agent is None or agent_id is None else stored_id(agent, agent_id)
        listed = await self.cluster.runs(stored, limit=limit)
        views = []
        for run in reversed(listed):
            if agent is None or run.agent_name == agent:
                views.append(await self.get(run.run_id))
        return views

    async def messages(self, agent: str, agent_id: str) -> list[dict[str, Any]]:
        self._class(agent)
        history = await self.store.load_messages(stored_id(agent, agent_id))
        return [{"role": m.role, "content": list(m.content)} for m in history]

    async def pending(self, agent: str | None = None) -> list[PendingView]:
        if agent is not None:
            self._class(agent)
        return await stored_pending(self.store, self._agents, agent)

    async def decide(self, run_id: str, call_id: str, decision: Approve | Deny) -> RunView | None:
        if not isinstance(decision, (Approve, Deny)):
            raise BadDecision(f"a decision is Approve or Deny, got: {decision!r}")
        found = await self.cluster.lookup(run_id)
        if found is None or found[0].agent_name not in self._agents:
            raise UnknownRun(f"no run {run_id!r}")
        result = found[1]
        if result is None or result.status != "awaiting_approval":
            status = "running" if result is None else result.status
            raise AlreadyDecided(f"run {run_id} is not awaiting approval (it is {status})")
        calls = {call.id for call in result.pending}
        if call_id not in calls:
            raise BadDecision(f"run {run_id} has no pending call {call_id!r}")
        stored = internal.stored_decisions({call_id: decision}, time.time())[call_id]
        if not await self.store.propose_decision(run_id, call_id, stored):
            raise AlreadyDecided(f"call {call_id} of run {run_id} was decided already")
        proposed = await self.store.proposed_decisions(run_id)
        if set(proposed) < calls:
            return None
        decisions = {call: internal.decision_of(taken) for call, taken in proposed.items()}
        # Another request (or front) that saw the last decision may have resumed it first.
        with contextlib.suppress(RunNotAwaitingApproval):
            await self.cluster.resume(run_id, decisions)
        return await self.get(run_id)

    async def ready(self) -> bool:
        try:
            await self.store.open()
        except Exception:
            return False
        return True

    # --- views -----------------------------------------------------------------------------

    def _class(self, agent: str) -> type[Agent[Any]]:
        cls = self._agents.get(agent)
        if cls is None:
            raise UnknownAgent(f"no agent named {agent!r} is served here")
        return cls

    async def _view(self, run: QueuedRun, result: RunResult[Any] | None) -> RunView:
        parts = split_stored_id(run.agent_id)
        agent_id = parts[1] if parts is not None else run.agent_id
        base = RunView(
            run_id=run.run_id,
            agent=run.agent_name,
            agent_id=agent_id,
            status="queued" if run.status == "queued" else "running",
            prompt=run.prompt,
            started_at=run.claimed_at,
        )
        if result is None:
            return base
        output = None
        if result.status == "completed":
            output = internal.output_to_json(internal.raw_output(result))
        error = None
        if result.error is not None:
            error = {
                "type": "run_failed" if result.status == "failed" else result.status,
                "message": public_text(result.error),
            }
        view = attrs.evolve(
            base,
            status=result.status,
            output=output,
            error=error,
            usage=usage_json(result.usage),
            ended_at=run.ended_at if result.status != "awaiting_approval" else None,
        )
        # Only the calls nobody has decided yet, as LocalRuns answers (_views.undecided).
        pending = tuple(pending_view(view, call) for call in result.pending)
        return await undecided(attrs.evolve(view, pending=pending), self.store)
