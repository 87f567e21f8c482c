"""Claude on Bedrock's streams: the Messages API's events inside AWS's event-stream
encoding, read raw as AnthropicModel reads the API's Server-Sent Events.

Each ``chunk`` message carries one event of the API's (its JSON, base64-encoded); an
``exception`` message is an error, given here as the API's ``error`` event with the type
of the status it stands for (a throttling exception is a ``rate_limit_error``), so that
the stream accumulator and the retries treat both providers' errors alike. The framing
is botocore's (``EventStreamBuffer``, which checks each message's CRCs): installed with
the ``satsuma[bedrock]`` extra, as the client that needs it is.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

__all__ = ["bedrock_events"]

# Bedrock's exceptions inside a stream -> the API's error type for the same status.
_ERROR_TYPES = {
    "throttlingException": "rate_limit_error",
    "serviceUnavailableException": "overloaded_error",
    "internalServerException": "api_error",
    "modelStreamErrorException": "api_error",
    "modelTimeoutException": "timeout_error",
    "validationException": "invalid_request_error",
    "accessDeniedException": "permission_error",
}


async def bedrock_events(chunks: AsyncIterator[bytes]) -> AsyncGenerator[dict[str, Any], None]:
    """The API's events from the body of an ``invoke-with-response-stream`` response.
    Closing it closes ``chunks``.

    Raises:
        ValueError, KeyError, TypeError: a message that is not one of Bedrock's
            (botocore's framing errors are ValueErrors too, after a bad CRC).
    """
    from botocore.eventstream import (  # type: ignore[import-untyped]
        EventStreamBuffer,
        ParserError,
    )

    buffer = EventStreamBuffer()
    try:
        async for data in chunks:
            buffer.add_data(data)
            try:
                messages = list(buffer)
            except ParserError as exc:  # a bad CRC, a length past the limits
                raise ValueError(f"not an event-stream message: {exc}") from exc
            for message in messages:
                headers = message.headers
                kind = headers.get(":message-type")
                if kind == "event":
                    if headers.get(":event-type") == "chunk":
                        payload = json.loads(message.payload)
                        yield json.loads(base64.b64decode(payload["bytes"]))
                elif kind in ("exception", "error"):
                    name = headers.get(":exception-type") or headers.get(":error-code") or ""
                    body = json.loads(message.payload or b"{}")
                    text = body.get("message") or body.get("Message") or name
                    kind = _ERROR_TYPES.get(name, "api_error")
                    yield {"type": "error", "error": {"type": kind, "message": str(text)}}
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
