"""The processes of ``benchmarks/serve.py``: servers and load generators, each run as
``python benchmarks/_serve_roles.py ROLE ARGS...`` so that no two share a trio thread.

A deployment's clients are not in its server's process: a client in the same process
and the same trio thread as the server (as httpx was before) spends the server's CPU
parsing its own answers, and on two cores that alone held HTTP to 0.3x of in process.
Here every server is a process of its own, serving until its stdin closes, and every
load generator is another, reading plain sockets with as little Python as it can (as
wrk or h2load would): what it costs is on the other core, not the server's.

Servers print their URL on a line; load generators print one JSON line of figures.
Only the servers and the in-process runs import satsuma (the load generators start
faster without it). ``PROFILE=FILE`` runs a role under cProfile, its stats into FILE.
"""

from __future__ import annotations

import cProfile
import json
import logging
import os
import select
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

Scope = dict[str, Any]


async def _stdin_closed() -> None:
    """Return once the parent closes this process's stdin (or dies)."""
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass


# --- servers -----------------------------------------------------------------------------


async def serve_api() -> None:
    """satsuma's server, both agents, no caps in the way of a load test."""
    from _serve_agents import Echo, Ticker, echo, ticker_model

    from satsuma.serve import Server
    from satsuma.testing import FunctionModel

    model = {"echo": FunctionModel(echo, keep_requests=0), "ticker": FunctionModel(ticker_model)}
    server = Server(
        [Echo, Ticker], port=0, model=model, max_runs_per_token=10**6, max_subscribers=100_000
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print(server.url, flush=True)
        await _stdin_closed()
        server.shutdown()


# What the floor answers to a POST: a run's JSON as the API answers it, of the same size.
RUN_JSON = json.dumps({
    "run_id": "run_0123456789ab", "agent": "echo", "agent_id": "m0", "status": "completed",
    "prompt": "hi", "output": "echo: hi", "error": None,
    "usage": {"input_tokens": 24, "output_tokens": 2, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0},
    "pending": [], "started_at": 1795745021.7910123, "ended_at": 1795745021.7916987,
}).encode()  # fmt: skip


class Ticks:
    """The floor's one event source: the time every half second, for every stream."""

    def __init__(self) -> None:
        self.body = b""
        self.changed = trio.Event()

    async def run(self) -> None:
        while True:
            await trio.sleep(0.5)
            data = json.dumps({"type": "ToolProgress", "text": repr(time.time())})
            self.body = f"event: ToolProgress\ndata: {data}\n\n".encode()
            self.changed, changed = trio.Event(), self.changed
            changed.set()


def floor_app(ticks: Ticks) -> Callable[[Scope, Any, Any], Awaitable[None]]:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        """The least an ASGI app on hypercorn can do: answer a POST with a run's JSON,
        and hold a GET open as an event stream, sending each tick as one chunk."""
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"].removeprefix("lifespan.")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        while (await receive()).get("more_body", False):
            pass
        if scope["method"] == "GET":
            headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                await ticks.changed.wait()
                await send({"type": "http.response.body", "body": ticks.body, "more_body": True})
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(RUN_JSON)).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": RUN_JSON})

    return app


