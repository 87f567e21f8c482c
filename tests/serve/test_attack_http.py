"""Attacking the HTTP framing: request smuggling basics and oversized headers, sent as raw
bytes on a real socket to the server on hypercorn's trio worker (127.0.0.1, port 0).

What is checked for each: no 500, no crash (the server answers the next client), and a
body is read as one framing says, never two ways at once. hypercorn's h11 parses the
requests: with both ``Transfer-Encoding`` and ``Content-Length`` the transfer coding
wins (RFC 9112, 6.3), so a run sees exactly the chunked body."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import satsuma
from conftest import Served, ServeHTTP
from satsuma.store import SQLiteStore
from satsuma.testing import ScriptedModel

_BODY = b'{"prompt": "hi"}'


class Support(satsuma.Agent):
    name = "support"


async def _exchange(served: Served, data: bytes, answers: int) -> list[tuple[int, bytes]]:
    """Send ``data`` on a fresh connection; read ``answers`` responses (status, body), or
    fewer if the server closes the connection first. Every answer here has a
    Content-Length (the app's JSON and hypercorn's refusals alike)."""
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    found: list[tuple[int, bytes]] = []
    buffer = b""
    with trio.fail_after(30):  # against a hang only: nothing here is about time
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(data)
            while len(found) < answers:
                head, sep, rest = buffer.partition(b"\r\n\r\n")
                if sep:
                    lines = head.decode("latin-1").split("\r\n")
                    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
                    length = int(fields["content-length"])
                    if len(rest) >= length:
                        found.append((int(lines[0].split()[1]), rest[:length]))
                        buffer = rest[length:]
                        continue
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                buffer += chunk
    return found


def _post(agent_id: str, headers: bytes, body: bytes) -> bytes:
    return (
        f"POST /v1/agents/support/{agent_id}/runs HTTP/1.1\r\nHost: localhost\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + headers
        + b"\r\n"
        + body
    )


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


async def _still_serves(served: Served) -> None:
    assert (await served.client.get("/healthz")).status_code == 200
    answer = await served.client.post("/v1/agents/support/after/runs", json={"prompt": "again"})
    assert answer.status_code == 200, answer.text


async def test_content_length_and_transfer_encoding_together(
    serve_http: ServeHTTP, tmp_path: Path
) -> None:
    model = ScriptedModel(["one", "two", "three"])
    async with (
        SQLiteStore(tmp_path / "agents.db") as store,
        serve_http([Support], store=store, model={"support": model}) as served,
    ):
        # The Content-Length (4) would cut the JSON; the chunked body is read instead.
        both = _post("a", b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", _chunked(_BODY))
        ((status, body),) = await _exchange(served, both, 1)
        assert status == 200, body
        assert b'"prompt": "hi"' in body
        # Chunked, then a Content-Length that would swallow a second request: the second
        # is a request of its own (TE framing), answered on its own, not part of a body.
        second = b"GET /v1/runs/nope HTTP/1.1\r\nHost: localhost\r\n\r\n"
        smuggled = _post(
            "b", b"Transfer-Encoding: chunked\r\nContent-Length: 45\r\n", b"0\r\n\r\n" + second
        )
        answers = await _exchange(served, smuggled, 2)
        assert [status for status, _ in answers] == [400, 404]
        assert b"prompt" in answers[0][1] and b"no run" in answers[1][1]
        assert (await served.client.get("/v1/agents/support/b/messages")).json()["messages"] == []
        await _still_serves(served)


async def test_a_body_longer_than_declared_is_not_read_past_its_length(
    serve_http: ServeHTTP,
) -> None:
    model = ScriptedModel(["one", "two"])
    async with serve_http([Support], model={"support": model}) as served:
        # The declared 16 bytes are the body; what follows is a next "request" of garbage.
        extra = _post("a", b"Content-Length: 16\r\n", _BODY + b'", "more": "x"}\r\n\r\n')
        answers = await _exchange(served, extra, 2)
        assert answers[0][0] == 200 and b'"prompt": "hi"' in answers[0][1]
        assert all(status == 400 for status, _ in answers[1:])
        messages = (await served.client.get("/v1/agents/support/a/messages")).json()["messages"]
        (user,) = [m for m in messages if m["role"] == "user"]
        assert user["content"] == [{"type": "text", "text": "hi"}]
        await _still_serves(served)


async def test_a_body_shorter_than_declared_starts_no_run(serve_http: ServeHTTP) -> None:
    model = ScriptedModel(["after"])
    async with serve_http([Support], model={"support": model}) as served:
        host, port = served.url.removeprefix("http://").rsplit(":", 1)
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(_post("short", b"Content-Length: 100\r\n", _BODY))
            # Another client is served while this one's body is incomplete; no run yet.
            assert (await served.client.get("/healthz")).status_code == 200
            assert await served.server.asgi.runs.runs("support", "short") == []
        # The client went away mid-body: nothing was run, the server serves the next one.
        await _still_serves(served)
        assert await served.server.asgi.runs.runs("support", "short") == []
        await _still_serves(served)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        # A header past hypercorn's h11_max_incomplete_size (16 KiB).
        (
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
            431,
        ),
        (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n", 431),
        (_post("a", b"Content-Length: 16\r\nContent-Length: 17\r\n", _BODY), 400),
        (_post("a", b"Transfer-Encoding : chunked\r\nContent-Length: 3\r\n", b"abc"), 400),
        (_post("a", b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"), 501),
        (_post("a", b"Content-Length: -1\r\n", b""), 400),
        (_post("a", b"Content-Length: 99999999999999999999\r\n", b""), 413),
        (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Bad\x00: 1\r\n\r\n", 400),
        # An obsolete line folding is unfolded into one value (RFC 9112, 5.2 lets a server).
        (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: 1\r\n folded\r\n\r\n", 200),
    ],
)
async def test_malformed_framing_is_refused_never_a_500(
    serve_http: ServeHTTP, request_bytes: bytes, status: int
) -> None:
    model = ScriptedModel(["after"])
    async with serve_http([Support], model={"support": model}) as served:
        answers = await _exchange(served, request_bytes, 1)
        assert [s for s, _ in answers] == [status]
        assert await served.server.asgi.runs.runs("support", "a") == []
        await _still_serves(served)
