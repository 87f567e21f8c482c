"""The last decision of a paused run is kept, but the store fails as the run is taken up
(``satsuma serve`` without a cluster, a SQLite file): the decision answers 503 naming
the store failure, the run stays paused with its calls and their decisions, and the
same decision sent again once the store works resumes it, on the same server or after
a restart. A different decision for a call decided already is still a 409.

The store fails for real: a trigger in the SQLite file refuses the claim's write (the
``runs`` row going from ``awaiting_approval`` to ``running``) with SQLite's "database or
disk is full", through the store's real translation, while every other write goes
through (the decisions before it were kept). Real HTTP, real clients, real files.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import serve_agents
import trio
from serve_agents import Banker, scripted, two_transfers

from satsuma.serve import create_token
from satsuma.store import SQLiteStore
from satsuma.testing import check_conversation

# The claim alone is refused: the proposals (an UPDATE of approvals) go through.
_REFUSE_CLAIMS = """
CREATE TRIGGER refuse_claims BEFORE UPDATE OF status ON runs
WHEN OLD.status = 'awaiting_approval' AND NEW.status = 'running'
BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END
"""


@pytest.fixture(autouse=True)
def _clear() -> None:
    serve_agents.done.clear()


def _sql(path: Path, statement: str) -> None:
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(statement)
    db.close()


async def refuse_claims(path: Path, refused: bool) -> None:
    """The file refuses the claim of a paused run (or takes it again), as a file that
    fills up between two writes does; set from another connection, as a disk fills."""
    statement = _REFUSE_CLAIMS if refused else "DROP TRIGGER refuse_claims"
    await trio.to_thread.run_sync(_sql, path, statement)


@asynccontextmanager
async def serving(
    serve_http: Any, path: Path, tokens: Path, *replies: Any
) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        SQLiteStore(path) as store,
        serve_http([Banker], store=store, model=scripted(*replies), tokens=tokens) as served,
    ):
        yield served.client


def _tokens(tmp_path: Path) -> tuple[Path, dict[str, str], dict[str, str]]:
    tokens = tmp_path / "tokens.txt"
    scopes = ["run", "read", "approve"]
    alice = create_token(tokens, name="alice", scopes=scopes)
    bob = create_token(tokens, name="bob", scopes=scopes)
    return tokens, {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"}


def _sse(text: str) -> list[tuple[int, str, dict[str, Any]]]:
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


async def _events(
    client: httpx.AsyncClient, run_id: str, headers: dict[str, str], after: int = 0
) -> list[tuple[int, str, dict[str, Any]]]:
    path = f"/v1/runs/{run_id}/events"
    sent = {**headers, "Last-Event-ID": str(after)}
    async with client.stream("GET", path, headers=sent) as answer:
        assert answer.status_code == 200
        return _sse((await answer.aread()).decode())


def _refused_resume(answer: httpx.Response, run_id: str) -> None:
    """The decision that was to resume the run: a 503 naming the store failure and
    what became of the run, never the file or SQLite's words."""
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["type"] == "unavailable"
    assert error["message"] == (
        f"the store failed as run {run_id} was to resume (the server's log says why): "
        "none of its calls ran, and it still awaits approval with every decision kept; "
        "send the same decision (or the cancel) again once the store works"
    )
    assert "agents.db" not in answer.text and "disk" not in answer.text


async def _still_paused(
    client: httpx.AsyncClient, run_id: str, calls: list[str], headers: dict[str, str]
) -> None:
    """The run awaits approval, listing its calls (each decided), here and in the inbox;
    nothing ran."""
    run = (await client.get(f"/v1/runs/{run_id}", headers=headers)).json()
    assert (run["status"], run["error"]) == ("awaiting_approval", None), run
    assert [call["call_id"] for call in run["pending"]] == calls
    inbox = (await client.get("/v1/approvals", headers=headers)).json()["approvals"]
    assert [(p["run_id"], p["call_id"]) for p in inbox] == [(run_id, call) for call in calls]
    assert serve_agents.done == []


