"""Runs paused for a person's decision, in every store: the pause and its pending calls in
one transaction, a claim that only one decision wins, and the decisions it records."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import trio

from satsuma import Usage
from satsuma.store import (
    SCHEMA_VERSION,
    ApprovalDecision,
    ApprovalRecord,
    PendingApproval,
    RunRecord,
    SQLiteStore,
    Store,
)


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


async def test_runs_awaiting_approval_of_one_agent(store: Store) -> None:
    """The per-agent form, what an agent reads whenever it decides about its paused runs:
    that agent's only, oldest first; an agent id that is SQL or LIKE text matches
    nothing else."""
    for run_id, agent_id, started_at in [
        ("r3", "a", 3.0),
        ("r1", "a", 1.0),
        ("r2", "b", 2.0),
        ("r4", "a%", 4.0),
        ("r5", "a' OR '1'='1", 5.0),
    ]:
        await store.start_run(
            RunRecord(
                run_id=run_id,
                agent_id=agent_id,
                status="running",
                prompt="p",
                started_at=started_at,
            )
        )
        await store.pause_run(run_id, [pending(f"t{run_id}", 1)], usage=Usage())
    assert [r.run_id for r in await store.runs_awaiting_approval("a")] == ["r1", "r3"]
    assert [r.run_id for r in await store.runs_awaiting_approval("b")] == ["r2"]
    assert [r.run_id for r in await store.runs_awaiting_approval("a%")] == ["r4"]
    assert [r.run_id for r in await store.runs_awaiting_approval("a' OR '1'='1")] == ["r5"]
    assert await store.runs_awaiting_approval("nobody") == []
    assert len(await store.runs_awaiting_approval()) == 5
    assert await store.claim_paused_run("r1")
    assert [r.run_id for r in await store.runs_awaiting_approval("a")] == ["r3"]


async def test_a_paused_run_is_not_marked_interrupted(store: Store) -> None:
    await started(store)
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    assert await store.mark_interrupted("a") == []
    (record,) = await store.runs("a")
    assert record.status == "awaiting_approval"


def decided(call: PendingApproval, decision: ApprovalDecision | None) -> ApprovalRecord:
    return ApprovalRecord(
        run_id=call.run_id,
        tool_use_id=call.tool_use_id,
        tool_name=call.tool_name,
        input=call.input,
        reason=call.reason,
        decision=decision,
    )


ALICE = ApprovalDecision(verdict="approved", decided_by="alice", decided_at=5.5)
EDIT = ApprovalDecision(
    verdict="edited", input={"to": "bob", "amount": 1}, decided_by=None, decided_at=6.0
)
BOB = ApprovalDecision(verdict="denied", reason="not today", decided_by="bob", decided_at=7.25)


async def test_a_claim_records_its_decisions_and_decided_calls_are_no_longer_pending(
    store: Store,
) -> None:
    await started(store)
    t1, t2, t3 = pending("t1", 1), pending("t2", 2), pending("t3", 3)
    await store.pause_run("r1", [t1, t2, t3], usage=Usage())
    assert await store.approvals("r1") == [decided(t1, None), decided(t2, None), decided(t3, None)]
    assert await store.claim_paused_run("r1", decisions={"t1": ALICE, "t2": EDIT, "t3": BOB})
    # The run goes on: nothing of it is pending any more, and who decided what is kept.
    assert await store.pending_calls("r1") == []
    assert await store.approvals("r1") == [decided(t1, ALICE), decided(t2, EDIT), decided(t3, BOB)]
    # Paused again on a later turn: the new call is pending, the decided ones stay, first.
    t4 = pending("t4", 4)
    await store.pause_run("r1", [t4], usage=Usage())
    assert await store.pending_calls("r1") == [t4]
    assert await store.approvals("r1") == [
        decided(t1, ALICE),
        decided(t2, EDIT),
        decided(t3, BOB),
        decided(t4, None),
    ]
    assert await store.approvals("unknown") == []


async def test_a_losing_claim_records_nothing(store: Store) -> None:
    await started(store)
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    other = ApprovalDecision(verdict="denied", reason="no", decided_by="carol", decided_at=9.0)
    wins: list[bool] = []

    async def claim(decision: ApprovalDecision) -> None:
        wins.append(await store.claim_paused_run("r1", decisions={"t1": decision}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(claim, ALICE)
        nursery.start_soon(claim, other)
    assert sorted(wins) == [False, True]
    (record,) = await store.approvals("r1")
    assert record.decision in (ALICE, other)
    # Whichever won, a later claim (the run is running) changes nothing.
    assert not await store.claim_paused_run("r1", decisions={"t1": BOB})
    assert await store.approvals("r1") == [record]


async def test_calls_of_a_run_no_longer_paused_are_not_pending(store: Store) -> None:
    await started(store)
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    # A later run went past it: never decided, never to run.
    await store.end_run("r1", status="cancelled", ended_at=2.0, usage=Usage(), error="gone past")
    assert await store.pending_calls("r1") == []
    assert await store.approvals("r1") == [decided(pending("t1", 1), None)]


async def test_a_version_3_file_gains_the_decisions(tmp_path: Path) -> None:
    from satsuma.store._schema import SQLITE_MIGRATIONS as _MIGRATIONS

    path = tmp_path / "v3.db"
    with contextlib.closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("CREATE TABLE satsuma_schema (version INTEGER NOT NULL)")
        for version in (1, 2, 3):
            for statement in _MIGRATIONS[version]:
                raw.execute(statement)
            raw.execute("INSERT INTO satsuma_schema (version) VALUES (?)", (version,))
        # A run an older satsuma paused.
        raw.execute(
            "INSERT INTO runs (run_id, agent_id, status, prompt, started_at, usage) "
            "VALUES ('r1', 'a', 'awaiting_approval', 'pay', 1.0, '{}')"
        )
        raw.execute(
            "INSERT INTO approvals (run_id, tool_use_id, position, tool_name, input, reason) "
            "VALUES ('r1', 't1', 0, 'transfer', '{\"to\": \"bob\", \"amount\": 1}', "
            "'transfer requires approval')"
        )
    async with SQLiteStore(path) as store:
        assert await store.pending_calls("r1") == [pending("t1", 1)]
        assert await store.claim_paused_run("r1", decisions={"t1": ALICE})
        assert await store.approvals("r1") == [decided(pending("t1", 1), ALICE)]
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert (
            raw.execute("SELECT max(version) FROM satsuma_schema").fetchone()[0] == SCHEMA_VERSION
        )
    assert SCHEMA_VERSION >= 4


async def test_a_version_4_postgres_database_gains_the_decisions(postgres_dsn: str) -> None:
    import psycopg

    from satsuma.store import PostgresStore
    from satsuma.store._postgres import SCHEMA_VERSION as POSTGRES_SCHEMA
    from satsuma.store._schema import POSTGRES_MIGRATIONS as _MIGRATIONS

    with psycopg.connect(postgres_dsn, autocommit=True) as raw:
        raw.execute("CREATE TABLE satsuma_schema (version INTEGER NOT NULL)")
        for version in (1, 2, 3, 4):
            for statement in _MIGRATIONS[version]:
                raw.execute(statement)
            raw.execute("INSERT INTO satsuma_schema (version) VALUES (%s)", (version,))
        # A run an older satsuma paused.
        raw.execute(
            "INSERT INTO runs (run_id, agent_id, status, prompt, started_at, usage) "
            "VALUES ('r1', 'a', 'awaiting_approval', 'pay', 1.0, '{}')"
        )
        raw.execute(
            "INSERT INTO approvals (run_id, tool_use_id, position, tool_name, input, reason) "
            "VALUES ('r1', 't1', 0, 'transfer', %s, 'transfer requires approval')",
            ('{"to": "bob", "amount": 1}',),
        )
    async with PostgresStore(postgres_dsn) as store:
        assert await store.pending_calls("r1") == [pending("t1", 1)]
        assert await store.claim_paused_run("r1", decisions={"t1": BOB})
        assert await store.approvals("r1") == [decided(pending("t1", 1), BOB)]
    with psycopg.connect(postgres_dsn, autocommit=True) as raw:
        row = raw.execute("SELECT max(version) FROM satsuma_schema").fetchone()
    assert row == (POSTGRES_SCHEMA,)


async def test_decisions_taken_one_call_at_a_time_are_kept_until_the_resume(store: Store) -> None:
    approved = ApprovalDecision(verdict="approved", decided_by="ann", decided_at=5.0)
    edited = ApprovalDecision(verdict="edited", input={"to": "bob", "amount": 1}, decided_at=6.0)
    await started(store)
    assert not await store.propose_decision("r1", "t1", approved)  # not paused yet
    await store.pause_run("r1", [pending("t1", 1), pending("t2", 2)], usage=Usage())
    assert await store.propose_decision("r1", "t1", approved)
    assert not await store.propose_decision("r1", "t1", edited)  # taken: the first stands
    assert not await store.propose_decision("r1", "t9", approved)  # no such call
    assert await store.proposed_decisions("r1") == {"t1": approved}
    # Still pending: a proposal decides nothing until the run is resumed with it.
    assert [c.tool_use_id for c in await store.pending_calls("r1")] == ["t1", "t2"]
    assert await store.propose_decision("r1", "t2", edited)
    assert await store.proposed_decisions("r1") == {"t1": approved, "t2": edited}
    assert await store.claim_paused_run("r1", decisions={"t1": approved, "t2": edited})
    assert await store.proposed_decisions("r1") == {}
    assert not await store.propose_decision("r1", "t1", approved)
    # Paused again: its new calls have no proposals.
    await store.pause_run("r1", [pending("t3", 3)], usage=Usage())
    assert await store.proposed_decisions("r1") == {}
    assert await store.propose_decision("r1", "t3", approved)


async def test_of_two_proposals_at_once_one_is_kept(store: Store) -> None:
    await started(store)
    await store.pause_run("r1", [pending("t1", 1)], usage=Usage())
    kept: list[bool] = []

    async def propose(by: str) -> None:
        decision = ApprovalDecision(verdict="approved", decided_by=by, decided_at=1.0)
        kept.append(await store.propose_decision("r1", "t1", decision))

    async with trio.open_nursery() as nursery:
        for by in ("ann", "bob", "cy"):
            nursery.start_soon(propose, by)
    assert sorted(kept) == [False, False, True]
