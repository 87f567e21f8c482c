"""``Server`` with its real runs (agents in this process, a SQLite file) and satsuma's
API, over real HTTP: a run through the front door, tokens reaching the API, the caps
applied, and nothing left running once the server's scope ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from serve_agents import Greeter, scripted

from satsuma.serve import Principal, Server, create_token
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


async def test_runs_in_flight_are_capped_for_every_surface(serve_http: Any, tmp_path: Path) -> None:
    import serve_agents
    from serve_agents import Banker

    from satsuma.testing import Reply

    serve_agents.gate["open"] = trio.Event()
    tokens = tmp_path / "tokens.txt"
    token = create_token(tokens, name="ops", scopes=["run", "read"])
    headers = {"Authorization": f"Bearer {token}"}
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "done", "again")
    options = {"model": model, "tokens": tokens, "max_runs_per_token": 1}
    async with serve_http([Banker], **options) as served:
        client = served.client
        first = await client.post(
            "/v1/agents/banker/a/runs", json={"prompt": "go", "wait": False}, headers=headers
        )
        assert first.status_code == 202, first.text
        refused = await client.post(
            "/v1/agents/banker/b/runs", json={"prompt": "go", "wait": False}, headers=headers
        )
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        # AG-UI starts runs through the same runs: refused too, as its own error.
        agui = await client.post(
            "/ag-ui/banker",
            json={
                "threadId": "c",
                "runId": "r",
                "state": None,
                "messages": [{"id": "m", "role": "user", "content": "go"}],
                "tools": [],
                "context": [],
                "forwardedProps": None,
            },
            headers=headers,
        )
        assert agui.status_code == 429
        assert agui.json()["error"]["type"] == "too_many_runs"
        serve_agents.gate["open"].set()
        run_id = first.json()["run_id"]
        async with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as events:
            await events.aread()  # the stream ends with the run
        await trio.testing.wait_all_tasks_blocked()  # the server's release of its slot
        assert served.server.asgi.slots.in_flight(Principal("ops", frozenset())) == 0
        again = await client.post(
            "/v1/agents/banker/d/runs", json={"prompt": "go"}, headers=headers
        )
        assert again.status_code == 200, again.text


async def _answer(stream: trio.SocketStream) -> bytes:
    """One HTTP/1.1 response read off ``stream`` (its head and a Content-Length body), or
    b"" when the server has closed the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive_some()
    return head


async def test_an_idle_connection_outlives_a_proxys_keep_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A proxy (nginx keeps upstream connections 60 s) or a client pool reuses an idle
    # connection: if the server closed it first, the request sent on it as it closes is
    # lost ("Server disconnected without sending a response", a 502 at a proxy). The
    # server keeps idle connections longer than they do: 75 s.
    server = Server([Greeter], port=0, model=scripted("Hello!"))
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        port = int(server.url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
            await trio.sleep(65)
            await stream.send_all(request)
            assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
            await trio.sleep(80)  # past the server's keep-alive: it closes the connection
            assert await stream.receive_some() == b""
        server.shutdown()
