"""PostgresStore's own cases, against a real server (see conftest.py): two stores (as two
processes would) on one database contending for an agent, fencing after a takeover, the
server restarting under a store, cancelled calls, schema versions, damaged rows, and a
real agent killed in another process and resumed here.

The Store contract itself runs on PostgreSQL through the ``store`` fixture of
test_stores.py, test_store_hardening.py and test_agent_persistence.py.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma import Message
from satsuma.store import Owner, PostgresStore, RunRecord
from satsuma.store._postgres import SCHEMA_VERSION
from satsuma.store._schema import POSTGRES_MIGRATIONS
from satsuma.testing import FunctionModel, Reply, ScriptedModel, check_conversation

WORKER = Path(__file__).with_name("prompt_worker.py")


class Assistant(satsuma.Agent):
    name = "assistant"


def elsewhere(name: str) -> Owner:
    """An owner on another machine: its lease is gone only once it expired."""
    return Owner(owner_id=f"{name}-owner", pid=4242, host=name)


@contextlib.contextmanager
def raw(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


# --- two stores, one database -------------------------------------------------------------


async def test_two_stores_on_one_database_contend_for_one_agent(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as node_a, PostgresStore(postgres_dsn) as node_b:
        lease_a = await node_a.acquire_lease("a", elsewhere("node-a"), seconds=30)
        await node_a.write_tail("a", 0, [Message.user("from a")], lease=lease_a)
        # The holder is alive (its lease has not expired): the second store is refused.
        with pytest.raises(satsuma.StoreError) as caught:
            await node_b.acquire_lease("a", elsewhere("node-b"), seconds=30)
        assert "agent 'a' is already open in process 4242 on host node-a" in str(caught.value)
        # Its lease lapses (it stopped renewing): the other store takes the agent over.
        await node_a.renew_lease(lease_a, seconds=-1)
        lease_b = await node_b.acquire_lease("a", elsewhere("node-b"), seconds=30)
        assert lease_b.epoch == lease_a.epoch + 1
        # Every write of the old holder is refused from now on, naming who holds it.
        for write in (
            node_a.write_tail("a", 1, [Message.user("stale")], lease=lease_a),
            node_a.start_run(
                RunRecord(run_id="r", agent_id="a", status="running", prompt="p", started_at=1),
                lease=lease_a,
            ),
            node_a.call_started("r", "t1", "charge", {}, lease=lease_a),
            node_a.mark_interrupted("a", lease=lease_a),
            node_a.renew_lease(lease_a, seconds=30),
        ):
            with pytest.raises(satsuma.StoreError, match=r"epoch 1\) was refused") as refused:
                await write
            assert "process 4242 on host node-b holds it now (epoch 2)" in str(refused.value)
        await node_a.release_lease(lease_a)  # lets nothing go
        await node_b.write_tail("a", 1, [Message.user("from b")], lease=lease_b)
        assert [m.text for m in await node_a.load_messages("a")] == ["from a", "from b"]
        assert await node_b.runs("a") == []


async def test_a_write_racing_a_takeover_commits_before_it_or_not_at_all(
    postgres_dsn: str,
) -> None:
    # The old holder writes as fast as it can while the other store takes the agent
    # over: every write it was told succeeded is there when the takeover returns, and
    # none succeeds after.
    async with PostgresStore(postgres_dsn) as node_a, PostgresStore(postgres_dsn) as node_b:
        lease_a = await node_a.acquire_lease("a", elsewhere("node-a"), seconds=-1)  # lapsed
        written: list[str] = []
        refused = trio.Event()

        async def old_holder() -> None:
            n = 0
            while True:
                try:
                    await node_a.write_tail("a", n, [Message.user(f"m{n}")], lease=lease_a)
                except satsuma.StoreError:
                    refused.set()
                    return
                written.append(f"m{n}")
                n += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(old_holder)
            await trio.sleep(0.05)
            lease_b = await node_b.acquire_lease("a", elsewhere("node-b"), seconds=30)
            seen = [m.text for m in await node_b.load_messages("a")]
            await refused.wait()
        assert lease_b.epoch == 2
        assert written, "the old holder wrote nothing before the takeover"
        assert seen == written


async def test_two_first_takers_at_once_one_wins(postgres_dsn: str) -> None:
    stores = [PostgresStore(postgres_dsn) for _ in range(4)]
    outcomes: list[str] = []

    async def take(n: int) -> None:
        try:
            lease = await stores[n].acquire_lease("a", elsewhere(f"node-{n}"), seconds=30)
            outcomes.append(f"epoch {lease.epoch}")
        except satsuma.StoreError:
            outcomes.append("refused")

    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(take, n)
    assert sorted(outcomes) == ["epoch 1", "refused", "refused", "refused"]
    for store in stores:
        await store.aclose()


# --- the server going away ------------------------------------------------------------------


async def test_a_server_restart_is_a_clear_error_while_it_is_down_and_loses_nothing(
    postgres_server: Any, postgres_dsn: str
) -> None:
    if not postgres_server.restartable:
        pytest.skip(f"the server of {postgres_server.admin_dsn!r} is not the suite's own")
    async with PostgresStore(postgres_dsn, pool_size=3) as store:
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        await store.write_tail("a", 0, [Message.user("committed")], lease=lease)
        await store.start_run(
            RunRecord(run_id="r1", agent_id="a", status="running", prompt="p", started_at=1),
            lease=lease,
        )
        await store.call_started("r1", "t1", "charge", {"amount": 3}, lease=lease)
        await trio.to_thread.run_sync(postgres_server.stop)
        try:
            for call in (
                store.load_messages("a"),
                store.write_tail("a", 1, [Message.user("lost")], lease=lease),
                store.runs("a"),
            ):
                with pytest.raises(satsuma.StoreError, match="cannot reach the database") as down:
                    await call
                assert store.location in str(down.value)
            with pytest.raises(satsuma.StoreError, match="cannot reach the database"):
                await PostgresStore(postgres_dsn).open()
        finally:
            await trio.to_thread.run_sync(postgres_server.start)
        # Back: the same store goes on, with everything committed before.
        assert [m.text for m in await store.load_messages("a")] == ["committed"]
        await store.write_tail("a", 1, [Message.user("after")], lease=lease)
        assert [m.text for m in await store.load_messages("a")] == ["committed", "after"]
        assert [(e.tool_use_id, e.input) for e in await store.calls("r1")] == [
            ("t1", {"amount": 3})
        ]
        assert [r.run_id for r in await store.runs("a")] == ["r1"]
        await store.release_lease(lease)


async def test_idle_connections_broken_under_the_store_are_replaced(postgres_dsn: str) -> None:
    # What a server restart does to the pool, without the restart: every idle
    # connection is cut; the next call runs on a new one.
    async with PostgresStore(postgres_dsn, pool_size=2) as store:
        async with trio.open_nursery() as nursery:  # two connections in the pool
            for n in range(2):
                nursery.start_soon(store.write_tail, f"a{n}", 0, [Message.user("x")])
        with raw(postgres_dsn) as admin:
            cut = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert cut is not None and cut[0] >= 1
        await store.write_tail("a0", 1, [Message.user("y")])
        assert [m.text for m in await store.load_messages("a0")] == ["x", "y"]


def _prepared(store: PostgresStore) -> int:
    """Statements prepared on the server by the store's (one) idle pooled connection."""
    [link] = store._idle
    row = link.connection.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(("threshold", "prepares"), [(5, True), (0, True), (None, False)])
