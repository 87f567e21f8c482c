"""How a server's connection ends: the read stream that notices it (the only sign, for
an idle connection, that the server has gone), and the words that explain an exit to the
model and the logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp.types as mcp_types
import trio
from mcp import MCPError

from ..._text import MESSAGE_LIMIT, describe_exception_text, exception_message, valid_text

__all__ = ["EndWatcher", "describe_end"]


class EndWatcher:
    """The transport's read stream, with a signal when it ends: the only sign, for an
    idle connection, that the server has gone."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def __aenter__(self) -> EndWatcher:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> Any:
        return await self._inner.__aexit__(*exc_info)

    def __aiter__(self) -> EndWatcher:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, trio.ClosedResourceError, trio.EndOfChannel):
            self._on_end()
            raise
        except Exception as exc:
            if type(exc).__name__ in ("ClosedResourceError", "EndOfStream"):  # anyio's
                self._on_end()
            raise

    async def receive(self) -> Any:
        return await self.__anext__()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def describe_end(exc: BaseException | None, stderr_tail: str) -> str:
    if exc is None or (isinstance(exc, MCPError) and exc.error.code == mcp_types.CONNECTION_CLOSED):
        text = "the connection closed"
    elif isinstance(exc, FileNotFoundError):
        text = f"no such program: {exc.filename or exc}"
    elif isinstance(exc, OSError):
        text = f"{type(exc).__name__}: {exc.strerror or exc}"
    else:
        # The SDK's exception may carry the server's own text: read it guarded.
        message = exception_message(exc, limit=MESSAGE_LIMIT)
        text = message if message is not None else describe_exception_text(exc)
    last = [line for line in stderr_tail.strip().splitlines() if line.strip()][-1:]
    if last:
        text += f" (its last words on stderr: {last[0].strip()[:300]})"
    # The model reads it: valid Unicode (a file name or a server's words may hold a lone
    # surrogate).
    return valid_text(text)