async def test_a_resume_the_store_refuses_leaves_the_run_paused_until_decided_again(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "agents.db"
    tokens, alice, bob = _tokens(tmp_path)
    async with serving(serve_http, path, tokens, *two_transfers("Done.")) as client:
        paused = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Pay both"}, headers=alice
        )
        run_id = paused.json()["run_id"]
        first, second = (call["call_id"] for call in paused.json()["pending"])
        (pause_end,) = [e for e in await _events(client, run_id, alice) if e[1] == "RunEnd"]
        edited = {"decision": "approve", "input": {"to": "bob", "amount": 5}}
        denied = {"decision": "deny", "reason": "not this month"}
        kept = await client.post(f"/v1/approvals/{run_id}/{first}", json=edited, headers=alice)
        assert kept.status_code == 202, kept.text

        await refuse_claims(path, True)
        last = await client.post(f"/v1/approvals/{run_id}/{second}", json=denied, headers=alice)
        _refused_resume(last, run_id)
        await _still_paused(client, run_id, [first, second], bob)
        # A different decision for a decided call is refused as ever, the kept one stands.
        other = await client.post(
            f"/v1/approvals/{run_id}/{first}", json={"decision": "deny"}, headers=bob
        )
        assert (other.status_code, other.json()["error"]["type"]) == (409, "already_decided")
        # The same decision while the file still refuses: the same 503, nothing ran.
        again = await client.post(f"/v1/approvals/{run_id}/{second}", json=denied, headers=bob)
        _refused_resume(again, run_id)
        await _still_paused(client, run_id, [first, second], bob)

        await refuse_claims(path, False)
        # Sent again (by another person, on the other call: the same decision), it
        # resumes the run with the decisions kept, each applied once.
        resumed = await client.post(f"/v1/approvals/{run_id}/{first}", json=edited, headers=bob)
        assert resumed.status_code == 200, resumed.text
        assert (resumed.json()["status"], resumed.json()["output"]) == ("completed", "Done.")
        assert serve_agents.done == ["transfer 5 to bob"]
        late = await client.post(f"/v1/approvals/{run_id}/{second}", json=denied, headers=bob)
        assert (late.status_code, late.json()["error"]["type"]) == (409, "already_decided")
        assert (await client.get("/v1/approvals", headers=bob)).json()["approvals"] == []
        # The events go on from the pause to one end: the refused resumes left none.
        after = await _events(client, run_id, bob, after=pause_end[0])
        assert [e[0] for e in after] == list(range(pause_end[0] + 1, after[-1][0] + 1))
        assert [e for e in after if e[1] == "RunEnd"] == [after[-1]]
        assert after[-1][2]["result"]["status"] == "completed"

    async with SQLiteStore(path) as store:
        history = await store.load_messages("banker/t")
        check_conversation(history)
        answers = [
            (block["tool_use_id"], block["content"])
            for message in history
            for block in message.content
            if block.get("type") == "tool_result"
        ]
        assert answers == [
            (first, "sent 5 to bob"),
            (second, "Error: Denied: not this month"),
        ]
        decided = {a.tool_use_id: a.decision for a in await store.approvals(run_id)}
        assert decided[first] is not None and decided[second] is not None
        assert (decided[first].verdict, decided[first].decided_by) == ("edited", "alice")
        assert (decided[second].verdict, decided[second].decided_by) == ("denied", "alice")


async def test_after_a_restart_the_same_decision_resumes_the_run(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "agents.db"
    tokens, alice, bob = _tokens(tmp_path)
    approve = {"decision": "approve"}
    async with serving(serve_http, path, tokens, *two_transfers()) as client:
        paused = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Pay both"}, headers=alice
        )
        run_id = paused.json()["run_id"]
        first, second = (call["call_id"] for call in paused.json()["pending"])
        kept = await client.post(f"/v1/approvals/{run_id}/{first}", json=approve, headers=alice)
        assert kept.status_code == 202, kept.text
        await refuse_claims(path, True)
        last = await client.post(f"/v1/approvals/{run_id}/{second}", json=approve, headers=bob)
        _refused_resume(last, run_id)
        await _still_paused(client, run_id, [first, second], bob)
    await refuse_claims(path, False)

    # A new server on the file: the run and its decisions are as they were left.
    async with serving(serve_http, path, tokens, "Both sent.") as client:
        await _still_paused(client, run_id, [first, second], alice)
        other = await client.post(
            f"/v1/approvals/{run_id}/{second}", json={"decision": "deny"}, headers=alice
        )
        assert (other.status_code, other.json()["error"]["type"]) == (409, "already_decided")
        resumed = await client.post(f"/v1/approvals/{run_id}/{second}", json=approve, headers=alice)
        assert resumed.status_code == 200, resumed.text
        assert (resumed.json()["status"], resumed.json()["output"]) == ("completed", "Both sent.")
        assert sorted(serve_agents.done) == ["transfer 10 to bob", "transfer 2 to al"]
        again = await client.post(f"/v1/approvals/{run_id}/{second}", json=approve, headers=alice)
        assert again.status_code == 409

    async with SQLiteStore(path) as store:
        check_conversation(await store.load_messages("banker/t"))
        decided = {a.tool_use_id: a.decision for a in await store.approvals(run_id)}
        by = {call: d.decided_by if d is not None else None for call, d in decided.items()}
        assert by == {first: "alice", second: "bob"}


