"""Servers in front of a cluster on a real PostgreSQL: runs go through the queue, a node
runs them, and any front answers for any run."""

from __future__ import annotations

import json
from typing import Any

import trio

import satsuma
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply


class Echo(satsuma.Agent):
    name = "echo"


@satsuma.tool(requires_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    return f"paid {amount} to {to}"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay]


def model(request: satsuma.ModelRequest) -> str | Reply:
    last = request.messages[-1]
    if "pay" in (request.messages[0].text or "") and last.role == "user" and last.text:
        return Reply(
            tool_calls=[("pay", {"to": "bob", "amount": 1}), ("pay", {"to": "ann", "amount": 2})]
        )
    return f"echo: {request.messages[0].text}"


def sse_events(text: str) -> list[dict[str, str]]:
    """The events of an SSE body, as dicts of their fields."""
    events = []
    for frame in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in frame.splitlines():
            if not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
        if fields:
            events.append(fields)
    return events


async def test_any_front_answers_for_any_run(postgres_dsn: str, serve_http: Any) -> None:
    options = {"model": FunctionModel(model)}
    async with (
        PostgresStore(postgres_dsn) as first_store,
        PostgresStore(postgres_dsn) as second_store,
        serve_http([Echo, Payer], store=first_store, **options) as first_served,
        serve_http([Echo, Payer], store=second_store, node=True, **options) as second_served,
    ):
        first, second = first_served.client, second_served.client
        with trio.fail_after(30):
            run = (await first.post("/v1/agents/echo/c1/runs", json={"prompt": "hello"})).json()
        assert run["status"] == "completed", run
        assert run["output"] == "echo: hello"
        seen = (await second.get(f"/v1/runs/{run['run_id']}")).json()
        assert (seen["status"], seen["output"], seen["agent"]) == (
            "completed",
            "echo: hello",
            "echo",
        )
        events = sse_events((await second.get(f"/v1/runs/{run['run_id']}/events")).text)
        assert events[0]["event"] == "RunStart" and events[-1]["event"] == "RunEnd"
        assert json.loads(events[-1]["data"])["result"]["status"] == "completed"
        messages = (await second.get("/v1/agents/echo/c1/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"]

        # A run paused for approval: listed and decided through the other front.
        with trio.fail_after(30):
            paused = (
                await first.post("/v1/agents/payer/p1/runs", json={"prompt": "pay them"})
            ).json()
        assert paused["status"] == "awaiting_approval", paused
        listed = (await second.get("/v1/approvals")).json()["approvals"]
        assert {c["call_id"] for c in listed} == {c["call_id"] for c in paused["pending"]}
        # Its conversation is busy while it waits on a person (if_busy: reject).
        refused = await second.post(
            "/v1/agents/payer/p1/runs", json={"prompt": "again", "if_busy": "reject"}
        )
        assert refused.status_code == 409 and "awaiting approval" in refused.text
        one, two = paused["pending"]
        answer = await second.post(
            f"/v1/approvals/{paused['run_id']}/{one['call_id']}", json={"decision": "approve"}
        )
        assert answer.status_code == 202
        # The other front knows of that decision: only the other call is left.
        left = (await first.get("/v1/approvals")).json()["approvals"]
        assert [c["call_id"] for c in left] == [two["call_id"]]
        # And the run itself, on either front, waits on that one call alone.
        for front in (first, second):
            seen = (await front.get(f"/v1/runs/{paused['run_id']}")).json()
            assert seen["status"] == "awaiting_approval"
            assert [c["call_id"] for c in seen["pending"]] == [two["call_id"]]
        with trio.fail_after(30):
            done = await first.post(
                f"/v1/approvals/{paused['run_id']}/{two['call_id']}",
                json={"decision": "deny", "reason": "not ann"},
            )
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed"
        resumed = (await first.get(f"/v1/runs/{paused['run_id']}")).json()
        assert resumed["status"] == "completed"

        # Busy conversations and the refusals of a front.
        slow = await first.post(
            "/v1/agents/echo/c1/runs", json={"prompt": "x", "if_busy": "interrupt", "wait": False}
        )
        assert slow.status_code in (202, 400)
        assert (await first.get("/v1/runs/r-unknown")).status_code == 404
