"""Supervisor: starts children in order, restarts them by OTP rules, stops them in reverse
order, and gives up (failing to its own supervisor) past its restart intensity.

This module is its public half: the public methods, which hand their requests to the
control loop (``_inbox``), and ``serve``, which runs it. The control loop is the only
place children are started and stopped after start-up, so decisions never race one
another; what it does (start, stop, restart, give up) is ``_control``'s ``ChildControl``,
the base class of Supervisor.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Final, Literal, final, overload

import attrs
import trio

from .._exceptions import SupervisorFailed
from ..agents import Agent, AgentHandle, internal
from ._children import Child, ChildSpec, RestartType, _AgentKind, _AgentTarget, _State, kind_of
from ._control import ChildControl
from ._events import SupervisorEvent, SupervisorGaveUp
from ._inbox import Inbox
from ._restarts import STRATEGIES, Backoff, RestartTimes, SupervisorStrategy

__all__ = ["Backoff", "ChildInfo", "Supervisor", "SupervisorStrategy"]

logger = logging.getLogger("satsuma.supervisor")

_DEFAULT_NAME: Final = "supervisor"

# The supervisor whose serve() the current task runs under: one served as another's
# child finds its parent here, to say where it stands in messages.
_serving: ContextVar[Supervisor | None] = ContextVar("satsuma_supervisor", default=None)


@attrs.frozen(kw_only=True)
class ChildInfo:
    """One entry of ``which_children()``; ``restarts`` counts its starts after the first."""

    id: str
    child: Any
    state: str
    restart: RestartType
    kind: Literal["worker", "supervisor"]
    restarts: int = 0


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name  # "SIGTERM", as a person names it
    except ValueError:
        return f"signal {signum}"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@final
class Supervisor(ChildControl):
    """Supervises children by OTP rules. See docs/supervision.md.

    Args:
        strategy: ``one_for_one`` (restart the child that ended), ``one_for_all``
            (restart them all), ``rest_for_one`` (restart it and those started after it).
        max_restarts: Restarts allowed within ``within`` seconds (default 3 within 5);
            one more and the supervisor stops every child and fails with
            SupervisorFailed.
        within: The intensity window, in seconds.
        children: Agent subclasses, Supervisors, serve-objects, or ChildSpecs, started in
            order when the supervisor starts.
        backoff: Wait before restarts (default: restart at once).
        name: The supervisor's name (in events and errors).
        events: Called with each supervisor event (ChildStarted, ChildExited,
            ChildCrashed, ChildRestarted, SupervisorGaveUp).
        call_timeout: How long a call to a restarting agent waits for it to come back.

    Use it as ``async with Supervisor(...) as sup:`` in any trio program, as a child of
    another supervisor, or run it as a service with ``await sup.serve_until_signalled()``
    (on its own, or inside the ``async with``).
    """

    def __init__(
        self,
        strategy: SupervisorStrategy = "one_for_one",
        *,
        max_restarts: int = 3,
        within: float = 5.0,
        children: Iterable[object] = (),
        backoff: Backoff | None = None,
        name: str = _DEFAULT_NAME,
        events: Callable[[SupervisorEvent], object] | None = None,
        call_timeout: float = 30.0,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got: {strategy!r}")
        if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an integer >= 0, got: {max_restarts!r}")
        if not isinstance(within, (int, float)) or isinstance(within, bool) or not within > 0:
            raise ValueError(f"within must be a positive number of seconds, got: {within!r}")
        self.strategy: SupervisorStrategy = strategy
        self.max_restarts = max_restarts
        self.within = float(within)
        self.backoff = backoff
        self.name = name
        self._events = events
        self.call_timeout = call_timeout
        self._initial = [self._as_spec(child) for child in children]
        self._children: list[Child] = []  # in start order
        self._by_id: dict[str, Child] = {}
        self._by_name: dict[str, Child] = {}
        self._nursery: trio.Nursery | None = None
        # Exits of children and commands of the public methods, in the order they came:
        # the control loop handles one at a time, and is the only place children are
        # started and stopped once the supervisor runs.
        self._inbox = Inbox()
        self._controlling = False
        self._stopping = False
        self._restart_times = RestartTimes()
        self._running = False
        self._parent: Supervisor | None = None
        self._manager: Any = None

    # --- public API -----------------------------------------------------------------

    @overload
    async def start_child(
        self,
        child: type[Agent[internal.OutputT]],
        *,
        id: str | None = None,
        name: str | None = None,
        restart: RestartType = "permanent",
        shutdown_timeout: float = 5.0,
        start_timeout: float = 60.0,
        **options: Any,
    ) -> AgentHandle[internal.OutputT]: ...

    @overload
    async def start_child(
        self,
        child: object,
        *,
        id: str | None = None,
        name: str | None = None,
        restart: RestartType = "permanent",
        shutdown_timeout: float = 5.0,
        start_timeout: float = 60.0,
        **options: Any,
    ) -> Any: ...

    async def start_child(
        self,
        child: object,
        *,
        id: str | None = None,
        name: str | None = None,
        restart: RestartType = "permanent",
        shutdown_timeout: float = 5.0,
        start_timeout: float = 60.0,
        **options: Any,
    ) -> Any:
        """Start a child now and return its handle once it is running: an AgentHandle
        for an agent (valid across its restarts; ``AgentHandle[Invoice]`` for an agent
        declared ``satsuma.Agent[Invoice]``), the Supervisor itself, or the service
        object.

        Without an ``id``, the child gets its default one (see ChildSpec), made unique
        with a counter: ``start_child(Agent)`` twice gives two children.

        Raises:
            ValueError: the id or name is taken, or an option is wrong.
            TypeError: ``child`` cannot be supervised.
            SupervisorFailed: the child failed to start, or did not report started
                within ``start_timeout`` seconds (the supervisor stays up).
        """
        spec = ChildSpec(
            child, id=id, name=name, restart=restart, shutdown_timeout=shutdown_timeout,
            start_timeout=start_timeout, options=options,
        )  # fmt: skip

        async def start() -> Any:
            record = self._add(spec)
            await self._start(record)
            if record.state is not _State.RUNNING:
                self._forget(record)
                raise self._could_not_start(record)
            return record.handle

        return await self._ask(start)

    def _could_not_start(self, child: Child) -> SupervisorFailed:
        """What start_child and restart_child raise for a child that did not start: only
        that child failed, so the supervisor runs on and says so."""
        failure = SupervisorFailed(
            self.name,
            child.id,
            child.last_error,
            "could not start",
            label=self._described(),
            gave_up=False,
        )
        failure.__cause__ = child.last_error
        return failure

    async def terminate_child(self, id: str) -> None:
        """Stop a child (it is given its shutdown timeout); its spec stays, to
        ``restart_child`` or ``delete_child`` later.

        Raises:
            KeyError: no child has that id.
        """

        async def terminate() -> None:
            await self._stop(self._get(id))

        await self._ask(terminate)

    async def restart_child(self, id: str) -> Any:
        """Start a stopped or exited child again (or restart a running one).

        Raises:
            KeyError: no child has that id.
            SupervisorFailed: it failed to start.
        """

        async def restart() -> Any:
            child = self._get(id)
            await self._stop(child)
            await self._start(child)
            if child.state is not _State.RUNNING:
                raise self._could_not_start(child)
            return child.handle

        return await self._ask(restart)

    async def delete_child(self, id: str) -> None:
        """Stop a child if it runs, and forget its spec.

        Raises:
            KeyError: no child has that id.
        """

        async def delete() -> None:
            child = self._get(id)
            await self._stop(child)
            self._forget(child)

        await self._ask(delete)

    async def _ask(self, action: Callable[[], Awaitable[Any]]) -> Any:
        """Have the control loop carry out ``action`` in its turn, and return its result
        (or raise its error)."""
        if self._nursery is None or self._stopping:
            raise RuntimeError(f"{self._described()} is not running")
        if not self._controlling:
            return await action()  # starting up: nothing else starts or stops children yet
        return await self._inbox.ask(action)

    def which_children(self) -> list[ChildInfo]:
        """Every child, in start order: id, child, state, restart type, kind."""
        return [
            ChildInfo(
                id=c.id,
                child=c.spec.child,
                state=c.state.value,
                restart=c.spec.restart,
                kind=c.kind.kind,
                restarts=max(c.incarnation - 1, 0),
            )
            for c in self._children
        ]

    @property
    def recent_restarts(self) -> int:
        """Restarts held against its intensity now (the last ``within`` seconds'); past
        ``max_restarts`` it gives up. Read inside trio."""
        now = trio.current_time()
        return sum(when >= now - self.within for when in self._restart_times.times)

    def count_children(self) -> dict[str, int]:
        """``specs``, ``active`` (running), ``supervisors`` and ``workers``."""
        return {
            "specs": len(self._children),
            "active": sum(c.state is _State.RUNNING for c in self._children),
            "supervisors": sum(c.kind.kind == "supervisor" for c in self._children),
            "workers": sum(c.kind.kind == "worker" for c in self._children),
        }

    def lookup(self, name: str) -> Any:
        """The handle of the child registered under ``name``.

        Raises:
            KeyError: no child has that name.
        """
        try:
            return self._by_name[name].handle
        except KeyError:
            raise KeyError(f"{self._described()} has no child named {name!r}") from None

    # --- running --------------------------------------------------------------------

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled (then stop the children, last started first, each given
        its shutdown timeout), or until giving up (then raise SupervisorFailed).

        Raises:
            SupervisorFailed: too many restarts, or a child failed to start.
        """
        if self._running:
            raise RuntimeError(f"{self._described()} is already running")
        self._running = True
        self._parent = _serving.get()
        serving = _serving.set(self)
        self._children = []
        self._by_id = {}
        self._by_name = {}
        self._restart_times.clear()
        failure: SupervisorFailed | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    await self._start_initial()
                    task_status.started()
                    self._controlling = True
                    await self._control()
                except SupervisorFailed as exc:
                    # Raised below, outside the nursery, so that it is not wrapped in a group.
                    failure = exc
                finally:
                    self._controlling = False
                    self._stopping = True
                    # Commands still waiting will not be carried out: their callers raise.
                    self._inbox.refuse_commands(
                        lambda: failure or RuntimeError(f"{self._described()} stopped")
                    )
                    # Ordered shutdown, even when the supervisor itself is cancelled.
                    with trio.CancelScope(shield=True):
                        await self._stop_all()
                    nursery.cancel_scope.cancel()
        finally:
            _serving.reset(serving)
            self._running = False
            self._stopping = False
            self._nursery = None
        if failure is not None:
            raise failure

    async def _start_initial(self) -> None:
        for spec in self._initial:
            child = self._add(spec)
            await self._start(child)
            if child.state is not _State.RUNNING:
                self._emit(
                    SupervisorGaveUp(
                        supervisor=self.name, child_id=child.id, reason="could not start"
                    )
                )
                raise SupervisorFailed(
                    self.name,
                    child.id,
                    child.last_error,
                    "could not start",
                    label=self._described(),
                )

    async def __aenter__(self) -> Supervisor:
        self._manager = trio.open_nursery()
        nursery = await self._manager.__aenter__()
        try:
            await nursery.start(self.serve)
        except BaseException:
            # Nothing else runs in the nursery yet: close it and report the start failure
            # itself, not wrapped in a group.
            await self._manager.__aexit__(None, None, None)
            raise
        self._outer = nursery
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback_: TracebackType | None,
    ) -> bool | None:
        self._outer.cancel_scope.cancel()
        try:
            return await self._manager.__aexit__(exc_type, exc_value, traceback_)  # type: ignore[no-any-return]
        except BaseExceptionGroup as group:
            # As a nursery would, but without the group where one error says it all: the
            # body's own exception, or the supervisor's failure.
            others = group.subgroup(
                lambda e: e is not exc_value and not isinstance(e, BaseExceptionGroup)
            )
            if others is None:
                return False  # only the body's exception: it goes on as it was
            leaves = _leaves(group)
            if len(leaves) == 1 and isinstance(leaves[0], SupervisorFailed):
                raise leaves[0] from None
            raise

    async def serve_until_signalled(
        self,
        signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run as a service: serve until one of ``signals`` arrives, then shut down
        gracefully (children stopped last first, each within its shutdown timeout).
        Call it from the main thread (Python delivers signals there).

        Either on its own (``await sup.serve_until_signalled()``, the supervisor's
        initial children given as ``children=``), or inside ``async with sup:`` after
        starting children there: it then returns at the signal, and leaving the block
        stops the children.

        Raises:
            SupervisorFailed: the supervisor gave up (as such, not in an exception group).
        """
        with trio.open_signal_receiver(*signals) as received:
            if self._running:
                # Already serving (inside ``async with``): only the wait is left to do.
                task_status.started()
                await self._wait_for_signal(received)
                return
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.serve)
                    task_status.started()
                    await self._wait_for_signal(received)
                    nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                leaves = _leaves(group)
                if len(leaves) == 1 and isinstance(leaves[0], SupervisorFailed):
                    raise leaves[0] from None
                raise

    async def _wait_for_signal(self, received: AsyncIterator[int]) -> None:
        async for signum in received:
            logger.info("%s: %s received, shutting down", self._described(), _signal_name(signum))
            return

    # --- internals ------------------------------------------------------------------

    def _described(self) -> str:
        """The supervisor as messages name it: ``supervisor workers`` when it has a name,
        and by its place when it has the default one (never "supervisor supervisor")."""
        if self.name != _DEFAULT_NAME:
            return f"supervisor {self.name}"
        if self._parent is not None:
            return f"a supervisor under {self._parent._described()}"
        return "the root supervisor" if self._running else "the supervisor"

    def _as_spec(self, child: object) -> ChildSpec:
        return child if isinstance(child, ChildSpec) else ChildSpec(child)

    def _add(self, spec: ChildSpec) -> Child:
        if self._nursery is None:
            raise RuntimeError(f"{self._described()} is not running")
        kind = kind_of(spec, Supervisor)
        if spec.id is not None:
            child_id = spec.id
            if child_id in self._by_id:
                raise ValueError(f"{self._described()} already has a child with id {child_id!r}")
        else:
            base = child_id = kind.default_id()
            number = 1
            while child_id in self._by_id:
                number += 1
                child_id = f"{base}-{number}"
        if spec.name is not None and spec.name in self._by_name:
            raise ValueError(f"{self._described()} already has a child named {spec.name!r}")
        child = Child(spec=spec, id=child_id, kind=kind)
        if isinstance(kind, _AgentKind):
            child.target = _AgentTarget(child, kind.agent_id or child_id, self.call_timeout)
        child.handle = kind.handle(child)
        self._children.append(child)
        self._by_id[child_id] = child
        if spec.name is not None:
            self._by_name[spec.name] = child
        return child

    def _get(self, id: str) -> Child:
        try:
            return self._by_id[id]
        except KeyError:
            raise KeyError(f"{self._described()} has no child with id {id!r}") from None
