"""A write's rows of one kind in one statement on PostgreSQL (``store/_batched.py``): a
conversation's tail, a step's calls started, a step's outcomes. Each store must keep
the same conversation and journal, whatever the write: a tail rewritten in the middle,
shortened, emptied or refused; calls started again (an idempotent call re-run) or twice
in one step; outcomes of every shape. On PostgreSQL the step goes in fewer statements,
and a step whose connection is lost halfway writes nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final

import psycopg
import psycopg.sql
import pytest

import satsuma
from satsuma import Message
from satsuma.store import (
    JournalEntry,
    Owner,
    PostgresStore,
    RunEnd,
    RunRecord,
    Step,
    Store,
    StoreError,
    StoreUnavailable,
    Summary,
    write_step,
)
from satsuma.store import _batched as batched


def _text(text: str, role: str = "user") -> Message:
    return Message(role=role, content=[{"type": "text", "text": text}])  # type: ignore[arg-type]


def _started(call_id: str, value: Any = 1, run_id: str = "r1") -> JournalEntry:
    return JournalEntry(run_id=run_id, tool_use_id=call_id, tool_name="pay", input={"v": value})


def _outcome(
    call_id: str, content: Any, *, is_error: bool = False, kind: str | None = None
) -> JournalEntry:
    return JournalEntry(
        run_id="r1",
        tool_use_id=call_id,
        tool_name="pay",
        input=None,
        finished=True,
        content=content,
        is_error=is_error,
        error_kind=kind,
    )


async def _texts(store: Store, agent_id: str) -> list[str]:
    return [m.text for m in await store.load_messages(agent_id)]


async def _journal(store: Store) -> list[tuple[Any, ...]]:
    return [
        (e.tool_use_id, e.input, e.finished, e.content, e.is_error, e.error_kind)
        for e in await store.calls("r1")
    ]


async def _run(store: Store, agent_id: str) -> None:
    await store.start_run(
        RunRecord(run_id="r1", agent_id=agent_id, status="running", prompt="p", started_at=1.0),
        start=0,
        messages=[_text("p")],
    )


async def test_a_tail_rewritten_anywhere_leaves_exactly_the_new_conversation(
    store: Store,
) -> None:
    await store.write_tail("t", 0, [_text(f"m{i}") for i in range(5)])
    await store.write_tail("t", 2, [_text("x")])  # shorter: the rows after it go
    assert await _texts(store, "t") == ["m0", "m1", "x"]
    await store.write_tail("t", 1, [_text("a"), _text("b", "assistant"), _text("c")])  # longer
    assert await _texts(store, "t") == ["m0", "a", "b", "c"]
    assert [m.role for m in await store.load_messages("t")] == ["user", "user", "assistant", "user"]
    await store.write_tail("t", 4, [_text("d")])  # at the end: appended
    assert await _texts(store, "t") == ["m0", "a", "b", "c", "d"]
    with pytest.raises((StoreError, ValueError), match=r"write_tail at 7 past the end \(5\)"):
        await store.write_tail("t", 7, [_text("never")])
    assert await _texts(store, "t") == ["m0", "a", "b", "c", "d"]
    await store.write_tail("t", 3, [])  # nothing from 3 on
    assert await _texts(store, "t") == ["m0", "a", "b"]
    await store.write_tail("t", 0, [])
    assert await store.load_messages("t") == []
    await store.write_tail("t", 0, [_text("again")])
    assert await _texts(store, "t") == ["again"]
    assert await store.load_messages("other") == []  # another agent's untouched


async def test_a_tail_rewritten_drops_the_summaries_from_its_start_on(store: Store) -> None:
    await store.write_tail("s", 0, [_text(f"m{i}") for i in range(6)])
    for through in (2, 4):
        await store.add_summary(
            Summary(agent_id="s", through=through, text=f"to {through}", model="m", created_at=1.0)
        )
    await store.write_tail("s", 4, [_text("y")])  # a summary through 4 still holds
    assert [s.through for s in await store.summaries("s")] == [2, 4]
    await store.write_tail("s", 3, [_text("z")])
    assert [s.through for s in await store.summaries("s")] == [2]


async def test_the_calls_of_a_step_keep_their_order_inputs_and_outcomes(store: Store) -> None:
    await _run(store, "j")
    ids = ["c-d", "c-a", "c-c", "c-b"]  # not sorted: the step's order is the journal's
    inputs = [{"v": "ü ✓"}, {"v": [1, {"k": None}]}, {"v": ""}, {"v": 2.5}]
    step = Step(
        agent_id="j",
        start=1,
        messages=[_text("uses", "assistant")],
        started=[
            JournalEntry(run_id="r1", tool_use_id=i, tool_name="pay", input=v)
            for i, v in zip(ids, inputs, strict=True)
        ],
    )
    await write_step(store, step)
    assert [e.tool_use_id for e in await store.calls("r1")] == ids
    assert [e.input for e in await store.calls("r1")] == inputs
    outcomes = [
        _outcome("c-a", [{"type": "text", "text": "ok"}]),
        _outcome("c-b", "failed: ✗", is_error=True, kind="timeout"),
        _outcome("c-d", None, is_error=True),
        _outcome("never-started", "ignored"),  # nothing to finish, as one call at a time
    ]
    await write_step(store, Step(agent_id="j", finished=outcomes, start=2, messages=[_text("r")]))
    assert await _journal(store) == [
        ("c-d", inputs[0], True, None, True, None),
        ("c-a", inputs[1], True, [{"type": "text", "text": "ok"}], False, None),
        ("c-c", inputs[2], False, None, False, None),
        ("c-b", inputs[3], True, "failed: ✗", True, "timeout"),
    ]
    assert await _texts(store, "j") == ["p", "uses", "r"]


async def test_calls_started_again_or_twice_in_one_step_are_kept_as_one_at_a_time_would(
    store: Store,
) -> None:
    await _run(store, "k")
    await write_step(store, Step(agent_id="k", started=[_started("c1"), _started("c2")]))
    await write_step(store, Step(agent_id="k", finished=[_outcome("c1", "a"), _outcome("c2", "b")]))
    # c2 run again (an idempotent call, on resume) beside a new one: it keeps its place
    # and is unfinished again.
    await write_step(store, Step(agent_id="k", started=[_started("c2", "again"), _started("c3")]))
    # c4 started twice in one step: one row, the later input.
    twice = [_started("c4", "first"), _started("c4", "second")]
    await write_step(store, Step(agent_id="k", started=twice))
    assert await _journal(store) == [
        ("c1", {"v": 1}, True, "a", False, None),
        ("c2", {"v": "again"}, False, None, False, None),
        ("c3", {"v": 1}, False, None, False, None),
        ("c4", {"v": "second"}, False, None, False, None),
    ]
    # Two outcomes of one call in one step: the later one stands.
    late = [_outcome("c4", "early"), _outcome("c4", "late", is_error=True)]
    await write_step(store, Step(agent_id="k", finished=late))
    assert (await _journal(store))[3] == ("c4", {"v": "second"}, True, "late", True, None)


async def test_a_step_refused_by_its_tail_writes_none_of_its_calls(store: Store) -> None:
    await _run(store, "n")
    await write_step(store, Step(agent_id="n", started=[_started("c1"), _started("c2")]))
    refused = Step(
        agent_id="n",
        finished=[_outcome("c1", "a"), _outcome("c2", "b")],
        start=3,  # past the end (1): refused after the outcomes' statement
        messages=[_text("never")],
        started=[_started("c3"), _started("c4")],
        ends=[RunEnd(run_id="r1", status="completed", ended_at=2.0, usage=satsuma.Usage(), error=None)],
    )  # fmt: skip
    with pytest.raises((StoreError, ValueError), match=r"write_tail at 3 past the end \(1\)"):
        await write_step(store, refused)
    assert [(e.tool_use_id, e.finished) for e in await store.calls("r1")] == [
        ("c1", False),
        ("c2", False),
    ]
    assert await _texts(store, "n") == ["p"]
    record = await store.get_run("r1")
    assert record is not None and record.status == "running"


@contextlib.contextmanager
def _statements() -> Iterator[list[str]]:
    """The statements psycopg is asked to run, BEGIN and COMMIT left out."""
    sent: list[str] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def counted(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if query not in ("BEGIN", "COMMIT", "ROLLBACK"):
            sent.append(str(query))
        return execute(self, query, params, **kw)

    def counted_many(self: Any, query: Any, rows: Any, **kw: Any) -> Any:
        rows = list(rows)
        sent.extend(str(query) for _ in rows)
        return executemany(self, query, rows, **kw)

    psycopg.Cursor.execute = counted  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_many  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]


async def test_a_turns_steps_on_postgres_are_three_statements_each(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await _run(store, "c")
        lease = await store.acquire_lease("c", Owner.new(), seconds=60)
        uses = Step(
            agent_id="c",
            start=1,
            messages=[_text("uses", "assistant")],
            started=[_started("c1"), _started("c2"), _started("c3")],
        )
        results = Step(
            agent_id="c",
            finished=[_outcome("c1", "a"), _outcome("c2", "b"), _outcome("c3", "c")],
            start=2,
            messages=[_text("results"), _text("more")],
        )
        with _statements() as sent:
            await write_step(store, uses, lease=lease)
        # The lease's check with the agent's lock, the tail, the calls started.
        assert len(sent) == 3, sent
        with _statements() as sent:
            await write_step(store, results, lease=lease)
        assert len(sent) == 3, sent  # the check with the lock, the outcomes, the tail
        assert await _texts(store, "c") == ["p", "uses", "results", "more"]
        assert [(e.tool_use_id, e.content) for e in await store.calls("r1")] == [
            ("c1", "a"),
            ("c2", "b"),
            ("c3", "c"),
        ]


async def test_a_step_whose_connection_is_lost_halfway_writes_nothing(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await _run(store, "l")
        await write_step(store, Step(agent_id="l", started=[_started("c1"), _started("c2")]))
        # The server process ends itself in the outcomes' statement, every time: the tail
        # and the calls started after it were sent in the same pipeline, never run (a
        # first attempt that fails before its COMMIT was sent is made again, once).
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(
                "CREATE FUNCTION kill() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); "
                "RETURN NEW; END $$"
            )
            db.execute(
                "CREATE TRIGGER kill BEFORE UPDATE ON tool_calls "
                "FOR EACH ROW EXECUTE FUNCTION kill()"
            )
        step = Step(
            agent_id="l",
            finished=[_outcome("c1", "a"), _outcome("c2", "b")],
            start=1,
            messages=[_text("results")],
            started=[_started("c3"), _started("c4")],
        )
        with pytest.raises(StoreUnavailable, match="connection") as caught:
            await write_step(store, step)
        assert store.location in str(caught.value)
        assert [(e.tool_use_id, e.finished) for e in await store.calls("r1")] == [
            ("c1", False),
            ("c2", False),
        ]
        assert await _texts(store, "l") == ["p"]
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("DROP TRIGGER kill ON tool_calls")
        await write_step(store, step)  # the store goes on, on another connection
        assert [(e.tool_use_id, e.finished) for e in await store.calls("r1")] == [
            ("c1", True),
            ("c2", True),
            ("c3", False),
            ("c4", False),
        ]
        assert await _texts(store, "l") == ["p", "results"]


_HELD: Final = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND granted AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(%s, 0)"
)


@pytest.mark.parametrize("leased", [True, False], ids=["leased", "unleased"])
async def test_every_write_of_a_conversation_holds_its_agents_lock(
    postgres_dsn: str, leased: bool
) -> None:
    # Whether the lease's check took it or the write itself: the write's transaction holds
    # the agent's lock (writers of one conversation take turns), and the lock of another
    # agent whose lease it was given is not taken in its place.
    held: list[tuple[str, int]] = []

    def holds(*agents: str) -> Any:
        def rider(db: Any) -> None:
            for agent_id in agents:
                held.append((agent_id, int(db.execute(_HELD, (agent_id,)).fetchone()[0])))

        return rider

    async with PostgresStore(postgres_dsn) as store:
        await _run(store, "h")
        lease = await store.acquire_lease("h", Owner.new(), seconds=60) if leased else None
        other = await store.acquire_lease("o", Owner.new(), seconds=60)
        uses = Step(agent_id="h", start=1, messages=[_text("u", "assistant")], riders=[holds("h")])
        await write_step(store, uses, lease=lease)
        assert held == [("h", 1)]
        held.clear()
        # A lease of another agent: its check passes, and the step's own agent is locked.
        step = Step(agent_id="h", start=2, messages=[_text("v")], riders=[holds("h", "o")])
        await write_step(store, step, lease=other)
        assert held == [("h", 1), ("o", 0)]
        held.clear()
        await write_step(store, Step(agent_id="h", started=[_started("c")], riders=[holds("h")]))
        assert held == [("h", 0)]  # no conversation written: no lock
        assert await _texts(store, "h") == ["p", "u", "v"]


async def test_a_batch_finds_its_rows_by_index_in_a_big_journal(postgres_dsn: str) -> None:
    # A batch's rows are a VALUES list, whose length the planner knows: with rows from a
    # set-returning function (planned as 100 rows) the outcomes' UPDATE scanned the whole
    # journal, and the tail's end, read in a statement with WITH, every message of the
    # conversation. The plans of the statements as sent, generic as once prepared.
    async with PostgresStore(postgres_dsn) as store:
        await store.read(lambda db: None)  # the schema made
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(
            "INSERT INTO tool_calls (run_id, tool_use_id, tool_name, input) "
            "SELECT 'r' || (g / 4), 'c' || g, 't', '{}' FROM generate_series(1, 40000) g"
        )
        db.execute(
            "INSERT INTO messages SELECT 'a' || (g % 20), g / 20, 'user', '[]' "
            "FROM generate_series(0, 39999) g"
        )
        db.execute("ANALYZE")
        db.execute("SET plan_cache_mode = force_generic_plan")

        def plan(sql: str, params: list[Any]) -> str:
            db.execute("DEALLOCATE ALL")
            db.execute(f"PREPARE batch AS {_numbered(sql)}")
            values = psycopg.sql.SQL(", ").join(psycopg.sql.Literal(p) for p in params)
            query = psycopg.sql.SQL("EXPLAIN EXECUTE batch ({})").format(values)
            rows = db.execute(query).fetchall()
            return "\n".join(row[0] for row in rows)

        finished = plan(
            batched._finished_sql(2), ["r5", "c20", "x", False, None, "r5", "c21", "y", True, "k"]
        )
        assert "Index Scan using tool_calls_pkey" in finished, finished
        assert "Seq Scan" not in finished, finished
        tail = plan(
            batched._tail_sql(1),
            ["a5", 2001, "a5", 2000, "a5", 2000, "user", "[]", 2000, "x", "y", "a5"],
        )
        assert "Index Only Scan Backward using messages_pkey" in tail, tail
        assert "Seq Scan on messages" not in tail, tail


def _numbered(sql: str) -> str:
    """``sql`` with psycopg's ``%s`` as PostgreSQL's ``$1``, ``$2``..."""
    parts = sql.split("%s")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


async def test_more_rows_than_one_statement_takes_are_written_all_the_same(store: Store) -> None:
    # Past batched.MOST rows, a tail or a step's calls go one statement each, as on SQLite.
    many = batched.MOST + 8
    await _run(store, "m")
    await store.write_tail("m", 1, [_text(f"t{i}") for i in range(many)])
    await store.write_tail("m", 3, [_text(f"u{i}") for i in range(many)])
    assert await _texts(store, "m") == ["p", "t0", "t1", *[f"u{i}" for i in range(many)]]
    ids = [f"c{many - i:03}" for i in range(many)]
    await write_step(store, Step(agent_id="m", started=[_started(i) for i in ids]))
    await write_step(store, Step(agent_id="m", finished=[_outcome(i, i) for i in ids]))
    assert [(e.tool_use_id, e.content) for e in await store.calls("r1")] == [(i, i) for i in ids]
