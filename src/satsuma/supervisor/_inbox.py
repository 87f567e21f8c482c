"""The supervisor's inbox: the exits of its children and the requests of its public
methods, in the order they came, for the control loop to handle one at a time (the only
place children are started and stopped once the supervisor runs, so that decisions never
race one another)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import attrs
import trio

from ._children import Child

__all__ = ["Command", "Exit", "Inbox", "Item"]


@attrs.frozen
class Exit:
    """An incarnation of a child ended (``error``: how, or None if it returned)."""

    child: Child
    incarnation: int
    error: BaseException | None
    reported: bool = False  # a failed start has had its ChildCrashed event already


@attrs.define(eq=False)
class Command:
    """A public method's request, carried out by the control loop in its turn, so that
    starting and stopping children never races a restart."""

    action: Callable[[], Awaitable[Any]]
    done: trio.Event = attrs.Factory(trio.Event)
    result: Any = None
    error: BaseException | None = None

    async def carry_out(self) -> None:
        try:
            self.result = await self.action()
        except Exception as exc:  # the caller's error (a bad id, a failed start)
            self.error = exc
        finally:
            self.done.set()


Item: TypeAlias = Exit | Command


class Inbox:
    """Exits and commands, unbounded (neither a child's task nor a caller waits to put
    one in), read in order by the control loop."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Item](math.inf)

    def __aiter__(self) -> AsyncIterator[Item]:
        return self._receive.__aiter__()

    def exited(self, exit_: Exit) -> None:
        self._send.send_nowait(exit_)

    async def ask(self, action: Callable[[], Awaitable[Any]]) -> Any:
        """Have the control loop carry out ``action`` in its turn; return its result (or
        raise its error)."""
        command = Command(action)
        self._send.send_nowait(command)
        await command.done.wait()
        if command.error is not None:
            raise command.error
        return command.result

    def refuse_commands(self, error: Callable[[], BaseException]) -> None:
        """Commands still waiting will not be carried out: their callers raise
        ``error()``. Exits still waiting are dropped."""
        while True:
            try:
                item = self._receive.receive_nowait()
            except trio.WouldBlock:
                return
            if isinstance(item, Command):
                item.error = error()
                item.done.set()
