"""The console's reads of many runs (satsuma.store's conversation_page, latest_runs,
usage_total, recent_decisions, message_page, page_runs) give the same answers on MemoryStore, SQLiteStore and
PostgresStore: grouped, summed, ordered and cut to a page by the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satsuma import Message, Usage
from satsuma.store import (
    ApprovalDecision,
    PendingApproval,
    PostgresStore,
    RunRecord,
    SQLiteStore,
    Store,
    StoreUnreadable,
    conversation_page,
    latest_runs,
    message_page,
    page_runs,
    recent_decisions,
    usage_total,
)


async def _run(
    store: Store, run_id: str, agent_id: str, at: float, tokens: int, cost: float | None
) -> None:
    await store.start_run(
        RunRecord(run_id=run_id, agent_id=agent_id, status="running", prompt="hi", started_at=at)
    )
    usage = Usage(input_tokens=tokens, output_tokens=1, cost_usd=cost)
    await store.end_run(run_id, status="completed", ended_at=at + 1, usage=usage, error=None)


async def test_pages_group_sum_search_and_hide_other_classes(store: Store) -> None:
    await _run(store, "r1", "support/alice", 10.0, 100, 0.5)
    await _run(store, "r2", "support/bob", 20.0, 10, None)
    await _run(store, "r3", "support/alice", 30.0, 1, 0.25)
    await _run(store, "r4", "billing/alice", 40.0, 7, 1.0)
    await _run(store, "r5", "support/50%_off", 5.0, 2, 0.0)

    page, total = await conversation_page(store, under=["support/"], limit=2)
    assert total == 3
    assert [(s.agent_id, s.runs, s.latest.run_id) for s in page] == [
        ("support/alice", 2, "r3"),
        ("support/bob", 1, "r2"),
    ]
    alice, bob = page
    assert (alice.usage.input_tokens, alice.usage.output_tokens) == (101, 2)
    assert alice.usage.cost_usd == 0.75 and alice.unpriced == 0
    assert bob.usage.cost_usd is None and bob.unpriced == 1

    rest, total = await conversation_page(store, under=["support/"], limit=2, offset=2)
    assert [s.agent_id for s in rest] == ["support/50%_off"] and total == 3
    # LIKE's wildcards in a search are matched as themselves.
    found, total = await conversation_page(store, under=["support/", "billing/"], search="%_")
    assert [s.agent_id for s in found] == ["support/50%_off"] and total == 1
    found, total = await conversation_page(store, under=["support/", "billing/"], search="alice")
    assert [s.agent_id for s in found] == ["billing/alice", "support/alice"]
    assert await conversation_page(store, under=[]) == ([], 0)

    latest = await latest_runs(store, under=["support/"], limit=2)
    assert [r.run_id for r in latest] == ["r3", "r2"]
    # One conversation's, by its exact id (not every id it prefixes).
    await _run(store, "r6", "support/alice2", 50.0, 1, None)
    alices = await latest_runs(store, under=["support/"], agent_id="support/alice")
    assert [r.run_id for r in alices] == ["r3", "r1"]

    total_usage = await usage_total(store, under=["support/"])
    assert total_usage.runs == 5 and total_usage.unpriced == 2
    assert total_usage.usage.input_tokens == 114 and total_usage.usage.cost_usd == 0.75
    nothing = await usage_total(store, under=["nobody/"])
    assert (nothing.runs, nothing.usage.cost_usd, nothing.unpriced) == (0, None, 0)


async def test_recent_decisions_name_who_decided(store: Store) -> None:
    for run_id, agent_id, at in (("p1", "bank/a", 1.0), ("p2", "bank/b", 2.0), ("p3", "x/c", 3.0)):
        await store.start_run(
            RunRecord(
                run_id=run_id, agent_id=agent_id, status="running", prompt="pay", started_at=at
            )
        )
        call = PendingApproval(
            run_id=run_id, tool_use_id=f"c-{run_id}", tool_name="pay", input={"n": 1}, reason="r"
        )
        await store.pause_run(run_id, [call], usage=Usage())
    assert await recent_decisions(store, under=["bank/"]) == []
    approve = ApprovalDecision(verdict="approved", decided_by="ops", decided_at=50.0)
    deny = ApprovalDecision(verdict="denied", reason="no", decided_by="eve", decided_at=60.0)
    assert await store.claim_paused_run("p1", decisions={"c-p1": approve})
    assert await store.claim_paused_run("p2", decisions={"c-p2": deny})
    assert await store.claim_paused_run("p3", decisions={"c-p3": deny})
    decided = await recent_decisions(store, under=["bank/"])
    assert [
        (agent_id, r.tool_use_id, r.decision and r.decision.decided_by) for agent_id, r in decided
    ] == [
        ("bank/b", "c-p2", "eve"),
        ("bank/a", "c-p1", "ops"),
    ]
    assert len(await recent_decisions(store, under=["bank/"], limit=1)) == 1


async def test_a_page_of_messages_and_the_runs_that_wrote_it(store: Store) -> None:
    # Five runs of two messages each (prompt, answer): positions 0, 2, 4, 6, 8.
    for number in range(5):
        prompt = Message(role="user", content=[{"type": "text", "text": f"q{number}"}])
        record = RunRecord(
            run_id=f"run{number}",
            agent_id="support/long",
            status="running",
            prompt=f"q{number}",
            started_at=float(number),
            position=2 * number,
        )
        await store.start_run(record, start=2 * number, messages=[prompt])
        answer = Message(role="assistant", content=[{"type": "text", "text": f"a{number}"}])
        await store.write_tail("support/long", 2 * number + 1, [answer])
    await store.start_run(
        RunRecord(
            run_id="other",
            agent_id="support/longer",
            status="running",
            prompt="x",
            started_at=9.0,
            position=0,
        ),
        start=0,
        messages=[Message(role="user", content=[{"type": "text", "text": "x"}])],
    )

    def texts(page: object) -> list[str]:
        return [m.content[0]["text"] for m in page.messages]  # type: ignore[attr-defined]

    latest = await message_page(store, "support/long", limit=3)
    assert (latest.start, latest.total, texts(latest)) == (7, 10, ["a3", "q4", "a4"])
    first = await message_page(store, "support/long", start=0, limit=4)
    assert (first.start, texts(first)) == (0, ["q0", "a0", "q1", "a1"])
    # A start past the end shows the last message rather than nothing.
    past = await message_page(store, "support/long", start=50, limit=4)
    assert (past.start, texts(past)) == (9, ["a4"])
    empty = await message_page(store, "support/nobody")
    assert (empty.start, empty.total, empty.messages) == (0, 0, ())

    # Messages 3 to 6: run1's answer (run1 began at 2), run2 and run3's prompt.
    runs = await page_runs(store, "support/long", start=3, end=7)
    assert [r.run_id for r in runs] == ["run1", "run2", "run3"]
    assert [r.run_id for r in await page_runs(store, "support/long", start=0, end=2)] == ["run0"]
    assert await page_runs(store, "support/nobody", start=0, end=50) == []


# On the SQL stores only: a MemoryStore holds its messages in a list, none can go missing.
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_page_with_a_missing_message_says_so(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    made: Any = (
        SQLiteStore(tmp_path / "s.db")
        if kind == "sqlite"
        else PostgresStore(request.getfixturevalue("postgres_dsn"))
    )
    async with made as store:
        await _a_missing_message_is_named(store)


async def _a_missing_message_is_named(store: Store) -> None:
    await store.write_tail(
        "support/holes",
        0,
        [Message(role="user", content=[{"type": "text", "text": str(n)}]) for n in range(3)],
    )

    def cut(db: object) -> None:
        db.execute("DELETE FROM messages WHERE seq = 1")  # type: ignore[attr-defined]

    await store.transaction(cut)  # type: ignore[attr-defined]
    with pytest.raises(StoreUnreadable, match="message 1 of agent 'support/holes' is missing"):
        await message_page(store, "support/holes", start=0)
