"""A loopback HTTP/1.1 server for the ``http_fetch`` tests, on trio and h11.

``async with serve() as server:`` listens on 127.0.0.1 with an ephemeral port until the
block ends; ``server.url("/text")`` is a URL on it, and ``server.requests`` the
``(method, target)`` of every request it received. Its routes:

- ``/text``, ``/html``, ``/json``: small UTF-8 bodies of those types;
- ``/latin1``: ``text/plain; charset=latin-1`` with non-ASCII bytes;
- ``/big``: 5 MB of text/plain with a content-length, sent in chunks;
- ``/endless``: a chunked text/plain body that never ends;
- ``/binary``: an ``image/png``; ``/no-type-binary`` and ``/no-type-text``: no
  content-type, with and without NUL bytes;
- ``/404``, ``/500``: error pages in text/plain;
- ``/redirect?to=LOCATION``: a 302 to LOCATION; ``/redirect-loop``: a 302 to itself;
  ``/hops/N``: a 302 to ``/hops/N-1``, and ``/hops/0`` answers ``arrived``;
- ``/slow``: the headers, then nothing; ``/hang``: no answer at all (both wait until the
  client hangs up).

Every route answers HEAD with its headers only.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Final
from urllib.parse import parse_qs, urlsplit

import h11
import trio
import trio.testing

# Reading h11 events off a stream is the same job as in satsuma's own loopback server.
from satsuma.testing._http import next_event as _next_event

__all__ = ["BIG_SIZE", "HttpTestServer", "serve"]

BIG_SIZE: Final = 5_000_000
CHUNK: Final = 64 * 1024
LAST_MODIFIED: Final = "Wed, 21 Oct 2015 07:28:00 GMT"
TEXT_BODY: Final = "Hello, wörld!\nSecond line.\n"
HTML_BODY: Final = "<!doctype html><title>Hi</title><p>Hello from the test server</p>\n"
JSON_BODY: Final = '{"hello": "world", "n": 42}'
LATIN1_TEXT: Final = "café crème, naïve façade\n"
PNG_BYTES: Final = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200)
NO_TYPE_BINARY: Final = b"\x00\x01\x02\x03binary\x00data" + bytes(100)
NO_TYPE_TEXT: Final = "plain words with no content-type\n"


class HttpTestServer:
    """The running server.

    Attributes:
        host: ``127.0.0.1``.
        port: The ephemeral port it listens on.
        requests: ``(method, target)`` of each request, in order (target with its query).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.requests: list[tuple[str, str]] = []
        self._closed: list[trio.Event] = []

    def url(self, path: str = "/") -> str:
        """``http://127.0.0.1:PORT`` followed by ``path``."""
        return f"http://{self.host}:{self.port}{path}"

    async def wait_idle(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until every connection is closed (the client hung up) and its handler task
        is gone."""
        with trio.fail_after(timeout):
            for closed in list(self._closed):
                await closed.wait()
            # Let the handler tasks that just set their event finish.
            await trio.testing.wait_all_tasks_blocked()

    @property
    def open_connections(self) -> int:
        """Connections not yet closed by either side."""
        return sum(not closed.is_set() for closed in self._closed)

    # --- HTTP ------------------------------------------------------------------------------

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        closed = trio.Event()
        self._closed.append(closed)
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                event = await _next_event(stream, connection)
                if not isinstance(event, h11.Request):
                    return  # the client closed the connection (or spoke no HTTP)
                while not isinstance(await _next_event(stream, connection), h11.EndOfMessage):
                    pass  # a request body: not used by any route
                method = event.method.decode("ascii")
                target = event.target.decode("ascii")
                self.requests.append((method, target))
                await self._answer(stream, connection, method, target)
                if connection.our_state is not h11.DONE:
                    return  # the answer left the connection unusable (or the client left)
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return  # the client went away mid-answer
        finally:
            closed.set()

    async def _answer(
        self, stream: trio.SocketStream, connection: h11.Connection, method: str, target: str
    ) -> None:
        parts = urlsplit(target)
        path = parts.path
        head = method == "HEAD"

        async def simple(status: int, body: bytes, *headers: tuple[str, str]) -> None:
            await _send(
                stream,
                connection,
                h11.Response(
                    status_code=status,
                    headers=[*headers, ("content-length", str(len(body)))],
                ),
            )
            if not head and body:
                await _send(stream, connection, h11.Data(data=body))
            await _send(stream, connection, h11.EndOfMessage())

        utf8_text = ("content-type", "text/plain; charset=utf-8")
        if path == "/text":
            await simple(200, TEXT_BODY.encode(), utf8_text, ("last-modified", LAST_MODIFIED))
        elif path == "/html":
            await simple(200, HTML_BODY.encode(), ("content-type", "text/html; charset=utf-8"))
        elif path == "/json":
            await simple(200, JSON_BODY.encode(), ("content-type", "application/json"))
        elif path == "/latin1":
            body = LATIN1_TEXT.encode("latin-1")
            await simple(200, body, ("content-type", "text/plain; charset=latin-1"))
        elif path == "/big":
            await _send(
                stream,
                connection,
                h11.Response(
                    status_code=200,
                    headers=[("content-type", "text/plain"), ("content-length", str(BIG_SIZE))],
                ),
            )
            if not head:
                line = b"0123456789abcdefghijklmnopqrstuvwxyz\n" * (CHUNK // 37 + 1)
                sent = 0
                while sent < BIG_SIZE:
                    data = line[: min(CHUNK, BIG_SIZE - sent)]
                    await _send(stream, connection, h11.Data(data=data))
                    sent += len(data)
            await _send(stream, connection, h11.EndOfMessage())
        elif path == "/endless":
            # No content-length: h11 sends the body chunked.
            await _send(
                stream,
                connection,
                h11.Response(status_code=200, headers=[("content-type", "text/plain")]),
            )
            if head:
                await _send(stream, connection, h11.EndOfMessage())
                return
            data = b"more text, forever\n" * (CHUNK // 19)
            while True:  # until the client hangs up: send_all raises
                await _send(stream, connection, h11.Data(data=data))
        elif path == "/binary":
            await simple(200, PNG_BYTES, ("content-type", "image/png"))
        elif path == "/no-type-binary":
            await simple(200, NO_TYPE_BINARY)
        elif path == "/no-type-text":
            await simple(200, NO_TYPE_TEXT.encode())
        elif path == "/500":
            await simple(500, b"Internal failure: the test server broke\n", utf8_text)
        elif path == "/redirect":
            location = parse_qs(parts.query).get("to", ["/text"])[0]
            await simple(302, b"", ("location", location))
        elif path == "/redirect-loop":
            await simple(302, b"", ("location", "/redirect-loop"))
        elif path.startswith("/hops/") and path.removeprefix("/hops/").isdigit():
            left = int(path.removeprefix("/hops/"))
            if left:
                await simple(302, b"", ("location", f"/hops/{left - 1}"))
            else:
                await simple(200, b"arrived\n", utf8_text)
        elif path == "/slow":
            await _send(
                stream,
                connection,
                h11.Response(
                    status_code=200,
                    headers=[("content-type", "text/plain"), ("content-length", "100")],
                ),
            )
            await _wait_for_hangup(stream)
        elif path == "/hang":
            await _wait_for_hangup(stream)
        else:  # /404 and every unknown path
            await simple(404, f"Not found: {path}\n".encode(), utf8_text)


async def _send(stream: trio.SocketStream, connection: h11.Connection, event: h11.Event) -> None:
    data = connection.send(event)
    if data:
        await stream.send_all(data)


async def _wait_for_hangup(stream: trio.SocketStream) -> None:
    """Answer nothing more; return when the client closes the connection."""
    while await stream.receive_some(CHUNK):
        pass


def serve() -> _Serving:
    """Run an HttpTestServer on 127.0.0.1 for the duration of an ``async with`` block.

    An exception from the block comes out as it is, not wrapped in an exception group.
    """
    return _Serving()


class _Serving:
    def __init__(self) -> None:
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> HttpTestServer:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        host, port = listeners[0].socket.getsockname()[:2]
        server = HttpTestServer(host, port)
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        self._nursery.start_soon(trio.serve_listeners, server._serve_connection, listeners)
        return server

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._nursery is not None and self._nursery_manager is not None
        self._nursery.cancel_scope.cancel()
        await self._nursery_manager.__aexit__(None, None, None)
