"""The server's connections (serve/_connection.py), through ``listen`` on a real socket:
an answer of known length written in one piece, other writes as they come, and the
keep-alive watch that closes an idle connection but never a busy one."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
from hypercorn.config import Config

from satsuma.serve._listen import listen

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


@asynccontextmanager
async def _listening(app: App, keep_alive: float = 75.0) -> AsyncIterator[trio.SocketStream]:
    """``app`` served by ``listen`` on 127.0.0.1, and a client connection to it."""
    config = Config()
    config.bind, config.accesslog = ["127.0.0.1:0"], None
    config.errorlog = logging.getLogger("test_connection")
    config.keep_alive_timeout = keep_alive
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: listen(
                app, config, stop=stop, drain_timeout=1.0, task_status=task_status
            )
        )
        host, port = binds[0].removeprefix("http://").rsplit(":", 1)
        client = await trio.open_tcp_stream(host, int(port))
        try:
            yield client
        finally:
            await client.aclose()
            stop.set()


def _request(method: str = "GET", path: str = "/") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


async def _read_until(client: trio.SocketStream, ending: bytes) -> bytes:
    got = b""
    with trio.fail_after(10):
        while not got.endswith(ending):
            chunk = await client.receive_some(65536)
            assert chunk, f"the connection closed after: {got!r}"
            got += chunk
    return got


def _json_app(released: trio.Event | None = None) -> App:
    """Answers every request with ``{"ok": true}`` and a Content-Length, its body sent
    only once ``released`` is set (when given)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b'{"ok": true}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"12")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if released is not None:
            await released.wait()
        await send({"type": "http.response.body", "body": body})

    return app


async def test_answers_of_known_length_arrive_whole_one_after_another() -> None:
    async with _listening(_json_app()) as client:
        for _ in range(3):  # one keep-alive connection: each answer ends where it should
            await client.send_all(_request())
            answer = await _read_until(client, b'{"ok": true}')
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert answer.count(b"HTTP/1.1") == 1


async def test_a_head_announcing_a_body_waits_for_it() -> None:
    released = trio.Event()
    async with _listening(_json_app(released)) as client:
        await client.send_all(_request())
        with trio.move_on_after(0.3):
            early = await client.receive_some(65536)
            raise AssertionError(f"the head came before its body: {early!r}")
        released.set()
        answer = await _read_until(client, b'{"ok": true}')
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"content-length: 12" in answer.lower()


async def test_a_head_request_gets_its_head_and_the_connection_goes_on() -> None:
    # No body follows a HEAD answer's head (hypercorn drops it): the head is written
    # at the answer's end, and the next request is answered.
    async with _listening(_json_app()) as client:
        await client.send_all(_request("HEAD"))
        head = await _read_until(client, b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"content-length: 12" in head.lower()
        await client.send_all(_request())
        answer = await _read_until(client, b'{"ok": true}')
        assert answer.startswith(b"HTTP/1.1 200 ")


async def test_a_stream_without_a_length_is_written_as_it_comes() -> None:
    released = trio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await released.wait()
        await send({"type": "http.response.body", "body": b"data: 2\n\n"})

    async with _listening(app) as client:
        await client.send_all(_request())
        first = await _read_until(client, b"data: 1\n\n\r\n")  # before the second exists
        assert first.startswith(b"HTTP/1.1 200 ")
        assert b"data: 2" not in first
        released.set()
        await _read_until(client, b"0\r\n\r\n")


async def test_an_idle_connection_is_closed_after_the_keep_alive() -> None:
    async with _listening(_json_app(), keep_alive=0.2) as client:
        await client.send_all(_request())
        await _read_until(client, b'{"ok": true}')
        with trio.fail_after(10):
            assert await client.receive_some(65536) == b""  # closed by the server


async def test_a_busy_connection_is_not_closed_by_the_keep_alive() -> None:
    async def slow(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await trio.sleep(0.6)  # three keep-alive timeouts
        await _json_app()(scope, receive, send)

    async with _listening(slow, keep_alive=0.2) as client:
        for _ in range(2):
            await client.send_all(_request())
            answer = await _read_until(client, b'{"ok": true}')
            assert answer.startswith(b"HTTP/1.1 200 ")


async def test_a_stream_outlasting_the_keep_alive_is_kept_then_the_idle_connection_closed() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await trio.sleep(0.6)  # three keep-alive timeouts
        await send({"type": "http.response.body", "body": b"data: 2\n\n"})

    async with _listening(app, keep_alive=0.2) as client:
        await client.send_all(_request())
        answer = await _read_until(client, b"0\r\n\r\n")
        assert b"data: 1" in answer and b"data: 2" in answer
        with trio.fail_after(10):
            assert await client.receive_some(65536) == b""  # idle after it: closed
