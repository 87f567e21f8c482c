"""The bridge: one trio run as a guest of the running asyncio loop, and calls that cross it.

trio's guest mode (``trio.lowlevel.start_guest_run``) runs trio's scheduler in the host
loop's own thread, one batch of ready tasks per loop callback; only trio's wait for I/O
runs in a worker thread. So trio tasks and asyncio callbacks never run at the same time,
and plain objects (a future, a flag) may be shared between them without locks. What may
not cross freely is trio's run context: a trio primitive (a cancel scope, a nursery) is
touched only from inside the trio run, reached through ``TrioToken.run_sync_soon``.

Each call from asyncio becomes one trio task in the bridge's nursery, in its own cancel
scope, whose end settles one asyncio future: with its value, its exception (the same
object), or cancelled when trio cancelled it. The asyncio caller never cancels that
future itself: a cancelled caller cancels the trio task's scope and waits for the task
to end (a run records its end first), then raises its ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TypeAlias, TypeVar, final

import outcome
import trio

from .._exceptions import SatsumaError

__all__ = ["Bridge", "Call", "RuntimeClosed", "RuntimeState", "wait_out"]

logger = logging.getLogger("satsuma.aio")

T = TypeVar("T")

# One guest run per loop: a second would be a second trio run in the same thread, and
# trio's run context is one per thread (start_guest_run refuses it, less clearly).
# Weak: a loop closed with its runtime never left (a program that never exits the block)
# is forgotten with the loop rather than kept alive.
_LOOPS_IN_USE: Final[weakref.WeakSet[asyncio.AbstractEventLoop]] = weakref.WeakSet()


class RuntimeClosed(SatsumaError, RuntimeError):
    """A ``satsuma.aio`` handle or runtime was used when its runtime was not running:
    before ``async with Runtime()`` was entered, or after it closed (or failed, in
    which case ``__cause__`` is why)."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"the satsuma.aio Runtime is not running: {what}")


RuntimeState: TypeAlias = Literal["new", "starting", "running", "closing", "closed"]


class _State(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


@final
class Call:
    """One asyncio call into trio: the function, the trio task's cancel scope once it
    runs, and the asyncio future its end settles."""

    def __init__(self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], future: Any):
        self.fn = fn
        self.args = args
        self.future: asyncio.Future[Any] = future
        self.scope: trio.CancelScope | None = None
        self.cancel_requested = False

    def cancel_in_trio(self) -> None:
        """Cancel the trio task (run inside trio); before it starts, it starts cancelled."""
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()

    def settle(self, result: outcome.Outcome[Any] | None) -> None:
        """Give the asyncio caller the task's end: an outcome, or None for cancelled."""
        if self.future.done():
            return
        if result is None:
            self.future.cancel("cancelled in trio")
        elif isinstance(result, outcome.Value):
            self.future.set_result(result.value)
        elif isinstance(result, outcome.Error):
            self.future.set_exception(result.error)


