"""The console's pages over the store and the supervisor, over real HTTP: the
supervision tree with restarts and intensity, the agents page's cost, usage and cost
totals, the cluster page without a cluster, a conversation's tool calls with their
journal state, steering and cancelling from a conversation, and who decided each call."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import serve_agents
import trio
from serve_agents import Banker, scripted, two_transfers

import satsuma
from satsuma import Usage
from satsuma.models import ModelRequest
from satsuma.serve import create_token
from satsuma.store import SQLiteStore
from satsuma.testing import FunctionModel, Reply

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(autouse=True)
def _reset() -> None:
    serve_agents.done.clear()
    serve_agents.gate["open"] = trio.Event()


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


async def login(client: httpx.AsyncClient, token: str) -> None:
    form = await client.get("/console/login")
    await client.post("/console/login", data={"token": token, "csrf": csrf_of(form.text)})


async def ended(client: httpx.AsyncClient, run_id: str, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}", headers=headers)).json()
    while run["status"] in ("queued", "running"):
        await trio.sleep(0.01)
        run = (await client.get(f"/v1/runs/{run_id}", headers=headers)).json()
    return run


class Fragile(satsuma.Agent):
    name = "fragile"


crashed: list[str] = []


def crash_once(request: ModelRequest) -> str:
    prompt = request.messages[-1].text
    if "CRASH" in prompt and prompt not in crashed:
        crashed.append(prompt)
        raise RuntimeError("a bug in the model adapter")  # a crash: the agent restarts
    return f"ok: {prompt}"


async def test_the_overview_shows_the_tree_with_restarts_and_intensity(serve_http: Any) -> None:
    crashed.clear()
    async with serve_http([Fragile], model=FunctionModel(crash_once)) as served:
        client = served.client
        calm = (await client.post("/v1/agents/fragile/calm/runs", json={"prompt": "hi"})).json()
        assert calm["status"] == "completed"
        hostile = f"{HOSTILE}-id"
        crash = await client.post(f"/v1/agents/fragile/{hostile}/runs", json={"prompt": "CRASH"})
        assert crash.json()["status"] == "failed"
        page = await client.get("/console")
        assert page.status_code == 200
        text = page.text
        assert "Supervision tree" in text and "server supervisor" in text
        # Each conversation: its own supervisor (restarts, intensity), its agent under it.
        calm_item = text[text.index("fragile / calm") :]
        assert "0 restarts" in calm_item and "intensity 0 of 3 restarts within 5 s" in calm_item
        crashed_item = text[text.index("fragile / &lt;img") :]
        assert "<code>Fragile</code>" in crashed_item
        assert 'class="restarts">1 restart<' in crashed_item
        assert "intensity 1 of 3 restarts within 5 s" in crashed_item
        assert "<img" not in text
        # Latest runs come from the store: both runs are listed.
        assert text.count('href="/console/runs/') >= 2


async def test_agents_usage_and_cost_from_the_store(serve_http: Any, tmp_path: Path) -> None:
    priced = Usage(input_tokens=1000, output_tokens=100, cost_usd=0.25)
    model = scripted(*[Reply(text="Hi.", usage=priced)] * 3)
    path = tmp_path / "tokens.txt"
    only_banker = create_token(path, name="viewer", scopes=["read"], agents=["banker"])
    async with (
        SQLiteStore(tmp_path / "agents.db") as store,
        serve_http([Banker, serve_agents.Greeter], model=model, store=store, tokens=path) as served,
    ):
        client = served.client
        admin = create_token(path, name="admin", scopes=["run", "read"])
        for agent, agent_id in (("banker", "a"), ("banker", "a"), ("greeter", HOSTILE)):
            answer = await client.post(
                f"/v1/agents/{agent}/{agent_id}/runs",
                json={"prompt": "Hi"},
                headers={"Authorization": f"Bearer {admin}"},
            )
            assert answer.json()["status"] == "completed", answer.text
        await login(client, admin)
        agents = await client.get("/console/agents")
        assert "2 conversations" in agents.text
        assert "<td>2</td><td>2000 in / 200 out</td><td>$0.5000</td>" in agents.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in agents.text and "<img" not in agents.text
        usage = await client.get("/console/usage")
        assert usage.status_code == 200
        assert re.search(r"banker</th><td>2</td><td>2000</td><td>200</td>", usage.text)
        assert "all</th><td>3</td><td>3000</td><td>300</td><td>0</td><td>0</td>" in usage.text
        assert "$0.7500" in usage.text
        cluster = await client.get("/console/cluster")
        assert cluster.status_code == 200 and "without a cluster" in cluster.text
        # A token that reaches the banker only sees the banker's.
        await login(client, only_banker)
        agents = await client.get("/console/agents")
        assert "1 conversation<" in agents.text and "greeter" not in agents.text
        usage = await client.get("/console/usage")
        assert "greeter" not in usage.text and "$0.5000" in usage.text


def failing_tool_then_answer(request: ModelRequest) -> Reply | str:
    if len(request.messages) == 1:
        return Reply(tool_calls=[("transfer", {"to": HOSTILE, "amount": 0})])
    return "Could not."


async def test_a_conversation_shows_each_call_and_is_steered_and_cancelled(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.txt"
    reader = create_token(path, name="reader", scopes=["read"])
    runner = create_token(path, name="runner", scopes=["run", "read", "approve"])
    model = scripted(
        Reply(tool_calls=[("transfer", {"to": HOSTILE, "amount": 0})]),
        "Could not.",
        Reply(tool_calls=[("slow", {"label": "long"})]),
        "Steered.",
        "Unused.",
    )
    async with serve_http([Banker], model=model, tokens=path) as served:
        client = served.client
        auth = {"Authorization": f"Bearer {runner}"}
        run = (
            await client.post("/v1/agents/banker/c/runs", json={"prompt": "Pay"}, headers=auth)
        ).json()
        call = run["pending"][0]["call_id"]
        decided = await client.post(
            f"/v1/approvals/{run['run_id']}/{call}", json={"decision": "approve"}, headers=auth
        )
        assert decided.status_code == 200
        assert (await ended(client, run["run_id"], runner))["status"] == "completed"
        await login(client, reader)
        page = await client.get("/console/conversations/banker/c")
        text = page.text
        # The failed call: its input, outcome text, error kind marked, journal state.
        assert "&lt;img src=x onerror=alert(1)&gt;" in text and "<img" not in text
        assert 'class="error-kind error-' in text and "amount must be at least 1" in text
        assert "journal: finished" in text
        assert "approved by runner" in text
        # read only: no form to steer or cancel, and a POST anyway is refused.
        assert "Steer" not in text
        refused = await client.post(
            "/console/conversations/banker/c/steer", data={"prompt": "x", "csrf": csrf_of(text)}
        )
        assert refused.status_code == 403
        await login(client, runner)
        slow = (
            await client.post(
                "/v1/agents/banker/c/runs", json={"prompt": "Wait", "wait": False}, headers=auth
            )
        ).json()
        page = await client.get("/console/conversations/banker/c")
        assert "Steer" in page.text and "Cancel the run in progress" in page.text
        csrf = csrf_of(page.text)
        no_csrf = await client.post("/console/conversations/banker/c/steer", data={"prompt": "x"})
        assert no_csrf.status_code == 403
        empty = await client.post(
            "/console/conversations/banker/c/steer", data={"prompt": " ", "csrf": csrf}
        )
        assert empty.status_code == 400 and "prompt" in empty.text
        steered = await client.post(
            "/console/conversations/banker/c/steer", data={"prompt": "Hurry", "csrf": csrf}
        )
        assert steered.status_code == 303
        # Steering answers with the run in progress, now steered.
        assert steered.headers["location"] == f"/console/runs/{slow['run_id']}"
        cancelled = await client.post("/console/conversations/banker/c/cancel", data={"csrf": csrf})
        assert cancelled.status_code == 303
        assert (await ended(client, slow["run_id"], runner))["status"] == "cancelled"
        nothing = await client.post("/console/conversations/banker/c/cancel", data={"csrf": csrf})
        assert nothing.status_code == 409 and "no run in progress" in nothing.text
        assert serve_agents.done == []


async def test_the_inbox_shows_who_decided(serve_http: Any, tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    ops = create_token(path, name="ops-1", scopes=["read", "approve", "run"])
    async with serve_http([Banker], model=scripted(*two_transfers("Done.")), tokens=path) as served:
        client = served.client
        run = (
            await client.post(
                "/v1/agents/banker/pay/runs",
                json={"prompt": "Pay"},
                headers={"Authorization": f"Bearer {ops}"},
            )
        ).json()
        first, second = (p["call_id"] for p in run["pending"])
        await login(client, ops)
        inbox = await client.get("/console/approvals")
        assert "No call has been decided yet." in inbox.text
        approved = await client.post(
            f"/console/approvals/{run['run_id']}/{first}",
            data={"decision": "approve", "input": "", "csrf": csrf_of(inbox.text)},
        )
        assert approved.status_code == 303
        inbox = await client.get("/console/approvals")
        # The run waits on its second call; the first shows who decided it.
        assert inbox.text.count('class="approval"') == 1
        assert "Decided already in this run" in inbox.text
        assert "approved by <span" in inbox.text
        assert 'class="decided-by">ops-1<' in inbox.text
        denied = await client.post(
            f"/console/approvals/{run['run_id']}/{second}",
            data={"decision": "deny", "reason": "no", "csrf": csrf_of(inbox.text)},
        )
        assert denied.status_code == 303
        await ended(client, run["run_id"], ops)
        inbox = await client.get("/console/approvals")
        assert "No call is waiting" in inbox.text
        decided = inbox.text[inbox.text.index("Decided lately") :]
        assert decided.count('class="decided-by">ops-1<') == 2
        assert "verdict-approved" in decided and "verdict-denied" in decided
