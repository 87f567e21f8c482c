"""ToolServer: what the servers of tools (an MCP server, a remote A2A agent) share.

A server of tools lists its tools only once it runs, so an agent or a ToolRunner takes it
in ``tools`` as a whole and asks it for them. It runs three ways: as a supervisor's child
(``serve``: its end is a crash), started by an agent with itself (``serve_quietly``: its
end turns its calls into error results), or in ``async with``, which this base holds.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import trio

from ._tool import Tool


class ToolServer(abc.ABC):
    """The base of a server of tools: an Agent starts it with itself unless it runs."""

    # Bumped each time the server's tool list may have changed: an agent lists the
    # tools again when it sees a new number.
    generation: int = 0
    _held: tuple[contextlib.AsyncExitStack, trio.Nursery] | None = None

    @property
    @abc.abstractmethod
    def running(self) -> bool:
        """Whether it is running, so that its tools can be called."""

    @abc.abstractmethod
    def tools(self) -> Sequence[Tool]:
        """Its tools, for a ToolRunner or an Agent's ``tools`` (it must be running)."""

    @abc.abstractmethod
    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled, as a supervisor's child: an end of its own is a crash."""

    @abc.abstractmethod
    async def serve_quietly(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled; an end of its own is answered in its calls, not raised."""

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        try:
            await nursery.start(self.serve_quietly)
        except BaseException:
            nursery.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._held = (stack, nursery)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._held is not None, "__aexit__ without __aenter__"
        (stack, nursery), self._held = self._held, None
        nursery.cancel_scope.cancel()
        await stack.__aexit__(exc_type, exc, traceback)
