"""A step's writes together (``satsuma.store.Step``): the ``tool_use`` message with the
calls journaled as started, a turn's last outcome with its results, a run's last messages
with its end. On each store a step is written whole or not at all; an agent's durability
order holds (nothing of a step before the tools run is written when any of it fails, and
no tool runs then); a store that is not satsuma's gets the same writes one call each, in
the order the contract wants."""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs
import psycopg
import pytest

import satsuma
from satsuma import Message
from satsuma.store import (
    JournalEntry,
    LeaseLost,
    Owner,
    PostgresStore,
    RunEnd,
    RunRecord,
    SQLiteStore,
    Step,
    Store,
    StoreError,
    write_step,
)
from satsuma.testing import Reply, ScriptedModel, check_conversation

ran: list[str] = []


@satsuma.tool
async def pay(amount: int) -> str:
    """Pay an amount (not idempotent).

    Args:
        amount: How much.
    """
    ran.append(f"pay {amount}")
    return f"paid {amount}"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay]


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def _started(run_id: str, call_id: str) -> JournalEntry:
    return JournalEntry(run_id=run_id, tool_use_id=call_id, tool_name="pay", input={"amount": 1})


def _finished(run_id: str, call_id: str, content: str) -> JournalEntry:
    return JournalEntry(
        run_id=run_id,
        tool_use_id=call_id,
        tool_name="pay",
        input=None,
        finished=True,
        content=content,
    )


async def _a_run_with_one_call(store: Store, agent_id: str) -> None:
    await store.start_run(
        RunRecord(run_id="r1", agent_id=agent_id, status="running", prompt="p", started_at=1.0),
        start=0,
        messages=[Message.user("p")],
    )
    await store.call_started("r1", "c1", "pay", {"amount": 1})


async def test_a_step_is_written_whole_or_not_at_all(store: Store) -> None:
    await _a_run_with_one_call(store, "a1")
    refused = Step(
        agent_id="a1",
        finished=[_finished("r1", "c1", "paid 1")],
        start=5,  # past the conversation's end: refused, after the outcome's statement
        messages=[Message(role="assistant", content=[{"type": "text", "text": "never"}])],
        started=[_started("r1", "c2")],
        ends=[RunEnd(run_id="r1", status="completed", ended_at=2.0, usage=satsuma.Usage(), error=None)],
    )  # fmt: skip
    with pytest.raises((StoreError, ValueError), match="past the end"):
        await write_step(store, refused)
    assert [(e.tool_use_id, e.finished) for e in await store.calls("r1")] == [("c1", False)]
    assert [m.text for m in await store.load_messages("a1")] == ["p"]
    record = await store.get_run("r1")
    assert record is not None and record.status == "running"

    await write_step(store, attrs.evolve(refused, start=1))
    assert [(e.tool_use_id, e.finished, e.content) for e in await store.calls("r1")] == [
        ("c1", True, "paid 1"),
        ("c2", False, None),
    ]
    assert [m.text for m in await store.load_messages("a1")] == ["p", "never"]
    record = await store.get_run("r1")
    assert record is not None and record.status == "completed" and record.ended_at == 2.0


async def test_a_step_under_a_lease_no_longer_held_writes_nothing(store: Store) -> None:
    await _a_run_with_one_call(store, "a2")
    old = await store.acquire_lease("a2", Owner.new(), seconds=60)
    await store.release_lease(old)
    await store.acquire_lease("a2", Owner.new(), seconds=60)  # another owner, a new epoch
    step = Step(
        agent_id="a2",
        finished=[_finished("r1", "c1", "paid 1")],
        start=1,
        messages=[Message(role="assistant", content=[{"type": "text", "text": "late"}])],
    )
    with pytest.raises(LeaseLost, match="no longer has"):
        await write_step(store, step, lease=old)
    assert [(e.tool_use_id, e.finished) for e in await store.calls("r1")] == [("c1", False)]
    assert [m.text for m in await store.load_messages("a2")] == ["p"]


