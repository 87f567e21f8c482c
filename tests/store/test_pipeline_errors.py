"""PostgresStore: a write whose own work raises a BaseException that is not
``trio.Cancelled`` (a KeyboardInterrupt, a SystemExit) in its thread, in the middle of
the pipelined transaction (``_postgres_pipeline``), leaves nothing written, its
connection closed rather than given back to the pool (what psycopg knows of it, its
prepared statements among them, may no longer be what the server has), and the store
usable: the next calls run on another connection."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from satsuma.store import PostgresStore


def _scratch(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("CREATE TABLE scratch (n INTEGER NOT NULL)")


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("read_first", [False, True], ids=["sent", "answered"])
async def test_a_base_exception_in_a_pipelined_write_closes_its_connection(
    postgres_dsn: str, kind: type[BaseException], read_first: bool
) -> None:
    _scratch(postgres_dsn)
    used: list[psycopg.Connection[Any]] = []
    async with PostgresStore(postgres_dsn, prepare_threshold=0) as store:
        # A connection in the pool, with statements prepared on it.
        for n in range(3):
            await store.transaction(
                lambda db, n=n: db.execute("INSERT INTO scratch (n) VALUES (%s)", (n,))
            )

        def work(db: psycopg.Connection[Any]) -> None:
            used.append(db)
            cursor = db.execute("INSERT INTO scratch (n) VALUES (%s) RETURNING n", (99,))
            if read_first:
                assert cursor.fetchone() == (99,)  # an answer read halfway
            raise kind("stop")

        with pytest.raises(kind, match="stop"):
            await store.transaction(work)
        [connection] = used
        assert connection.closed
        assert all(link.connection is not connection for link in store._idle)
        # Later calls work, on another connection; nothing of the write was committed.
        for n in range(3, 6):
            await store.transaction(
                lambda db, n=n: db.execute("INSERT INTO scratch (n) VALUES (%s)", (n,))
            )
        rows = await store.read(
            lambda db: db.execute("SELECT n FROM scratch ORDER BY n").fetchall()
        )
        assert [n for (n,) in rows] == [0, 1, 2, 3, 4, 5]
        assert store._idle and all(link.connection is not connection for link in store._idle)
