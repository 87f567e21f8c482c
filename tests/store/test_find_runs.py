"""``Store.find_runs`` on each store (memory, SQLite, PostgreSQL): run records across
conversations by agent class, conversation, status and start, the newest so many; a run
recorded before the class was kept (schema 6) is found by its conversation only."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

import satsuma
from satsuma.store import RunRecord, SQLiteStore, Store
from satsuma.testing import ScriptedModel


def record(
    run_id: str, agent_id: str, agent: str | None, started_at: float, **kw: object
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent_id=agent_id,
        status=kw.pop("status", "completed"),  # type: ignore[arg-type]
        prompt=f"prompt of {run_id}",
        started_at=started_at,
        position=0,
        agent=agent,
    )


async def test_runs_are_found_by_class_across_conversations(store: Store) -> None:
    for one in [
        record("r1", "t-1", "support", 10.0),
        record("r2", "t-2", "support", 20.0),
        record("r3", "t-1", "billing", 30.0),
        record("r4", "t-3", None, 40.0),  # written before satsuma kept the class
        record("r5", "t-2", "support", 50.0, status="failed"),
        record("r6", "t-3", "support", 60.0),
    ]:
        await store.start_run(one)

    def ids(records: list[RunRecord]) -> list[str]:
        return [r.run_id for r in records]

    assert ids(await store.find_runs(agent="support")) == ["r1", "r2", "r5", "r6"]
    assert (await store.find_runs(agent="support"))[0].agent == "support"
    assert ids(await store.find_runs(agent="support", status="completed")) == ["r1", "r2", "r6"]
    # The newest so many, oldest first.
    assert ids(await store.find_runs(agent="support", status="completed", limit=2)) == [
        "r2",
        "r6",
    ]
    assert ids(await store.find_runs(agent="support", since=20.0)) == ["r2", "r5", "r6"]
    # A run without a class: never found by class, found by its conversation.
    assert ids(await store.find_runs(agent_id="t-3")) == ["r4", "r6"]
    assert (await store.find_runs(agent_id="t-3"))[0].agent is None
    assert ids(await store.find_runs(agent="support", agent_id="t-1")) == ["r1"]
    assert ids(await store.find_runs(limit=3)) == ["r4", "r5", "r6"]
    assert ids(await store.find_runs()) == ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert await store.find_runs(agent="nobody") == []


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"limit": 0}, "limit must be an int >= 1"),
        ({"limit": True}, "limit must be an int >= 1"),
        ({"agent": ""}, "agent must be a non-empty str"),
        ({"agent_id": 3}, "agent_id must be a non-empty str"),
        ({"status": "done"}, "status must be one of"),
        ({"since": float("nan")}, "since must be seconds since the epoch"),
    ],
)
async def test_bad_arguments_are_named(
    store: Store, arguments: dict[str, object], text: str
) -> None:
    with pytest.raises(ValueError, match=text):
        await store.find_runs(**arguments)  # type: ignore[arg-type]


class Support(satsuma.Agent):
    name = "support"


async def test_an_agent_records_its_class_name_on_each_run(store: Store) -> None:
    async with satsuma.open_agent(
        Support, model=ScriptedModel(["hello"]), store=store, agent_id="t-9"
    ) as agent:
        await agent.run("hi")
    (found,) = await store.find_runs(agent="support")
    assert found.agent_id == "t-9" and found.prompt == "hi" and found.status == "completed"
    assert (await store.runs("t-9"))[0].agent == "support"


async def test_a_version_6_file_gains_the_class_column_and_keeps_its_runs(tmp_path: Path) -> None:
    from satsuma.store._schema import SQLITE_MIGRATIONS

    path = tmp_path / "v6.db"
    with contextlib.closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("CREATE TABLE satsuma_schema (version INTEGER NOT NULL)")
        for version in range(1, 7):
            for statement in SQLITE_MIGRATIONS[version]:
                raw.execute(statement)
            raw.execute("INSERT INTO satsuma_schema (version) VALUES (?)", (version,))
        raw.execute(
            "INSERT INTO runs (run_id, agent_id, status, prompt, started_at, usage, position) "
            "VALUES ('old', 't-1', 'completed', 'kept', 1.0, '[1, 2, 0, 0]', 0)"
        )
    async with SQLiteStore(path) as store:
        (old,) = await store.find_runs(agent_id="t-1")
        assert old.run_id == "old" and old.agent is None
        assert await store.find_runs(agent="support") == []
        await store.start_run(record("new", "t-1", "support", 2.0))
        assert [r.run_id for r in await store.find_runs(agent="support")] == ["new"]
