"""A SQLite file deleted, moved or replaced while an agent has it open (issue 29, item 11):
SQLite would go on writing into the inode it holds, and every commit would "succeed"
where no one reads it. The store refuses instead (StoreClosed, naming the path), and the
agent stops."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import satsuma
from satsuma.store import SQLiteStore, StoreClosed
from satsuma.testing import ScriptedModel


class Assistant(satsuma.Agent):
    name = "assistant"


def _delete(path: Path) -> None:
    path.unlink()


def _move_away(path: Path) -> None:
    path.rename(path.with_name("moved.db"))


def _replace_with_another_store(path: Path) -> None:
    # Another store's file (a backup put back, say), with a conversation of its own.
    other = path.with_name("other.db")
    with contextlib.closing(sqlite3.connect(other)) as db, db:
        db.execute("CREATE TABLE marker (text TEXT)")
        db.execute("INSERT INTO marker VALUES ('the replacement')")
    os.replace(other, path)


def _delete_the_wal(path: Path) -> None:
    Path(f"{path}-wal").unlink()


def _delete_the_shm(path: Path) -> None:
    Path(f"{path}-shm").unlink()


CHANGES = {
    "deleted": (_delete, "the file was deleted or moved away"),
    "moved": (_move_away, "the file was deleted or moved away"),
    "replaced": (_replace_with_another_store, "the file was replaced"),
    "wal deleted": (_delete_the_wal, "its -wal file was deleted or moved away"),
    "shm deleted": (_delete_the_shm, "its -shm file was deleted or moved away"),
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_an_agent_stops_when_its_file_goes_away_and_nothing_is_written_silently(
    tmp_path: Path, change: str
) -> None:
    path = tmp_path / "agents.db"
    damage, said = CHANGES[change]
    store = SQLiteStore(path)
    model = ScriptedModel(["one", "two"])
    replacement: bytes | None = None
    with pytest.raises(satsuma.AgentCrashed) as crashed:
        async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as agent:
            assert (await agent.run("first")).status == "completed"
            damage(path)
            if change == "replaced":
                replacement = path.read_bytes()
            await agent.run("second")
    cause = crashed.value.cause
    assert isinstance(cause, StoreClosed)
    assert cause.location == str(path)
    assert said in cause.problem
    assert "Nothing of this change was written" in cause.problem
    # The second run never reached the model, and every later call is refused.
    assert len(model.requests) == 1
    with pytest.raises(StoreClosed, match=said):
        await store.runs("a")
    with pytest.raises(StoreClosed):
        await store.open()
    await store.aclose()
    # Nothing was written where it does not belong. (The -wal and -shm files left at the
    # path are the old file's: SQLite pairs them with whatever file is at the path, so
    # a person moves them away with it, or puts it back; docs/persistence.md.)
    if change == "deleted":
        assert not path.exists()  # not made again, empty, under the agent
    elif change == "replaced":
        assert path.read_bytes() == replacement
    else:
        if change == "moved":
            path.with_name("moved.db").rename(path)  # put back: it is whole again
        async with SQLiteStore(path) as again:
            assert [r.prompt for r in await again.runs("a")] in ([], ["first"])
            if change == "moved":
                assert [r.prompt for r in await again.runs("a")] == ["first"]


async def test_a_store_call_that_commits_after_the_file_was_replaced_says_so(
    tmp_path: Path,
) -> None:
    # The change lands in the old file (the one SQLite holds): the caller is told, not
    # handed a success.
    path = tmp_path / "agents.db"
    async with SQLiteStore(path) as store:
        await store.load_messages("a")
        original = store._files  # the identities the store opened

        def swap_midway(db: sqlite3.Connection) -> None:
            path.rename(path.with_name("moved.db"))

        with pytest.raises(StoreClosed, match="This change was committed into the file"):
            await store._call(swap_midway)
        assert original == store._files
        with pytest.raises(StoreClosed):
            await store.load_messages("a")


@pytest.mark.parametrize("change", ["deleted", "replaced"])
async def test_under_a_supervisor_the_agent_is_not_restarted_onto_a_lost_file(
    tmp_path: Path, change: str
) -> None:
    # A careful service owner expects the service to stop, loudly, rather than run on:
    # each restart finds the store closed, and the supervisor gives up.
    path = tmp_path / "agents.db"
    damage: Callable[[Path], None] = CHANGES[change][0]
    store = SQLiteStore(path)
    with pytest.raises(satsuma.SupervisorFailed) as failed:
        async with satsuma.Supervisor(max_restarts=2, within=60) as sup:
            agent = await sup.start_child(
                Assistant, model=ScriptedModel(["one", "two"]), store=store, agent_id="a"
            )
            assert (await agent.run("first")).status == "completed"
            damage(path)
            with pytest.raises(satsuma.AgentCrashed):
                await agent.run("second")
            with trio.fail_after(60):  # a hang guard: it gives up after its restarts
                await trio.sleep_forever()
    assert isinstance(failed.value.cause, StoreClosed)
    assert str(path) in str(failed.value)
    await store.aclose()


async def test_a_relative_path_still_names_its_file_after_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with SQLiteStore("agents.db") as store:
        await store.load_messages("a")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)  # "agents.db" now names no file
        assert await store.load_messages("a") == []
