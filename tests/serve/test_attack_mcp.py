"""Attacking ``/mcp`` from a browser: DNS rebinding and cross-origin requests against a
server without tokens (loopback only), through real HTTP with the official mcp client
and with forged ``Host`` and ``Origin`` headers over httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

import satsuma
from conftest import ServeHTTP
from satsuma.serve import create_token
from satsuma.testing import ScriptedModel

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]

_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
_MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


class Support(satsuma.Agent):
    """Answers questions."""

    name = "support"


@asynccontextmanager
async def _session(url: str, **headers: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _served(**options: Any) -> dict[str, Any]:
    return {"model": {"support": ScriptedModel(["Hello from support."])}, **options}


async def test_the_mcp_client_on_loopback_is_served(serve_http: ServeHTTP) -> None:
    async with serve_http([Support], **_served()) as served:
        async with _session(served.url) as session:
            result = await session.call_tool("support", {"prompt": "hi"})
        assert not result.is_error
        (content,) = result.content
        assert isinstance(content, types.TextContent) and content.text == "Hello from support."
        # "localhost" and a same-machine origin are this server too.
        port = served.url.rsplit(":", 1)[1]
        answer = await served.client.post(
            "/mcp",
            json=_LIST,
            headers={
                **_MCP_HEADERS,
                "Host": f"localhost:{port}",
                "Origin": f"http://localhost:{port}",
            },
        )
        assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("headers", "status", "kind"),
    [
        ({"Host": "attacker.example:8000"}, 421, "misdirected"),
        ({"Host": "attacker.example"}, 421, "misdirected"),
        ({"Host": "127.0.0.1.attacker.example"}, 421, "misdirected"),
        ({"Origin": "http://attacker.example"}, 403, "forbidden"),
        ({"Origin": "null"}, 403, "forbidden"),
        ({"Origin": "http://127.0.0.1.attacker.example:80"}, 403, "forbidden"),
    ],
)
async def test_a_forged_host_or_origin_is_refused_without_tokens(
    serve_http: ServeHTTP, headers: dict[str, str], status: int, kind: str
) -> None:
    model = ScriptedModel([])
    async with serve_http([Support], model={"support": model}) as served:
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "support", "arguments": {"prompt": "pay the attacker"}},
        }
        for body in (_LIST, call):
            answer = await served.client.post(
                "/mcp", json=body, headers={**_MCP_HEADERS, **headers}
            )
            assert answer.status_code == status, answer.text
            assert answer.json()["error"]["type"] == kind
        # Nothing ran: the forged call never reached an agent.
        assert await served.server.asgi.runs.runs("support") == []


async def test_the_mcp_client_is_refused_through_a_rebound_name(serve_http: ServeHTTP) -> None:
    async with serve_http([Support], **_served()) as served:
        # The SDK's client turns the 421 into its own error (in trio's exception groups).
        with pytest.raises(BaseExceptionGroup, match="Exceptions from Trio nursery"):
            async with _session(served.url, Host="attacker.example") as session:
                await session.call_tool("support", {"prompt": "hi"})
        assert await served.server.asgi.runs.runs("support") == []


async def test_a_token_vouches_for_its_request_whatever_its_host(
    serve_http: ServeHTTP, tmp_path: Path
) -> None:
    # Behind a proxy the Host is the public name: with tokens, the token is the check.
    token = create_token(tmp_path / "tokens.txt", name="ops", scopes=["run", "read"])
    options = _served(tokens=tmp_path / "tokens.txt")
    async with serve_http([Support], **options) as served:
        answer = await served.client.post(
            "/mcp",
            json=_LIST,
            headers={
                **_MCP_HEADERS,
                "Host": "agents.example.com",
                "Origin": "https://agents.example.com",
                "Authorization": f"Bearer {token}",
            },
        )
        assert answer.status_code == 200, answer.text
        assert "support" in answer.text
        forged = await served.client.post(
            "/mcp", json=_LIST, headers={**_MCP_HEADERS, "Host": "attacker.example"}
        )
        assert forged.status_code == 401
