"""A resume with decisions whose claim fails on the store, in one process (no cluster):
that resume raises the store's error, saying the run was not resumed; the agent goes on
(no crash, no restart); nothing committed is lost, nothing ran; and once the store works
again, the run is resumed and completes, each call answered once and the decisions
applied once.

The store fails for real: a SQLite file that stops taking writes (the store's own
connection set ``PRAGMA query_only``, as a read-only or full disk answers), and a
PostgreSQL connection lost as the claim commits. That one is lost in two ways: the
server does not write the claim (a deferred trigger terminates the backend inside the
COMMIT), or it does (the trigger holds the COMMIT while a proxy closes the connection,
so the answer never comes): then the agent takes its claim back, at once, or before the
next resume when the database cannot be reached meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma import Approve, Deny
from satsuma.store import (
    ApprovalDecision,
    PostgresStore,
    SQLiteStore,
    Store,
    StoreClosed,
    StoreError,
    StoreUnavailable,
    release_claim,
)
from satsuma.testing import Reply, ScriptedModel, check_conversation

ran: list[str] = []

_STILL_PAUSED = (
    "none of its calls ran, and it still awaits approval (resume it with its decisions "
    "again once the store works)"
)


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@satsuma.tool(requires_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone (not idempotent).

    Args:
        to: Who.
        amount: How much.
    """
    ran.append(f"pay {amount} to {to}")
    return f"paid {amount} to {to}"


@satsuma.tool
async def balance(account: str) -> str:
    """Read a balance.

    Args:
        account: The account.
    """
    ran.append(f"balance {account}")
    return f"{account}: 100"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay, balance]


def a_model() -> ScriptedModel:
    # One turn: a payment that waits for a decision beside a read that runs at once.
    return ScriptedModel(
        [
            Reply(tool_calls=[("pay", {"to": "bob", "amount": 10}), ("balance", {"account": "a"})]),
            "Paid.",
        ]
    )


@asynccontextmanager
async def opened(store: Store, how: str) -> AsyncIterator[tuple[satsuma.AgentHandle, Any]]:
    """The agent, opened ``how``: by ``open_agent``, or as a supervisor's child (then the
    supervisor comes too, to count its restarts)."""
    if how == "open_agent":
        async with satsuma.open_agent(Payer, model=a_model(), store=store, agent_id="p") as agent:
            yield agent, None
        return
    async with satsuma.Supervisor() as supervisor:
        agent = await supervisor.start_child(Payer, model=a_model(), store=store, agent_id="p")
        yield agent, supervisor


async def paused(agent: satsuma.AgentHandle) -> tuple[str, str]:
    result = await agent.run("Pay Bob 10")
    assert result.status == "awaiting_approval", result.error
    (call,) = result.pending
    assert ran == ["balance a"]
    return result.run_id, call.id


async def still_paused(store: Store, run_id: str, call_id: str) -> None:
    """Nothing of the failed resume stayed: the run awaits approval, its call undecided,
    and nothing but the read ran."""
    record = await store.get_run(run_id)
    assert record is not None and record.status == "awaiting_approval"
    assert [call.tool_use_id for call in await store.pending_calls(run_id)] == [call_id]
    (approval,) = await store.approvals(run_id)
    assert approval.decision is None
    assert ran == ["balance a"]


async def completes_once(
    agent: satsuma.AgentHandle, store: Store, run_id: str, call_id: str, by: str
) -> None:
    """Resumed again, the run completes: each call answered once, the payment run once,
    the read not run again, the decision recorded once (``by``'s)."""
    with trio.fail_after(30):
        result = await agent.resume(run_id, decisions={call_id: Approve(by=by)})
    assert (result.status, result.output) == ("completed", "Paid."), result.error
    assert ran == ["balance a", "pay 10 to bob"]
    history = await store.load_messages("p")
    check_conversation(history)
    answers = [
        block
        for message in history
        for block in message.content
        if block.get("type") == "tool_result"
    ]
    assert [block["content"] for block in answers] == ["paid 10 to bob", "a: 100"]
    (approval,) = await store.approvals(run_id)
    assert approval.decision is not None
    assert (approval.decision.verdict, approval.decision.decided_by) == ("approved", by)


# --- SQLite: the file stops taking writes ---------------------------------------------------


async def _writable(store: SQLiteStore, writable: bool) -> None:
    # Set where SQLite reads it: on the store's one connection, through its one thread.
    connection = store._connection
    assert connection is not None
    pragma = f"PRAGMA query_only = {'OFF' if writable else 'ON'}"
    await trio.to_thread.run_sync(connection.execute, pragma, limiter=store._limiter)


