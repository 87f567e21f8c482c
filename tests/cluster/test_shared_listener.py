"""The client's one LISTEN connection: every waiting ``Cluster.result`` / ``run`` and every
open ``EventStream`` of a trio run share it (real PostgreSQL; the server counts the
connections), a cancelled waiter leaves nothing and disturbs no other, the connection
closes when no one has waited for a while, and it comes back after a database restart.

Runs are held in the queue by submitting them with no node serving (``cancel`` then
ends each at once, with a NOTIFY), or by a node whose model waits for the test."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma import RunResult
from satsuma.cluster import Cluster, Node, _shared_listen
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


def backends(dsn: str) -> tuple[int, int]:
    """The shared listener's connections to the test's database, and how many of the
    database's connections wait on a LISTEN (their last statement)."""
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FILTER (WHERE application_name = %s), "
            "count(*) FILTER (WHERE query LIKE 'LISTEN%%') "
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
            (_shared_listen.APPLICATION_NAME,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def server_sees(dsn: str, wanted: tuple[int, int]) -> None:
    while await trio.to_thread.run_sync(backends, dsn) != wanted:  # noqa: ASYNC110  (the server's view)
        await trio.sleep(0.05)


def subscriptions() -> int:
    """Waiters the shared listeners of this trio run know of."""
    try:
        hubs = _shared_listen._HUBS.get()
    except LookupError:
        return 0
    return sum(len(hub._subscriptions()) for hub in hubs.values())


async def until_subscribed(count: int) -> None:
    while subscriptions() != count:  # noqa: ASYNC110  (the listener's own state)
        await trio.sleep(0.01)


async def test_many_concurrent_runs_share_one_listen_connection(postgres_dsn: str) -> None:
    results: dict[str, RunResult] = {}
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        cluster = Cluster(store, poll_interval=60)  # results come by NOTIFY, not by polling

        async def run(index: int) -> None:
            results[f"c-{index}"] = await cluster.run(Echo, f"c-{index}", f"hello {index}")

        with trio.fail_after(30):
            async with trio.open_nursery() as callers:
                for index in range(20):
                    callers.start_soon(run, index)
                # No node serves yet: every run waits in the queue, every caller waits.
                await until_subscribed(20)
                # One connection listens for the twenty of them (the store's pool aside).
                await server_sees(postgres_dsn, (1, 1))
                node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.5)
                await nursery.start(node.serve)
            assert subscriptions() == 0
        nursery.cancel_scope.cancel()
    assert {agent_id: (r.status, r.output) for agent_id, r in results.items()} == {
        f"c-{index}": ("completed", f"echo: hello {index}") for index in range(20)
    }


async def test_event_streams_share_the_results_connection(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store, poll_interval=60)
        run_ids = [await cluster.submit(Echo, f"s-{index}", "hi") for index in range(3)]
        ended: list[object] = []

        async def watch(run_id: str) -> None:
            async with cluster.events(run_id) as stream:
                ended.extend([event async for event in stream])

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for run_id in run_ids:
                    nursery.start_soon(watch, run_id)
                nursery.start_soon(cluster.result, run_ids[0])
                await until_subscribed(4)
                await server_sees(postgres_dsn, (1, 1))
                for run_id in run_ids:
                    await cluster.cancel(run_id)  # queued: it ends now, with a NOTIFY
    # Each stream ended with its run's end, heard through the shared connection.
    assert [type(event).__name__ for event in ended] == ["RunEnd"] * 3


async def test_a_cancelled_waiter_leaves_nothing_and_disturbs_no_other(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shared_listen, "_IDLE_SECONDS", 0.5)
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store, poll_interval=60)
        tasks = trio.lowlevel.current_statistics().tasks_living
        run_ids = [await cluster.submit(Echo, f"w-{index}", "hi") for index in range(3)]
        results: dict[str, RunResult] = {}

        async def wait(run_id: str) -> None:
            results[run_id] = await cluster.result(run_id)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                doomed = trio.CancelScope()

                async def cancelled_wait() -> None:
                    with doomed:
                        await cluster.result(run_ids[2])

                nursery.start_soon(wait, run_ids[0])
                nursery.start_soon(wait, run_ids[1])
                nursery.start_soon(cancelled_wait)
                await until_subscribed(3)
                await server_sees(postgres_dsn, (1, 1))
                # Each waiter has read its run once and waits: no store thread at work
                # (the server shows a LISTEN before the last of a waiter's channels).
                while store._limiter.borrowed_tokens:  # noqa: ASYNC110  (no event says so)
                    await trio.sleep(0.01)
                doomed.cancel()
                await until_subscribed(2)
                # The others still wait, on the same connection.
                assert await trio.to_thread.run_sync(backends, postgres_dsn) == (1, 1)
                assert store._limiter.borrowed_tokens == 0  # no store thread at work
                for run_id in run_ids[:2]:
                    await cluster.cancel(run_id)
            # No one waits now: the listener closes its connection and its task ends
            # once idle (0.5 s here), and the trio run has the tasks it had before.
            await server_sees(postgres_dsn, (0, 0))
            while trio.lowlevel.current_statistics().tasks_living > tasks:  # noqa: ASYNC110
                await trio.sleep(0.05)
    assert sorted(results) == sorted(run_ids[:2])
    assert all(result.status == "cancelled" for result in results.values())
    # The cancelled wait left its run alone.
    assert [s for r, s in await _runs(postgres_dsn) if r == run_ids[2]] == ["queued"]
    # A wait after the listener closed opens it again.
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store, poll_interval=60)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cluster.result, run_ids[2])
                await until_subscribed(1)
                await server_sees(postgres_dsn, (1, 1))
                await cluster.cancel(run_ids[2])


