"""Runtime: satsuma inside an asyncio program, as one async context manager.

Inside, a trio run is a guest of the asyncio loop (see ``_bridge``); its main task holds
a Supervisor (``rt.supervisor``) and the nursery in which every call from asyncio and
every agent of ``rt.open_agent`` runs. Closing stops them in order: the calls and
unsupervised agents are cancelled (their runs end ``cancelled``, stored), then the
supervisor stops its children, last started first, each within its shutdown timeout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar, final, overload

import attrs
import trio

from ..agents import Agent, AgentHandle, open_agent
from ..supervisor import Backoff, Supervisor, SupervisorEvent, SupervisorStrategy
from ._bridge import Bridge, RuntimeClosed, RuntimeState
from ._handles import AsyncioAgentHandle, AsyncioSupervisor

__all__ = ["Runtime"]

logger = logging.getLogger("satsuma.aio")

T = TypeVar("T")
OutputT = TypeVar("OutputT")


@attrs.frozen
class _Held:
    """An agent of ``open_agent`` as its holding task hands it over: its handle, and how
    to stop it (cancel the holder, and wait until the agent has stopped)."""

    handle: AgentHandle[Any]
    stop: Callable[[], Awaitable[None]]


@final
class Runtime:
    """satsuma inside an asyncio program: trio runs as a guest of the running loop.

    ``async with Runtime() as rt:`` in any asyncio code (a FastAPI lifespan, a worker's
    main); then ``await rt.open_agent(...)`` or ``await rt.start_child(...)`` for
    agents, whose handles are awaited from any task of that loop, and
    ``await rt.run(fn, *args)`` for any other trio function. One Runtime per loop;
    everything it started stops when the block exits.

    Args:
        strategy, max_restarts, within, backoff, events, call_timeout: The options of
            the runtime's supervisor (``rt.supervisor``), as for ``satsuma.Supervisor``.
        name: The supervisor's name (in its events and errors).

    Raises:
        RuntimeError: (on entering) no asyncio loop is running, this loop already
            runs a Runtime, or this Runtime was entered before.
        SupervisorFailed: (on leaving) the supervisor gave up on its children.
    """

    def __init__(
        self,
        *,
        strategy: SupervisorStrategy = "one_for_one",
        max_restarts: int = 3,
        within: float = 5.0,
        backoff: Backoff | None = None,
        events: Callable[[SupervisorEvent], object] | None = None,
        call_timeout: float = 30.0,
        name: str = "aio",
    ) -> None:
        # Built here so that a wrong option is an error of the constructor, not of the
        # trio run; a Supervisor starts nothing until it is entered.
        self._supervisor = Supervisor(
            strategy,
            max_restarts=max_restarts,
            within=within,
            backoff=backoff,
            events=events,
            call_timeout=call_timeout,
            name=name,
        )
        self._bridge = Bridge(self._main)
        self._facade = AsyncioSupervisor(self._bridge, self._supervisor)

    async def __aenter__(self) -> Runtime:
        await self._bridge.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # The body's own exception, if any, goes on as it was (returning None); a failure
        # of the trio run (the supervisor gave up) is raised instead.
        await self._bridge.stop()

    async def _main(self, serve: Callable[[], Awaitable[None]]) -> None:
        async with self._supervisor:
            await serve()

    @property
    def supervisor(self) -> AsyncioSupervisor:
        """The runtime's supervisor: ``await rt.supervisor.start_child(Agent, ...)``."""
        return self._facade

    @property
    def state(self) -> RuntimeState:
        """``new``, ``starting``, ``running``, ``closing`` or ``closed``. A runtime
        whose supervisor gave up is ``closed`` (leaving its block raises why)."""
        return self._bridge.state

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The asyncio loop this runtime runs on.

        Raises:
            RuntimeClosed: it has not been entered.
        """
        return self._bridge.loop

    async def open_agent(
        self, agent: type[Agent[OutputT]], **options: Any
    ) -> AsyncioAgentHandle[OutputT]:
        """Start an agent that runs until the runtime closes, unsupervised: if it
        crashes, later calls raise ``AgentUnavailable``. Options as for
        ``satsuma.open_agent`` (``model``, ``store``, ``agent_id``, ``context``,
        ``approver``, ``approval_timeout``). For an agent restarted after a crash, use
        ``start_child``.

        Raises:
            TypeError, ValueError, ConfigurationError, StoreError: as
                ``satsuma.open_agent`` does, the agent not started.
            RuntimeClosed: the runtime is not running.
        """
        held: _Held = await self._bridge.call(self._open, agent, options)
        return AsyncioAgentHandle(self._bridge, held.handle, stop=held.stop)

    async def _open(self, agent: type[Agent[Any]], options: dict[str, Any]) -> _Held:
        held: _Held = await self._bridge.nursery.start(self._hold_agent, agent, options)
        return held

    async def _hold_agent(
        self,
        agent: type[Agent[Any]],
        options: dict[str, Any],
        task_status: trio.TaskStatus[_Held] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        started = False
        stopped = trio.Event()
        try:
            with trio.CancelScope() as scope:

                async def stop() -> None:
                    scope.cancel()
                    await stopped.wait()

                async with open_agent(agent, **options) as handle:
                    task_status.started(_Held(handle, stop))
                    started = True
                    await trio.sleep_forever()
        except Exception as exc:
            if not started:
                raise  # to open_agent's caller, through nursery.start
            # The agent crashed; its callers were told (AgentCrashed), and later ones
            # get AgentUnavailable. The runtime and its other agents go on.
            logger.error("%s; it is not supervised, so it stays stopped", exc)
        finally:
            stopped.set()

    @overload
    async def start_child(
        self, child: type[Agent[OutputT]], **options: Any
    ) -> AsyncioAgentHandle[OutputT]: ...

    @overload
    async def start_child(self, child: object, **options: Any) -> Any: ...

    async def start_child(self, child: object, **options: Any) -> Any:
        """``rt.supervisor.start_child``: start a supervised agent (restarted after a
        crash by the runtime's strategy) or service, and return its handle."""
        return await self._facade.start_child(child, **options)

    async def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run the trio function ``fn(*args)`` in the runtime and return its result.

        Cancelling the awaiting asyncio task cancels ``fn`` and waits for it to end;
        ``fn``'s exceptions arrive as the same objects; ``fn`` cancelled by trio (the
        runtime closing) arrives as a cancellation.

        Raises:
            RuntimeClosed: the runtime is not running.
            RuntimeError: called from another thread or loop (see
                ``call_from_thread``).
        """
        return await self._bridge.call(fn, *args)

    def call_from_thread(self, afn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """From a thread other than the loop's, run ``afn(*args)`` on the runtime's loop
        and block until it returns: ``rt.call_from_thread(agent.run, "hi")`` or
        ``rt.call_from_thread(rt.run, trio_fn, arg)``. The one thread-safe entry point.

        Raises:
            RuntimeError: called from the loop's own thread (that would block the loop
                it waits on: await instead).
            RuntimeClosed: the runtime is not running, or its loop has closed.
        """
        loop = self._bridge.loop
        if self._bridge.thread == threading.get_ident():
            raise RuntimeError(
                "call_from_thread was called from the runtime's own loop thread, where it "
                "would block the loop it waits on: await the call instead"
            )
        coroutine = afn(*args)
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError as exc:  # the loop has closed
            coroutine.close()  # never to run: closed, so Python does not warn of it
            raise RuntimeClosed(f"its loop has closed ({exc})") from exc
        return future.result()

    def __repr__(self) -> str:
        return f"<satsuma.aio.Runtime {self._bridge.state}>"
