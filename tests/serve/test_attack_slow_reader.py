"""Attacking the event streams with clients that read slowly or not at all, through real
HTTP: a raw socket with a tiny receive buffer opens ``/v1/runs/{id}/events`` (or an
AG-UI run) and reads nothing while a run sends megabytes of events. The run and the
other clients must go on, lose nothing, and the server must keep no more for the slow
one than its bounded event log (past it, the slow one is told what it lost)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

import satsuma
from conftest import Served, ServeHTTP
from satsuma.serve._open_runs import open_local_runs
from satsuma.testing import ScriptedModel

# One TextDelta event a word: 1,000 words of 4,000 characters, some 4 MB of events
# (and as much again in the RunEnd that carries the answer): more than the kernel
# buffers of the slow client's connection hold.
_WORD = "x" * 4000
_WORDS = 1000


class Writer(satsuma.Agent):
    name = "writer"


def _long_answer(word: str = _WORD) -> str:
    return " ".join([word] * _WORDS)


@asynccontextmanager
async def _slow_client(served: Served, request: bytes) -> AsyncIterator[trio.SocketStream]:
    """A connection that sent ``request`` and reads nothing until the test says: its
    receive buffer is as small as the kernel allows, so the server's sends soon block."""
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    async with stream:
        await stream.send_all(request)
        yield stream


async def _read_to_end(stream: trio.SocketStream) -> bytes:
    received = b""
    while chunk := await stream.receive_some(65536):
        received += chunk
        if received.endswith(b"\r\n0\r\n\r\n"):  # the chunked answer's last chunk
            break
    return received


def _events(raw: bytes) -> list[tuple[int | None, dict[str, Any]]]:
    """The SSE events of a chunked HTTP answer read off a raw socket: (id, data)."""
    _, _, body = raw.partition(b"\r\n\r\n")
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        text += rest[:size]
        body = rest[size + 2 :]
    found: list[tuple[int | None, dict[str, Any]]] = []
    for block in text.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            event_id = int(fields["id"]) if "id" in fields else None
            found.append((event_id, json.loads(fields["data"])))
    return found


async def _read_sse(client: httpx.AsyncClient, path: str) -> list[tuple[int, dict[str, Any]]]:
    async with client.stream("GET", path) as answer:
        assert answer.status_code == 200
        raw = (await answer.aread()).decode()
    found = []
    for block in raw.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            found.append((int(fields["id"]), json.loads(fields["data"])))
    return found


async def test_a_client_that_reads_nothing_stalls_no_run_and_no_other_client(
    serve_http: ServeHTTP,
) -> None:
    model = ScriptedModel([_long_answer(), "Short answer."])
    async with serve_http([Writer], model={"writer": model}) as served:
        client = served.client
        started = await client.post(
            "/v1/agents/writer/long/runs", json={"prompt": "write", "wait": False}
        )
        run_id = started.json()["run_id"]
        request = f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
        async with _slow_client(served, request) as slow:
            # Another client reads the whole stream, every event once, in order.
            fast = await _read_sse(client, f"/v1/runs/{run_id}/events")
            ids = [event_id for event_id, _ in fast]
            assert ids == list(range(1, len(ids) + 1))
            deltas = [data for _, data in fast if data["type"] == "TextDelta"]
            assert len(deltas) == _WORDS
            assert fast[-1][1]["type"] == "RunEnd"
            # The run ended while the slow client held its stream unread.
            view = (await client.get(f"/v1/runs/{run_id}")).json()
            assert view["status"] == "completed"
            # Another conversation runs meanwhile.
            other = await client.post("/v1/agents/writer/other/runs", json={"prompt": "hi"})
            assert other.json()["output"] == "Short answer."
            # The slow client, reading at last, gets every event too (the log kept them).
            slow_events = _events(await _read_to_end(slow))
        assert [event_id for event_id, _ in slow_events] == ids
        assert slow_events[-1][1]["type"] == "RunEnd"


async def test_a_client_too_far_behind_is_told_what_it_lost(serve_http: ServeHTTP) -> None:
    # A log of 20 events: the server keeps no more for a slow client than that (and what
    # the kernel buffers of its connection hold, some 4 MB), however long the run: here
    # 8 MB of deltas.
    model = ScriptedModel([_long_answer("x" * 8_000), "Short answer."])

    def runs() -> Any:
        return open_local_runs([Writer], model={"writer": model}, event_limit=20)

    async with serve_http([Writer], runs=runs) as served:
        client = served.client
        started = await client.post(
            "/v1/agents/writer/long/runs", json={"prompt": "write", "wait": False}
        )
        run_id = started.json()["run_id"]
        request = f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
        async with _slow_client(served, request) as slow:
            view = await client.post(f"/v1/runs/{run_id}/cancel")  # ended already: as is
            assert view.json()["status"] == "completed"
            other = await client.post("/v1/agents/writer/other/runs", json={"prompt": "hi"})
            assert other.json()["output"] == "Short answer."
            raw = await _read_to_end(slow)
        events = _events(raw)
        ids = [event_id for event_id, _ in events]
        assert ids == sorted(set(ids))  # increasing: nothing twice
        losses = [data for _, data in events if data["type"] == "EventsLost"]
        assert losses
        # One loss or several (more dropped while it was sent one): each told.
        missed = {n for lost in losses for n in range(lost["first_id"], lost["last_id"] + 1)}
        # Every event either reached it or is counted lost (an EventsLost event bears
        # the last lost id); most were dropped rather than kept for it.
        assert sorted(set(ids) | missed) == list(range(1, ids[-1] + 1))
        assert len(missed) > _WORDS / 4
        assert events[-1][1]["type"] == "RunEnd"


async def test_an_ag_ui_client_that_reads_nothing_stalls_no_run(serve_http: ServeHTTP) -> None:
    model = ScriptedModel([_long_answer(), "Short answer."])
    async with serve_http([Writer], model={"writer": model}) as served:
        body = json.dumps(
            {
                "threadId": "web-1",
                "runId": "r-1",
                "messages": [{"id": "m1", "role": "user", "content": "write"}],
                "tools": [],
                "context": [],
                "forwardedProps": {},
                "state": {},
            }
        ).encode()
        request = (
            b"POST /ag-ui/writer HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
        ) + body
        async with _slow_client(served, request) as slow:
            runs = served.server.asgi.runs
            # The AG-UI run's id is the server's own: wait until the run exists, then
            # for its end (a loop on what the server says, not on time).
            while not (found := await runs.runs("writer", "web-1")):  # noqa: ASYNC110
                await trio.sleep(0.01)
            assert (await runs.wait(found[0].run_id)).status == "completed"
            other = await served.client.post("/v1/agents/writer/other/runs", json={"prompt": "hi"})
            assert other.json()["output"] == "Short answer."
            events = _events(await _read_to_end(slow))
        types = [data["type"] for _, data in events]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
        assert types.count("TEXT_MESSAGE_CONTENT") == _WORDS
