"""PostgresStore when the network stops answering: a real server behind a loopback proxy
(the ``partition`` fixture) that turns into a black hole, accepting and reading but
forwarding and answering nothing. TCP sees nothing wrong there (the kernel acknowledges
every byte), so only the store's own handling bounds a call: the caller's deadline
returns at once, the connection is dropped and its thread woken.

Each call runs beside a watchdog that, should the call still be waiting after 10 s (the
old code waited for TCP: forever here, about 15 minutes on a real network), heals the
network so that the test ends and fails instead of hanging. Measured here, the calls
return about 1 s after they start, at their deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio

import satsuma
from satsuma import Message
from satsuma.store import Owner, PostgresStore

# What the old code took far longer than; the calls below end at their 1 s deadline.
WATCHDOG_SECONDS = 10.0


@attrs.define
class Watchdog:
    """Heals the partition, and closes the connections it carries (else a connection
    whose bytes it dropped would wait for ever), if a call is still waiting after
    WATCHDOG_SECONDS."""

    partition: Any
    fired: bool = False

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep(WATCHDOG_SECONDS)
        self.fired = True
        self.partition.black_hole = False
        self.partition.cut()


async def within_deadline(partition: Any, call: Callable[[], Awaitable[object]]) -> float:
    """Run ``call`` under ``trio.move_on_after(1)``; how long it took. Fails if it was
    not cut short by its deadline, or outlived the watchdog."""
    watchdog = Watchdog(partition)
    async with trio.open_nursery() as nursery:
        await nursery.start(watchdog.watch)
        started = trio.current_time()
        with trio.move_on_after(1) as scope:
            await call()
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert not watchdog.fired, f"the call waited {took:.1f}s, past its 1 s deadline"
    assert scope.cancelled_caught
    return took


def borrowed(store: PostgresStore) -> int:
    """Worker threads of the store still running (each holds a slot of its pool)."""
    return int(store._limiter.borrowed_tokens)


async def until_threads_end(store: PostgresStore) -> None:
    with trio.fail_after(30):
        while borrowed(store):  # noqa: ASYNC110  (the threads report back to trio)
            await trio.sleep(0.05)


async def warm(store: PostgresStore, count: int) -> None:
    """``count`` connections in the pool, each used once."""

    async def hold() -> None:
        await store._call(lambda db: db.execute("SELECT pg_sleep(0.2)"), transaction=False)

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(hold)
    assert len(store._idle) == count


def calls(store: PostgresStore, lease: Any) -> dict[str, Callable[[], Awaitable[object]]]:
    """A read, a write in a transaction, and a lease renewal (one statement)."""
    return {
        "read": lambda: store.load_messages("a"),
        "write": lambda: store.write_tail("a", 1, [Message.user("lost?")], lease=lease),
        "renew": lambda: store.renew_lease(lease, seconds=30),
    }


@pytest.mark.parametrize("kind", ["read", "write", "renew"])
@pytest.mark.parametrize("connection", ["pooled", "new"])
async def test_a_call_behind_a_black_hole_returns_at_its_deadline(
    partition: Any, kind: str, connection: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="satsuma.store")
    async with PostgresStore(partition.dsn, pool_size=2, connect_timeout=2) as store:
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        await store.write_tail("a", 0, [Message.user("kept")], lease=lease)
        if connection == "new":
            store._drop_idle()  # the call connects through the black hole
        before = partition.accepted
        partition.black_hole = True
        await within_deadline(partition, calls(store, lease)[kind])
        # Its thread comes back (woken, or its connecting timed out), giving its
        # connection up rather than back to the pool.
        await until_threads_end(store)
        assert store._idle == []
        partition.black_hole = False
        # The store serves again, on a new connection.
        with trio.fail_after(30):
            messages = await store.load_messages("a")
        assert partition.accepted > before + (1 if connection == "new" else 0)
    assert [m.text for m in messages][:1] == ["kept"]
    said = [r.getMessage() for r in caplog.records if r.name == "satsuma.store"]
    if kind == "write" and connection == "pooled":
        # A write cut short while the database had it: whether it committed is unknown.
        assert any("may or may not have been written" in line for line in said), said


async def test_stuck_calls_do_not_exhaust_the_pool(partition: Any) -> None:
    async with PostgresStore(partition.dsn, pool_size=8, connect_timeout=2) as store:
        await warm(store, 8)
        partition.black_hole = True
        # Twelve calls at once: eight stuck on the pool's connections, four waiting
        # for a slot; every one returns at its deadline.
        took: list[float] = []

        async def one() -> None:
            took.append(await within_deadline(partition, lambda: store.load_messages("a")))

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(one)
        assert len(took) == 12
        # Every thread ends (each woken once its cancel timed out), so no slot stays
        # taken for ever; the eight connections are gone from the pool.
        await until_threads_end(store)
        assert store._idle == []
        before = partition.accepted
        partition.black_hole = False
        with trio.fail_after(30):
            assert await store.load_messages("a") == []
        assert partition.accepted > before  # on a fresh connection


async def test_opening_behind_a_black_hole_returns_at_its_deadline(partition: Any) -> None:
    store = PostgresStore(partition.dsn, connect_timeout=2)
    partition.black_hole = True
    await within_deadline(partition, store.open)
    await until_threads_end(store)
    partition.black_hole = False
    with trio.fail_after(30):
        async with store:
            assert await store.runs("a") == []


async def test_a_server_that_does_not_answer_a_new_connection_is_store_unavailable(
    partition: Any,
) -> None:
    # No deadline of the caller's: connect_timeout bounds connecting.
    store = PostgresStore(partition.dsn, connect_timeout=2)
    partition.black_hole = True
    with trio.fail_after(WATCHDOG_SECONDS), pytest.raises(satsuma.store.StoreUnavailable) as caught:
        await store.open()
    assert "cannot reach the database" in str(caught.value)


def test_the_network_settings_reach_libpq() -> None:
    store = PostgresStore(
        "postgresql://app@db/agents",
        keepalives_idle=7,
        keepalives_interval=2.5,
        keepalives_count=4,
        tcp_user_timeout=12.5,
    )
    assert store._network.parameters(store.dsn) == {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 7,
        "keepalives_interval": 3,  # libpq counts whole seconds: rounded up, never to 0
        "keepalives_count": 4,
        "tcp_user_timeout": 12500,  # milliseconds
    }
    # What the DSN says wins.
    given = PostgresStore("postgresql://app@db/agents?keepalives_idle=60&tcp_user_timeout=0")
    parameters = given._network.parameters(given.dsn)
    assert "keepalives_idle" not in parameters and "tcp_user_timeout" not in parameters
    for setting in ("keepalives_idle", "tcp_user_timeout", "cancel_timeout"):
        with pytest.raises(ValueError, match=f"{setting} must be positive"):
            PostgresStore("postgresql://app@db/agents", **{setting: 0})


async def test_every_connection_has_keepalives_and_a_user_timeout(partition: Any) -> None:
    # Over TCP (libpq ignores them on a Unix socket), as libpq records the connection's
    # parameters.
    async with PostgresStore(partition.dsn, keepalives_idle=7, tcp_user_timeout=12) as store:
        [link] = store._idle
        assert link.connection.info.host == "127.0.0.1"
        dsn = link.connection.info.dsn
    assert "keepalives=1" in dsn and "keepalives_idle=7" in dsn, dsn
    assert "tcp_user_timeout=12000" in dsn
