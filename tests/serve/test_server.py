"""``Server`` with its real runs (agents in this process, a SQLite file) and satsuma's
API, over real HTTP: a run through the front door, tokens reaching the API, the caps
applied, and nothing left running once the server's scope ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from serve_agents import Greeter, scripted

from satsuma.serve import Server, create_token
from satsuma.store import SQLiteStore


async def test_a_run_through_the_server(serve_http: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    runner = create_token(tokens, name="runner", scopes=["run", "read"], agents=["greeter"])
    reader = create_token(tokens, name="reader", scopes=["read"])
    store = SQLiteStore(tmp_path / "agents.db")
    async with serve_http(
        [Greeter], store=store, model=scripted("Hello!"), tokens=tokens
    ) as served:
        client = served.client
        assert (await client.get("/readyz")).status_code == 200
        body = {"prompt": "Hi", "wait": True}
        assert (await client.post("/v1/agents/greeter/t-1/runs", json=body)).status_code == 401
        refused = await client.post(
            "/v1/agents/greeter/t-1/runs",
            json=body,
            headers={"Authorization": f"Bearer {reader}"},
        )
        assert refused.status_code == 403
        answer = await client.post(
            "/v1/agents/greeter/t-1/runs",
            json=body,
            headers={"Authorization": f"Bearer {runner}"},
        )
        assert answer.status_code == 200, answer.text
        run = answer.json()
        assert (run["status"], run["output"], run["agent"], run["agent_id"]) == (
            "completed",
            "Hello!",
            "greeter",
            "t-1",
        )
        again = await client.get(
            f"/v1/runs/{run['run_id']}", headers={"Authorization": f"Bearer {reader}"}
        )
        assert again.json()["status"] == "completed"
        bad = await client.post(
            "/v1/agents/greeter/t-1/runs",
            content=b"x" * (2**20 + 1),
            headers={"Authorization": f"Bearer {runner}"},
        )
        assert bad.status_code == 413


def every_task() -> set[trio.lowlevel.Task]:
    tasks: set[trio.lowlevel.Task] = set()
    waiting = [trio.lowlevel.current_root_task()]
    while waiting:
        task = waiting.pop()
        tasks.add(task)
        waiting.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return tasks


async def test_leaving_serve_stops_every_task(tmp_path: Path) -> None:
    before = every_task()
    server = Server(
        [Greeter], port=0, model=scripted("Hello!"), store=SQLiteStore(tmp_path / "a.db")
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with httpx.AsyncClient(base_url=server.url) as client:
            answer = await client.post("/v1/agents/greeter/a/runs", json={"prompt": "Hi"})
            assert answer.status_code == 200
        assert len(every_task() - before) > 3  # hypercorn, the supervisor, the agent...
        nursery.cancel_scope.cancel()
    # Hypercorn, the supervisor, the agents and the run tasks all ended with the scope;
    # nothing listens on the port.
    assert every_task() == before
    async with httpx.AsyncClient(base_url=server.url) as client:
        try:
            await client.get("/healthz")
        except httpx.ConnectError:
            pass
        else:
            raise AssertionError("the server still answers")


# The MCP SDK's client leaves its response streams to the garbage collector on close,
# which trio reports as a ResourceWarning (an SDK matter, as in test_mcp.py).
@pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning")
@pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning")
async def test_every_surface_is_behind_the_tokens(serve_http: Any, tmp_path: Path) -> None:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    tokens = tmp_path / "tokens.txt"
    token = create_token(tokens, name="ops", scopes=["run", "read"])
    async with serve_http([Greeter], model=scripted("Hello!"), tokens=tokens) as served:
        for method, path in [
            ("POST", "/mcp"),
            ("POST", "/ag-ui/greeter"),
            ("GET", "/v1/approvals"),
        ]:
            refused = await served.client.request(method, path, json={})
            assert refused.status_code == 401, path
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(f"{served.url}/mcp", http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
            assert [tool.name for tool in listed.tools] == ["greeter"]
            result = await session.call_tool("greeter", {"prompt": "Hi"})
            assert not result.is_error
