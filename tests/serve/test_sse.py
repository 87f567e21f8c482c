"""SSE framing, and a stream's keep-alives on trio's virtual clock, driven in process
through the ASGI app."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from satsuma.serve import App, ServerSentEvent
from satsuma.serve._sse import frame


def test_frame() -> None:
    assert frame(ServerSentEvent("x")) == b"data: x\n\n"
    assert frame(ServerSentEvent("a\r\nb\rc\nd", id="3", event="e")) == (
        b"event: e\nid: 3\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    )
    assert frame(ServerSentEvent("")) == b"data: \n\n"
    assert frame(ServerSentEvent("end\n")) == b"data: end\ndata: \n\n"
    # Only CR and LF break a line in SSE: other line separators are data.
    assert frame(ServerSentEvent("a\u2028b\x0bc")) == "data: a\u2028b\x0bc\n\n".encode()
    # An id or event name cannot break out of its line to forge an event.
    assert frame(ServerSentEvent("x", id="1\n\ndata: forged\x00", event="a\rb")) == (
        b"event: ab\nid: 1data: forged\ndata: x\n\n"
    )


async def test_keepalives_and_disconnect(
    autojump_clock: trio.testing.MockClock, echo: Any, tiny_runs: Any
) -> None:
    from satsuma.serve import ServeContext
    from satsuma.serve._slots import RunSlots

    surface = echo(ServeContext(runs=tiny_runs, slots=RunSlots(1)))
    app = App(surfaces=[surface], runs=tiny_runs)
    sent: list[dict[str, Any]] = []
    inbox_send, inbox = trio.open_memory_channel[dict[str, Any]](10)
    inbox_send.send_nowait({"type": "http.request", "body": b"", "more_body": False})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/test/stream", "headers": []}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, inbox.receive, send)
        await trio.sleep(40)  # two keep-alives on a quiet stream
        surface.streams[0].send.send_nowait(ServerSentEvent("hello"))
        await trio.sleep(1)
        inbox_send.send_nowait({"type": "http.disconnect"})
    assert sent[0]["type"] == "http.response.start"
    bodies = [message["body"] for message in sent[1:]]
    assert bodies == [b": keep-alive\n\n", b": keep-alive\n\n", b"data: hello\n\n"]
    assert surface.streams[0].closed.is_set()
    assert app.subscribers == 0


async def test_a_keepalive_and_an_event_are_never_sent_at_once(
    autojump_clock: trio.testing.MockClock, echo: Any, tiny_runs: Any
) -> None:
    # A client slow to take each send (2 s here): an event that comes while a keep-alive
    # is being sent waits for it, and a keep-alive falling due while an event is being
    # sent is skipped (that send is traffic already). Nothing overlaps, nothing is lost.
    from satsuma.serve import ServeContext
    from satsuma.serve._slots import RunSlots

    surface = echo(ServeContext(runs=tiny_runs, slots=RunSlots(1)))
    app = App(surfaces=[surface], runs=tiny_runs)
    sent: list[tuple[float, bytes]] = []
    in_flight = 0
    inbox_send, inbox = trio.open_memory_channel[dict[str, Any]](10)
    inbox_send.send_nowait({"type": "http.request", "body": b"", "more_body": False})

    async def send(message: dict[str, Any]) -> None:
        nonlocal in_flight
        in_flight += 1
        assert in_flight == 1, "two sends in flight at once"
        if message["type"] == "http.response.body":
            await trio.sleep(2)
            sent.append((trio.current_time(), message["body"]))
        in_flight -= 1

    scope = {"type": "http", "method": "GET", "path": "/test/stream", "headers": []}
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(app, scope, inbox.receive, send)
        await trio.sleep(16)  # the first keep-alive went at 15 s and is still on its way
        surface.streams[0].send.send_nowait(ServerSentEvent("during a keep-alive"))
        await trio.sleep(12)  # 28 s: sent 17 s-19 s; the next keep-alive is due at 34 s
        await trio.sleep(5)  # 33 s
        surface.streams[0].send.send_nowait(ServerSentEvent("over the due time"))
        await trio.sleep(10)  # sent 33-35 s, so nothing is due before 50 s
        inbox_send.send_nowait({"type": "http.disconnect"})
    assert [(at - start, body) for at, body in sent] == [
        (17.0, b": keep-alive\n\n"),
        (19.0, b"data: during a keep-alive\n\n"),
        (35.0, b"data: over the due time\n\n"),
    ]
    assert app.subscribers == 0
