"""Fencing across processes: a node paused (SIGSTOP) in the middle of a tool, past its
lease, loses the run to another node, which finishes it; resumed (SIGCONT), the paused
node writes nothing more into the database (its writes carry a lease it no longer has and
are refused), gives the run up, and lets the agent be."""

from __future__ import annotations

import importlib.util
import json
import signal
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
import trio

from satsuma._exceptions import StoreError
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.store import _queue as queue
from satsuma.testing import FunctionModel, check_conversation
from satsuma.tools import INTERRUPTED_TEXT

WORKER = Path(__file__).with_name("node_worker.py")


def _worker_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_satsuma_node_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _worker_module()

AGENT_ID = "ledger-1"


def _snapshot(dsn: str, agent_id: str) -> dict[str, Any]:
    """Everything the database holds of the conversation, its runs and its lease."""
    with psycopg.connect(dsn) as db:
        return {
            "messages": db.execute(
                "SELECT seq, role, content FROM messages WHERE agent_id = %s ORDER BY seq",
                (agent_id,),
            ).fetchall(),
            "runs": db.execute(
                "SELECT * FROM runs WHERE agent_id = %s ORDER BY seq", (agent_id,)
            ).fetchall(),
            "tool_calls": db.execute(
                "SELECT c.* FROM tool_calls c JOIN runs r USING (run_id) "
                "WHERE r.agent_id = %s ORDER BY c.position",
                (agent_id,),
            ).fetchall(),
            "leases": db.execute(
                "SELECT * FROM leases WHERE agent_id = %s", (agent_id,)
            ).fetchall(),
            "run_queue": db.execute(
                "SELECT * FROM run_queue WHERE agent_id = %s ORDER BY seq", (agent_id,)
            ).fetchall(),
        }


def _node_rows(dsn: str, pid: int) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as db:
        return db.execute(
            "SELECT node_id, heartbeat_at FROM nodes WHERE pid = %s", (pid,)
        ).fetchall()


async def _until(condition: Any, *args: Any) -> Any:
    """Poll a database condition (in a thread) until it gives something true."""
    while not (found := await trio.to_thread.run_sync(condition, *args)):  # noqa: ASYNC110  (in the database)
        await trio.sleep(0.05)
    return found


