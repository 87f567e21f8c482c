"""HTTP/1.1 for the loopback servers, with h11 over a trio stream: a request read with
its body, and an answer written (a JSON body, a streamed one, or none: the connection
dropped). The model API's dialect and the script are ``_server``'s."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeAlias

import attrs
import h11
import trio

__all__ = [
    "Answer",
    "Drop",
    "JSONAnswer",
    "StreamAnswer",
    "next_event",
    "receive_request",
    "send_answer",
    "serve_connection",
    "sse",
    "write",
]

_RECEIVE_SIZE = 65536


@attrs.frozen
class JSONAnswer:
    """A JSON body, with its status and headers."""

    status: int
    body: Mapping[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class StreamAnswer:
    """A streamed body, sent chunked: its frames, then an error frame or the body's end."""

    # The body's pieces, each one Server-Sent Event already encoded.
    frames: list[bytes]
    # Frames after which the connection is dropped with no end to the body, or None.
    cut_after: int | None = None
    # An error event, sent after the frames (then the connection is closed).
    error: bytes | None = None
    content_type: str = "text/event-stream"


@attrs.frozen
class Drop:
    """Close the connection without answering."""


Answer: TypeAlias = "JSONAnswer | StreamAnswer | Drop"
"""What a loopback server sends for one request."""


def sse(event: str, data: Mapping[str, Any]) -> bytes:
    """One Server-Sent Event, encoded."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def serve_connection(
    stream: trio.SocketStream,
    answer: Callable[[h11.Request, bytes], Awaitable[Answer]],
    request_ids: Iterator[int],
) -> None:
    """Serve one client's connection: each request is answered by ``answer`` and sent
    with the next of ``request_ids``, until the client or an answer ends it."""
    connection = h11.Connection(h11.SERVER)
    try:
        while True:
            request = await receive_request(stream, connection)
            if request is None:
                return
            sent = await answer(*request)
            if not await send_answer(stream, connection, sent, f"req_test_{next(request_ids)}"):
                return
            if connection.our_state is h11.MUST_CLOSE:
                return
            connection.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
        # The client went away (a timeout, a closed client) or spoke no HTTP: that
        # connection is over, the server goes on. trio closes the stream.
        return


async def send_answer(
    stream: trio.SocketStream, connection: h11.Connection, answer: Answer, request_id: str
) -> bool:
    """Send an answer, with its ``request-id`` header; whether the connection may serve
    another request."""
    request_header = ("request-id", request_id)
    if isinstance(answer, Drop):
        return False
    if isinstance(answer, JSONAnswer):
        data = json.dumps(answer.body).encode()
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(data))),
            request_header,
            *answer.headers,
        ]
        await write(stream, connection, h11.Response(status_code=answer.status, headers=headers))
        await write(stream, connection, h11.Data(data=data), h11.EndOfMessage())
        return True
    headers = [("content-type", answer.content_type), ("cache-control", "no-cache"), request_header]
    # No content-length: h11 sends the body chunked, as the API does.
    await write(stream, connection, h11.Response(status_code=200, headers=headers))
    frames = answer.frames if answer.cut_after is None else answer.frames[: answer.cut_after]
    for frame in frames:
        await write(stream, connection, h11.Data(data=frame))
    if answer.cut_after is not None:
        # Closed with the chunked body unfinished: the client sees the peer hang up
        # mid-message, as when a connection drops.
        return False
    if answer.error is not None:
        await write(stream, connection, h11.Data(data=answer.error))
    await write(stream, connection, h11.EndOfMessage())
    return answer.error is None


async def write(stream: trio.SocketStream, connection: h11.Connection, *events: h11.Event) -> None:
    """Send h11 events on the stream."""
    for event in events:
        data = connection.send(event)
        if data:
            await stream.send_all(data)


async def next_event(stream: trio.SocketStream, connection: h11.Connection) -> Any:
    """The next h11 event of the connection, reading the stream as it needs."""
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        # An empty read (the client closed) tells h11 about the end of the input.
        connection.receive_data(await stream.receive_some(_RECEIVE_SIZE))


async def receive_request(
    stream: trio.SocketStream, connection: h11.Connection
) -> tuple[h11.Request, bytes] | None:
    """The next request and its body, or None when the client closed the connection."""
    request = await next_event(stream, connection)
    if not isinstance(request, h11.Request):
        return None
    body = bytearray()
    while True:
        event = await next_event(stream, connection)
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        else:
            return None
