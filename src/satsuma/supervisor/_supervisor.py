"""Supervisor: starts children in order, restarts them by OTP rules, stops them in reverse
order, and gives up (failing to its own supervisor) past its restart intensity.

Each child runs in its own task and cancel scope in the supervisor's nursery; a child's
exception never reaches the nursery (it is reported to the supervisor's control loop,
which decides). The control loop is the only place children are started and stopped
after start-up, so decisions never race one another.
"""

from __future__ import annotations

import logging
import math
import signal
import traceback
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Final, Literal, TypeAlias, final, overload

import attrs
import trio

from .._exceptions import AgentUnavailable, SupervisorFailed
from .._text import MESSAGE_LIMIT, describe_exception_text
from ..agents import Agent, AgentHandle, OutputT, seconds_or_none, spec_of
from ._children import (
    Child,
    ChildSpec,
    RestartType,
    _AgentKind,
    _AgentTarget,
    _Kind,
    _ServiceKind,
    _Started,
    _State,
    _SupervisorKind,
)
from ._events import (
    ChildCrashed,
    ChildExited,
    ChildRestarted,
    ChildStarted,
    SupervisorEvent,
    SupervisorGaveUp,
)

__all__ = ["Backoff", "ChildInfo", "Supervisor", "SupervisorStrategy"]

logger = logging.getLogger("satsuma.supervisor")

SupervisorStrategy: TypeAlias = Literal["one_for_one", "one_for_all", "rest_for_one"]
_STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")
_DEFAULT_NAME: Final = "supervisor"

# The supervisor whose serve() the current task runs under: one served as another's
# child finds its parent here, to say where it stands in messages.
_serving: ContextVar[Supervisor | None] = ContextVar("satsuma_supervisor", default=None)


@attrs.frozen
class Backoff:
    """Wait before a restart: ``base * 2**(n - 1)`` seconds for the n-th restart within
    the intensity window, at most ``cap``."""

    base: float = 0.1
    cap: float = 5.0

    def delay(self, restarts: int) -> float:
        return float(min(self.cap, self.base * 2.0 ** max(restarts - 1, 0)))


@attrs.frozen(kw_only=True)
class ChildInfo:
    """One entry of ``which_children()``."""

    id: str
    child: Any
    state: str
    restart: RestartType
    kind: Literal["worker", "supervisor"]


@attrs.frozen
class _Exit:
    child: Child
    incarnation: int
    error: BaseException | None
    reported: bool = False  # a failed start has had its ChildCrashed event already


@attrs.define(eq=False)
class _Command:
    """A public method's request, carried out by the control loop in its turn, so that
    starting and stopping children never races a restart."""

    action: Callable[[], Awaitable[Any]]
    done: trio.Event = attrs.Factory(trio.Event)
    result: Any = None
    error: BaseException | None = None


def kind_of(spec: ChildSpec) -> _Kind:
    """The kind of child a spec names.

    Raises:
        TypeError: it is none of an Agent subclass, a Supervisor, a serve-object; or
            options were given to a child that takes none.
    """
    child = spec.child
    options = dict(spec.options)
    if isinstance(child, type) and issubclass(child, Agent):
        spec_of(child)  # a concrete, checked Agent
        unknown = set(options) - {
            "model", "context", "agent_id", "store", "approver", "approval_timeout",
        }  # fmt: skip
        if unknown:
            raise TypeError(f"unknown agent options: {', '.join(sorted(unknown))}")
        approver = options.get("approver")
        if approver is not None and not callable(approver):
            raise TypeError(f"approver must be an async function, got: {approver!r}")
        timeout = options.get("approval_timeout", spec_of(child).approval_timeout)
        if not seconds_or_none(timeout):
            raise ValueError(
                f"approval_timeout must be a positive number of seconds or None, got: {timeout!r}"
            )
        return _AgentKind(
            child,
            options.get("model"),
            options.get("context"),
            options.get("agent_id"),
            options.get("store"),
            approver=approver,
            approval_timeout=None if timeout is None else float(timeout),
        )
    if options:
        raise TypeError(f"options apply to agents only, got: {', '.join(sorted(options))}")
    if isinstance(child, Supervisor):
        return _SupervisorKind(child)
    if callable(getattr(child, "serve", None)) and not isinstance(child, type):
        return _ServiceKind(child)
    raise TypeError(
        "a child must be an Agent subclass, a Supervisor, or an object with "
        f"async def serve(self, *, task_status), got: {child!r}"
    )


def _describe(exc: BaseException) -> str:
    # The child's exception is user code: its __str__ may raise or be enormous.
    leaves = exc.exceptions if issubclass(type(exc), BaseExceptionGroup) else [exc]  # type: ignore[attr-defined]
    return "; ".join(describe_exception_text(e, limit=MESSAGE_LIMIT) for e in leaves)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name  # "SIGTERM", as a person names it
    except ValueError:
        return f"signal {signum}"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _unavailable(child_id: str, why: str) -> Callable[[], BaseException]:
    return lambda: AgentUnavailable(child_id, why)