async def _refuse_the_journal(store: Store) -> None:
    """Make the database itself refuse every journal entry (a trigger), as a full disk or
    a broken table would: a real failure in the middle of a step's transaction."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON tool_calls "
                "BEGIN SELECT RAISE(ABORT, 'the journal is refused'); END"
            )
    else:
        assert isinstance(store, PostgresStore)
        with psycopg.connect(store.dsn, autocommit=True) as db:
            db.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'the journal is refused'; END $$"
            )
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON tool_calls "
                "FOR EACH ROW EXECUTE FUNCTION refuse()"
            )


@pytest.mark.parametrize("unopened_store", ["sqlite", "postgres"], indirect=True)
async def test_a_turn_whose_journal_fails_runs_no_tool_and_writes_nothing_of_its_step(
    store: Store,
) -> None:
    await _refuse_the_journal(store)
    model = ScriptedModel([Reply(tool_calls=[("pay", {"amount": 5})]), "never"])
    async with satsuma.open_agent(Payer, model=model, store=store, agent_id="a3") as agent:
        # Read by the model before its second answer: it must never come.
        result = await agent.run("pay 5")
        history = agent.history
    assert result.status == "failed"
    assert "the journal is refused" in (result.error or "")
    assert ran == []  # no tool ran: its start could not be journaled
    assert await store.calls(result.run_id) == []
    # The tool_use message went in the failed step: it was written after, with the run's
    # end, answered as cancelled, so the stored conversation stays valid.
    stored = await store.load_messages("a3")
    check_conversation(stored)
    assert stored == list(history)
    assert stored[-1].tool_results[0]["content"] == (
        "Error: Cancelled: the run failed on a store error before this tool finished."
    )
    record = await store.get_run(result.run_id)
    assert record is not None and record.status == "failed"
    assert "the journal is refused" in (record.error or "")


class _Recorder:
    """A store that is not one of satsuma's (it wraps one): it gets each write alone."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_tail(self, agent_id: str, start: int, messages: Any, **kw: Any) -> None:
        self.writes.append("tail:" + ",".join(m.role for m in messages))
        await self.inner.write_tail(agent_id, start, messages, **kw)

    async def call_started(self, run_id: str, tool_use_id: str, *args: Any, **kw: Any) -> None:
        self.writes.append(f"started:{tool_use_id}")
        await self.inner.call_started(run_id, tool_use_id, *args, **kw)

    async def call_finished(self, run_id: str, tool_use_id: str, **kw: Any) -> None:
        self.writes.append(f"finished:{tool_use_id}")
        await self.inner.call_finished(run_id, tool_use_id, **kw)

    async def end_run(self, run_id: str, **kw: Any) -> None:
        self.writes.append(f"end:{kw['status']}")
        await self.inner.end_run(run_id, **kw)


@satsuma.tool
async def note(text: str) -> str:
    """Note a text.

    Args:
        text: What to note.
    """
    ran.append(f"note {text}")
    return f"noted {text}"


class Noter(satsuma.Agent):
    name = "noter"
    tools = [note]


async def test_a_store_that_is_not_satsumas_gets_each_write_in_the_contracts_order(
    store: Store,
) -> None:
    recorder: Any = _Recorder(store)
    model = ScriptedModel([Reply(tool_calls=[("note", {"text": "a"})]), "done"])
    async with satsuma.open_agent(Noter, model=model, store=recorder, agent_id="a4") as agent:
        result = await agent.run("note a")
    assert result.status == "completed" and ran == ["note a"]
    call_id = result.messages[1].tool_uses[0]["id"]
    assert recorder.writes == [
        "tail:assistant",  # the tool_use message, before the call is journaled
        f"started:{call_id}",  # before the tool runs
        f"finished:{call_id}",  # the turn's last outcome, then its results
        "tail:user",  # before the model is called again
        "tail:assistant",  # the answer, then the run's end
        "end:completed",
    ]
    journal = await store.calls(result.run_id)
    assert [(e.tool_use_id, e.finished, e.content) for e in journal] == [(call_id, True, "noted a")]
    assert await store.load_messages("a4") == list(agent.history)


async def test_a_connection_whose_write_failed_mid_pipeline_is_not_given_back(
    postgres_dsn: str,
) -> None:
    # A write refused mid-pipeline (its lease lost): the server skips what follows the
    # refusal, statements psycopg sent to be prepared included, which it may still count
    # as prepared. On the fresh-clone CI run such a connection, given back to the pool,
    # failed every later call with 'prepared statement "_pg3_4" does not exist' (a node
    # that lost one lease could no longer claim runs). It is closed instead: with a pool
    # of one, the next call runs on another server process, and every write after works.
    def backend(db: Any) -> int:
        return int(db.execute("SELECT pg_backend_pid()").fetchone()[0])

    async with PostgresStore(postgres_dsn, pool_size=1, prepare_threshold=1) as store:
        await _a_run_with_one_call(store, "a3")
        old = await store.acquire_lease("a3", Owner.new(), seconds=60)
        await store.release_lease(old)
        current = await store.acquire_lease("a3", Owner.new(), seconds=60)
        step = Step(
            agent_id="a3",
            finished=[_finished("r1", "c1", "paid 1")],
            start=1,
            messages=[Message(role="assistant", content=[{"type": "text", "text": "late"}])],
        )
        await write_step(store, step, lease=current)
        before = await store.transaction(backend)
        assert await store.transaction(backend) == before  # pooled while all goes well
        with pytest.raises(LeaseLost, match="no longer has"):
            await write_step(store, step, lease=old)
        assert await store.transaction(backend) != before
        for _ in range(3):
            await write_step(store, step, lease=current)
        assert [(e.tool_use_id, e.finished) for e in await store.calls("r1")] == [("c1", True)]
        assert [m.text for m in await store.load_messages("a3")] == ["p", "late"]
