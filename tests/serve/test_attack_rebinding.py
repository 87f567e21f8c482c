"""DNS rebinding and cross-origin pages against a server without tokens (loopback only),
on every surface: a forged ``Host`` is a 421 and a foreign ``Origin`` a 403 before any
surface sees the request, through real HTTP; with tokens, neither is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from conftest import ServeHTTP
from satsuma.serve import create_token
from satsuma.testing import ScriptedModel


class Support(satsuma.Agent):
    """Answers questions."""

    name = "support"


_MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
_A2A_SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {
        "message": {
            "messageId": "m1",
            "role": "ROLE_USER",
            "parts": [{"text": "pay the attacker"}],
        }
    },
}
_AGUI_RUN = {
    "threadId": "t1",
    "runId": "r1",
    "state": {},
    "messages": [{"id": "u1", "role": "user", "content": "pay the attacker"}],
    "tools": [],
    "context": [],
    "forwardedProps": {},
}

# (method, path, body): one request on each surface, and the app's own paths.
_REQUESTS: list[tuple[str, str, Any]] = [
    ("POST", "/v1/agents/support/c1/runs", {"prompt": "pay the attacker"}),
    ("GET", "/v1/approvals", None),
    ("GET", "/v1/agents/support/c1/messages", None),
    ("POST", "/a2a/support", _A2A_SEND),
    ("GET", "/a2a/support/.well-known/agent-card.json", None),
    ("POST", "/ag-ui/support", _AGUI_RUN),
    ("GET", "/console", None),
    ("GET", "/console/api/overview", None),
    ("POST", "/mcp", _MCP_LIST),
    ("GET", "/readyz", None),
    ("GET", "/nowhere", None),
]
_HEADERS = {"Accept": "application/json, text/event-stream"}


def _ids(request: tuple[str, str, Any]) -> str:
    return f"{request[0]} {request[1]}"


@pytest.mark.parametrize("request_", _REQUESTS, ids=_ids)
@pytest.mark.parametrize(
    ("forged", "status", "kind"),
    [
        ({"Host": "attacker.example:8000"}, 421, "misdirected"),
        ({"Host": "attacker.example"}, 421, "misdirected"),
        ({"Host": "127.0.0.1.attacker.example"}, 421, "misdirected"),
        ({"Host": ""}, 421, "misdirected"),
        ({"Origin": "http://attacker.example"}, 403, "forbidden"),
        ({"Origin": "null"}, 403, "forbidden"),
        ({"Origin": "http://127.0.0.1.attacker.example:80"}, 403, "forbidden"),
    ],
    ids=["host-port", "host", "host-prefix", "host-empty", "origin", "origin-null", "origin-x"],
)
async def test_a_browser_from_elsewhere_is_refused_on_every_path(
    serve_http: ServeHTTP,
    request_: tuple[str, str, Any],
    forged: dict[str, str],
    status: int,
    kind: str,
) -> None:
    method, path, body = request_
    model = ScriptedModel([])
    async with serve_http([Support], model={"support": model}) as served:
        answer = await served.client.request(
            method, path, json=body, headers={**_HEADERS, **forged}
        )
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert error["type"] == kind
        assert ("Host" if status == 421 else "origin") in error["message"]
        # Nothing ran: the forged request never reached an agent.
        assert await served.server.asgi.runs.runs("support") == []


async def test_this_machines_names_and_pages_are_served(serve_http: ServeHTTP) -> None:
    model = ScriptedModel(["Hello."])
    async with serve_http([Support], model={"support": model}) as served:
        port = served.url.rsplit(":", 1)[1]
        for host, origin in [
            (f"127.0.0.1:{port}", None),
            (f"localhost:{port}", f"http://localhost:{port}"),
            ("localhost", "http://127.0.0.2:3000"),
            (f"[::1]:{port}", f"https://[::1]:{port}"),
        ]:
            headers = {"Host": host, **({"Origin": origin} if origin else {})}
            answer = await served.client.get("/v1/approvals", headers=headers)
            assert answer.status_code == 200, (host, origin, answer.text)
        answer = await served.client.post(
            "/v1/agents/support/c1/runs", json={"prompt": "hi"}, headers={"Host": "localhost"}
        )
        assert answer.status_code == 200 and answer.json()["output"] == "Hello."


async def test_an_origin_on_the_cors_list_is_served(serve_http: ServeHTTP) -> None:
    origin = "https://app.example"
    async with serve_http([Support], cors_origins=[origin]) as served:
        answer = await served.client.get("/v1/approvals", headers={"Origin": origin})
        assert answer.status_code == 200, answer.text
        assert answer.headers["access-control-allow-origin"] == origin
        other = await served.client.get(
            "/v1/approvals", headers={"Origin": "https://other.example"}
        )
        assert other.status_code == 403


async def test_with_tokens_the_token_is_the_check(serve_http: ServeHTTP, tmp_path: Path) -> None:
    # Behind a proxy the Host is the public name, and pages of other origins may hold a
    # token: neither is refused, and a forged request without the token is a 401.
    token = create_token(tmp_path / "tokens.txt", name="ops", scopes=["run", "read"])
    async with serve_http([Support], tokens=tmp_path / "tokens.txt") as served:
        forged = {"Host": "agents.example.com", "Origin": "https://elsewhere.example"}
        answer = await served.client.get(
            "/v1/approvals", headers={**forged, "Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200, answer.text
        refused = await served.client.get("/v1/approvals", headers=forged)
        assert refused.status_code == 401


async def test_a_request_without_host_is_no_browsers_and_is_served(serve_http: ServeHTTP) -> None:
    # HTTP/1.0 may leave Host out; a browser never does (it sends the name it resolved).
    async with serve_http([Support]) as served:
        host, port = served.url.removeprefix("http://").rsplit(":", 1)
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(b"GET /v1/approvals HTTP/1.0\r\n\r\n")
            received = b""
            while chunk := await stream.receive_some():
                received += chunk
        assert received.startswith(b"HTTP/1.1 200"), received[:200]