async def test_prepare_threshold_none_prepares_nothing_on_the_server(
    postgres_dsn: str, threshold: int | None, prepares: bool
) -> None:
    # What a pooler in transaction mode needs (PgBouncer before 1.21, Supavisor): psycopg
    # prepares a query run often enough on a connection, unless told not to.
    async with PostgresStore(postgres_dsn, pool_size=1, prepare_threshold=threshold) as store:
        for n in range(8):
            await store.write_tail("a", n, [Message.user(f"m{n}")])
            assert len(await store.load_messages("a")) == n + 1
        assert (await trio.to_thread.run_sync(_prepared, store) > 0) is prepares


# --- cancellation -------------------------------------------------------------------------


def _waiting_on_locks(dsn: str) -> int:
    """Backends of this database waiting for a lock now."""
    with raw(dsn) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_cancelled_call_returns_at_once_and_its_query_is_cancelled_on_the_server(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn, pool_size=1) as store:
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        [first] = store._idle
        with raw(postgres_dsn) as blocker:
            # Another transaction holds the lease row: the store's write waits for it,
            # and goes on waiting for as long as the blocker holds it.
            blocker.execute("BEGIN")
            blocker.execute("SELECT * FROM leases WHERE agent_id = 'a' FOR UPDATE")
            released = trio.Event()
            async with trio.open_nursery() as nursery:

                async def watchdog() -> None:
                    # Should the call wait for its thread (as it did), end the wait,
                    # so that the test fails rather than hangs.
                    await trio.sleep(10)
                    await trio.to_thread.run_sync(blocker.execute, "ROLLBACK")
                    released.set()

                nursery.start_soon(watchdog)
                with trio.move_on_after(0.2) as scope:
                    await store.write_tail("a", 0, [Message.user("in flight")], lease=lease)
                nursery.cancel_scope.cancel()
            # Returned while the lock is still held: the call did not wait for its thread.
            assert scope.cancelled_caught
            assert not released.is_set()
            # The server was asked to cancel the query: nothing waits on the lock any
            # more, although the blocker still holds it.
            with trio.fail_after(10):
                while await trio.to_thread.run_sync(_waiting_on_locks, postgres_dsn):  # noqa: ASYNC110  (the server's state)
                    await trio.sleep(0.02)
            blocker.execute("ROLLBACK")
        # Cancelled before COMMIT: nothing of it was written.
        assert await store.load_messages("a") == []
        # Cancelled while waiting for a connection: nothing runs at all.
        with trio.move_on_after(0):
            await store.write_tail("a", 0, [Message.user("never")], lease=lease)
        # Its connection was dropped (never reused: its state was unknown), and the pool's
        # one slot serves the next call on a new one.
        await store.write_tail("a", 0, [Message.user("next")], lease=lease)
        assert [m.text for m in await store.load_messages("a")] == ["next"]
        [second] = store._idle
        assert second is not first
        with trio.fail_after(10):  # closed once its cancel is done with it
            while not first.connection.closed:  # noqa: ASYNC110  (a thread closes it)
                await trio.sleep(0.02)
        assert second.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# --- schema -------------------------------------------------------------------------------


