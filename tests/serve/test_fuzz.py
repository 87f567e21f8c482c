"""Bad input never breaks the server (issue 31, item 9): random methods, paths, ids,
headers and bodies on every endpoint the app knows, with tokens and without; never a
500, never an exception out of the app, every error the JSON error shape, and the
server still answers a normal request after each batch.

Most examples are driven in process (the ASGI app called with scope, receive and send,
in front of real LocalRuns and every surface), a smaller part over real HTTP.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_agents import Banker, Greeter

from satsuma.serve import Server, create_token
from satsuma.testing import FakeModel

NAMES = ["greeter", "banker", "nobody", "", "gr%2Feeter", "\u00e9", "x" * 300]
IDS = st.one_of(
    st.sampled_from(["t-1", "", "a%2Fb", "%00", "x" * 201, "..", "%ff", "r-1", "run_1"]),
    st.text(alphabet=string.ascii_letters + string.digits + "-_.~%", min_size=1, max_size=20),
)
METHODS = st.one_of(
    # Mostly the methods the endpoints take, so that most requests reach a surface.
    st.sampled_from(["GET", "POST"]),
    st.sampled_from(["GET", "POST"]),
    st.sampled_from(["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
    st.text(alphabet=string.ascii_uppercase, min_size=1, max_size=8),
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    first, second = draw(IDS), draw(IDS)
    template = draw(
        st.sampled_from(
            [
                "/v1/agents/{n}/{a}/runs",
                "/v1/runs/{a}",
                "/v1/runs/{a}/events",
                "/v1/runs/{a}/cancel",
                "/v1/agents/{n}/{a}/messages",
                "/v1/approvals",
                "/v1/approvals/{a}/{b}",
                "/v1/{a}",
                "/ag-ui/{n}",
                "/ag-ui/{n}/{a}",
                "/mcp",
                "/mcp/{a}",
                "/a2a/{n}",
                "/a2a/{n}/.well-known/agent-card.json",
                "/.well-known/agent-card.json",
                "/healthz",
                "/readyz",
                "/{a}",
                "{a}",
            ]
        )
    )
    return template.format(n=name, a=first, b=second)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = ["prompt", "wait", "if_busy", "decision", "input", "reason", "threadId", "runId",
        "messages", "jsonrpc", "method", "params", "id", "state", "tools", "context"]  # fmt: skip
BODIES = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(st.sampled_from(KEYS), JSON, max_size=6).map(
        lambda value: json.dumps(value).encode()
    ),
    st.just(b'{"prompt": "Hi", "wait": true}'),
    st.just(b'{"prompt": "Hi", "wait": false, "if_busy": "reject"}'),
)


@st.composite
def headers(draw: st.DrawFn, token: str) -> list[tuple[bytes, bytes]]:
    given: list[tuple[bytes, bytes]] = []
    auth = draw(
        st.sampled_from([f"Bearer {token}", f"Bearer {token}", "Bearer nope", "", "Basic x", None])
    )
    if auth is not None:
        given.append((b"authorization", auth.encode()))
    for name in ("content-type", "last-event-id", "accept", "a2a-version", "origin",
                 "content-length", "mcp-session-id", "access-control-request-method"):  # fmt: skip
        if draw(st.booleans()):
            value = draw(
                st.one_of(
                    st.text(max_size=30),
                    st.sampled_from(
                        [
                            "application/json",
                            "text/event-stream",
                            "5",
                            "-1",
                            "99999999999999999999",
                            "1.0",
                            "0.3",
                        ]
                    ),
                )
            )
            given.append((name.encode(), value.encode("utf-8", "replace")))
    return given


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("tokens") / "tokens.txt"
    return path, create_token(path, name="ops", scopes=["run", "read", "approve"])


def server(tokens: Path | None) -> Server:
    return Server([Greeter, Banker], port=0, model=FakeModel(), tokens=tokens)


async def call(
    app: Any, method: str, path: str, hdrs: list[tuple[bytes, bytes]], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    sent: list[dict[str, Any]] = []
    given = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        # After the body, the client is gone: a stream ends, a run goes on.
        return given.pop(0) if given else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "replace"),
        "query_string": b"",
        "headers": hdrs,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    with trio.fail_after(30):  # a hang is a failure, not a stuck suite
        await app(scope, receive, send)
    starts = [message for message in sent if message["type"] == "http.response.start"]
    assert len(starts) == 1, (method, path, sent[:2])
    content = b"".join(
        message.get("body", b"") for message in sent if message["type"] == "http.response.body"
    )
    return starts[0]["status"], starts[0].get("headers", []), content


def check(
    method: str, path: str, status: int, answer_headers: list[tuple[bytes, bytes]], content: bytes
) -> None:
    assert status != 500, (method, path, content[:300])
    assert 200 <= status < 600
    kinds = dict(answer_headers).get(b"content-type", b"")
    if status >= 400 and kinds == b"application/json" and not path.startswith("/mcp"):
        error = json.loads(content)
        assert set(error) == {"error"} and set(error["error"]) == {"type", "message"}, content
        assert "Traceback" not in error["error"]["message"]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_in_process(token_file: tuple[Path, str], data: st.DataObject) -> None:
    path_to_tokens, token = token_file
    served = server(data.draw(st.sampled_from([None, path_to_tokens])))
    async with served.open_runs():
        for _ in range(10):
            method = data.draw(METHODS)
            path = data.draw(paths())
            hdrs = data.draw(headers(token))
            body = data.draw(BODIES)
            status, answer_headers, content = await call(served.asgi, method, path, hdrs, body)
            check(method, path, status, answer_headers, content)
        # Still a server: a normal request is answered.
        auth = [(b"authorization", f"Bearer {token}".encode())]
        status, _, content = await call(
            served.asgi, "POST", "/v1/agents/greeter/after/runs", auth, b'{"prompt": "Hi"}'
        )
        assert status == 200, content
        assert json.loads(content)["status"] == "completed"


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_over_http(token_file: tuple[Path, str], data: st.DataObject) -> None:
    path_to_tokens, token = token_file
    served = server(path_to_tokens)
    async with trio.open_nursery() as nursery:
        await nursery.start(served.serve)
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            for _ in range(5):
                method = data.draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
                path = data.draw(paths())
                if not path.startswith("/"):
                    path = "/" + path
                hdrs = {
                    name.decode(): value.decode()
                    for name, value in data.draw(headers(token))
                    if name not in (b"content-length",)
                    and value.isascii()
                    and value.strip() == value
                    and all(32 <= ord(c) < 127 for c in value.decode())
                }
                body = data.draw(BODIES)
                answer = await client.request(method, path, headers=hdrs, content=body)
                check(
                    method,
                    path,
                    answer.status_code,
                    [(k.encode(), v.encode()) for k, v in answer.headers.items()],
                    answer.content,
                )
            ok = await client.post(
                "/v1/agents/greeter/after/runs",
                json={"prompt": "Hi"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert ok.status_code == 200, ok.text
        nursery.cancel_scope.cancel()