async def test_a_paused_node_writes_nothing_after_its_run_was_taken_over_and_gives_it_up(
    postgres_dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        cluster = Cluster(store, poll_interval=0.5)
        # Tools of 3 s: the pause lands inside them.
        paused = await worker.NodeProcess.start(
            postgres_dsn, log, tmp_path, "clerk", "paused", 1.0, 3.0
        )
        nursery.start_soon(paused.pump)
        try:
            with trio.fail_after(60):
                await paused.wait_for(lambda lines: any(x.startswith("READY") for x in lines))
                run_id = await cluster.submit(worker.Clerk, AGENT_ID, "entry 1")
                await paused.wait_for(lambda _: any(c[0] == "record" for c in paused.calls()))
                paused.process.send_signal(signal.SIGSTOP)
                [stale_node] = await _until(_node_rows, postgres_dsn, paused.pid)

                taker = Node(
                    store,
                    agents=[worker.Clerk],
                    name="taker",
                    model=FunctionModel(worker.clerk_reply),
                    context={"log": str(log), worker.TOOL_SECONDS: 0.05},
                    lease_seconds=1.0,
                    poll_interval=0.2,
                )
                await nursery.start(taker.serve)
                result = await cluster.result(run_id)
                assert result.status == "completed", result
                before = await trio.to_thread.run_sync(_snapshot, postgres_dsn, AGENT_ID)

                paused.process.send_signal(signal.SIGCONT)
                # The paused node learns it was counted dead, gives its run up and joins
                # again under a new id; two heartbeats of the new one, and it has had
                # every chance to write.
                [(_, beat)] = await _until(
                    lambda: [
                        row
                        for row in _node_rows(postgres_dsn, paused.pid)
                        if row[0] != stale_node[0]
                    ]
                )
                await _until(
                    lambda: [row for row in _node_rows(postgres_dsn, paused.pid) if row[1] > beat]
                )
                [(_, beat)] = _node_rows(postgres_dsn, paused.pid)
                await _until(
                    lambda: [row for row in _node_rows(postgres_dsn, paused.pid) if row[1] > beat]
                )
                after = await trio.to_thread.run_sync(_snapshot, postgres_dsn, AGENT_ID)
                stderr = paused.stderr.read_text()
        finally:
            await paused.kill()
            nursery.cancel_scope.cancel()

    # Nothing written by the paused node after the takeover: not a message, a journal
    # entry, a run record, the queue's row, nor a renewal of the agent's lease.
    assert after == before
    assert "was counted dead (no heartbeat for 1s); gives up its 1 run(s)" in stderr, stderr
    assert "no longer has" in stderr, stderr  # a write of it was refused (StoreError)
    assert paused.process.returncode == -signal.SIGKILL

    history = await trio.to_thread.run_sync(_snapshot, postgres_dsn, AGENT_ID)
    [lease] = history["leases"]
    assert lease[1] is None  # owner_id: let go by the taker; the paused node took nothing
    messages = [
        {"role": role, "content": json.loads(content)} for _, role, content in history["messages"]
    ]
    check_conversation(messages)
    effects = log.read_text().splitlines()
    records = [line.split()[2] for line in effects if line.startswith("record ")]
    assert sorted(records) == ["toolu_entry_1_record1", "toolu_entry_1_record2"]
    answers = {
        block["tool_use_id"]: block["content"]
        for message in messages
        for block in message["content"]
        if block.get("type") == "tool_result"
    }
    assert INTERRUPTED_TEXT in str(answers["toolu_entry_1_record1"])
    assert answers["toolu_entry_1_fetch"] == "fetch entry_1 done"


async def test_a_node_counted_dead_claims_and_starts_nothing(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        # "dead" stops sending heartbeats at once: its lease is a millisecond.
        for node_id, lease in (("alive", 60.0), ("dead", 0.001)):
            await queue.register_node(
                store, node_id, name=node_id, host="h", pid=1, agents=["clerk"], lease_seconds=lease
            )
        await queue.enqueue(store, "run_1", "clerk", "a-1", "one")
        await queue.enqueue(store, "run_2", "clerk", "a-2", "two")
        claimed = await queue.claim(store, "dead", ["clerk"])
        assert claimed is not None and claimed.run_id == "run_1"
        # A live node's sweep counts it dead and requeues its run.
        assert await queue.sweep(store, lock_timeout=1.0) == 1
        # Whatever it still tries under its old id changes nothing.
        assert await queue.claim(store, "dead", ["clerk"]) is None
        assert not await queue.mark_running(store, "run_1", "dead")
        runs = {run.run_id: (run.status, run.node_id) for run in await Cluster(store).runs()}
        assert runs == {"run_1": ("queued", None), "run_2": ("queued", None)}
        # A live node claims as before.
        claimed = await queue.claim(store, "alive", ["clerk"])
        assert claimed is not None and claimed.run_id == "run_1"


async def test_the_server_ends_a_transaction_its_paused_process_left_holding_locks(
    postgres_dsn: str,
) -> None:
    # The migrations that create the schema are not limited (they may take long on big
    # tables): a store whose limit is a millisecond still opens.
    async with PostgresStore(postgres_dsn, transaction_timeout=0.001):
        pass
    async with PostgresStore(postgres_dsn) as store:
        await queue.register_node(
            store, "paused", name="p", host="h", pid=1, agents=["clerk"], lease_seconds=60
        )

    # A paused process (SIGSTOP) in the middle of a pipelined write, played by a write
    # that stops for longer than transaction_timeout between its statements.
    def paused_write(db: psycopg.Connection[Any]) -> None:
        db.execute("UPDATE nodes SET heartbeat_at = heartbeat_at WHERE node_id = 'paused'")
        db.execute("SELECT 1").fetchone()  # the update went out, its lock is held
        time.sleep(1.5)
        db.execute("SELECT 1").fetchone()

    async with PostgresStore(postgres_dsn, transaction_timeout=0.6) as store:
        with pytest.raises(StoreError, match="lost"):
            await store._call(paused_write)
    # The server ended it: its lock is free (a write waiting at most 1 s gets it).
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("SET lock_timeout = '1s'")
        db.execute("DELETE FROM nodes WHERE node_id = 'paused'")
