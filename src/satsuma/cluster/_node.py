"""Node: a supervisable service that runs the queued runs of the agent classes it serves.

One task claims runs (``run_queue``, SELECT ... FOR UPDATE SKIP LOCKED) when a NOTIFY
says there may be one, or every ``poll_interval`` seconds (at once again after a claim
that saw more runs waiting); each claimed run gets a task
that opens its agent with the store (taking the agent's lease, so that two nodes never
run one agent at once), runs or resumes it, and writes its result. A heartbeat keeps the
node's row alive and puts back in the queue the runs of nodes whose row expired; the node
that claims such a run resumes it from the agent's tool-call journal.

Draining (the node's ``serve`` is cancelled): no more claims; runs in flight get
``drain_timeout`` seconds to end, then are cancelled and handed back to the queue for
another node, which resumes them. The draining work runs in a shielded scope with that
deadline, so a supervisor's cancellation does not cut it short.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final, final

import trio

from .._exceptions import (
    StoreClosed,
    StoreError,
    StoreUnavailable,
)
from ..agents import Agent, internal
from ..models import Model
from ..store import DEFAULT_LEASE_SECONDS, Owner, PostgresStore, claim_and_take
from ..store import run_queue as queue
from ._attempt import STOP_WRITE_SECONDS, RunAttempts
from ._inflight import InFlight
from ._listen import Listener
from ._recording import EventLog, expire_ended

__all__ = ["Node"]

logger = logging.getLogger("satsuma.cluster")

# How many runs heard watched before their claim came back a node remembers.
_HEARD_WATCHED: Final = 1024


@final
class Node:
    """Runs the cluster's queued runs of some agent classes, in this process.

    A supervisable child: ``await sup.start_child(node)``. Start as many nodes as you
    like, in as many processes and machines, on one database; a run is claimed by one
    node, and runs of one ``agent_id`` go one at a time, in order.

    Args:
        store: The cluster's PostgresStore.
        agents: The Agent classes this node serves (by ``Agent.name``).
        name: A name for people (``satsuma cluster status``); the host and pid by
            default.
        max_agents: How many agents the node has open at once.
        max_runs: How many runs it runs at once (by default ``max_agents``). Each run
            opens its agent and closes it at its end, so the lower of the two bounds
            both today.
        model: The model provider for its agents (by default each class's own, as
            ``open_agent`` makes it); tests pass a ScriptedModel or a FunctionModel.
        context: The tools' context mapping for its agents.
        lease_seconds: The node counts as dead when it has not sent a heartbeat for
            this long (it sends one every third of it); its runs then go to the other
            nodes.
        drain_timeout: When the node is stopped, how long its runs in flight have to
            end before they are cancelled and handed back. Keep it below the
            supervisor's ``shutdown_timeout`` for the child (5 s by default).
        poll_interval: New runs are announced by NOTIFY; the node also looks for work
            this often, in seconds.
        event_log: How the events of its runs are kept for ``Cluster.events``
            (``EventLog()``: bounded per run, an hour after the run); None keeps none.
        result_retention: Seconds an ended run stays in the queue (default 3600: an
            hour). Its row holds the run's result, with a copy of the run's messages,
            for ``Cluster.result`` and ``Cluster.runs``; nodes delete older rows (and
            their events) about once a minute. ``Cluster.result`` of a run past it
            reads the agent's own run record (kept until ``Store.prune``), so only a
            run that never reached an agent (cancelled while queued, or no node could
            open its agent) is then unknown.

    Raises:
        TypeError: ``store`` is not a PostgresStore, or an entry of ``agents`` is not a
            concrete Agent subclass.
        ValueError: no agents, two classes with one name, or a bound below 1.
    """

    def __init__(
        self,
        store: PostgresStore,
        agents: Iterable[type[Agent[Any]]],
        *,
        name: str | None = None,
        max_agents: int = 100,
        max_runs: int | None = None,
        model: Model | None = None,
        context: Mapping[str, Any] | None = None,
        lease_seconds: float = 15.0,
        drain_timeout: float = 3.0,
        poll_interval: float = 2.0,
        event_log: EventLog | None = EventLog(),  # noqa: B008  (frozen: one shared value is fine)
        result_retention: float = 3600.0,
    ) -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(f"a node runs on a PostgresStore, got: {type(store).__name__}")
        classes: dict[str, type[Agent[Any]]] = {}
        for agent in agents:
            agent_name = internal.spec_of(agent).name
            if agent_name in classes and classes[agent_name] is not agent:
                raise ValueError(f"two agent classes are named {agent_name!r}")
            classes[agent_name] = agent
        if not classes:
            raise ValueError("a node needs at least one agent class to serve")
        for label, bound in (("max_agents", max_agents), ("max_runs", max_runs)):
            if bound is not None and bound < 1:
                raise ValueError(f"{label} must be at least 1, got: {bound!r}")
        for label, seconds in (
            ("lease_seconds", lease_seconds),
            ("drain_timeout", drain_timeout),
            ("poll_interval", poll_interval),
            ("result_retention", result_retention),
        ):
            if not seconds > 0:
                raise ValueError(f"{label} must be positive, got: {seconds!r}")
        self.store = store
        self.agents = tuple(classes.values())
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.node_id = uuid.uuid4().hex
        self.max_agents = max_agents
        self.max_runs = max_runs if max_runs is not None else max_agents
        self.model = model
        self.context = dict(context or {})
        self.lease_seconds = lease_seconds
        self.drain_timeout = drain_timeout
        self.poll_interval = poll_interval
        self.event_log = event_log
        self.result_retention = result_retention
        self._classes = classes
        self._slots = trio.Semaphore(min(self.max_agents, self.max_runs))
        self._in_flight: dict[str, InFlight] = {}
        # Runs heard watched that were not in flight here (yet): a claim's answer and
        # the NOTIFY of a watcher who waited on its lock may come in either order.
        self._heard_watched: dict[str, bool] = {}
        self._wake = trio.Event()
        self._attempts = RunAttempts(self, classes)

    def __repr__(self) -> str:
        return f"<Node {self.name} serving {', '.join(self._classes)}>"

    @property
    def in_flight(self) -> tuple[str, ...]:
        """The ids of the runs this node is running now."""
        return tuple(self._in_flight)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled, then drain (see the class). Reports started once it is
        in the node table and listening for work.

        Raises:
            StoreError: the database cannot be reached at start.
            StoreClosed: the store was closed under the node: it stops, since nothing
                it does can be written any more.
        """
        await self.store.open()
        listener = Listener(
            self.store, [queue.QUEUED_CHANNEL, queue.CANCEL_CHANNEL, queue.WATCH_CHANNEL]
        )
        try:
            await listener.open()
            await self._register()
            # Shielded: a cancellation of serve() drains (below) rather than cutting runs
            # short; the drain's deadline is this scope's.
            work = trio.CancelScope(shield=True)
            claiming = trio.CancelScope()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._work, work, claiming, listener)
                    task_status.started()
                    try:
                        await trio.sleep_forever()
                    finally:
                        claiming.cancel()
                        work.deadline = min(work.deadline, trio.current_time() + self.drain_timeout)
            except BaseExceptionGroup as group:
                # A closed store stops every task of the node at once: it is one error.
                closed, rest = group.split(StoreClosed)
                if closed is None or (rest is not None and rest.split(trio.Cancelled)[1]):
                    raise
                raise _first_leaf(closed) from None
        finally:
            listener.close()
            with trio.move_on_after(STOP_WRITE_SECONDS, shield=True):
                try:
                    # Anything still held (a hand-back that could not be written) goes
                    # back to the queue with the node's row.
                    await queue.unregister_node(self.store, self.node_id)
                except StoreError:
                    logger.warning(
                        "node %s: could not leave the node table; the others will see it "
                        "dead after %gs",
                        self.name,
                        self.lease_seconds,
                        exc_info=True,
                    )

    async def _register(self) -> None:
        await queue.register_node(
            self.store,
            self.node_id,
            name=self.name,
            host=socket.gethostname(),
            pid=os.getpid(),
            agents=list(self._classes),
            lease_seconds=self.lease_seconds,
        )
        await self._beat()  # the runs of nodes that died while none was alive

    async def _work(
        self, work: trio.CancelScope, claiming: trio.CancelScope, listener: Listener
    ) -> None:
        with work:
            async with trio.open_nursery() as services:
                services.start_soon(self._keep_alive)
                services.start_soon(self._listen, listener)
                services.start_soon(expire_ended, self.store, self.event_log, self.result_retention)
                async with trio.open_nursery() as runs:
                    with claiming:
                        await self._claim_runs(runs)
                # Every run ended or was handed back.
                services.cancel_scope.cancel()

    # --- claiming -------------------------------------------------------------------------

    async def _claim_runs(self, runs: trio.Nursery) -> None:
        names = list(self._classes)
        while True:
            await self._slots.acquire()
            self._wake = trio.Event()  # a NOTIFY from here on wakes the wait below
            node_id = self.node_id
            more = False
            claimed = None
            owner = Owner.new()
            try:
                # The run's agent is taken and loaded with the claim, in its transaction.
                claimed = await claim_and_take(
                    self.store, node_id, names, owner, seconds=DEFAULT_LEASE_SECONDS
                )
            except StoreClosed:
                raise
            except StoreError as exc:
                logger.warning("node %s: could not claim runs", self.name, exc_info=True)
                run = None
                if isinstance(exc, StoreUnavailable):
                    # Its answer may have been lost as it committed: what it may have
                    # claimed and taken goes back, once the database answers.
                    await self._attempts.undo_lost_claim(node_id, owner, list(self._in_flight))
            else:
                run, more = claimed.run, claimed.more
            if claimed is not None and run is not None and node_id != self.node_id:
                # Claimed under the id of an incarnation counted dead meanwhile.
                if claimed.taken is not None:
                    await self._attempts.let_go(claimed.taken)
                await self._attempts.hand_back(run, node_id, "keep", 0.0)
                run = None
            if claimed is None or run is None:
                self._slots.release()
                with trio.move_on_after(self.poll_interval):
                    await self._wake.wait()
                continue
            entry = InFlight(run, node_id, taken=claimed.taken, refusal=claimed.refusal)
            if run.watched or self._heard_watched.pop(run.run_id, False):
                entry.watch()
            self._in_flight[run.run_id] = entry
            runs.start_soon(self._execute, entry)
            if not more:
                # Nothing else waited: the next claim waits for a NOTIFY (one that came
                # since this claim began has set the event already) or the poll.
                with trio.move_on_after(self.poll_interval):
                    await self._wake.wait()

    async def _listen(self, listener: Listener) -> None:
        while True:
            for channel, payload in await listener.wait(self.poll_interval):
                if channel == queue.QUEUED_CHANNEL and payload in self._classes:
                    self._wake.set()
                elif channel == queue.CANCEL_CHANNEL:
                    await self._cancel(payload)
                elif channel == queue.WATCH_CHANNEL:
                    self._watch(payload)

    def _watch(self, run_id: str) -> None:
        entry = self._in_flight.get(run_id)
        if entry is not None:
            entry.watch()
            return
        self._heard_watched[run_id] = True
        if len(self._heard_watched) > _HEARD_WATCHED:
            del self._heard_watched[next(iter(self._heard_watched))]  # the oldest

    async def _cancel(self, run_id: str) -> None:
        entry = self._in_flight.get(run_id)
        if entry is not None:
            await entry.cancel()

    async def _keep_alive(self) -> None:
        while True:
            await trio.sleep(self.lease_seconds / 3)
            try:
                await self._beat()
            except StoreClosed:
                raise
            except StoreError:
                logger.warning("node %s: heartbeat failed", self.name, exc_info=True)

    async def _beat(self) -> None:
        beat = await queue.heartbeat(self.store, self.node_id, lease_seconds=self.lease_seconds)
        if not beat.registered:
            # Counted dead (no heartbeat for lease_seconds: the process was paused, or
            # cut off from the database): its runs went back to the queue and the leases
            # of their agents were let go, so that what it still writes of them is
            # refused. It gives them up at once (they may be running on another node
            # already) and joins again as a new node, under a new id, so that nothing
            # its old self held can be written under its name.
            lost = list(self._in_flight.values())
            logger.warning(
                "node %s: was counted dead (no heartbeat for %gs); gives up its %d run(s), "
                "which went to other nodes, and joins again",
                self.name,
                self.lease_seconds,
                len(lost),
            )
            for entry in lost:
                entry.lost = True
                entry.scope.cancel()
            self.node_id = uuid.uuid4().hex
            await self._register()
        for run_id in beat.cancels:
            await self._cancel(run_id)
        try:
            requeued = await queue.sweep(self.store, lock_timeout=self.lease_seconds / 3)
        except StoreClosed:
            raise
        except StoreError as exc:
            # Rows held by a node paused mid-transaction, say: the next beat tries again.
            logger.warning("node %s: could not look for dead nodes: %s", self.name, exc)
        else:
            if requeued:
                self._wake.set()

    # --- running --------------------------------------------------------------------------

    async def _execute(self, entry: InFlight) -> None:
        run = entry.run
        try:
            with entry.scope:
                await self._attempts.attempt(run, entry)
        finally:
            if self._in_flight.get(run.run_id) is entry:
                del self._in_flight[run.run_id]
            self._slots.release()


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
