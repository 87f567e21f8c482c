"""Store errors split by what the caller does next (issue 29, item 12): each subclass of
StoreError raised where its failure happens, on real stores. ``except StoreError`` still
catches them all."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma.store import (
    LeaseLost,
    Owner,
    PostgresStore,
    SQLiteStore,
    Store,
    StoreClosed,
    StoreError,
    StoreUnavailable,
    StoreUnreadable,
)
from satsuma.testing import ScriptedModel


class Assistant(satsuma.Agent):
    name = "assistant"


def test_every_store_error_is_a_store_error() -> None:
    for error in (StoreUnavailable, LeaseLost, StoreUnreadable, StoreClosed):
        assert issubclass(error, StoreError)
        assert not any(
            issubclass(error, other)
            for other in (StoreUnavailable, LeaseLost, StoreUnreadable, StoreClosed)
            if other is not error
        )


# --- StoreUnreadable: a corrupt file, a row that does not decode, a newer schema --------


async def _stored(store: Store, agent_id: str = "a") -> None:
    async with satsuma.open_agent(
        Assistant, model=ScriptedModel(["one"]), store=store, agent_id=agent_id
    ) as agent:
        await agent.run("first")


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"these are not the pages of a SQLite database\n" * 200)


def _torn_pages(path: Path) -> None:
    # The header stays (it is a SQLite file), the pages after the first are garbage.
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xa5" * (len(data) - page)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_not_a_database, _torn_pages])
async def test_a_corrupt_sqlite_file_is_unreadable(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    path = tmp_path / "agents.db"
    async with SQLiteStore(path) as store:
        for index in range(20):  # pages enough for the damage to hit tables
            await _stored(store, f"a{index}")
    damage(path)
    with pytest.raises(StoreUnreadable, match=r"corrupt|not a SQLite database") as caught:
        await SQLiteStore(path).open()
    assert str(path) in str(caught.value)


async def _damage_a_message(store: Store) -> None:
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db, db:
            db.execute("UPDATE messages SET content = '{not json' WHERE seq = 1")
    else:
        assert isinstance(store, PostgresStore)
        with psycopg.connect(store.dsn, autocommit=True) as db:
            db.execute("UPDATE messages SET content = '{not json' WHERE seq = 1")


@pytest.mark.parametrize("unopened_store", ["sqlite", "postgres"], indirect=True)
async def test_a_row_that_does_not_decode_is_unreadable(store: Store) -> None:
    await _stored(store)
    await _damage_a_message(store)
    with pytest.raises(StoreUnreadable, match=r"message 1 of agent 'a' cannot be read"):
        await store.load_messages("a")
    # Opening the agent fails with it too: nothing is guessed in its place.
    with pytest.raises(StoreUnreadable):
        async with satsuma.open_agent(
            Assistant, model=ScriptedModel([]), store=store, agent_id="a"
        ):
            raise AssertionError("the agent must not start on a damaged history")


async def test_a_sqlite_file_of_a_newer_schema_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    async with SQLiteStore(path):
        pass
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO satsuma_schema (version) VALUES (999)")
    with pytest.raises(StoreUnreadable, match="newer than this satsuma knows"):
        await SQLiteStore(path).open()


async def test_a_postgres_database_of_a_newer_schema_is_unreadable(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn):
        pass
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("INSERT INTO satsuma_schema (version) VALUES (999)")
    with pytest.raises(StoreUnreadable, match="newer than this satsuma knows"):
        await PostgresStore(postgres_dsn).open()


# --- StoreUnavailable: the database cannot be reached -----------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: nothing listens there


async def test_a_port_where_nothing_listens_is_unavailable() -> None:
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{_free_port()}/agents")
    with pytest.raises(StoreUnavailable, match="cannot reach the database"):
        await store.open()


async def test_a_stopped_server_is_unavailable_and_a_refusal_is_not(
    postgres_server: Any,
) -> None:
    # A server of this test's own (it is stopped), made as the session's is.
    server = await trio.to_thread.run_sync(type(postgres_server).embedded)
    try:
        dsn = server.dsn(await trio.to_thread.run_sync(server.create_database))
        async with PostgresStore(dsn) as store:
            await _stored(store)
            await trio.to_thread.run_sync(server.stop)
            for _ in range(2):  # a connection from the pool, then a new one
                with pytest.raises(StoreUnavailable):
                    await store.load_messages("a")
        # A database that does not exist is refused by a running server: waiting
        # does not cure it, so it is no StoreUnavailable.
        await trio.to_thread.run_sync(server.start)
        with pytest.raises(StoreError, match="does not exist") as caught:
            await PostgresStore(server.dsn("satsuma_no_such_database")).open()
        assert not isinstance(caught.value, StoreUnavailable)
    finally:
        await trio.to_thread.run_sync(server.close)


# --- LeaseLost: a write under a stale epoch ----------------------------------------------


async def test_a_write_under_a_stale_epoch_is_lease_lost(store: Store) -> None:
    owner = Owner.new()
    stale = await store.acquire_lease("a", owner, seconds=30)
    current = await store.acquire_lease("a", owner, seconds=30)  # the epoch grows
    assert current.epoch == stale.epoch + 1
    try:
        message = satsuma.Message(role="user", content=[{"type": "text", "text": "hi"}])
        with pytest.raises(LeaseLost, match=rf"epoch {stale.epoch}\) was refused"):
            await store.write_tail("a", 0, [message], lease=stale)
        with pytest.raises(LeaseLost):
            await store.renew_lease(stale, seconds=30)
        assert await store.load_messages("a") == []
        await store.write_tail("a", 0, [message], lease=current)
    finally:
        await store.release_lease(stale)
        await store.release_lease(current)


def _take_over(store: Store) -> None:
    """Another owner takes agent 'a' (a newer epoch), as a takeover would write it."""
    statement = "UPDATE leases SET owner_id = 'someone else', epoch = epoch + 1"
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db, db:
            db.execute(statement)
    else:
        assert isinstance(store, PostgresStore)
        with psycopg.connect(store.dsn, autocommit=True) as db:
            db.execute(statement)


@pytest.mark.parametrize("unopened_store", ["sqlite", "postgres"], indirect=True)
async def test_an_agent_whose_lease_was_taken_stops_instead_of_failing_each_run(
    store: Store,
) -> None:
    model = ScriptedModel(["one", "two", "three"])
    with pytest.raises(satsuma.AgentCrashed) as crashed:
        async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as agent:
            assert (await agent.run("first")).status == "completed"
            _take_over(store)
            await agent.run("second")
    assert isinstance(crashed.value.cause, LeaseLost)
    assert "someone else" not in str(crashed.value.cause)  # an owner id is not shown
    assert "a write under a lease it no longer has" in str(crashed.value.cause)
    # Nothing of the second run was written under the lost lease.
    assert [record.prompt for record in await store.runs("a")] == ["first"]


# --- StoreClosed ------------------------------------------------------------------------


@pytest.mark.parametrize("unopened_store", ["sqlite", "postgres"], indirect=True)
async def test_a_closed_store_is_closed(unopened_store: Store) -> None:
    store = unopened_store
    await store.open()
    await store.aclose()
    with pytest.raises(StoreClosed, match="the store is closed"):
        await store.load_messages("a")
    with pytest.raises(StoreClosed):
        await store.open()


async def test_an_agent_whose_store_was_closed_stops(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "agents.db")
    with pytest.raises(satsuma.AgentCrashed) as crashed:
        async with satsuma.open_agent(
            Assistant, model=ScriptedModel(["one", "two"]), store=store, agent_id="a"
        ) as agent:
            await agent.run("first")
            await store.aclose()
            await agent.run("second")
    assert isinstance(crashed.value.cause, StoreClosed)
