"""``Server`` as a supervisor's child: stopped by its supervisor (a cancel), it drains as
SIGTERM does. Through real HTTP: an event stream open on a run in flight ends cleanly
(its chunked body closed, not cut), and the run keeps its state in the SQLite store."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio
from serve_agents import Banker, gate, scripted

import satsuma
from satsuma.serve import Server
from satsuma.store import SQLiteStore
from satsuma.testing import Reply


async def test_a_supervisor_stopping_the_server_drains_it(tmp_path: Path) -> None:
    gate["open"] = trio.Event()  # never opened: the run waits in its tool
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Done.")
    store = SQLiteStore(tmp_path / "agents.db")
    server = Server([Banker], store=store, model=model, port=0, drain_timeout=30)
    async with satsuma.Supervisor() as sup:
        await sup.start_child(server, id="web", shutdown_timeout=60)
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            started = await client.post(
                "/v1/agents/banker/b-1/runs", json={"prompt": "go", "wait": False}
            )
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            seen: list[str] = []
            async with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
                assert stream.status_code == 200
                async with trio.open_nursery() as nursery:
                    async for line in stream.aiter_lines():
                        seen.append(line)
                        if '"ToolCallStart"' in line and len(nursery.child_tasks) == 0:
                            # The run is in its tool: the supervisor stops the server.
                            nursery.start_soon(sup.terminate_child, "web")
                # The stream ended cleanly: httpx read its chunked body to the end (a
                # connection cut mid-body raises RemoteProtocolError here).
        assert any('"ToolCallStart"' in line for line in seen)
        assert sup.which_children()[0].state == "stopped"
    # The run was in flight: it ended with the server's runs, its end kept in the store.
    async with SQLiteStore(tmp_path / "agents.db") as reopened:
        record = await reopened.get_run(run_id)
    assert record is not None
    assert record.status == "cancelled", record
