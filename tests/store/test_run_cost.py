"""A run's cost in the store: written with its usage, read back by ``runs``, and unknown
(never 0) for a run recorded before satsuma priced its calls."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import satsuma
from satsuma.store import SQLiteStore
from satsuma.testing import MessagesServer


class Priced(satsuma.Agent):
    name = "priced"
    model = "claude-haiku-4-5"
    system = "You help."


async def test_a_runs_cost_is_stored_and_a_row_without_one_reads_as_unknown(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with (
        MessagesServer(["Hello.", "Again."]) as server,
        SQLiteStore(path) as store,
        satsuma.open_agent(
            Priced, model=satsuma.AnthropicModel(server.client()), store=store, agent_id="a"
        ) as agent,
    ):
        first = await agent.run("hi")
        second = await agent.run("and again")
    assert first.usage.cost_usd is not None and first.usage.cost_usd > 0
    async with SQLiteStore(path) as store:
        records = await store.runs("a")
    assert [record.usage for record in records] == [first.usage, second.usage]

    # A row as satsuma wrote it before it priced calls: four counts, no cost.
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE runs SET usage = '[10, 5, 0, 0]' WHERE prompt = 'hi'")
    async with SQLiteStore(path) as store:
        old, new = await store.runs("a")
    assert old.usage == satsuma.Usage(input_tokens=10, output_tokens=5)
    assert old.usage.cost_usd is None
    assert new.usage.cost_usd == second.usage.cost_usd
