"""The loopback model servers of ``run.py``, served from a background thread.

Both run in one ``trio.run`` in a thread of the parent process, so that every library
(each measured in a child process) talks to them over loopback HTTP, and a child's CPU
time and memory are its own:

- satsuma's ``MessagesServer`` (the Anthropic Messages API), played by
  ``_conversation.anthropic_responder``;
- a minimal OpenAI Chat Completions endpoint (``POST /v1/chat/completions``, JSON only,
  no streaming), enough for the OpenAI Agents SDK's ``OpenAIChatCompletionsModel``.
"""

from __future__ import annotations

import gc
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import h11
import trio
from _conversation import Captures, anthropic_responder, openai_responder

from satsuma.testing import MessagesServer

__all__ = ["Servers", "serve"]

# MessagesServer plays a finite script; each item is the same function of the request.
# A full run makes some 70,000 requests.
_SCRIPT_LENGTH = 500_000


class Servers:
    """Where the servers listen, and what workload 5's last requests carried."""

    def __init__(self) -> None:
        self.anthropic_url = ""
        self.openai_url = ""
        self.captures = Captures()


async def _next_event(stream: trio.SocketStream, connection: h11.Connection) -> Any:
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        # An empty read (the client closed) tells h11 about the end of the input.
        connection.receive_data(await stream.receive_some(65536))


async def _serve_openai(
    stream: trio.SocketStream, respond: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    connection = h11.Connection(h11.SERVER)
    ids = itertools.count(1)
    try:
        while True:
            request = await _next_event(stream, connection)
            if not isinstance(request, h11.Request):
                return
            body = bytearray()
            while not isinstance(event := await _next_event(stream, connection), h11.EndOfMessage):
                if not isinstance(event, h11.Data):
                    return
                body += event.data
            payload = json.loads(body)
            message = respond(payload)
            answer = {
                "id": f"chatcmpl-{next(ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": payload.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
            data = json.dumps(answer).encode()
            headers = [("content-type", "application/json"), ("content-length", str(len(data)))]
            for out in (
                h11.Response(status_code=200, headers=headers),
                h11.Data(data=data),
                h11.EndOfMessage(),
            ):
                await stream.send_all(connection.send(out) or b"")
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
        return
    finally:
        await trio.aclose_forcefully(stream)


async def _main(servers: Servers, ready: threading.Event, stop: trio.Event) -> None:
    responder = anthropic_responder(servers.captures)
    openai_respond = openai_responder(servers.captures)

    def respond(body: dict[str, Any]) -> Any:
        # MessagesServer keeps every request it was sent (for tests to look at); a full
        # run sends some 70,000, the largest with a hundred tool results: kept, they grew
        # this process by gigabytes, contender after contender, and with it the time its
        # collections take. What workload 5 needs is kept by the responder (captures).
        anthropic_server.requests.clear()
        return responder(body)

    anthropic_server = MessagesServer([respond] * _SCRIPT_LENGTH)
    # The script's deque would otherwise be traversed by every full collection of this
    # process, slowing the server down at random moments.
    gc.freeze()
    async with anthropic_server:
        servers.anthropic_url = anthropic_server.base_url
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            servers.openai_url = f"http://127.0.0.1:{port}/v1"

            async def handler(stream: trio.SocketStream) -> None:
                await _serve_openai(stream, openai_respond)

            nursery.start_soon(trio.serve_listeners, handler, listeners)
            ready.set()
            await stop.wait()
            nursery.cancel_scope.cancel()


@contextmanager
def serve() -> Iterator[Servers]:
    """Run both servers in a background thread for the block."""
    servers = Servers()
    ready = threading.Event()
    token_box: list[Any] = []
    stop_box: list[trio.Event] = []
    errors: list[BaseException] = []

    async def root() -> None:
        token_box.append(trio.lowlevel.current_trio_token())
        stop = trio.Event()
        stop_box.append(stop)
        await _main(servers, ready, stop)

    def target() -> None:
        try:
            trio.run(root)
        except BaseException as exc:  # reported to the main thread, which re-raises it
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=target, name="loopback-servers", daemon=True)
    thread.start()
    ready.wait()
    if errors:
        raise errors[0]
    try:
        yield servers
    finally:
        trio.from_thread.run_sync(stop_box[0].set, trio_token=token_box[0])
        thread.join()
        if errors:
            raise errors[0]
