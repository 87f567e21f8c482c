"""Server-sent events read from a body's lines: the data of each event.

The OpenAI-compatible model client and the A2A client both read SSE bodies and need only
the events' data (neither protocol uses ``event:`` or ``id:`` on the way in), so the
reading lives in the kernel, once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator


async def sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The data of each event, its ``data:`` lines joined with newlines as the SSE rules
    say; an event without data is skipped. Closing it closes ``lines`` (when they can be
    closed), so that an abandoned stream releases its connection at once."""
    data: list[str] = []
    try:
        async for line in lines:
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            yield "\n".join(data)
    finally:
        close = getattr(lines, "aclose", None)
        if close is not None:
            await close()
