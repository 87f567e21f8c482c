"""Runs paused for a person's decision, in every store: the pause and its pending calls in
one transaction, and a claim that only one decision wins."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import trio

from satsuma import Usage
from satsuma.store import SCHEMA_VERSION, PendingApproval, RunRecord, SQLiteStore, Store


def pending(call_id: str, amount: int) -> PendingApproval:
    return PendingApproval(
        run_id="r1",
        tool_use_id=call_id,
        tool_name="transfer",
        input={"to": "bob", "amount": amount},
        reason="transfer requires approval",
    )


async def started(store: Store) -> None:
    await store.start_run(
        RunRecord(run_id="r1", agent_id="a", status="running", prompt="pay", started_at=1.0)
    )


async def test_a_paused_run_keeps_its_pending_calls_in_order(store: Store) -> None:
    await started(store)
    assert await store.pending_calls("r1") == []
    usage = Usage(input_tokens=3, output_tokens=2)
    await store.pause_run("r1", [pending("t2", 2), pending("t1", 1)], usage=usage)
    record = await store.get_run("r1")
    assert record is not None
    assert (record.status, record.usage, record.ended_at) == ("awaiting_approval", usage, None)
    assert await store.pending_calls("r1") == [pending("t2", 2), pending("t1", 1)]
    # Paused again later in the same run: the new calls replace the old ones.
    assert await store.claim_paused_run("r1")
    await store.pause_run("r1", [pending("t3", 3)], usage=usage)
    assert await store.pending_calls("r1") == [pending("t3", 3)]


async def test_only_one_claim_of_a_paused_run_wins(store: Store) -> None:
    await started(store)
    assert not await store.claim_paused_run("r1")  # running, not paused
    assert not await store.claim_paused_run("unknown")
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    wins: list[bool] = []

    async def claim() -> None:
        wins.append(await store.claim_paused_run("r1"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(claim)
    assert sorted(wins) == [False, False, False, False, True]
    record = await store.get_run("r1")
    assert record is not None and record.status == "running"


async def test_runs_awaiting_approval_are_listed_across_agents(store: Store) -> None:
    assert await store.runs_awaiting_approval() == []
    for run_id, agent_id, started_at in [("r2", "b", 2.0), ("r1", "a", 1.0), ("r3", "a", 3.0)]:
        await store.start_run(
            RunRecord(
                run_id=run_id,
                agent_id=agent_id,
                status="running",
                prompt="pay",
                started_at=started_at,
            )
        )
    await store.pause_run("r2", [pending("t2", 2)], usage=Usage())
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    paused = await store.runs_awaiting_approval()
    assert [(r.run_id, r.agent_id, r.status) for r in paused] == [
        ("r1", "a", "awaiting_approval"),
        ("r2", "b", "awaiting_approval"),
    ]
    # Taken up by a decision: no longer waiting on anyone.
    assert await store.claim_paused_run("r1")
    assert [r.run_id for r in await store.runs_awaiting_approval()] == ["r2"]


async def test_a_paused_run_is_not_marked_interrupted(store: Store) -> None:
    await started(store)
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    assert await store.mark_interrupted("a") == []
    (record,) = await store.runs("a")
    assert record.status == "awaiting_approval"


async def test_a_version_2_file_gains_the_approvals_table(tmp_path: Path) -> None:
    from satsuma.store._sqlite import _MIGRATIONS

    path = tmp_path / "v2.db"
    with contextlib.closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("CREATE TABLE satsuma_schema (version INTEGER NOT NULL)")
        for version in (1, 2):
            for statement in _MIGRATIONS[version]:
                raw.execute(statement)
            raw.execute("INSERT INTO satsuma_schema (version) VALUES (?)", (version,))
    async with SQLiteStore(path) as store:
        await started(store)
        await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
        assert await store.pending_calls("r1") == [pending("t1", 1)]
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT max(version) FROM satsuma_schema").fetchone()[0] == 3
    assert SCHEMA_VERSION == 3