@pytest.mark.parametrize("how", ["open_agent", "supervised"])
async def test_a_claim_refused_by_the_file_fails_that_resume_only(tmp_path: Path, how: str) -> None:
    path = tmp_path / "agents.db"
    async with SQLiteStore(path) as store, opened(store, how) as (agent, supervisor):
        run_id, call_id = await paused(agent)
        await _writable(store, False)
        with trio.fail_after(30), pytest.raises(StoreError) as raised:
            await agent.resume(run_id, decisions={call_id: Approve(by="first")})
        assert type(raised.value) is StoreError  # the store's own class, not AgentCrashed
        assert raised.value.location == str(path)
        assert raised.value.problem.startswith("the file cannot be written"), raised.value
        assert raised.value.problem.endswith(
            f"; run {run_id} was not resumed: none of its calls ran, and it still awaits "
            "approval (resume it with its decisions again once the store works)"
        )
        # A second try while the file still refuses: the same, and still nothing ran.
        with trio.fail_after(30), pytest.raises(StoreError, match="was not resumed"):
            await agent.resume(run_id, decisions={call_id: Approve(by="first")})
        await _writable(store, True)
        await still_paused(store, run_id, call_id)
        if supervisor is not None:
            [child] = supervisor.which_children()
            assert (child.state, child.restarts) == ("running", 0)
        await completes_once(agent, store, run_id, call_id, "second")


async def test_a_store_closed_at_the_resume_stops_the_agent(tmp_path: Path) -> None:
    # Its file moved away: no write of the agent can succeed any more, so the agent
    # stops, as when a run meets it, and the resume says why.
    path = tmp_path / "agents.db"
    told: list[satsuma.AgentCrashed] = []
    async with SQLiteStore(path) as store:
        with pytest.raises(satsuma.AgentCrashed) as left:
            async with opened(store, "open_agent") as (agent, _):
                run_id, call_id = await paused(agent)
                path.rename(tmp_path / "moved.db")
                with trio.fail_after(30), pytest.raises(satsuma.AgentCrashed) as crashed:
                    await agent.resume(run_id, decisions={call_id: Approve()})
                assert isinstance(crashed.value.cause, StoreClosed), crashed.value
                told.append(crashed.value)  # the resume itself, not only open_agent, said so
        assert isinstance(left.value.cause, StoreClosed), left.value
    assert len(told) == 1
    assert ran == ["balance a"]


# --- PostgreSQL: one connection lost as the claim commits ----------------------------------

# Once: the first transaction that updates approvals (the claim) has its COMMIT held by
# {action}. The take-back and the later claims pass through.
_TRIGGER = """
CREATE SEQUENCE held_commits;
CREATE FUNCTION hold_commit() RETURNS trigger AS $$
BEGIN
    IF nextval('held_commits') = 1 THEN
        {action}
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER hold_commit AFTER UPDATE ON approvals
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit();
"""
# The server writes nothing: the backend ends inside the COMMIT.
_TERMINATE = "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5);"
# The server writes it, once the test has closed the connection under it.
_SLEEP = "PERFORM pg_sleep(3);"


