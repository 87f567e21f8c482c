"""Server-sent events over ASGI: the framing of one event, and the sending of a stream
with keep-alives, that stops when the client goes away or the server drains.

Every SSE answer of every surface goes through ``send_stream``, so the rules are kept in
one place: each data line framed on its own (the spec splits on CR, LF and CRLF), no
``id:`` or ``event:`` line able to break the frame, a comment every ``keepalive``
seconds so that proxies keep the connection, and the events' iterator closed whatever
ends the stream. Closing it cancels nothing else: a run belongs to the server.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ._http import HTTPError, ServerSentEvent, SSEAnswer

__all__ = ["KEEPALIVE_SECONDS", "frame", "send_stream"]

KEEPALIVE_SECONDS = 15.0
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# An id or event name is one field of one line: anything that would end the line (or a
# NUL, which makes a client ignore the id) is dropped rather than allowed to forge a frame.
_NOT_IN_FIELD = re.compile(r"[\r\n\x00]")
_KEEPALIVE = b": keep-alive\n\n"

log = logging.getLogger("satsuma.serve")

Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
StartAnswer = Callable[[int, list[tuple[bytes, bytes]]], Awaitable[None]]


# A surface hands every stream of a run the same ServerSentEvent: framed once for all.
@functools.lru_cache(maxsize=256)
def frame(event: ServerSentEvent) -> bytes:
    """One event as its bytes on the wire, ending with the blank line that ends it."""
    lines = []
    if event.event is not None:
        lines.append(f"event: {_NOT_IN_FIELD.sub('', event.event)}")
    if event.id is not None:
        lines.append(f"id: {_NOT_IN_FIELD.sub('', event.id)}")
    lines.extend(f"data: {line}" for line in _LINE_BREAK.split(event.data))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def _error_frame(error: HTTPError) -> bytes:
    import json

    body = json.dumps({"error": {"type": error.kind, "message": error.message}})
    return frame(ServerSentEvent(body, event="error"))


async def send_stream(
    answer: SSEAnswer,
    *,
    start: StartAnswer,
    send: Send,
    receive: Receive,
    headers: list[tuple[bytes, bytes]],
    stopping: trio.Event,
    to_error: Callable[[Exception], HTTPError],
    keepalive: float = KEEPALIVE_SECONDS,
) -> None:
    """Send ``answer``'s events until they end, the client goes away or ``stopping`` is
    set; close the iterator in every case.

    The status line and headers go out at once, so that a client knows its stream is
    open before the first event. A failure of the iterator then ends the stream with an
    ``error`` event (``{"error": {"type", "message"}}``): a surface that can fail at
    once (an unknown run) checks that before it answers with a stream.

    Args:
        start: Sends the status and headers (``headers`` and the stream's own).
        to_error: The HTTP error an exception of the iterator stands for; it raises
            what it does not map (a bug, logged by the caller).
    """
    # The stream's own task reads the events and sends each: a thousand streams of one
    # run cost a thousand wake-ups per event, not the three each that a reading task
    # handing events over a channel to a sending one cost. Keep-alives come from a
    # watcher that sends only when nothing was sent for ``keepalive`` seconds. No two
    # sends are ever in flight at once, and an event's send takes no lock for it (a
    # trio.Lock's acquire and release, per event per stream, was a tenth of our share of
    # a fan-out): a keep-alive is skipped while an event is being sent (that is traffic
    # already), and an event waits for a keep-alive in flight to be done.
    events = answer.events
    failure: list[Exception] = []
    gone = False
    sending_event = False
    keepalive_sent: trio.Event | None = None  # set once the keep-alive in flight is sent
    last_sent = trio.current_time()

    async def begin() -> None:
        await start(
            answer.status,
            [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                # nginx buffers answers unless told not to: an event would wait there.
                (b"x-accel-buffering", b"no"),
                *headers,
            ],
        )

    async def keep_alive() -> None:
        nonlocal last_sent, keepalive_sent
        while True:
            await trio.sleep_until(last_sent + keepalive)
            if sending_event:  # a slow client takes an event: that is traffic already
                await trio.sleep(keepalive)
                continue
            if trio.current_time() - last_sent < keepalive:
                continue
            keepalive_sent = trio.Event()
            try:
                await send({"type": "http.response.body", "body": _KEEPALIVE, "more_body": True})
                last_sent = trio.current_time()
            finally:
                keepalive_sent.set()
                keepalive_sent = None

    async def watch(scope: trio.CancelScope) -> None:
        # The body was read whole before: what the server hears now is the disconnect.
        nonlocal gone
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                gone = True
                scope.cancel()
                return

    async def watch_stopping(scope: trio.CancelScope) -> None:
        await stopping.wait()
        scope.cancel()

    async with trio.open_nursery() as nursery:
        sending = trio.CancelScope()
        nursery.start_soon(watch, sending)
        nursery.start_soon(watch_stopping, sending)
        try:
            await begin()
            last_sent = trio.current_time()
            if keepalive > 0 and keepalive != math.inf:
                nursery.start_soon(keep_alive)
            with sending:
                while True:
                    try:
                        event = await events.__anext__()
                    except StopAsyncIteration:
                        break
                    except Exception as failed:  # told to the client below, as an event
                        failure.append(failed)
                        break
                    body = frame(event)
                    if keepalive_sent is not None:  # a keep-alive is on its way: after it
                        await keepalive_sent.wait()
                    sending_event = True
                    try:
                        await send({"type": "http.response.body", "body": body, "more_body": True})
                    finally:
                        sending_event = False
                    last_sent = trio.current_time()
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
            nursery.cancel_scope.cancel()  # the watchers and the keep-alives
    if gone:
        return
    if failure:
        error = to_error(failure[0])
        await send({"type": "http.response.body", "body": _error_frame(error), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