async def test_the_schema_is_created_once_by_stores_opening_at_once(postgres_dsn: str) -> None:
    stores = [PostgresStore(postgres_dsn) for _ in range(4)]
    async with trio.open_nursery() as nursery:
        for store in stores:
            nursery.start_soon(store.open)
    for store in stores:
        await store.aclose()
    with raw(postgres_dsn) as db:
        versions = db.execute("SELECT version FROM satsuma_schema ORDER BY version").fetchall()
        tables = db.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() ORDER BY table_name"
        ).fetchall()
    # Every version of the history once, with no gap.
    assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    assert sorted(POSTGRES_MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))
    assert max(POSTGRES_MIGRATIONS) == SCHEMA_VERSION
    assert [t for (t,) in tables] == [
        "approvals", "budget_holds", "budget_ledgers", "leases", "messages", "nodes",
        "run_event_streams", "run_events", "run_queue", "runs", "satsuma_schema", "summaries",
        "tool_calls",
    ]  # fmt: skip


async def test_a_newer_schema_is_refused(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn):
        pass
    with raw(postgres_dsn) as db:
        db.execute("INSERT INTO satsuma_schema (version) VALUES (%s)", (SCHEMA_VERSION + 7,))
    with pytest.raises(satsuma.StoreError) as caught:
        await PostgresStore(postgres_dsn).open()
    assert caught.value.problem == (
        f"its schema is version {SCHEMA_VERSION + 7}, newer than this satsuma knows "
        f"({SCHEMA_VERSION}); upgrade satsuma to use it"
    )


