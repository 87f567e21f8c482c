"""The Store interface, on both implementations; SQLite's own failure modes."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from satsuma import Message, Usage
from satsuma.store import (
    SCHEMA_VERSION,
    Owner,
    RunRecord,
    SQLiteStore,
    Store,
    StoreError,
)


def text(role: Any, words: str) -> Message:
    return Message(role=role, content=[{"type": "text", "text": words}])


async def test_messages_round_trip_with_every_kind_of_tail_write(store: Store) -> None:
    assert await store.load_messages("a") == []
    first, second = text("user", "hi"), text("assistant", "hello")
    await store.write_tail("a", 0, [first, second])
    assert await store.load_messages("a") == [first, second]
    merged = Message(role="assistant", content=[*second.content, {"type": "text", "text": "!"}])
    await store.write_tail("a", 1, [merged])  # replace the last
    assert await store.load_messages("a") == [first, merged]
    await store.write_tail("a", 1, [])  # cut the tail
    assert await store.load_messages("a") == [first]
    tool_use = Message(
        role="assistant",
        content=[{"type": "tool_use", "id": "t1", "name": "x", "input": {"k": [1, None, "é"]}}],
    )
    await store.write_tail("a", 1, [tool_use])
    assert (await store.load_messages("a"))[1] == tool_use
    assert await store.load_messages("b") == []
    with pytest.raises((StoreError, ValueError), match="past the end"):
        await store.write_tail("a", 5, [first])


async def test_runs_are_recorded_ended_and_marked_interrupted(store: Store) -> None:
    usage = Usage(input_tokens=5, output_tokens=2, cache_read_input_tokens=1)
    for n in range(3):
        await store.start_run(
            RunRecord(
                run_id=f"r{n}", agent_id="a", status="running", prompt=f"p{n}", started_at=100.0 + n
            )
        )
    await store.start_run(
        RunRecord(run_id="other", agent_id="b", status="running", prompt="x", started_at=1.0)
    )
    await store.end_run("r0", status="completed", ended_at=150.0, usage=usage, error=None)
    await store.end_run(
        "r1", status="failed", ended_at=151.0, usage=Usage(), error="529: Overloaded"
    )
    records = await store.runs("a")
    assert [(r.run_id, r.status) for r in records] == [
        ("r0", "completed"),
        ("r1", "failed"),
        ("r2", "running"),
    ]
    assert records[0].usage == usage
    assert records[0].ended_at == 150.0
    assert records[1].error == "529: Overloaded"
    interrupted = await store.mark_interrupted("a")
    assert [r.run_id for r in interrupted] == ["r2"]
    assert interrupted[0].status == "interrupted"
    assert (await store.get_run("r2")) == interrupted[0]
    assert (await store.get_run("other")) is not None
    assert (await store.get_run("other")).status == "running"  # type: ignore[union-attr]
    assert await store.get_run("nope") is None
    assert await store.mark_interrupted("a") == []


async def test_the_tool_call_journal(store: Store) -> None:
    await store.call_started("r", "t1", "write_file", {"path": "a.txt"})
    await store.call_started("r", "t2", "bash", {"command": "ls"})
    await store.call_finished("r", "t1", content="written", is_error=False, error_kind=None)
    entries = await store.calls("r")
    assert [(e.tool_use_id, e.finished) for e in entries] == [("t1", True), ("t2", False)]
    assert entries[0].content == "written"
    assert entries[0].input == {"path": "a.txt"}
    assert entries[1].tool_name == "bash"
    await store.call_finished(
        "r", "t2", content=[{"type": "text", "text": "x"}], is_error=True, error_kind="timeout"
    )
    second = (await store.calls("r"))[1]
    assert (second.content, second.is_error, second.error_kind) == (
        [{"type": "text", "text": "x"}],
        True,
        "timeout",
    )
    assert await store.calls("unknown") == []


async def test_two_hundred_writers_at_once_lose_nothing(store: Store) -> None:
    async def writer(n: int) -> None:
        agent = f"agent-{n}"
        for turn in range(5):
            await store.write_tail(
                agent, turn, [text("user" if turn % 2 == 0 else "assistant", f"{n}.{turn}")]
            )

    async with trio.open_nursery() as nursery:
        for n in range(200):
            nursery.start_soon(writer, n)
    for n in range(200):
        stored = await store.load_messages(f"agent-{n}")
        assert [m.text for m in stored] == [f"{n}.{turn}" for turn in range(5)]


async def test_sqlite_keeps_everything_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "folder" / "state.db"
    async with SQLiteStore(path) as store:
        await store.write_tail("a", 0, [text("user", "kept")])
        await store.start_run(
            RunRecord(run_id="r", agent_id="a", status="running", prompt="p", started_at=1.0)
        )
    async with SQLiteStore(path) as store:
        assert [m.text for m in await store.load_messages("a")] == ["kept"]
        assert [r.status for r in await store.mark_interrupted("a")] == ["interrupted"]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert (
            raw.execute("SELECT max(version) FROM satsuma_schema").fetchone()[0] == SCHEMA_VERSION
        )


async def test_a_version_1_file_is_migrated_and_keeps_its_data(tmp_path: Path) -> None:
    # A file as satsuma with schema version 1 wrote it: no run positions, no leases.
    from satsuma.store._schema import SQLITE_MIGRATIONS as _MIGRATIONS

    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("CREATE TABLE satsuma_schema (version INTEGER NOT NULL)")
        for statement in _MIGRATIONS[1]:
            raw.execute(statement)
        raw.execute("INSERT INTO satsuma_schema (version) VALUES (1)")
        raw.execute(
            "INSERT INTO messages VALUES ('a', 0, 'user', ?)",
            ('[{"type": "text", "text": "kept"}]',),
        )
        raw.execute(
            "INSERT INTO runs VALUES ('r', 'a', 'running', 'kept', 1.0, NULL, '[1, 2, 0, 0]', NULL)"
        )
    async with SQLiteStore(path) as store:
        assert [m.text for m in await store.load_messages("a")] == ["kept"]
        (record,) = await store.runs("a")
        assert record.position is None and record.usage.output_tokens == 2
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        assert lease.epoch == 1
        await store.release_lease(lease)
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert (
            raw.execute("SELECT max(version) FROM satsuma_schema").fetchone()[0] == SCHEMA_VERSION
        )


async def test_a_file_that_is_not_a_database_is_a_clear_error_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not sqlite at all " * 200)
    with pytest.raises(StoreError, match="is not a SQLite database, or is corrupt") as info:
        await SQLiteStore(path).open()
    assert str(path) in str(info.value)


async def test_a_corrupted_database_is_a_clear_error_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SQLiteStore(path) as store:
        for n in range(50):
            await store.write_tail("a", n, [text("user" if n % 2 == 0 else "assistant", "x" * 500)])
    data = bytearray(path.read_bytes())
    for page in range(1, len(data) // 4096):  # scribble over every b-tree page header
        data[page * 4096 : page * 4096 + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"corrupt"):
        await SQLiteStore(path).open()


async def test_a_path_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(StoreError, match="cannot create its folder"):
        await SQLiteStore(blocker / "state.db").open()
    folder = tmp_path / "a_folder"
    folder.mkdir()
    with pytest.raises(StoreError, match="cannot"):
        await SQLiteStore(folder).open()  # a folder is not a database file


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SQLiteStore(path):
        pass
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO satsuma_schema (version) VALUES (?)", (SCHEMA_VERSION + 7,))
    with pytest.raises(
        StoreError, match=f"schema is version {SCHEMA_VERSION + 7}, newer than this satsuma knows"
    ):
        await SQLiteStore(path).open()


async def test_a_full_disk_fails_the_write_and_keeps_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SQLiteStore(path) as store:
        await store.write_tail("a", 0, [text("user", "committed")])
        # A database that may not grow: SQLite answers as it does on a full disk.
        connection = store._connection
        assert connection is not None
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreError, match="the disk is full"):
            await store.write_tail("a", 1, [text("assistant", "y" * 200_000)])
        assert [m.text for m in await store.load_messages("a")] == ["committed"]


async def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    await store.open()
    await store.aclose()
    with pytest.raises(StoreError, match="the store is closed"):
        await store.load_messages("a")


def test_durability_is_checked() -> None:
    with pytest.raises(ValueError, match="durability must be"):
        SQLiteStore("x.db", durability="sometimes")  # type: ignore[arg-type]


def test_the_store_imports_nothing_of_satsuma_but_message_types() -> None:
    import subprocess

    code = "import sys, satsuma.store; print(sorted(m for m in sys.modules if m.startswith(('satsuma.tools', 'satsuma.agents', 'satsuma.supervisor'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # satsuma/__init__ loads the tools layer eagerly; never the agents or the supervisor.
    assert "satsuma.agents" not in out.stdout
    assert "satsuma.supervisor" not in out.stdout
