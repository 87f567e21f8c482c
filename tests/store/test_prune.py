"""Store.prune on every store: 300 runs in 30 conversations, exact counts before and
after, what must never go (live runs, conversations unless asked, held agents)."""

from __future__ import annotations

import sqlite3
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from satsuma import Message, Usage
from satsuma._store_commands import parse_duration
from satsuma.store import (
    ApprovalDecision,
    MemoryStore,
    Owner,
    PendingApproval,
    PostgresStore,
    PruneReport,
    RunRecord,
    SQLiteStore,
    Store,
)
from satsuma.store import _postgres_retention as postgres_retention
from satsuma.store import _sqlite_retention as sqlite_module

DAY = 86400.0
AGENTS = 30
RUNS_PER_AGENT = 10
OLD_AGENTS = 20  # agents 0..19 ended their runs 40 days ago; 20..29 a day ago


def text(role: Any, words: str) -> Message:
    return Message(role=role, content=[{"type": "text", "text": words}])


async def fill(store: Store) -> None:
    """300 runs: two journaled calls each, an approval decided on every even run, two
    messages each. Live runs among the old: agent 1's last run is interrupted, agent 2's
    awaits approval; agent 20's last runs still; agent 0 is held open."""
    now = time.time()
    for a in range(AGENTS):
        agent_id = f"agent-{a:02}"
        ended = now - (40 * DAY if a < OLD_AGENTS else DAY)
        for n in range(RUNS_PER_AGENT):
            run_id = f"run-{a:02}-{n}"
            position = 2 * n
            await store.start_run(
                RunRecord(
                    run_id=run_id,
                    agent_id=agent_id,
                    status="running",
                    prompt=f"p{n}",
                    started_at=ended - 10 + n,
                    position=position,
                ),
                start=position,
                messages=[text("user", f"p{n}")],
            )
            await store.write_tail(agent_id, position + 1, [text("assistant", f"a{n}")])
            for call in ("c1", "c2"):
                await store.call_started(run_id, call, "tool", {"n": n})
                await store.call_finished(
                    run_id, call, content="ok", is_error=False, error_kind=None
                )
            last = n == RUNS_PER_AGENT - 1
            if last and a == 1:
                await store.mark_interrupted(agent_id)
                continue
            if last and a == 2:
                pending = PendingApproval(
                    run_id=run_id, tool_use_id="c3", tool_name="pay", input={}, reason="money"
                )
                await store.pause_run(run_id, [pending], usage=Usage())
                continue
            if last and a == 20:
                continue  # still running
            if n % 2 == 0:
                pending = PendingApproval(
                    run_id=run_id, tool_use_id="c0", tool_name="pay", input={}, reason="money"
                )
                await store.pause_run(run_id, [pending], usage=Usage())
                decision = ApprovalDecision(verdict="approved", decided_by="ops", decided_at=now)
                assert await store.claim_paused_run(run_id, decisions={"c0": decision})
            status: Any = ("completed", "failed", "cancelled", "max_iterations")[n % 4]
            await store.end_run(
                run_id, status=status, ended_at=ended + n, usage=Usage(), error=None
            )
    await store.acquire_lease("agent-00", Owner.new(), seconds=3600)


def rows(store: Store) -> dict[str, int]:
    """Every table's row count, read from the database itself (not through the store)."""
    tables = ("runs", "tool_calls", "approvals", "messages", "leases")
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.dsn) as db:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}  # type: ignore[index]


async def seen(store: Store) -> dict[str, int]:
    """The same counts through the Store interface (MemoryStore has no tables)."""
    counts = dict.fromkeys(("runs", "tool_calls", "approvals", "messages"), 0)
    for a in range(AGENTS):
        records = await store.runs(f"agent-{a:02}")
        counts["runs"] += len(records)
        counts["messages"] += len(await store.load_messages(f"agent-{a:02}"))
        for n in range(RUNS_PER_AGENT):
            counts["tool_calls"] += len(await store.calls(f"run-{a:02}-{n}"))
            counts["approvals"] += len(await store.approvals(f"run-{a:02}-{n}"))
    return counts


@pytest.fixture(params=[None, 7], ids=["batch500", "batch7"])
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores' batch size as shipped, and one that splits every step in many."""
    if request.param is not None:
        for module in (sqlite_module, postgres_retention):
            monkeypatch.setattr(module, "PRUNE_BATCH", request.param)