async def test_a_database_that_does_not_exist_is_a_clear_error_at_open(
    postgres_server: Any,
) -> None:
    dsn = postgres_server.dsn("satsuma_no_such_database")
    with pytest.raises(satsuma.StoreError, match=r"cannot reach the database .*does not exist"):
        async with satsuma.open_agent(
            Assistant, model=ScriptedModel([]), store=PostgresStore(dsn), agent_id="a"
        ):
            raise AssertionError("the agent must not start")


async def test_a_database_not_in_utf8_is_refused_at_open(
    postgres_server: Any, postgres_dsn: str
) -> None:
    with raw(postgres_dsn) as db:
        db.execute("CREATE DATABASE satsuma_ascii ENCODING 'SQL_ASCII' TEMPLATE template0")
    try:
        with pytest.raises(satsuma.StoreError, match="encoding is SQL_ASCII, not UTF8"):
            await PostgresStore(postgres_server.dsn("satsuma_ascii")).open()
    finally:
        with raw(postgres_dsn) as db:
            db.execute("DROP DATABASE satsuma_ascii WITH (FORCE)")


async def test_a_closed_store_says_so(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    await store.open()
    await store.aclose()
    with pytest.raises(satsuma.StoreError, match="the store is closed"):
        await store.load_messages("a")


def test_the_dsn_is_checked_and_its_password_never_shown() -> None:
    store = PostgresStore("postgresql://app:s3cret@db.internal:5433/agents")
    assert repr(store) == "PostgresStore('postgresql://app@db.internal:5433/agents')"
    assert "s3cret" not in store.location
    socket_store = PostgresStore("dbname=agents host=/run/pg user=app password=s3cret")
    assert socket_store.location == "postgresql://app@/agents?host=/run/pg"
    with pytest.raises(ValueError, match="not a PostgreSQL connection string"):
        PostgresStore("this is not = a dsn ' at all")
    with pytest.raises(ValueError, match="pool_size must be at least 1"):
        PostgresStore("postgresql:///agents", pool_size=0)
    with pytest.raises(ValueError, match="prepare_threshold must be None or 0 or more"):
        PostgresStore("postgresql:///agents", prepare_threshold=-1)


def test_psycopg_is_imported_only_by_a_postgres_store_and_named_when_missing() -> None:
    bare = "import sys, satsuma, satsuma.store; print([m for m in sys.modules if 'psycopg' in m])"
    out = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    missing = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from satsuma.store import PostgresStore\n"
        "try:\n"
        "    PostgresStore('postgresql:///agents')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", missing], capture_output=True, text=True, check=True
    )
    assert "pip install 'satsuma[postgres]'" in out.stdout


# --- rows that do not decode --------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("UPDATE messages SET content = '{not json' WHERE seq = 1", "message 1 of agent 'a'"),
        ("UPDATE messages SET role = 'system' WHERE seq = 3", "message 3 of agent 'a'"),
        ("DELETE FROM messages WHERE seq = 1", "message 1 of agent 'a' is missing"),
        ("UPDATE runs SET usage = '[1, 2]' WHERE prompt = 'second'", "run '"),
        ("UPDATE runs SET status = 'weird' WHERE prompt = 'first'", "run '"),
    ],
)
async def test_a_row_that_does_not_decode_stops_the_agent_with_a_store_error(
    postgres_dsn: str, damage: str, named: str
) -> None:
    async with (
        PostgresStore(postgres_dsn) as store,
        satsuma.open_agent(
            Assistant, model=ScriptedModel(["one", "two"]), store=store, agent_id="a"
        ) as agent,
    ):
        await agent.run("first")
        await agent.run("second")
    with raw(postgres_dsn) as db:
        db.execute(damage)  # type: ignore[arg-type]
    async with PostgresStore(postgres_dsn) as store:
        with pytest.raises(satsuma.StoreError) as caught:
            async with satsuma.open_agent(
                Assistant, model=ScriptedModel([]), store=store, agent_id="a"
            ):
                raise AssertionError("the agent must not start on a damaged history")
        assert named in str(caught.value)
        assert "nothing was guessed" in str(caught.value)
        assert await store.runs("b") == []