async def wait_out(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, whatever cancels the waiting task meanwhile: the
    trio side is winding down and ends promptly (a run's wind-down is bounded), and
    leaving before it has would let the caller see a run that has not recorded its
    end. The caller re-raises its own CancelledError afterwards; a second cancel of the
    same task changes nothing it would not change anyway."""
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            continue
    if not future.cancelled():
        future.exception()  # looked at, so asyncio does not log it as never retrieved


@final
class Bridge:
    """Owns the guest run: starts it on the running loop, serves calls, stops it.

    ``main`` is the trio function that sets up what the runtime holds (the supervisor);
    it gets the bridge's nursery-running function to call once ready.
    """

    def __init__(self, main: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]) -> None:
        self._main = main
        self._state = _State.NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._ready: asyncio.Future[None] | None = None
        self._ended: asyncio.Future[outcome.Outcome[None]] | None = None
        self._failure: BaseException | None = None
        # Calls whose future is not settled yet: the run's end settles any left (none
        # should be; this makes a bug in the bridge an error rather than a hang).
        self._pending: set[Call] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The asyncio loop the runtime runs on."""
        if self._loop is None:
            raise RuntimeClosed("it has not been entered")
        return self._loop

    @property
    def thread(self) -> int | None:
        """The id of the loop's thread (None before the runtime is entered)."""
        return self._thread

    @property
    def state(self) -> RuntimeState:
        """new, starting, running, closing or closed."""
        return self._state.value

    @property
    def nursery(self) -> trio.Nursery:
        """Where the runtime's own tasks run (from inside trio).

        Raises:
            RuntimeClosed: the runtime has stopped serving calls.
        """
        if self._nursery is None:
            raise RuntimeClosed("it is closing")
        return self._nursery

    # --- asyncio side -------------------------------------------------------------

    async def start(self) -> None:
        """Start the guest run on the running loop; return once ``main`` is ready."""
        if self._state is not _State.NEW:
            raise RuntimeError(
                "a satsuma.aio Runtime can be entered once: make a new Runtime() instead"
            )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "satsuma.aio.Runtime needs a running asyncio loop: enter it with "
                "`async with Runtime()` inside asyncio code (asyncio.run, uvicorn, ...); "
                "under trio, use satsuma directly"
            ) from None
        if loop in _LOOPS_IN_USE:
            raise RuntimeError(
                "this asyncio loop already runs a satsuma.aio Runtime: share that one "
                "(one trio guest run per loop)"
            )
        self._state = _State.STARTING
        self._loop, self._thread = loop, threading.get_ident()
        self._ready, self._ended = loop.create_future(), loop.create_future()
        _LOOPS_IN_USE.add(loop)
        try:
            trio.lowlevel.start_guest_run(
                self._run,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon,
                done_callback=self._on_done,
                # asyncio's loop owns signal.set_wakeup_fd (its signal handlers), so
                # trio must leave it alone (trio's guest-mode docs).
                host_uses_signal_set_wakeup_fd=True,
            )
        except BaseException:
            _LOOPS_IN_USE.discard(loop)
            self._state = _State.CLOSED
            raise
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            # Cancelled while starting, or main failed before it was ready: stop what
            # did start, and report main's own failure if there was one.
            await self.stop()
            raise
        if self._state is _State.STARTING:
            self._state = _State.RUNNING

    async def stop(self) -> None:
        """Stop the guest run and wait until it has ended (whatever cancels us meanwhile).

        Raises:
            BaseException: what ended the trio run, if it failed.
            asyncio.CancelledError: the caller was cancelled while waiting.
        """
        assert self._ended is not None
        if self._state in (_State.STARTING, _State.RUNNING):
            self._state = _State.CLOSING
            self._run_in_trio(self._request_stop)
        cancelled = False
        while not self._ended.done():
            try:
                await asyncio.shield(self._ended)
            except asyncio.CancelledError:
                cancelled = True
        ended = self._ended.result()
        if cancelled:
            raise asyncio.CancelledError
        ended.unwrap()

    def check(self) -> None:
        """Raise unless a call may be made now, from here.

        Raises:
            RuntimeClosed: the runtime is not running.
            RuntimeError: called from another thread or another asyncio loop.
        """
        if self._state is not _State.RUNNING:
            what = {
                _State.NEW: "it has not been entered",
                _State.STARTING: "it is still starting",
                _State.CLOSING: "it is closing",
                _State.CLOSED: "it has closed",
            }[self._state]
            error = RuntimeClosed(what)
            error.__cause__ = self._failure
            raise error
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not self._loop:
            raise RuntimeError(
                "a satsuma.aio handle was used outside the asyncio loop its Runtime runs on "
                "(another thread or loop): from another thread, use "
                "rt.call_from_thread(handle.run, ...)"
            )

    def submit(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Call:
        """Start ``fn(*args)`` as a trio task; its end settles the returned call's future."""
        self.check()
        assert self._loop is not None
        call = Call(fn, args, self._loop.create_future())
        self._pending.add(call)
        call.future.add_done_callback(lambda _: self._pending.discard(call))
        self._run_in_trio(self._spawn, call)
        return call

    async def wait(self, call: Call) -> Any:
        """The call's result, as asyncio sees it: its value, its exception, or a
        CancelledError (once the trio task ended) if either side cancelled it."""
        try:
            return await asyncio.shield(call.future)
        except asyncio.CancelledError:
            if call.future.cancelled():
                raise  # trio cancelled it: the caller sees a cancellation
            self.cancel(call)
            await wait_out(call.future)
            raise

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(*args)`` run in trio, awaited from asyncio."""
        result: T = await self.wait(self.submit(fn, *args))
        return result

    def cancel(self, call: Call) -> None:
        """Cancel the call's trio task (no-op once it ended)."""
        if not call.future.done():
            self._run_in_trio(call.cancel_in_trio)

    def _run_in_trio(self, fn: Callable[..., object], *args: Any) -> None:
        assert self._token is not None or self._state is _State.STARTING
        if self._token is None:
            return  # still starting: main has not run; _request_stop is seen via state
        # A run that has ended settled every call it had on the way out.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(fn, *args)

    def _on_done(self, ended: outcome.Outcome[None]) -> None:
        """trio's done_callback, on the loop's thread once the run has ended."""
        assert self._ended is not None and self._ready is not None and self._loop is not None
        self._state = _State.CLOSED
        _LOOPS_IN_USE.discard(self._loop)
        if isinstance(ended, outcome.Error):
            # The runtime's nurseries wrap what failed in groups of one: the caller of
            # ``async with Runtime()`` gets the failure itself where there is one.
            ended = outcome.Error(_plain(ended.error))
            self._failure = ended.error
        if not self._ready.done():
            if isinstance(ended, outcome.Error):
                self._ready.set_exception(ended.error)
            else:
                self._ready.set_exception(RuntimeClosed("it ended while starting"))
            self._ready.exception()
        for call in list(self._pending):
            error = RuntimeClosed("it ended before the call did")
            error.__cause__ = self._failure
            call.settle(outcome.Error(error))
        self._ended.set_result(ended)
        interrupt = _interrupt(self._failure)
        if interrupt is not None:
            # Out of the loop, as asyncio lets these two through its callbacks: Ctrl-C
            # in trio stops the program, as it would have without the runtime.
            raise interrupt

    # --- trio side ----------------------------------------------------------------

    async def _run(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        if self._state is _State.CLOSING:
            self._stop.set()  # cancelled before trio ran at all
        await self._main(self._serve)

    async def _serve(self) -> None:
        """Serve calls until asked to stop; ``main`` awaits this inside what it holds."""
        assert self._stop is not None and self._ready is not None
        async with trio.open_nursery() as nursery:
            try:
                self._nursery = nursery
                if not self._ready.done():
                    self._ready.set_result(None)
                await self._stop.wait()
                nursery.cancel_scope.cancel()
            finally:
                # Before the nursery closes to new tasks, whatever ended its body (our
                # stop, or a cancel from outside: the supervisor gave up): a call
                # arriving later is refused (RuntimeClosed), not dropped.
                self._nursery = None

    def _request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def _spawn(self, call: Call) -> None:
        if self._nursery is None:
            call.settle(outcome.Error(RuntimeClosed("it closed before the call started")))
            return
        self._nursery.start_soon(self._serve_call, call)

    async def _serve_call(self, call: Call) -> None:
        try:
            with trio.CancelScope() as scope:
                call.scope = scope
                if call.cancel_requested:
                    scope.cancel()
                try:
                    value = await call.fn(*call.args)
                except Exception as exc:  # the caller's to handle, not the runtime's
                    call.settle(outcome.Error(exc))
                else:
                    call.settle(outcome.Value(value))
        finally:
            # Still unsettled: our scope caught its own cancel, or a cancel from outside
            # (the runtime closing) or a KeyboardInterrupt goes through here on its way.
            call.settle(None)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _plain(error: BaseException) -> BaseException:
    """The one exception inside nested groups of one, or the group as it is."""
    leaves = _leaves(error)
    return leaves[0] if len(leaves) == 1 else error


def _interrupt(error: BaseException | None) -> BaseException | None:
    """A KeyboardInterrupt or SystemExit among what ended the run, if any."""
    if error is None:
        return None
    for leaf in _leaves(error):
        if isinstance(leaf, (KeyboardInterrupt, SystemExit)):
            return leaf
    return None
