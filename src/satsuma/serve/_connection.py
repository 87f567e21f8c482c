"""``Connection``: hypercorn's trio connection, with a response written in one piece and
no task spawned per request to watch the keep-alive.

Hypercorn's ``TCPServer`` writes an HTTP/1.1 answer of a known length in three calls of
``send_all`` (its head, its body, and the empty end h11 gives a body with a
``Content-Length``), each behind the connection's lock: six passes of trio's scheduler
and two system calls more than one write needs. Here a head announcing a body is held
until that body comes (the app sends it straight after), then written with it; an empty
write is no write at all. Any other write (a chunked event stream's, HTTP/2's frames)
goes out as it comes, after whatever is held.

Its keep-alive watch is a task started anew (``nursery.start``, which waits for it) at
the end of every request and cancelled at the start of the next: on a connection that
sends run after run, that was a spawn and four passes of the scheduler per request. Here
one task per connection waits under a cancel scope whose deadline moves instead: the
keep-alive timeout from the end of the last answer, none while a request is answered.
It closes the connection as hypercorn's does: when the deadline passes while idle, or
at once when the server stops (a connection busy then closes itself after its answer).
"""

from __future__ import annotations

import math
import re
from typing import Any

import trio
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio.tcp_server import TCPServer

__all__ = ["Connection"]

# The head of an HTTP/1.1 answer (status 200 or more) that announces a body: h11 sends
# its body next, as the app gives it. Searched within the head alone.
_HEAD = re.compile(rb"HTTP/1\.1 [2-5]\d\d ")
_BODY_FOLLOWS = re.compile(rb"\r\ncontent-length: *[1-9]", re.IGNORECASE)


class _KeepAlive:
    """Hypercorn's ``idle_task``, kept by one task per connection (see the module)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._scope: trio.CancelScope | None = None
        self._busy = False

    async def restart(self, task_group: Any, action: object) -> None:
        """The connection is idle from now: closed unless a request comes in time."""
        self._busy = False
        deadline = trio.current_time() + self._connection.config.keep_alive_timeout
        if self._scope is None:
            self._scope = trio.CancelScope(deadline=deadline)
            task_group._nursery.start_soon(self._watch, self._scope)
        else:
            self._scope.deadline = deadline

    async def stop(self) -> None:
        """A request is being answered: no timeout until it is."""
        self._busy = True
        if self._scope is not None:
            self._scope.deadline = math.inf

    def retire(self) -> None:
        """A request is answered with a stream (no length): its task ends until the
        connection is idle again, rather than sleeping beside a long-held stream."""
        if self._busy and self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def _watch(self, scope: trio.CancelScope) -> None:
        with scope:
            await self._connection.context.terminated.wait()
        if self._scope is not scope:
            return  # retired (a stream): the next idle spell has a watch of its own
        self._scope = None
        if self._busy:
            # The server stops while a request is answered: the connection closes
            # itself after the answer (hypercorn's protocol sees the server stopping).
            return
        with trio.CancelScope(shield=True):
            await self._connection._initiate_server_close()


class Connection(TCPServer):
    """One client connection: hypercorn's, writing each answer in one piece."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._keep_alive = self.idle_task = _KeepAlive(self)  # type: ignore[assignment]
        self._held = b""

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            data = event.data
            if self._held:
                data, self._held = self._held + data, b""
            elif not data:
                return  # the end of a body of known length: nothing to write
            elif _announces_body(data):
                self._held = data
                return
            elif _HEAD.match(data) is not None:
                self._keep_alive.retire()  # an event stream, most likely: held long
            await self._write(data)
            return
        if isinstance(event, Closed) and self._held:
            # A head whose body never came (the app failed after starting its answer):
            # written, as hypercorn would have, before the connection closes.
            held, self._held = self._held, b""
            await self._write(held)
        await super().protocol_send(event)

    async def _write(self, data: bytes) -> None:
        """Write ``data`` as hypercorn does (under the lock, shielded: a write is never
        cut in half), taking a free lock without a pass of the scheduler."""
        if self.send_lock.locked():
            await super().protocol_send(RawData(data=data))
            return
        self.send_lock.acquire_nowait()
        try:
            with trio.CancelScope(shield=True):
                await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self.protocol.handle(Closed())
        finally:
            self.send_lock.release()


def _announces_body(data: bytes) -> bool:
    """Whether ``data`` is an answer's head announcing a body of known length."""
    if _HEAD.match(data) is None:
        return False
    end = data.find(b"\r\n\r\n")
    return end >= 0 and _BODY_FOLLOWS.search(data, 0, end + 2) is not None