async def test_a_journal_row_that_does_not_decode_names_the_call_and_the_run(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await store.call_started("r1", "toolu_1", "charge", {"amount": 3})
        await store.call_finished("r1", "toolu_1", content="ok", is_error=False, error_kind=None)
        with raw(postgres_dsn) as db:
            db.execute("UPDATE tool_calls SET content = '[oops'")
        with pytest.raises(satsuma.StoreError, match=r"call 'toolu_1' of run 'r1'.*not JSON"):
            await store.calls("r1")


# --- a real agent ---------------------------------------------------------------------------

charges: list[int] = []


@satsuma.tool
async def charge(amount: int) -> str:
    """Charge the customer (not idempotent).

    Args:
        amount: Euros.
    """
    charges.append(amount)
    return f"charged {amount} EUR"


class Cashier(satsuma.Agent):
    name = "cashier"
    tools = [charge]


async def test_an_agent_keeps_its_conversation_and_journal_across_opens(
    postgres_dsn: str,
) -> None:
    charges.clear()
    model = ScriptedModel([Reply(tool_calls=[("charge", {"amount": 12})]), "Done.", "Yes."])
    async with PostgresStore(postgres_dsn) as store:
        async with satsuma.open_agent(Cashier, model=model, store=store, agent_id="c-1") as agent:
            first = await agent.run("Charge 12 EUR")
        assert first.output == "Done."
        (entry,) = await store.calls(first.run_id)
        assert (entry.tool_name, entry.input, entry.finished, entry.content) == (
            "charge",
            {"amount": 12},
            True,
            "charged 12 EUR",
        )
    # Another store (another process, say) on the same database: the conversation is back.
    async with (
        PostgresStore(postgres_dsn) as store,
        satsuma.open_agent(Cashier, model=model, store=store, agent_id="c-1") as agent,
    ):
        assert len(agent.history) == 4
        second = await agent.run("Did it work?")
        check_conversation(agent.history)
        assert [(r.run_id, r.status) for r in await store.runs("c-1")] == [
            (first.run_id, "completed"),
            (second.run_id, "completed"),
        ]
    assert charges == [12]


async def test_an_agent_killed_in_another_process_is_refused_then_resumed_here(
    postgres_dsn: str,
) -> None:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), postgres_dsn, "a", "What is the weather?", "model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        seen = b""
        with trio.fail_after(60):
            while b"AT model\n" not in seen:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    raise AssertionError((await process.stderr.receive_some()).decode())
                seen += chunk
        async with PostgresStore(postgres_dsn) as store:
            with pytest.raises(satsuma.StoreError) as caught:
                async with satsuma.open_agent(
                    Assistant, model=ScriptedModel([]), store=store, agent_id="a"
                ):
                    raise AssertionError("two owners of one agent")
            assert f"process {process.pid} on host {socket.gethostname()}" in str(caught.value)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()
    # The holder died mid-run: the agent is free here, its run interrupted and resumable.
    sent: list[str] = []

    async def reply(request: satsuma.ModelRequest) -> str:
        await trio.lowlevel.checkpoint()
        sent.extend(m.text for m in request.messages)
        return "Sunny."

    async with (
        PostgresStore(postgres_dsn) as store,
        satsuma.open_agent(Assistant, model=FunctionModel(reply), store=store, agent_id="a") as a,
    ):
        (record,) = await store.runs("a")
        assert record.status == "interrupted"
        result = await a.resume(record.run_id)
        assert (result.status, result.output, result.run_id) == (
            "completed",
            "Sunny.",
            record.run_id,
        )
        assert sent == ["What is the weather?"]
        check_conversation(await store.load_messages("a"))
        assert os.getpid() != process.pid


async def test_pool_size_is_the_most_connections_the_store_opens(postgres_dsn: str) -> None:
    # The cluster sizes its event writers from it (a quarter of the pool).
    async with PostgresStore(postgres_dsn, pool_size=6) as store:
        assert store.pool_size == 6
    assert PostgresStore(postgres_dsn).pool_size == 8
