"""Claude on Bedrock's streams, as MessagesServer writes them: AWS's event-stream encoding.

Bedrock's ``invoke-with-response-stream`` sends the Messages API's events, each one
inside an event-stream message (its JSON, base64, in a ``chunk``), and an error as an
``exception`` message. The server builds its streams as Server-Sent Events whatever the
path; this module turns them into Bedrock's, so that the real ``AsyncAnthropicBedrock``
reads them with botocore's own parser (which checks the framing and both CRCs).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["EVENT_STREAM", "bedrock_stream"]

EVENT_STREAM = "application/vnd.amazon.eventstream"
"""The content type of a Bedrock stream."""

# The exception Bedrock sends inside a stream for each error type the server sends.
_AWS_EXCEPTIONS = {"overloaded_error": "serviceUnavailableException"}


def bedrock_stream(
    frames: Iterable[bytes], error: bytes | None
) -> tuple[list[bytes], bytes | None]:
    """A stream's SSE frames (the server's own) and its error event, if any, as
    event-stream messages: one ``chunk`` per event, and an ``exception`` for the error."""
    chunks = [
        _message(
            {":message-type": "event", ":event-type": "chunk"},
            {"bytes": base64.b64encode(json.dumps(_sse_json(frame)).encode()).decode()},
        )
        for frame in frames
    ]
    if error is None:
        return chunks, None
    body = _sse_json(error)["error"]
    exception = _message(
        {":message-type": "exception", ":exception-type": _AWS_EXCEPTIONS[body["type"]]},
        {"message": body["message"]},
    )
    return chunks, exception


def _sse_json(frame: bytes) -> dict[str, Any]:
    """The data of an SSE frame of the server's own."""
    data = frame.decode().split("data: ", 1)[1]
    value: dict[str, Any] = json.loads(data)
    return value


def _message(headers: Mapping[str, str], payload: Mapping[str, Any]) -> bytes:
    """One message of AWS's event-stream encoding: a prelude (total and header lengths
    and their CRC32), string headers, the JSON payload, and the whole message's CRC32."""
    head = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value))
        + value.encode()
        for name, value in {":content-type": "application/json", **headers}.items()
    )
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(head) + len(body) + 4, len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + body
    return message + struct.pack(">I", zlib.crc32(message))