@pytest.mark.usefixtures("batch")
async def test_prune_deletes_ended_runs_past_the_cut_and_nothing_else(store: Store) -> None:
    await fill(store)
    before = {"runs": 300, "tool_calls": 600, "approvals": 151, "messages": 600}
    assert await seen(store) == before
    if not isinstance(store, MemoryStore):
        assert rows(store) == {**before, "leases": 1}

    # 20 old agents x 10 runs, less the interrupted and the paused one: 198 runs, their
    # 396 calls and the 100 approvals of their even runs.
    expected = {"runs": 198, "tool_calls": 396, "approvals": 100, "run_queue": 0}
    dry = await store.prune(older_than=timedelta(days=30), dry_run=True)
    assert dry.dry_run
    assert dry.counts() == {
        **expected,
        "run_events": 0,
        "conversations": 0,
        "messages": 0,
        "budget_ledgers": 0,
        "budget_holds": 0,
    }
    assert await seen(store) == before  # a dry run deletes nothing

    report = await store.prune(older_than=30 * DAY)
    assert not report.dry_run
    assert report.counts() == dry.counts()
    after = {"runs": 102, "tool_calls": 204, "approvals": 51, "messages": 600}
    assert await seen(store) == after
    if not isinstance(store, MemoryStore):
        assert rows(store) == {**after, "leases": 1}
    # What stays of the old agents: the live runs, whatever their age.
    assert [(r.run_id, r.status) for r in await store.runs("agent-01")] == [
        ("run-01-9", "interrupted")
    ]
    assert [(r.run_id, r.status) for r in await store.runs("agent-02")] == [
        ("run-02-9", "awaiting_approval")
    ]
    assert [p.tool_use_id for p in await store.pending_calls("run-02-9")] == ["c3"]
    assert len(await store.calls("run-01-9")) == 2  # what a resume reuses
    assert [r.status for r in await store.runs("agent-20")][-1] == "running"
    assert await store.runs("agent-05") == []

    # Again: nothing more is past the cut.
    assert (await store.prune(older_than=30 * DAY)).counts() == dict.fromkeys(dry.counts(), 0)


@pytest.mark.usefixtures("batch")
async def test_conversations_go_only_when_asked_and_only_when_idle(store: Store) -> None:
    await fill(store)
    await store.prune(older_than=30 * DAY)
    assert (await seen(store))["messages"] == 600

    # Agents 3..19: every run pruned, no lease held. Agent 0 is held open; agent 1 has an
    # interrupted run, agent 2 a run awaiting approval; 20..29 ran a day ago.
    dry = await store.prune(older_than=30 * DAY, conversations=True, dry_run=True)
    assert (dry.conversations, dry.messages) == (17, 340)
    report = await store.prune(older_than=30 * DAY, conversations=True)
    assert (report.runs, report.conversations, report.messages) == (0, 17, 340)
    assert (await seen(store))["messages"] == 260
    assert await store.load_messages("agent-03") == []
    assert len(await store.load_messages("agent-00")) == 20
    assert len(await store.load_messages("agent-02")) == 20
    if not isinstance(store, MemoryStore):
        assert rows(store)["messages"] == 260

    # In one call, the runs and then the conversations they leave idle.
    report = await store.prune(older_than=0, conversations=True)
    # Agents 20..29 ended their runs; agent 20's last is running, so it stays, as do
    # agents 0 (held), 1 and 2.
    assert (report.runs, report.conversations, report.messages) == (99, 9, 180)
    assert (await seen(store))["messages"] == 80


async def test_a_fresh_store_prunes_nothing(store: Store) -> None:
    report = await store.prune(older_than=0, conversations=True)
    assert report == PruneReport(dry_run=False, cut=report.cut)


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), timedelta(days=-1)])
async def test_a_negative_age_is_refused(store: Store, bad: Any) -> None:
    with pytest.raises(ValueError, match="older_than must be 0 or more seconds"):
        await store.prune(older_than=bad)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * DAY), ("12h", 43200), ("90m", 5400), ("45s", 45), ("2w", 14 * DAY),
     ("1d12h", 1.5 * DAY), ("0.5h", 1800), (" 7D ", 7 * DAY)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-3d", "3d-", "1e3d", "3 d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


async def test_postgres_prune_skips_rows_another_transaction_holds(postgres_dsn: str) -> None:
    """A node finishing a run, or another prune, holds rows: prune neither waits for
    them nor fails; they go at the next prune."""
    async with PostgresStore(postgres_dsn) as store:
        await fill(store)
        with psycopg.connect(postgres_dsn) as other:
            with other.transaction():
                other.execute("SELECT 1 FROM runs WHERE run_id = 'run-05-3' FOR UPDATE")
                report = await store.prune(older_than=30 * DAY)
            assert (report.runs, report.tool_calls) == (197, 394)
            assert [r.run_id for r in await store.runs("agent-05")] == ["run-05-3"]
        report = await store.prune(older_than=30 * DAY)
        assert (report.runs, report.tool_calls) == (1, 2)
        assert await store.runs("agent-05") == []