async def test_a_repeated_decision_of_a_run_still_waiting_on_others_is_a_409(
    serve_http: Any, tmp_path: Path
) -> None:
    # The same decision again resumes only a run whose resume failed: while another
    # call still waits, a second decision on a decided call is a 409, as ever.
    path = tmp_path / "agents.db"
    tokens, alice, _ = _tokens(tmp_path)
    async with serving(serve_http, path, tokens, *two_transfers()) as client:
        paused = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Pay"}, headers=alice
        )
        run_id = paused.json()["run_id"]
        first, second = (call["call_id"] for call in paused.json()["pending"])
        decide = f"/v1/approvals/{run_id}/{first}"
        kept = await client.post(decide, json={"decision": "approve"}, headers=alice)
        assert kept.status_code == 202
        repeated = await client.post(decide, json={"decision": "approve"}, headers=alice)
        assert (repeated.status_code, repeated.json()["error"]["type"]) == (409, "already_decided")
        run = (await client.get(f"/v1/runs/{run_id}", headers=alice)).json()
        assert [call["call_id"] for call in run["pending"]] == [second]


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


async def test_the_console_says_so_and_lists_the_calls_to_decide_again(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "agents.db"
    model = scripted(*two_transfers("Done."))
    async with SQLiteStore(path) as store, serve_http([Banker], store=store, model=model) as served:
        client = served.client
        run = (await client.post("/v1/agents/banker/c/runs", json={"prompt": "Pay"})).json()
        run_id = run["run_id"]
        first, second = (p["call_id"] for p in run["pending"])
        (pause_end,) = [e for e in await _events(client, run_id, {}) if e[1] == "RunEnd"]
        csrf = _csrf((await client.get("/console/approvals")).text)
        approve = {"decision": "approve", "input": "", "csrf": csrf}
        deny = {"decision": "deny", "reason": "not to al", "csrf": csrf}
        kept = await client.post(f"/console/approvals/{run_id}/{first}", data=approve)
        assert kept.status_code == 303, kept.text
        await refuse_claims(path, True)
        last = await client.post(f"/console/approvals/{run_id}/{second}", data=deny)
        assert last.status_code == 503, last.text
        assert f"the store failed as run {run_id} was to resume" in last.text
        assert "send the same decision (or the cancel) again once the store works" in last.text
        assert "agents.db" not in last.text and "disk" not in last.text
        inbox = await client.get("/console/approvals")
        assert inbox.text.count('class="approval"') == 2
        await refuse_claims(path, False)
        again = await client.post(f"/console/approvals/{run_id}/{second}", data=deny)
        assert again.status_code == 303, again.text
        # The console does not wait for the run: its events, from the pause, to its end.
        after = await _events(client, run_id, {}, after=pause_end[0])
        assert [e[2].get("result", {}).get("status") for e in after if e[1] == "RunEnd"] == [
            "completed"
        ]
        ended = (await client.get(f"/v1/runs/{run_id}")).json()
        assert (ended["status"], ended["output"]) == ("completed", "Done.")
        assert serve_agents.done == ["transfer 10 to bob"]


async def test_a_run_left_paused_so_can_be_cancelled(serve_http: Any, tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    tokens, alice, _ = _tokens(tmp_path)
    async with serving(serve_http, path, tokens, *two_transfers()) as client:
        paused = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Pay"}, headers=alice
        )
        run_id = paused.json()["run_id"]
        first, second = (call["call_id"] for call in paused.json()["pending"])
        for call in (first, second):
            if call == second:
                await refuse_claims(path, True)
            decided = await client.post(
                f"/v1/approvals/{run_id}/{call}", json={"decision": "approve"}, headers=alice
            )
        _refused_resume(decided, run_id)
        cancel = f"/v1/runs/{run_id}/cancel"
        _refused_resume(await client.post(cancel, headers=alice), run_id)
        await _still_paused(client, run_id, [first, second], alice)
        await refuse_claims(path, False)
        cancelled = await client.post(cancel, headers=alice)
        assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
        assert serve_agents.done == []
        late = await client.post(
            f"/v1/approvals/{run_id}/{second}", json={"decision": "approve"}, headers=alice
        )
        assert late.status_code == 409
