"""The supervisor's control loop and its children's incarnations: how a child is started
(within its start timeout), runs in a task of its own, is stopped (within its shutdown
timeout), and is restarted or given up on when it ends.

``ChildControl`` is the half of ``Supervisor`` (its one subclass, in ``_supervisor``)
that carries out what the other half (the public methods, ``serve``) asks: each child
runs in its own task and cancel scope in the supervisor's nursery; a child's exception
never reaches the nursery (it is reported to the control loop, which decides).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

import trio

from .._exceptions import AgentUnavailable, SupervisorFailed
from .._text import MESSAGE_LIMIT, describe_exception_text
from ._children import Child, _Started, _State
from ._events import (
    ChildCrashed,
    ChildExited,
    ChildRestarted,
    ChildStarted,
    SupervisorEvent,
    SupervisorGaveUp,
)
from ._inbox import Command, Exit, Inbox
from ._restarts import Backoff, RestartTimes, SupervisorStrategy, restart_group

__all__ = ["ChildControl"]

logger = logging.getLogger("satsuma.supervisor")


def _describe(exc: BaseException) -> str:
    # The child's exception is user code: its __str__ may raise or be enormous.
    leaves = exc.exceptions if issubclass(type(exc), BaseExceptionGroup) else [exc]  # type: ignore[attr-defined]
    return "; ".join(describe_exception_text(e, limit=MESSAGE_LIMIT) for e in leaves)


def _unavailable(child_id: str, why: str) -> Callable[[], BaseException]:
    return lambda: AgentUnavailable(child_id, why)


def _unwrap(exc: Exception) -> Exception:
    # A crash inside a child's own nursery comes wrapped: report the single cause.
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class ChildControl:
    """Starts, stops and restarts a supervisor's children, from its control loop."""

    # Set by Supervisor.__init__ (and _nursery by serve).
    name: str
    strategy: SupervisorStrategy
    max_restarts: int
    within: float
    backoff: Backoff | None
    _events: Callable[[SupervisorEvent], object] | None
    _children: list[Child]
    _by_id: dict[str, Child]
    _by_name: dict[str, Child]
    _nursery: trio.Nursery | None
    _inbox: Inbox
    _restart_times: RestartTimes

    def _described(self) -> str:
        raise NotImplementedError  # Supervisor's

    def _forget(self, child: Child) -> None:
        self._children.remove(child)
        del self._by_id[child.id]
        if child.spec.name is not None:
            del self._by_name[child.spec.name]

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
        self._inbox.exited(Exit(child, incarnation, error))

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

    async def _control(self) -> None:
        async for item in self._inbox:
            if isinstance(item, Command):
                await item.carry_out()
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
            restarts = self._restart_times.note(trio.current_time(), self.within)
            if restarts > self.max_restarts:
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
            await self._restart(child, restarts)

    async def _restart(self, failed: Child, restarts: int) -> None:
        group = restart_group(self.strategy, self._children, failed)
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
                self._inbox.exited(Exit(child, child.incarnation, child.last_error, reported=True))
