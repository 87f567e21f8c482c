"""The app in front of every surface, over real HTTP: health, routing, tokens and scopes,
the body limit, JSON errors (the Runs exceptions mapped in one place, a bug a bare 500),
CORS, the cap on runs in flight, SSE streams and their cap, and a clean stop."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from satsuma.serve import Server, ServerSentEvent, create_token

pytestmark = pytest.mark.filterwarnings("error")


def error_of(answer: httpx.Response) -> dict[str, str]:
    body = json.loads(answer.content)
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "message"}, body
    assert answer.headers["content-type"] == "application/json"
    return dict(body["error"])


async def test_health_and_readiness(serve_http: Any, echo: Any, tiny_runs: Any) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        live = await served.client.get("/healthz")
        assert (live.status_code, live.json()) == (200, {"status": "ok"})
        ready = await served.client.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        tiny_runs.is_ready = False
        waiting = await served.client.get("/readyz")
        assert waiting.status_code == 503
        assert error_of(waiting) == {"type": "unavailable", "message": "the store is not open yet"}
        posted = await served.client.post("/healthz")
        assert posted.status_code == 405


async def test_routing_and_json_errors(serve_http: Any, echo: Any, tiny_runs: Any) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        client = served.client
        echoed = await client.post("/test/echo?a=1&b=&a=2", content=b"hi")
        assert echoed.json() == {
            "method": "POST",
            "path": "/test/echo",
            "query": {"a": "2", "b": ""},
            "body": "hi",
            "principal": None,
        }
        assert (await client.get("/elsewhere")).status_code == 404
        assert error_of(await client.get("/")) == {"type": "not_found", "message": "no such path"}
        created = await client.post("/test/json", json={"x": [1, "ü"]})
        assert (created.status_code, created.json()) == (201, {"got": {"x": [1, "ü"]}})
        for body, expected in [
            (b"", "the body is empty: expected JSON"),
            (b"\xff\xfe", "the body is not UTF-8"),
            (b"{", "the body is not JSON"),
            (b"NaN", "the body is not JSON: NaN is not JSON"),
            (b"[" * 100_000, "the body's JSON nests too deep"),
        ]:
            answer = await client.post("/test/json", content=body)
            assert answer.status_code == 400, body[:10]
            assert error_of(answer)["message"].startswith(expected)


@pytest.mark.parametrize(
    ("what", "status", "kind"),
    [
        ("unknown-run", 404, "not_found"),
        ("unknown-agent", 404, "unknown_agent"),
        ("busy", 409, "busy"),
        ("decided", 409, "already_decided"),
        ("bad-decision", 400, "bad_decision"),
        ("value", 400, "bad_request"),
        ("teapot", 418, "teapot"),
    ],
)
async def test_runs_exceptions_are_mapped_once_for_every_surface(
    serve_http: Any, echo: Any, tiny_runs: Any, what: str, status: int, kind: str
) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        answer = await served.client.get(f"/test/raise/{what}")
        assert answer.status_code == status
        assert error_of(answer)["type"] == kind
        if what == "teapot":
            assert answer.headers["x-kind"] == "tea"


async def test_a_bug_is_a_bare_500_and_logged(
    serve_http: Any, echo: Any, tiny_runs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        with caplog.at_level(logging.ERROR, logger="satsuma.serve"):
            answer = await served.client.get(
                "/test/raise/bug", headers={"Authorization": "Bearer sat_never-logged"}
            )
        assert answer.status_code == 500
        assert error_of(answer) == {"type": "internal", "message": "internal error"}
        assert "secret" not in answer.text and "Traceback" not in answer.text
        assert "a bug: secret internals" in caplog.text  # the log has the traceback
        assert "sat_never-logged" not in caplog.text
        assert (await served.client.get("/healthz")).status_code == 200


async def test_agent_id_rules(serve_http: Any, echo: Any, tiny_runs: Any) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        good = await served.client.get("/test/agent/ticket-42%20ü")
        assert good.json() == {"agent_id": "ticket-42 ü"}
        assert (await served.client.get("/test/agent/" + "x" * 200)).status_code == 200
        for bad in ["x" * 201, "a%2Fb", "a%0Ab", "a%7Fb", ""]:
            answer = await served.client.get(f"/test/agent/{bad}")
            assert answer.status_code == 400, bad
            assert "agent_id" in error_of(answer)["message"]


async def test_body_limit(serve_http: Any, echo: Any, tiny_runs: Any) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo], max_body=1000) as served:
        client = served.client
        assert (await client.post("/test/echo", content=b"x" * 1000)).status_code == 200
        declared = await client.post("/test/echo", content=b"x" * 1001)
        assert declared.status_code == 413
        assert error_of(declared) == {"type": "too_large", "message": "the body is over 1000 bytes"}

        async def chunks() -> Any:  # no Content-Length: read, and cut at the limit
            for _ in range(20):
                yield b"y" * 100

        streamed = await client.post("/test/echo", content=chunks())
        assert streamed.status_code == 413
        assert (await client.get("/healthz")).status_code == 200


async def test_default_body_limit_is_one_mebibyte(
    serve_http: Any, echo: Any, tiny_runs: Any
) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        assert (await served.client.post("/test/echo", content=b"x" * 2**20)).status_code == 200
        assert (
            await served.client.post("/test/echo", content=b"x" * (2**20 + 1))
        ).status_code == 413


async def test_tokens_and_scopes(
    serve_http: Any, echo: Any, tiny_runs: Any, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.txt"
    ops = create_token(tokens, name="ops", scopes=["run", "read"], agents=["support"])
    boss = create_token(tokens, name="boss", scopes=["admin"])
    async with serve_http(runs=tiny_runs, surfaces=[echo], tokens=tokens) as served:
        client = served.client
        missing = await client.get("/test/echo")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert error_of(missing)["type"] == "unauthorized"
        for header in ["Bearer", "Basic abc", f"Bearer {ops}x", "Bearer sat_", ops]:
            bad = await client.get("/test/echo", headers={"Authorization": header})
            assert bad.status_code == 401, header
            assert ops not in bad.text
        as_ops = {"Authorization": f"Bearer {ops}"}
        echoed = await client.get("/test/echo", headers=as_ops)
        assert echoed.json()["principal"] == "ops"
        assert (await client.get("/test/need/run/support", headers=as_ops)).status_code == 200
        denied = await client.get("/test/need/approve", headers=as_ops)
        assert denied.status_code == 403
        assert error_of(denied) == {
            "type": "forbidden",
            "message": "token 'ops' lacks the scope 'approve'",
        }
        elsewhere = await client.get("/test/need/run/billing", headers=as_ops)
        assert error_of(elsewhere)["message"] == "token 'ops' does not reach the agent 'billing'"
        as_boss = {"authorization": f"bearer {boss}"}
        assert (await client.get("/test/need/approve/billing", headers=as_boss)).status_code == 200
        # Health needs no token: a load balancer's probe has none.
        assert (await client.get("/healthz")).status_code == 200
        # A token added to the file is taken without a restart.
        late = create_token(tokens, name="late", scopes=["read"])
        assert (
            await client.get("/test/echo", headers={"Authorization": f"Bearer {late}"})
        ).status_code == 200
        # A file gone wrong refuses every token rather than the last good copy's.
        tokens.write_text(tokens.read_text() + "garbage\n")
        broken = await client.get("/test/echo", headers=as_boss)
        assert broken.status_code == 503
        assert boss not in broken.text


async def test_runs_in_flight_are_capped_per_token(
    serve_http: Any, echo: Any, tiny_runs: Any, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.txt"
    one = {"Authorization": f"Bearer {create_token(tokens, name='one', scopes=['run'])}"}
    two = {"Authorization": f"Bearer {create_token(tokens, name='two', scopes=['run'])}"}
    options = {"runs": tiny_runs, "surfaces": [echo], "tokens": tokens, "max_runs_per_token": 2}
    async with serve_http(**options) as served:
        client = served.client
        assert (await client.post("/test/run", headers=one)).status_code == 202
        assert (await client.post("/test/run", headers=one)).status_code == 202
        refused = await client.post("/test/run", headers=one)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert error_of(refused)["type"] == "too_many_runs"
        assert (await client.post("/test/run", headers=two)).status_code == 202  # its own cap
        await client.post("/test/release", headers=one)
        assert (await client.post("/test/run", headers=one)).status_code == 202


async def test_cors_is_off_unless_the_origin_is_listed(
    serve_http: Any, echo: Any, tiny_runs: Any
) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        answer = await served.client.options("/test/echo", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers
        plain = await served.client.get("/test/echo", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in plain.headers
    async with serve_http(
        runs=tiny_runs, surfaces=[echo], cors_origins=["https://app.example"]
    ) as served:
        answer = await served.client.options("/test/echo", headers=preflight)
        assert answer.status_code == 204
        assert answer.headers["access-control-allow-origin"] == "https://app.example"
        assert "authorization" in answer.headers["access-control-allow-headers"]
        other = await served.client.options(
            "/test/echo", headers={**preflight, "Origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in other.headers
        plain = await served.client.get("/test/echo", headers={"Origin": "https://app.example"})
        assert plain.headers["access-control-allow-origin"] == "https://app.example"
        failed = await served.client.get(
            "/test/raise/busy", headers={"Origin": "https://app.example"}
        )
        assert failed.headers["access-control-allow-origin"] == "https://app.example"


def test_without_tokens_only_loopback_unless_insecure(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        Server(host=host, runs=object())  # type: ignore[arg-type]
    for host in ("0.0.0.0", "192.168.1.4", "::", "example.com"):
        with pytest.raises(ValueError, match=f"refusing to serve on {host} without tokens"):
            Server(host=host)
        Server(host=host, insecure=True)
    tokens = tmp_path / "tokens.txt"
    create_token(tokens, name="ops", scopes=["read"])
    Server(host="0.0.0.0", tokens=tokens)


def test_two_classes_with_one_name_are_refused() -> None:
    import satsuma

    class One(satsuma.Agent):
        name = "support"

    class Two(satsuma.Agent):
        name = "support"

    with pytest.raises(ValueError, match="two agent classes are named 'support'"):
        Server([One, Two])
    assert list(Server([One, One]).agents) == ["support"]


def test_a_certificate_needs_its_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="certfile and keyfile"):
        Server(certfile=tmp_path / "cert.pem")


async def test_leaving_the_scope_stops_everything(echo: Any, tiny_runs: Any) -> None:
    server = Server(port=0, runs=tiny_runs, surfaces=[echo])
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        url = server.url
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/healthz")).status_code == 200
        nursery.cancel_scope.cancel()
    # Nothing listens any more; the surfaces are gone with the runs.
    async with httpx.AsyncClient(base_url=url) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/healthz")
    assert server.asgi.surfaces == []


async def test_shutdown_ends_streams_and_returns(echo: Any, tiny_runs: Any) -> None:
    server = Server(port=0, runs=tiny_runs, surfaces=[echo])
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with (
            httpx.AsyncClient(base_url=server.url) as client,
            client.stream("GET", "/test/stream") as stream,
        ):
            assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
            echo.surface.streams[0].send.send_nowait(ServerSentEvent("one", id="1"))
            lines = stream.aiter_lines()
            assert [await anext(lines) for _ in range(3)] == ["id: 1", "data: one", ""]
            server.shutdown()  # a drain ends the streams rather than wait for them
            assert [line async for line in lines] == []
        # serve returns by itself once drained: nothing here cancels it.
    assert echo.surface.streams[0].closed.is_set()


async def test_streams(serve_http: Any, echo: Any, tiny_runs: Any) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo]) as served:
        async with served.client.stream("GET", "/test/stream") as stream:
            assert stream.status_code == 200
            assert stream.headers["x-stream"] == "1"
            assert stream.headers["cache-control"] == "no-cache"
            assert stream.headers["x-accel-buffering"] == "no"
            send = echo.surface.streams[0].send
            send.send_nowait(ServerSentEvent('{"a": 1}', id="7", event="update"))
            send.send_nowait(ServerSentEvent("two\nlines"))
            send.close()
            text = (await stream.aread()).decode()
        assert text == 'event: update\nid: 7\ndata: {"a": 1}\n\ndata: two\ndata: lines\n\n'
        # An iterator that fails (an unknown run) ends its stream with an error event.
        async with served.client.stream("GET", "/test/stream/unknown") as stream:
            text = (await stream.aread()).decode()
        assert text == (
            'event: error\ndata: {"error": {"type": "not_found", "message": "no run \'r-2\'"}}\n\n'
        )
        # A client that goes away: its stream's iterator is closed, the server goes on.
        async with served.client.stream("GET", "/test/stream") as stream:
            assert stream.status_code == 200
        await echo.surface.streams[2].closed.wait()
        assert (await served.client.get("/healthz")).status_code == 200


async def test_subscribers_are_capped(serve_http: Any, echo: Any, tiny_runs: Any) -> None:
    async with serve_http(runs=tiny_runs, surfaces=[echo], max_subscribers=2) as served:
        async with (
            served.client.stream("GET", "/test/stream") as first,
            served.client.stream("GET", "/test/stream") as second,
        ):
            assert (first.status_code, second.status_code) == (200, 200)
            third = await served.client.get("/test/stream")
            assert third.status_code == 503
            assert third.headers["retry-after"] == "5"
            assert "event streams are open already" in error_of(third)["message"]
        for stream in echo.surface.streams[:2]:
            await stream.closed.wait()
        async with served.client.stream("GET", "/test/stream") as fourth:
            assert fourth.status_code == 200
