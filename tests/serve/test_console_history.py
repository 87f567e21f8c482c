"""A long conversation's page in the console, over real HTTP and a real SQLite file: its
latest messages by default, plain links to earlier ones, only that page read from the
store (a damaged early row does not stop the latest page), and each call's duration when
the run's events tell it, "duration unknown" when nothing kept them."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import serve_agents
from serve_agents import Banker

from satsuma import Message
from satsuma.store import RunRecord, SQLiteStore, Store
from satsuma.testing import Reply, ScriptedModel

RUNS = 30  # four messages each: 120 in all


async def long_conversation(store: Store, agent_id: str, runs: int) -> None:
    """``runs`` runs of one conversation, each a prompt, a tool call, its result and an
    answer, with their records and journal (as an agent writes them)."""
    for number in range(runs):
        run_id = f"run_{number:04}"
        call_id = f"toolu_{number:04}"
        position = 4 * number
        record = RunRecord(
            run_id=run_id,
            agent_id=agent_id,
            status="running",
            prompt=f"question {number}",
            started_at=1000.0 + number,
            position=position,
        )
        await store.start_run(record, start=position, messages=[Message.user(f"question {number}")])
        ask = {"type": "tool_use", "id": call_id, "name": "slow", "input": {"label": f"L{number}"}}
        await store.write_tail(agent_id, position + 1, [Message(role="assistant", content=[ask])])
        await store.call_started(run_id, call_id, "slow", {"label": f"L{number}"})
        failed = number % 2 == 1
        text = f"result {number}"
        await store.call_finished(
            run_id, call_id, content=text, is_error=failed, error_kind="crashed" if failed else None
        )
        result = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": text,
            "is_error": failed,
        }
        answer = {"type": "text", "text": f"answer {number}"}
        await store.write_tail(
            agent_id,
            position + 2,
            [Message(role="user", content=[result]), Message(role="assistant", content=[answer])],
        )
        await store.end_run(
            run_id, status="completed", ended_at=1000.5 + number, usage=record.usage, error=None
        )


def shown(page: str, what: str) -> list[int]:
    """The numbers in ``what {n}`` texts of the page."""
    return [int(n) for n in re.findall(rf">{what} (\d+)<", page)]


async def test_a_long_conversation_is_paged_without_javascript(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "agents.db"
    async with SQLiteStore(path) as store:
        await long_conversation(store, "banker/long", RUNS)
    # Message 0 damaged: a page that read the whole conversation could not be shown.
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE messages SET content = 'not json' WHERE agent_id = 'banker/long' AND seq = 0"
        )
    model = ScriptedModel([Reply(tool_calls=[("slow", {"label": "live"})]), "Done."])
    async with SQLiteStore(path) as store, serve_http([Banker], model=model, store=store) as served:
        client = served.client
        latest = (await client.get("/console/conversations/banker/long")).text
        assert (
            "messages 71 to 120 of 120" in latest and '<ol class="messages" start="71">' in latest
        )
        assert shown(latest, "answer") == list(range(17, 30))
        assert 'href="/console/conversations/banker/long?start=0">Earliest' in latest
        assert 'rel="prev" href="/console/conversations/banker/long?start=20">Earlier' in latest
        assert "Later" not in latest
        # Each call of the page: its journal state and error kind from the store; its
        # duration unknown, as this server never held those runs' events.
        assert latest.count("journal: finished") == 13
        assert latest.count("error-crashed") == 7
        assert latest.count("duration unknown") == 13

        middle = (await client.get("/console/conversations/banker/long?start=22")).text
        assert "messages 23 to 72 of 120" in middle
        # A page cut inside a run (message 23 is run 5's call's result): the call is told.
        assert shown(middle, "question")[0] == 6 and "result of <code>toolu_0005</code>" in middle
        assert middle.count("journal: finished") == 13
        assert "error-crashed" in middle.split("question 6")[0]
        assert 'rel="next" href="/console/conversations/banker/long?start=72">Later' in middle
        assert 'href="/console/conversations/banker/long">Latest' in middle

        # The page with the damaged row says the store failed, as a page.
        first = await client.get("/console/conversations/banker/long?start=0")
        assert first.status_code == 503 and "<!doctype html>" in first.text
        assert "the store failed to answer" in first.text
        for odd in ("start=x", "start=-3", "start=99999999999"):
            assert (
                "messages 71 to 120 of 120"
                in (await client.get(f"/console/conversations/banker/long?{odd}")).text
            )
        end = (await client.get("/console/conversations/banker/long?start=500")).text
        assert "messages 120 to 120 of 120" in end and shown(end, "answer") == [29]

        # A run this server drives: its call's duration is told by its events.
        serve_agents.gate["open"].set()
        run = await client.post("/v1/agents/banker/short/runs", json={"prompt": "Go"})
        assert run.json()["status"] == "completed", run.text
        short = (await client.get("/console/conversations/banker/short")).text
        assert re.search(r"result of <code>[^<]+</code> in \d+\.\d{3} s", short)
        assert "duration unknown" not in short and "Earlier" not in short
        missing = await client.get("/console/conversations/nobody/long")
        assert missing.status_code == 404
