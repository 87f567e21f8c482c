"""Hypercorn's trio worker with a drain that ends: ``listen`` serves an ASGI app until
``stop`` is set, then drains within ``drain_timeout`` seconds and cuts what is left.

Hypercorn's own ``serve`` drains by cancelling its connections' tasks after its
graceful timeout, but it shields each write to a socket from cancellation: a client
that holds an event stream open and stops reading (its receive window full) blocks a
write forever, and the drain with it (a SIGTERM never ended the process). So the
connections are served here by hypercorn's own ``TCPServer``, one task each, and kept
in a set: once the drain's time is up each socket still open is closed (reset, with
nothing more sent), which wakes a write blocked on it, and the tasks end.

Draining, in order: stop accepting (the listening sockets closed), tell the idle
keep-alive connections to close (hypercorn's ``terminated``), wait up to
``drain_timeout`` for the connections to end (the app ends its event streams itself),
then cut the rest. The app's ``lifespan`` is not called: ``App`` needs none.
"""

from __future__ import annotations

import socket as stdlib_socket
import struct
from contextlib import suppress
from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import repr_socket_addr

from ._connection import Connection

__all__ = ["listen"]


async def listen(
    app: Any,
    config: Config,
    *,
    stop: trio.Event,
    drain_timeout: float,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Serve ``app`` on ``config``'s binds until ``stop`` is set, then drain.

    ``task_status.started`` gets the URLs listened on (``http://127.0.0.1:8000``).

    Returns:
        How many connections were still open when the drain's time was up, and cut.
    """
    sockets = config.create_sockets()
    ssl_context = config.create_ssl_context()
    listeners: list[Any] = []
    binds: list[str] = []
    for secure, plain in ((True, sockets.secure_sockets), (False, sockets.insecure_sockets)):
        for sock in plain:
            sock.listen(config.backlog)
            plain_listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
            where = repr_socket_addr(sock.family, sock.getsockname())
            if secure:
                assert ssl_context is not None
                listeners.append(
                    trio.SSLListener(plain_listener, ssl_context, https_compatible=True)
                )
                binds.append(f"https://{where}")
            else:
                listeners.append(plain_listener)
                binds.append(f"http://{where}")
    context = WorkerContext(None)
    wrapped = ASGIWrapper(app)
    open_streams: set[trio.abc.Stream] = set()
    all_closed = trio.Event()

    async def connection(stream: Any) -> None:
        open_streams.add(stream)
        try:
            await Connection(wrapped, config, context, ConnectionState({}), stream)
        finally:
            open_streams.discard(stream)
            if not open_streams and stop.is_set():
                all_closed.set()

    async def accept(handlers: trio.Nursery) -> None:
        await trio.serve_listeners(connection, listeners, handler_nursery=handlers)

    async with trio.open_nursery() as connections:
        try:
            async with trio.open_nursery() as accepting:
                accepting.start_soon(accept, connections)
                task_status.started(binds)
                await stop.wait()
                accepting.cancel_scope.cancel()
        finally:
            for listener in listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()
        await context.terminated.set()
        if not open_streams:
            all_closed.set()
        cut = 0
        try:
            with trio.move_on_after(drain_timeout):
                await all_closed.wait()
        finally:
            # Also when cancelled while draining: a write blocked on a socket would hold
            # the connections' nursery open for good.
            cut = len(open_streams)
            for stream in list(open_streams):
                _reset(stream)
            connections.cancel_scope.cancel()
    return cut


def _reset(stream: trio.abc.Stream) -> None:
    """Close ``stream``'s socket at once, with a reset: a task blocked writing to it
    wakes (trio raises ``ClosedResourceError`` in it), and the kernel keeps no unsent
    bytes for a client that reads nothing."""
    transport = getattr(stream, "transport_stream", stream)  # under TLS, the TCP stream
    sock = getattr(transport, "socket", None)
    if sock is None:  # pragma: no cover - hypercorn serves socket streams only
        return
    with suppress(OSError):  # closed already
        sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
