"""``satsuma fake-server``: a loopback Messages API answering with the fake model's
replies, for pointing the SDK (or satsuma itself) at while offline.
"""

from __future__ import annotations

import signal
from typing import Any

import trio
from rich.console import Console

from ._command_error import CommandError
from ._terminal import say

__all__ = [
    "fake_server",
]


async def fake_server(host: str, port: int, *, console: Console) -> int:
    """Serve the Messages API with the fake model's answers until SIGINT or SIGTERM."""
    from .testing import MessagesServer, fake_reply

    def answer(body: dict[str, Any]) -> Any:
        messages = body.get("messages")
        tools = body.get("tools")
        return fake_reply(
            messages if isinstance(messages, list) else [],
            tools if isinstance(tools, list) else [],
        )

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            server = MessagesServer(then=answer, host=host, port=port, keep_requests=0)
            async with server:
                say(
                    console,
                    f"a fake Messages API on {server.base_url} (Ctrl-C stops it); point "
                    "the SDK and satsuma at it with:",
                )
                say(
                    console,
                    f"export ANTHROPIC_BASE_URL={server.base_url} ANTHROPIC_API_KEY=fake-key",
                )
                async for _ in signals:
                    return 0
        except OSError as error:
            raise CommandError(
                f"cannot listen on {host}:{port}: {error.strerror or error}"
            ) from None
    return 0  # pragma: no cover - the signal loop only ends by returning