def _install(dsn: str, action: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(_TRIGGER.format(action=action))


def _fired(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute("SELECT is_called FROM held_commits").fetchone()
    return bool(row and row[0])


def _held(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
            "AND query LIKE 'COMMIT%'"
        ).fetchone()
    return bool(row and row[0])


async def _resume_losing_its_connection(
    agent: satsuma.AgentHandle,
    run_id: str,
    decisions: dict[str, Approve | Deny],
    lose: Callable[[], Awaitable[None]],
) -> StoreUnavailable:
    """Resume, and call ``lose`` beside it; the error the resume raised."""
    errors: list[BaseException] = []

    async def resume() -> None:
        try:
            await agent.resume(run_id, decisions=decisions)
        except StoreError as exc:
            errors.append(exc)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            await lose()
    [error] = errors
    assert isinstance(error, StoreUnavailable), error
    assert "may or may not have been written" in error.problem, error
    assert error.problem.endswith(
        f"; run {run_id} was not resumed: none of its calls ran, and it "
        "still awaits approval (resume it with its decisions again once the store works)"
    )
    return error


async def test_a_claim_the_server_did_not_write_leaves_the_run_paused(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store, opened(store, "open_agent") as (agent, _):
        run_id, call_id = await paused(agent)
        await trio.to_thread.run_sync(_install, postgres_dsn, _TERMINATE)

        async def nothing() -> None:
            await trio.lowlevel.checkpoint()

        await _resume_losing_its_connection(agent, run_id, {call_id: Deny("first")}, nothing)
        assert await trio.to_thread.run_sync(_fired, postgres_dsn), "no connection was lost"
        await still_paused(store, run_id, call_id)
        await completes_once(agent, store, run_id, call_id, "second")


async def test_a_database_out_of_reach_fails_the_resume_and_not_the_agent(
    postgres_dsn: str, partition: Any
) -> None:
    # Nothing answers (a partition, a hung server): the resume's first read fails once
    # the connection's timeout has passed; no claim was even sent.
    async with (
        PostgresStore(partition.dsn, connect_timeout=2) as store,
        opened(store, "supervised") as (agent, supervisor),
    ):
        run_id, call_id = await paused(agent)
        partition.black_hole = True
        partition.cut()
        with trio.fail_after(60), pytest.raises(StoreUnavailable) as raised:
            await agent.resume(run_id, decisions={call_id: Approve(by="first")})
        assert "cannot reach the database" in raised.value.problem, raised.value
        assert raised.value.problem.endswith(f"run {run_id} was not resumed: {_STILL_PAUSED}")
        partition.black_hole = False
        [child] = supervisor.which_children()
        assert (child.state, child.restarts) == ("running", 0)
        await still_paused(store, run_id, call_id)
        await completes_once(agent, store, run_id, call_id, "second")


async def _cut_during_the_commit(dsn: str, partition: Any, black_hole: bool) -> None:
    # Once the claim's COMMIT is held on the server, every connection through the proxy
    # is closed (and, with black_hole, new ones get no answer): the client sees its
    # connection lost mid-commit, and the server goes on to write the claim.
    await _until(dsn, held=True)
    partition.black_hole = black_hole
    partition.cut()


async def _until(dsn: str, *, held: bool) -> None:
    """Wait until the claim's COMMIT is held on the server (or no longer is)."""
    while True:
        if await trio.to_thread.run_sync(_held, dsn) == held:
            return
        await trio.sleep(0.02)


async def test_a_claim_the_server_wrote_is_taken_back_at_once(
    postgres_dsn: str, partition: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="satsuma.agents")
    async with PostgresStore(partition.dsn) as store, opened(store, "open_agent") as (agent, _):
        run_id, call_id = await paused(agent)
        await trio.to_thread.run_sync(_install, postgres_dsn, _SLEEP)
        await _resume_losing_its_connection(
            agent,
            run_id,
            {call_id: Deny("first")},
            lambda: _cut_during_the_commit(postgres_dsn, partition, False),
        )
        # The take-back waited for the held COMMIT (the run's row), found the claim
        # written, and undid it: the denial was never applied.
        assert f"run {run_id} was claimed by a resume that failed on the store" in caplog.text
        await still_paused(store, run_id, call_id)
        await completes_once(agent, store, run_id, call_id, "second")


async def test_a_claim_written_while_the_database_is_away_is_taken_back_on_the_next_resume(
    postgres_dsn: str, partition: Any
) -> None:
    async with (
        PostgresStore(partition.dsn, connect_timeout=2) as store,
        opened(store, "open_agent") as (agent, _),
    ):
        run_id, call_id = await paused(agent)
        await trio.to_thread.run_sync(_install, postgres_dsn, _SLEEP)
        await _resume_losing_its_connection(
            agent,
            run_id,
            {call_id: Deny("first")},
            lambda: _cut_during_the_commit(postgres_dsn, partition, True),
        )
        # The take-back could not reach the database: the claim, written once its
        # COMMIT is let go, stands there for now.
        await _until(postgres_dsn, held=False)
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            row = db.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,)).fetchone()
        assert row == ("running",)
        assert ran == ["balance a"]
        partition.black_hole = False
        # The next resume takes it back first, then claims the run with its decisions.
        await completes_once(agent, store, run_id, call_id, "second")


# --- release_claim on each store ------------------------------------------------------------


async def test_release_claim_undoes_only_its_own_claim(store: Store) -> None:
    async with satsuma.open_agent(Payer, model=a_model(), store=store, agent_id="p") as agent:
        run_id, call_id = await paused(agent)
    decided = ApprovalDecision(verdict="denied", reason="no", decided_by="x", decided_at=1234.5)
    assert await release_claim(store, run_id, [call_id], 1234.5) is False  # nothing claimed
    assert await store.claim_paused_run(run_id, decisions={call_id: decided})
    # Another claim's time, or other calls: not this claim, left alone.
    assert await release_claim(store, run_id, [call_id], 1234.25) is False
    assert await release_claim(store, run_id, [call_id, "other"], 1234.5) is False
    assert (await store.get_run(run_id)).status == "running"  # type: ignore[union-attr]
    assert await release_claim(store, run_id, [call_id], 1234.5) is True
    await still_paused(store, run_id, call_id)
    assert await release_claim(store, run_id, [call_id], 1234.5) is False  # once
