"""Attacking the store under a running server: the SQLite file stops taking writes (the
store's own connection set ``PRAGMA query_only``, as a file on a read-only or full
location answers: SQLite's real error, through the store's real translation), then
takes them again. Real HTTP, a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import trio

import satsuma
from conftest import ServeHTTP
from satsuma.store import SQLiteStore
from satsuma.testing import Reply, ScriptedModel


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much.
    """
    return f"sent {amount} to {to}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [transfer]


async def _writable(store: SQLiteStore, writable: bool) -> None:
    # The fault is set where SQLite reads it: on the store's one connection, through the
    # store's one thread (its limiter), between two of its calls.
    connection = store._connection
    assert connection is not None
    pragma = f"PRAGMA query_only = {'OFF' if writable else 'ON'}"
    await trio.to_thread.run_sync(connection.execute, pragma, limiter=store._limiter)


async def test_a_store_that_refuses_writes_is_a_503_and_loses_nothing(
    serve_http: ServeHTTP, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            "Kept answer.",
            Reply(tool_calls=[("transfer", {"to": "bob", "amount": 10})]),
            "New answer.",
            "Kept again.",
            "Sent.",
        ]
    )
    async with (
        SQLiteStore(tmp_path / "agents.db") as store,
        serve_http([Banker], store=store, model={"banker": model}) as served,
    ):
        client = served.client
        kept = await client.post("/v1/agents/banker/kept/runs", json={"prompt": "hello"})
        assert kept.json()["status"] == "completed"
        paused = (await client.post("/v1/agents/banker/paying/runs", json={"prompt": "pay"})).json()
        assert paused["status"] == "awaiting_approval"
        (call,) = paused["pending"]
        decide = f"/v1/approvals/{paused['run_id']}/{call['call_id']}"
        before = (await client.get("/v1/agents/banker/kept/messages")).json()["messages"]

        await _writable(store, False)
        # A new conversation, a decision, reads: each a 503 with the JSON error shape,
        # naming neither the file nor SQLite's words (those go to the log).
        for method, path, body in [
            ("POST", "/v1/agents/banker/new/runs", {"prompt": "hi"}),
            ("POST", decide, {"decision": "approve"}),
            ("GET", "/v1/approvals", None),
            ("GET", "/v1/agents/banker/kept/messages", None),
            ("GET", "/readyz", None),
        ]:
            answer = await client.request(method, path, json=body)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.json()["error"]["type"] == "unavailable"
            assert "agents.db" not in answer.text and "Traceback" not in answer.text
        # A run of a conversation already open runs, and fails on its first write: said.
        failed = await client.post("/v1/agents/banker/kept/runs", json={"prompt": "lost"})
        assert failed.status_code == 200, failed.text
        assert failed.json()["status"] == "failed"
        assert "cannot be written" in failed.json()["error"]["message"]
        assert (await client.get("/healthz")).status_code == 200  # the process lives on

        await _writable(store, True)
        assert (await client.get("/readyz")).status_code == 200
        # Nothing committed was lost: the conversation, the pending call, and both go on.
        after = (await client.get("/v1/agents/banker/kept/messages")).json()["messages"]
        assert after == before
        (waiting,) = (await client.get("/v1/approvals")).json()["approvals"]
        assert waiting["call_id"] == call["call_id"]
        new = await client.post("/v1/agents/banker/new/runs", json={"prompt": "hi"})
        assert new.json()["output"] == "New answer."
        again = await client.post("/v1/agents/banker/kept/runs", json={"prompt": "again"})
        assert again.json()["output"] == "Kept again.", again.text
        # The failed run left nothing half-written: the history goes on from the kept one.
        messages = (await client.get("/v1/agents/banker/kept/messages")).json()["messages"]
        texts = [block["text"] for m in messages for block in m["content"]]
        assert texts == ["hello", "Kept answer.", "again", "Kept again."]
        resumed = await client.post(decide, json={"decision": "approve"})
        assert resumed.json()["status"] == "completed"
        assert resumed.json()["output"] == "Sent."