async def _runs(dsn: str) -> list[tuple[str, str]]:
    def read() -> list[tuple[str, str]]:
        with psycopg.connect(dsn) as db:
            return [(str(a), str(b)) for a, b in db.execute("SELECT run_id, status FROM run_queue")]

    return await trio.to_thread.run_sync(read)


async def test_a_listen_connection_cut_under_the_waiters_is_made_again_and_no_end_is_missed(
    postgres_dsn: str,
) -> None:
    # The server ends the listener's connection (what idle_session_timeout or an
    # administrator does) and a run ends right after: whether its NOTIFY came before the
    # listener LISTENed again or after, the waiter hears of it (polling is once a minute).
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store, poll_interval=60)
        run_ids = [await cluster.submit(Echo, f"k-{index}", "hi") for index in range(2)]
        results: dict[str, RunResult] = {}

        async def wait(run_id: str) -> None:
            results[run_id] = await cluster.result(run_id)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for run_id in run_ids:
                    nursery.start_soon(wait, run_id)
                await until_subscribed(2)
                await server_sees(postgres_dsn, (1, 1))
                with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name = %s",
                        (_shared_listen.APPLICATION_NAME,),
                    )
                await cluster.cancel(run_ids[0])  # at once: maybe before the new LISTEN
                await server_sees(postgres_dsn, (1, 1))  # a new connection listens
                await cluster.cancel(run_ids[1])  # heard on the new connection
    assert {run_id: r.status for run_id, r in results.items()} == dict.fromkeys(
        run_ids, "cancelled"
    )


# --- a database restart ------------------------------------------------------------------------


@pytest.fixture
def own_server() -> Iterator[Any]:
    """A PostgreSQL server for this test alone (it is stopped and started again)."""
    spec = importlib.util.spec_from_file_location(
        "_satsuma_store_servers", Path(__file__).parent.parent / "store" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.PostgresServer.embedded()
    try:
        yield server
    finally:
        server.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_the_listener_comes_back_after_a_restart_and_waiters_hear_their_runs(
    own_server: Any,
) -> None:
    dsn = own_server.dsn(await trio.to_thread.run_sync(own_server.create_database))
    lines = _Lines()
    logging.getLogger("satsuma").addHandler(lines)
    results: dict[str, RunResult] = {}
    try:
        async with PostgresStore(dsn) as store:
            # Polling once a minute: within the test's deadline, results come by NOTIFY
            # on the connection made again after the restart.
            cluster = Cluster(store, poll_interval=60)
            run_ids = [await cluster.submit(Echo, f"r-{index}", "hi") for index in range(3)]
            restarted = trio.Event()

            async def wait(run_id: str) -> None:
                while True:
                    try:
                        results[run_id] = await cluster.result(run_id)
                        return
                    except satsuma.StoreError:
                        await restarted.wait()  # its first read came while the server was down

            with trio.fail_after(50):
                async with trio.open_nursery() as nursery:
                    for run_id in run_ids:
                        nursery.start_soon(wait, run_id)
                    await until_subscribed(3)
                    await server_sees(dsn, (1, 1))
                    await trio.to_thread.run_sync(own_server.stop)
                    while not any("lost the connection that listens" in x for x in lines.lines):  # noqa: ASYNC110
                        await trio.sleep(0.05)
                    await trio.to_thread.run_sync(own_server.start)
                    restarted.set()
                    while not any("listening for runs again" in x for x in lines.lines):  # noqa: ASYNC110
                        await trio.sleep(0.05)
                    await until_subscribed(3)
                    await server_sees(dsn, (1, 1))
                    for run_id in run_ids:
                        await cluster.cancel(run_id)
    finally:
        logging.getLogger("satsuma").removeHandler(lines)
    assert sorted(results) == sorted(run_ids)
    assert all(result.status == "cancelled" for result in results.values())
