"""The console in front of a cluster on a real PostgreSQL (the suite's own server): the
cluster page shows the nodes, the queue's depth per class, the leases and the runs in
flight; the agents and usage pages read the cluster's store; the overview says the
nodes supervise the agents; a conversation's call shows its duration, read from the
events the node recorded in PostgreSQL."""

from __future__ import annotations

import re
from typing import Any

import trio

import satsuma
from satsuma import Usage
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply

HOSTILE = "<img src=x onerror=alert(1)>"
release = {"gate": trio.Event(), "holding": trio.Event()}


@satsuma.tool
async def hold() -> str:
    """Wait until the test lets go."""
    release["holding"].set()
    await release["gate"].wait()
    return "released"


class Worker(satsuma.Agent):
    name = "worker"
    tools = [hold]


def model(request: satsuma.ModelRequest) -> str | Reply:
    if request.messages[-1].role == "user" and request.messages[-1].text == "hold":
        return Reply(tool_calls=[("hold", {})])
    return Reply(text="done", usage=Usage(input_tokens=10, output_tokens=2, cost_usd=0.01))


async def test_the_cluster_page_shows_nodes_queue_leases_and_runs(
    postgres_dsn: str, serve_http: Any
) -> None:
    release["gate"], release["holding"] = trio.Event(), trio.Event()
    async with (
        PostgresStore(postgres_dsn) as store,
        serve_http([Worker], store=store, node=True, model=FunctionModel(model)) as served,
    ):
        client = served.client
        with trio.fail_after(30):
            done = await client.post(f"/v1/agents/worker/{HOSTILE}/runs", json={"prompt": "hi"})
        assert done.json()["status"] == "completed", done.text
        held = (
            await client.post("/v1/agents/worker/busy/runs", json={"prompt": "hold", "wait": False})
        ).json()
        with trio.fail_after(30):
            await release["holding"].wait()
        page = await client.get("/console/cluster")
        assert page.status_code == 200
        text = page.text
        nodes = text[text.index('id="nodes"') : text.index('id="queue"')]
        assert "worker" in nodes and ">alive<" in nodes
        queue = text[text.index('id="queue"') : text.index('id="leases"')]
        assert re.search(r'<th scope="row">worker</th>', queue)
        flight = text[text.index('id="flight"') :]
        assert held["run_id"] in flight and "worker / busy" in flight
        leases = text[text.index('id="leases"') : text.index('id="flight"')]
        assert "worker / busy" in leases
        assert "<img" not in text
        overview = await client.get("/console")
        assert "Runs go through the cluster" in overview.text
        agents = await client.get("/console/agents")
        assert "2 conversations" in agents.text and "&lt;img src=x" in agents.text
        usage = await client.get("/console/usage")
        assert "$0.0100" in usage.text
        release["gate"].set()
        with trio.fail_after(30):
            view = (await client.get(f"/v1/runs/{held['run_id']}")).json()
            while view["status"] not in ("completed", "failed"):
                await trio.sleep(0.01)
                view = (await client.get(f"/v1/runs/{held['run_id']}")).json()
        assert view["status"] == "completed", view
        # This server holds no event of a cluster's run: the duration is the store's.
        busy = (await client.get("/console/conversations/worker/busy")).text
        assert re.search(r"result of <code>[^<]+</code> in \d+\.\d{3} s", busy), busy
        assert "journal: finished" in busy and "duration unknown" not in busy