def _unwrap(exc: Exception) -> Exception:
    # A crash inside a child's own nursery comes wrapped: report the single cause.
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@final
class Supervisor:
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
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(_STRATEGIES)}, got: {strategy!r}")
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
        self._inbox_send, self._inbox = trio.open_memory_channel[_Exit | _Command](math.inf)
        self._controlling = False
        self._stopping = False
        self._restart_times: deque[float] = deque()
        self._running = False
        self._parent: Supervisor | None = None
        self._manager: Any = None

    # --- public API -----------------------------------------------------------------

    @overload
    async def start_child(
        self,
        child: type[Agent[OutputT]],
        *,
        id: str | None = None,
        name: str | None = None,
        restart: RestartType = "permanent",
        shutdown_timeout: float = 5.0,
        start_timeout: float = 60.0,
        **options: Any,
    ) -> AgentHandle[OutputT]: ...

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
        command = _Command(action)
        self._inbox_send.send_nowait(command)
        await command.done.wait()
        if command.error is not None:
            raise command.error
        return command.result

    def which_children(self) -> list[ChildInfo]:
        """Every child, in start order: id, child, state, restart type, kind."""
        return [
            ChildInfo(
                id=c.id,
                child=c.spec.child,
                state=c.state.value,
                restart=c.spec.restart,
                kind=c.kind.kind,
            )
            for c in self._children
        ]

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
                    self._refuse_commands(failure)
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
        kind = kind_of(spec)
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

    def _forget(self, child: Child) -> None:
        self._children.remove(child)
        del self._by_id[child.id]
        if child.spec.name is not None:
            del self._by_name[child.spec.name]

    def _get(self, id: str) -> Child:
        try:
            return self._by_id[id]
        except KeyError:
            raise KeyError(f"{self._described()} has no child with id {id!r}") from None

    def _emit(self, event: SupervisorEvent) -> None:
        if self._events is not None:
            try:
                self._events(event)
            except Exception:  # an observer's bug must not take the supervisor down
                logger.exception("supervisor event callback raised on %r", event)

    async def _start(self, child: Child) -> bool:
        """Start one incarnation and wait until it runs (True) or fails to start."""
        assert self._nursery is not None
        child.incarnation += 1
        child.finished = trio.Event()
        child.scope = trio.CancelScope()
        child.set_state(_State.STARTING)
        self._nursery.start_soon(self._run_child, child, child.incarnation, child.scope)
        with trio.move_on_after(child.spec.start_timeout):
            while child.state is _State.STARTING and not child.finished.is_set():
                await child.changed.wait()
        if child.state is _State.STARTING and not child.finished.is_set():
            await self._abort_start(child)
            return False
        running = child.state is _State.RUNNING
        if running:
            self._emit(
                ChildStarted(supervisor=self.name, child_id=child.id, incarnation=child.incarnation)
            )
        return running

    async def _abort_start(self, child: Child) -> None:
        """A start that never reported ``started()``: cancel that incarnation, give it its
        shutdown timeout, and count it as failed to start."""
        timeout = child.spec.start_timeout
        error = TimeoutError(
            f"it did not report started within {timeout:g}s "
            "(its serve never called task_status.started())"
        )
        child.last_error = error
        assert child.scope is not None
        child.scope.cancel()
        with trio.move_on_after(child.spec.shutdown_timeout):
            await child.finished.wait()
        child.set_state(_State.EXITED)
        self._emit_crash(child, error)

    async def _run_child(self, child: Child, incarnation: int, scope: trio.CancelScope) -> None:
        error: Exception | None = None
        try:
            # Shielded from the supervisor's own cancellation: children are stopped one at
            # a time, last started first, by _stop_all (through their own scope), never
            # all at once by a cancellation sweeping the nursery.
            with trio.CancelScope(shield=True), scope:
                await child.kind.serve(child, _Started(child))
        except Exception as exc:
            error = _unwrap(exc)
        finally:
            if child.incarnation == incarnation:
                child.finished.set()
        if child.incarnation != incarnation:
            return
        if error is not None:
            child.last_error = error
        if scope.cancel_called:
            # Stopped by us: _stop reports it. An error raised while stopping is only logged.
            if error is not None:
                logger.warning(
                    "%s: child %s raised while stopping: %s",
                    self._described(),
                    child.id,
                    _describe(error),
                )
            return
        if child.state is _State.STARTING:
            child.set_state(_State.EXITED)  # failed to start: _start's caller decides
            if error is not None:
                self._emit_crash(child, error)
            return
        restart = child.spec.restart
        will_restart = restart == "permanent" or (restart == "transient" and error is not None)
        # Callers of a child about to be restarted wait for it rather than fail at once.
        child.set_state(_State.RESTARTING if will_restart else _State.EXITED)
        if not will_restart:
            why = f"it {'crashed' if error is not None else 'ended'} and is {restart}"
            child.end_queued(_unavailable(child.id, why), why)
        self._inbox_send.send_nowait(_Exit(child, incarnation, error))

    def _emit_crash(self, child: Child, error: BaseException) -> None:
        logger.warning("%s: child %s crashed: %s", self._described(), child.id, _describe(error))
        if self._events is None:
            return  # formatting a traceback nobody reads costs more than the restart
        self._emit(
            ChildCrashed(
                supervisor=self.name,
                child_id=child.id,
                error=_describe(error),
                traceback="".join(traceback.format_exception(error)),
            )
        )

    async def _stop(self, child: Child) -> None:
        """Cancel a child and give it its shutdown timeout to finish."""
        if child.scope is None or child.finished.is_set():
            # Not running (ended, or waiting for a restart): it just stays down.
            if child.state is not _State.STOPPED:
                child.set_state(_State.STOPPED)
            child.end_queued(None, "it was stopped")
            return
        child.set_state(_State.STOPPING)
        child.scope.cancel()
        with trio.move_on_after(child.spec.shutdown_timeout) as waited:
            await child.finished.wait()
        if waited.cancelled_caught:
            logger.warning(
                "%s: child %s still running %gs after it was cancelled",
                self._described(),
                child.id,
                child.spec.shutdown_timeout,
            )
        child.set_state(_State.STOPPED)
        child.end_queued(None, "it was stopped")
        self._emit(ChildExited(supervisor=self.name, child_id=child.id, reason="shutdown"))

    async def _stop_all(self) -> None:
        for child in reversed(self._children):
            await self._stop(child)

    def _refuse_commands(self, failure: SupervisorFailed | None) -> None:
        """Commands still waiting will not be carried out: their callers raise."""
        while True:
            try:
                item = self._inbox.receive_nowait()
            except trio.WouldBlock:
                return
            if isinstance(item, _Command):
                item.error = failure or RuntimeError(f"{self._described()} stopped")
                item.done.set()

    async def _control(self) -> None:
        async for item in self._inbox:
            if isinstance(item, _Command):
                try:
                    item.result = await item.action()
                except Exception as exc:  # the caller's error (a bad id, a failed start)
                    item.error = exc
                finally:
                    item.done.set()
                continue
            exit_ = item
            child = exit_.child
            if child.incarnation != exit_.incarnation or self._by_id.get(child.id) is not child:
                continue  # an old incarnation, or a child deleted since
            if exit_.reported:
                pass
            elif exit_.error is not None:
                self._emit_crash(child, exit_.error)
            else:
                self._emit(ChildExited(supervisor=self.name, child_id=child.id, reason="normal"))
            restart = child.spec.restart
            if restart == "temporary" or (restart == "transient" and exit_.error is None):
                if restart == "temporary":
                    self._forget(child)
                continue
            if child.state is not _State.RESTARTING:
                continue  # stopped or restarted by hand meanwhile
            now = trio.current_time()
            self._restart_times.append(now)
            # A restart exactly `within` seconds old still counts (OTP: R >= Now - Period).
            while self._restart_times and self._restart_times[0] < now - self.within:
                self._restart_times.popleft()
            if len(self._restart_times) > self.max_restarts:
                self._emit(
                    SupervisorGaveUp(
                        supervisor=self.name, child_id=child.id, reason="too many restarts"
                    )
                )
                failure = SupervisorFailed(
                    self.name, child.id, exit_.error, label=self._described()
                )
                why = f"its supervisor gave up: {failure}"
                for each in self._children:
                    # What waits for a child that will not come back fails, saying why.
                    each.end_queued(_unavailable(each.id, why), why)
                raise failure
            await self._restart(child, len(self._restart_times))

    async def _restart(self, failed: Child, restarts: int) -> None:
        index = self._children.index(failed)
        if self.strategy == "one_for_one":
            group = [failed]
        elif self.strategy == "one_for_all":
            group = list(self._children)
        else:
            group = self._children[index:]
        # As OTP does: the others in the group are stopped, last started first; the
        # temporary ones among them are forgotten, and every other spec in the group is
        # started again — also one that had ended or was stopped by hand before.
        for child in reversed(group):
            if child is not failed:
                await self._stop(child)
        for child in group:
            if child is not failed and child.spec.restart == "temporary":
                self._forget(child)
        group = [c for c in group if c is failed or c.spec.restart != "temporary"]
        for child in group:
            child.set_state(_State.RESTARTING)
        delay = self.backoff.delay(restarts) if self.backoff is not None else 0.0
        if delay:
            await trio.sleep(delay)
        for child in group:
            if self._by_id.get(child.id) is not child or child.state is not _State.RESTARTING:
                continue  # deleted or stopped by hand during the backoff
            if await self._start(child):
                self._emit(
                    ChildRestarted(
                        supervisor=self.name, child_id=child.id, restarts=restarts, delay=delay
                    )
                )
            else:
                # Failed to start again: that is one more exit to judge.
                child.set_state(_State.RESTARTING)
                self._inbox_send.send_nowait(
                    _Exit(child, child.incarnation, child.last_error, reported=True)
                )
