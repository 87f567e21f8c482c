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