async def serve_floor() -> None:
    """A bare ASGI app on the same hypercorn, configured as ``Server`` configures it."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind, config.accesslog, config.backlog = ["127.0.0.1:0"], None, 4096
    config.errorlog = logging.getLogger("floor")  # not its "Running on" line
    ticks = Ticks()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        app = floor_app(ticks)
        binds = await nursery.start(
            lambda task_status: serve(
                app, config, shutdown_trigger=stop.wait, mode="asgi", task_status=task_status
            )
        )
        nursery.start_soon(ticks.run)
        print(binds[0], flush=True)
        await _stdin_closed()
        stop.set()
        nursery.cancel_scope.cancel()


# --- load generators ---------------------------------------------------------------------


async def read_answer(stream: trio.SocketStream, buffer: bytearray) -> bytes:
    """Read one HTTP/1.1 answer with a Content-Length; return its status, keep the rest."""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buffer[:end]).lower()
            at = head.index(b"content-length:") + 15
            length = int(head[at : head.index(b"\r\n", at)] if b"\r\n" in head[at:] else head[at:])
            if len(buffer) >= end + 4 + length:
                del buffer[: end + 4 + length]
                return head[9:12]
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buffer += chunk


async def post_load(url: str, path: str, conversations: int, runs: int) -> None:
    """``conversations`` connections at once, each posting ``runs`` times in a row to
    ``path`` (``{n}``: the conversation's number); prints runs per second. The
    connections are opened before the clock starts, as separate callers' would be."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = b'{"prompt": "hi"}'
    streams = [await trio.open_tcp_stream(host, int(port)) for _ in range(conversations)]

    async def conversation(n: int) -> None:
        request = (
            f"POST {path.format(n=n)} HTTP/1.1\r\nhost: {host}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body
        buffer = bytearray()
        for _ in range(runs):
            await streams[n].send_all(request)
            status = await read_answer(streams[n], buffer)
            assert status == b"200", (status, bytes(buffer))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for n in range(conversations):
            nursery.start_soon(conversation, n)
    rate = conversations * runs / (time.perf_counter() - start)
    for stream in streams:
        await stream.aclose()
    print(json.dumps({"rate": rate}), flush=True)


async def in_process(conversations: int, runs: int) -> None:
    """The same runs in process: ``conversations`` agents opened at once, each running
    ``runs`` runs in a row; prints runs per second."""
    from _serve_agents import Echo, echo

    import satsuma
    from satsuma.testing import FunctionModel

    model = FunctionModel(echo, keep_requests=0)
    async with satsuma.open_agent(Echo, model=model) as agent:  # imports, first-use costs
        await agent.run("warm")

    async def conversation(n: int) -> None:
        async with satsuma.open_agent(Echo, model=model) as agent:
            for _ in range(runs):
                assert (await agent.run("hi")).status == "completed"

    start, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for n in range(conversations):
            nursery.start_soon(conversation, n)
    rate = conversations * runs / (time.perf_counter() - start)
    cpu_ms = (time.process_time() - cpu) * 1000 / (conversations * runs)
    print(json.dumps({"rate": rate, "cpu ms": cpu_ms}), flush=True)


def subscribe(url: str, path: str, count: int, seconds: float) -> None:
    """Hold ``count`` event streams of ``path`` open on plain sockets under one epoll,
    print ``open N`` once every stream's head came, then for ``seconds`` note when each
    tick (a ``ToolProgress`` event carrying the time it was sent) reached each stream.

    A tick's arrival is the time the poll that found it returned, not the time this
    process got round to reading that socket: reading a thousand sockets one after the
    other is the client's cost, not the server's. Prints ``{"reach": [...]}`` (each
    whole tick's time until the last stream had it, in seconds) and keeps the streams
    open until stdin closes, so the parent can read the server's RSS with them held.
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    request = f"GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
    poll = select.epoll()
    sockets: dict[int, socket.socket] = {}
    for _ in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(request)
        sock.setblocking(False)
        sockets[sock.fileno()] = sock
        poll.register(sock.fileno(), select.EPOLLIN)
    opened: set[int] = set()
    rest = dict.fromkeys(sockets, b"")
    measuring = float("inf")
    arrivals: dict[float, list[float]] = {}  # a tick's time -> when each stream had it
    deadline = time.time() + 120
    while time.time() < deadline:
        if len(opened) == count and measuring == float("inf"):
            print(f"open {count}", flush=True)
            measuring, deadline = time.time(), time.time() + seconds
        ready = poll.poll(0.5)
        now = time.time()
        for fd, _ in ready:
            chunk = sockets[fd].recv(65536)
            if not chunk:
                raise ConnectionError("the server closed an event stream")
            opened.add(fd)
            *lines, rest[fd] = (rest[fd] + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and b'"ToolProgress"' in line:
                    sent = float(json.loads(line[6:])["text"])
                    if sent >= measuring:  # older ticks are replayed to a new stream
                        arrivals.setdefault(sent, []).append(now - sent)
    reach = [max(got) for got in arrivals.values() if len(got) == len(opened)]
    print(json.dumps({"open": len(opened), "reach": reach, "ticks": len(arrivals)}), flush=True)
    sys.stdin.read()
    for sock in sockets.values():
        sock.close()


def main(role: str, args: list[str], profile: str | None) -> None:
    """Run ``role`` with its arguments; under cProfile into ``profile`` when given."""
    logging.disable(logging.WARNING)  # a server's own lines are not the benchmark's output
    # CPU time, not wall time: on a busy machine a wall clock charges whatever ran when
    # the scheduler took the CPU away (often a system call) with the wait.
    profiler = cProfile.Profile(time.process_time) if profile else None
    if profiler is not None:
        profiler.enable()
    try:
        if role == "api":
            trio.run(serve_api)
        elif role == "floor":
            trio.run(serve_floor)
        elif role == "post":
            trio.run(post_load, args[0], args[1], int(args[2]), int(args[3]))
        elif role == "in-process":
            trio.run(in_process, int(args[0]), int(args[1]))
        elif role == "subscribe":
            subscribe(args[0], args[1], int(args[2]), float(args[3]))
        else:
            raise SystemExit(f"unknown role: {role}")
    finally:
        if profiler is not None and profile is not None:
            profiler.disable()
            profiler.dump_stats(profile)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:], os.environ.get("PROFILE") or None)
