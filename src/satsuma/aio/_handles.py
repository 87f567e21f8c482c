"""The asyncio faces of satsuma's handles: an agent's and the runtime's supervisor's.

Each method crosses into trio through the runtime's bridge and calls the trio handle's
method of the same name there, so its behaviour, its errors and its docstring's promises
are those of ``satsuma.AgentHandle`` and ``satsuma.Supervisor``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final, overload

import trio

from ..agents import Agent, AgentEvent, AgentHandle, RunResult
from ..store import RunRecord
from ..supervisor import ChildInfo, Supervisor
from ..tools import Approve, Deny
from ._bridge import wait_out

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from .._messages import Message
    from ._bridge import Bridge

__all__ = ["AsyncioAgentHandle", "AsyncioSupervisor"]

# The agent's output type, as satsuma.AgentHandle[OutputT] has it.
OutputT = TypeVar("OutputT")
# The output type a run asks for instead of its agent's (run(..., output_type=X)).
RunOutputT = TypeVar("RunOutputT")


@final
class AsyncioAgentHandle(Generic[OutputT]):
    """An agent, as asyncio code talks to it: ``await agent.run(...)``,
    ``async for event in agent.stream(...)``. Returned by ``Runtime.open_agent`` and
    ``Runtime.start_child``; valid until its runtime closes (then a call raises
    ``RuntimeClosed``). Use it from the runtime's loop; from another thread, through
    ``Runtime.call_from_thread``.

    Cancelling the asyncio task that awaits ``run`` (``asyncio.timeout`` included)
    cancels the run in trio; the ``CancelledError`` arrives once the run has recorded its
    end (``cancelled``), so the conversation stays valid and the agent serves the next
    run. Errors arrive as the same exceptions ``satsuma.AgentHandle`` raises.
    """

    def __init__(
        self,
        bridge: Bridge,
        handle: AgentHandle[OutputT],
        *,
        stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._bridge = bridge
        self._handle = handle
        self._stop = stop

    @property
    def name(self) -> str:
        """The agent's declared name."""
        return self._handle.name

    @property
    def agent_id(self) -> str:
        """This agent's id."""
        return self._handle.agent_id

    @property
    def history(self) -> tuple[Message, ...]:
        """A copy of the conversation so far.

        Raises:
            RuntimeClosed: the runtime is not running.
        """
        self._bridge.check()
        return self._handle.history

    @property
    def compacted_history(self) -> tuple[Message, ...]:
        """The conversation as a ``Compaction`` history sends it (see
        ``satsuma.AgentHandle.compacted_history``).

        Raises:
            RuntimeClosed: the runtime is not running.
        """
        self._bridge.check()
        return self._handle.compacted_history

    @property
    def interrupted(self) -> tuple[RunRecord, ...]:
        """Runs a crash or a kill interrupted that can still be resumed (see
        ``satsuma.AgentHandle.interrupted``)."""
        self._bridge.check()
        return self._handle.interrupted

    @overload
    async def run(
        self,
        prompt: str,
        *,
        events: Callable[[AgentEvent], object] | None = None,
        output_retries: int | None = None,
    ) -> RunResult[OutputT]: ...

    @overload
    async def run(
        self,
        prompt: str,
        *,
        output_type: type[RunOutputT],
        events: Callable[[AgentEvent], object] | None = None,
        output_retries: int | None = None,
    ) -> RunResult[RunOutputT]: ...

    @overload
    async def run(
        self,
        prompt: str,
        *,
        output_type: object,
        events: Callable[[AgentEvent], object] | None = None,
        output_retries: int | None = None,
    ) -> RunResult[Any]: ...

    async def run(
        self,
        prompt: str,
        *,
        output_type: Any = None,
        events: Callable[[AgentEvent], object] | None = None,
        output_retries: int | None = None,
    ) -> RunResult[Any]:
        """Run the agent on ``prompt`` and return how the run ended (see
        ``satsuma.AgentHandle.run``): ``RunResult[Invoice]`` for an agent declared
        ``satsuma.Agent[Invoice]``, or for ``output_type=Invoice``. ``events`` is called
        on the loop's thread.

        Raises:
            AgentUnavailable, AgentCrashed, TypeError, ValueError: as
                ``satsuma.AgentHandle.run`` does.
            RuntimeClosed: the runtime is not running.
            asyncio.CancelledError: this task was cancelled (the run ended
                ``cancelled`` first), or trio cancelled the call (the runtime closed).
        """
        options: dict[str, Any] = {"events": events, "output_retries": output_retries}
        if output_type is not None:
            options["output_type"] = output_type

        async def run() -> RunResult[Any]:
            result: RunResult[Any] = await self._handle.run(prompt, **options)
            return result

        return await self._bridge.call(run)

    async def stream(
        self, prompt: str, *, output_type: Any = None, output_retries: int | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Run the agent on ``prompt``, yielding its events as they happen; the last one
        is ``RunEnd``. The run waits for the reader (``satsuma.AgentHandle.stream``).

        Leaving early cancels the run: ``break`` (asyncio closes the generator),
        ``aclose()``, or this task being cancelled; closing returns once the run has
        ended. Errors as for ``run``.
        """
        options: dict[str, Any] = {"output_retries": output_retries}
        if output_type is not None:
            options["output_type"] = output_type
        send, receive = trio.open_memory_channel[AgentEvent](0)

        async def pump() -> None:
            # A stream is read by one trio task, its own, from start to end: the trio
            # handle's stream holds its run across yields.
            async with send:
                async for event in self._handle.stream(prompt, **options):
                    await send.send(event)

        pumping = self._bridge.submit(pump)
        try:
            while True:
                try:
                    event = await self._bridge.call(receive.receive)
                except trio.EndOfChannel:
                    break
                yield event
            await self._bridge.wait(pumping)  # the stream's own error, if it failed
        finally:
            self._bridge.cancel(pumping)
            await wait_out(pumping.future)

    async def steer(self, text: str) -> None:
        """Send a user message that the model reads at its next turn."""
        await self._bridge.call(self._handle.steer, text)

    async def cancel(self) -> None:
        """End the current run as ``cancelled`` (queued runs are not touched)."""
        await self._bridge.call(self._handle.cancel)

    async def resume(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Approve | Deny] | None = None,
        events: Callable[[AgentEvent], object] | None = None,
    ) -> RunResult[OutputT]:
        """Go on with an interrupted run, or one awaiting approval with ``decisions``
        (``satsuma.AgentHandle.resume``)."""

        async def resume() -> RunResult[OutputT]:
            return await self._handle.resume(run_id, decisions=decisions, events=events)

        return await self._bridge.call(resume)

    async def result(self, run_id: str) -> RunResult[OutputT]:
        """A run of this agent that ended, as its store kept it."""
        return await self._bridge.call(self._handle.result, run_id)

    async def reset(self) -> None:
        """Forget the conversation, after the runs queued before this call."""
        await self._bridge.call(self._handle.reset)

    async def aclose(self) -> None:
        """Stop an agent of ``Runtime.open_agent`` before the runtime closes: a run in
        progress ends ``cancelled``; returns once the agent has stopped. Later calls
        raise ``AgentUnavailable``. Stopping it twice is harmless.

        Raises:
            TypeError: the agent is supervised (``start_child``): stop it through
                ``rt.supervisor.terminate_child(id)``, or its supervisor would restart it.
        """
        if self._stop is None:
            raise TypeError(
                f"agent {self.agent_id} is supervised: stop it with "
                "rt.supervisor.terminate_child(id), not aclose()"
            )
        await self._bridge.call(self._stop)

    def __repr__(self) -> str:
        return f"<satsuma.aio agent {self.name} {self.agent_id}>"


@final
class AsyncioSupervisor:
    """The runtime's supervisor (``rt.supervisor``), as asyncio code talks to it. Its
    agents are restarted by its strategy, as under trio (docs/supervision.md); the
    supervisor stops them, last started first, when the runtime closes."""

    def __init__(self, bridge: Bridge, supervisor: Supervisor) -> None:
        self._bridge = bridge
        self._supervisor = supervisor

    @property
    def name(self) -> str:
        """The supervisor's name."""
        return self._supervisor.name

    @overload
    async def start_child(
        self, child: type[Agent[RunOutputT]], **options: Any
    ) -> AsyncioAgentHandle[RunOutputT]: ...

    @overload
    async def start_child(self, child: object, **options: Any) -> Any: ...

    async def start_child(self, child: object, **options: Any) -> Any:
        """Start a child and return its handle once it runs: an
        ``AsyncioAgentHandle`` for an Agent subclass; for a service or a nested
        Supervisor, the object itself (a trio object: reach it with ``rt.run``).
        Options as for ``satsuma.Supervisor.start_child``.

        Raises:
            SupervisorFailed, ValueError, TypeError: as ``Supervisor.start_child``.
        """
        handle = await self._bridge.call(self._start, child, options)
        if isinstance(handle, AgentHandle):
            return AsyncioAgentHandle(self._bridge, handle)
        return handle

    async def _start(self, child: object, options: dict[str, Any]) -> Any:
        return await self._supervisor.start_child(child, **options)

    async def terminate_child(self, id: str) -> None:
        """Stop a child; its spec stays (``restart_child``, ``delete_child``)."""
        await self._bridge.call(self._supervisor.terminate_child, id)

    async def restart_child(self, id: str) -> Any:
        """Start a stopped child again (or restart a running one)."""
        handle = await self._bridge.call(self._supervisor.restart_child, id)
        if isinstance(handle, AgentHandle):
            return AsyncioAgentHandle(self._bridge, handle)
        return handle

    async def delete_child(self, id: str) -> None:
        """Forget a stopped child's spec."""
        await self._bridge.call(self._supervisor.delete_child, id)

    def which_children(self) -> list[ChildInfo]:
        """The children: id, child, state, restart, kind."""
        self._bridge.check()
        return self._supervisor.which_children()

    def count_children(self) -> dict[str, int]:
        """``specs``, ``active``, ``supervisors``, ``workers``."""
        self._bridge.check()
        return self._supervisor.count_children()

    def __repr__(self) -> str:
        return f"<satsuma.aio supervisor {self.name}>"
