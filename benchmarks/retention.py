"""What 10,000 runs leave in a store's tables, and what ``Store.prune`` leaves of them.

SQLite: 10,000 agent runs (100 conversations of 100 runs) on a SQLiteStore file.
PostgreSQL: 10,000 runs submitted through a ``Cluster`` and run by a ``Node`` in this
process (100 conversations), so that the queue (``run_queue``) and the recorded events
fill as in a cluster. Each run is two model calls with one journaled tool call between.

For each store the table sizes (rows, and bytes where the database tells them) are
printed after the runs, after ``prune(older_than=0)`` (every run ended, so it stands for
``--older-than 30d`` a month later) and after ``prune(..., conversations=True)``; then
the same number of runs again and a prune: the second round reuses the space the first
one's rows left, so the tables stay at the size of one round. On PostgreSQL ``cluster.run`` is timed on another conversation before and
while the prune runs: a prune deletes in short batches and must not stall the cluster.

Figures are printed, never asserted.

    python benchmarks/retention.py [--runs N] [--dsn DSN] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import trio
from _harness import header, table
from postgres_store import database, embedded_server

from satsuma import ModelRequest, open_agent
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore, PruneReport, SQLiteStore
from satsuma.store._status import cluster_status
from satsuma.testing import FunctionModel, Reply
from store import Worker

CONVERSATIONS = 100
# Bounds the SQLite runs at once, and the node's agents.
AT_ONCE = 20
SQLITE_TABLES = ("messages", "runs", "tool_calls", "approvals", "leases")

Sizes = dict[str, tuple[int, int | None]]  # table -> (rows, bytes or None)


def one_call(request: ModelRequest) -> Reply | str:
    """A tool call, then an answer."""
    if any(block.get("type") == "tool_result" for block in request.messages[-1].content):
        return "done"
    return Reply(tool_calls=[("noop", {"n": len(request.messages)})])


def sqlite_sizes(path: Path) -> Sizes:
    with contextlib.closing(sqlite3.connect(path)) as db:
        try:  # dbstat: bytes per table and its indexes, where SQLite was built with it
            pages = dict(
                db.execute(
                    "SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d "
                    "LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY 1"
                ).fetchall()
            )
        except sqlite3.OperationalError:
            pages = {}
        return {
            name: (db.execute(f"SELECT count(*) FROM {name}").fetchone()[0], pages.get(name))
            for name in SQLITE_TABLES
        }


async def postgres_sizes(store: PostgresStore) -> Sizes:
    status = await cluster_status(store)
    return {t.name: (t.rows, t.bytes) for t in status.tables}


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def sqlite_runs(path: Path, runs: int) -> float:
    per = runs // CONVERSATIONS
    limiter = trio.CapacityLimiter(AT_ONCE)
    async with SQLiteStore(path) as store:

        async def conversation(number: int) -> None:
            async with (
                limiter,
                open_agent(
                    Worker, model=FunctionModel(one_call), store=store, agent_id=f"c-{number}"
                ) as agent,
            ):
                for _ in range(per):
                    result = await agent.run("go")
                    assert result.status == "completed", result.error

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for number in range(CONVERSATIONS):
                nursery.start_soon(conversation, number)
        return time.perf_counter() - started


Step = tuple[str, Sizes, int, "PruneReport | None", float]


async def measure_sqlite(folder: Path, runs: int) -> dict[str, Any]:
    path = folder / "retention.db"
    steps: list[Step] = []
    seconds = 0.0
    for cycle in (1, 2):
        seconds += await sqlite_runs(path, runs)
        steps.append((f"{runs:,} runs", sqlite_sizes(path), file_bytes(path), None, 0.0))
        async with SQLiteStore(path) as store:
            for label, conversations in (("prune", False), ("--conversations", True)):
                if cycle == 2 and not conversations:
                    continue
                started = time.perf_counter()
                report = await store.prune(older_than=0, conversations=conversations)
                took = time.perf_counter() - started
                steps.append((label, sqlite_sizes(path), file_bytes(path), report, took))
        if cycle == 1:
            # Deleted pages are reused by the next writes; SQLite gives them back to the
            # file system only at a VACUUM (which rewrites the file: at most yearly).
            with contextlib.closing(sqlite3.connect(path)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            steps.append(("checkpoint", sqlite_sizes(path), file_bytes(path), None, 0.0))
    return {"runs": 2 * runs, "seconds": seconds, "steps": steps}


async def cluster_runs(store: PostgresStore, cluster: Cluster, runs: int) -> float:
    per = runs // CONVERSATIONS
    started = time.perf_counter()
    for round_ in range(per):
        async with trio.open_nursery() as nursery:
            for number in range(CONVERSATIONS):
                nursery.start_soon(cluster.submit, Worker, f"c-{number}", f"go {round_}")
    while True:  # every run ended
        waiting = await cluster.runs(status=("queued", "claimed", "running"), limit=1)
        if not waiting:
            return time.perf_counter() - started
        await trio.sleep(0.5)


async def probe(
    cluster: Cluster, times: list[float], count: int | None, done: trio.Event | None
) -> None:
    """Add to ``times`` ``cluster.run`` times (ms) on a conversation of its own:
    ``count`` of them, or until ``done``."""
    count = None if count is None else len(times) + count
    while (count is None or len(times) < count) and not (done is not None and done.is_set()):
        started = time.perf_counter()
        await cluster.run(Worker, "probe", "go")
        times.append((time.perf_counter() - started) * 1000)


async def measure_postgres(dsn: str, runs: int) -> dict[str, Any]:
    steps: list[Step] = []
    seconds = 0.0
    baseline: list[float] = []
    during: list[float] = []
    for cycle in (1, 2):
        async with PostgresStore(dsn) as store, trio.open_nursery() as nursery:
            node = Node(
                store,
                [Worker],
                model=FunctionModel(one_call),
                max_agents=AT_ONCE,
                poll_interval=0.5,
            )
            await nursery.start(node.serve)
            cluster = Cluster(store)
            seconds += await cluster_runs(store, cluster, runs)
            steps.append((f"{runs:,} runs", await postgres_sizes(store), 0, None, 0.0))
            if cycle == 1:  # after the sizes: the probe's own runs are not in them
                await probe(cluster, baseline, 50, None)
            for label, conversations in (("prune", False), ("--conversations", True)):
                if cycle == 2 and not conversations:
                    continue
                done = trio.Event()
                async with trio.open_nursery() as probing:
                    probing.start_soon(probe, cluster, during, None, done)
                    started = time.perf_counter()
                    report = await store.prune(older_than=0, conversations=conversations)
                    took = time.perf_counter() - started
                    done.set()
                steps.append((label, await postgres_sizes(store), 0, report, took))
            nursery.cancel_scope.cancel()
        if cycle == 1:
            # What autovacuum does by itself (a minute or so later): the deleted rows'
            # space is marked free for the next writes. The files keep their size.
            with psycopg.connect(dsn, autocommit=True) as db:
                db.execute("VACUUM")
            async with PostgresStore(dsn) as store:
                steps.append(("VACUUM", await postgres_sizes(store), 0, None, 0.0))
    return {
        "runs": 2 * runs,
        "seconds": seconds,
        "steps": steps,
        "baseline": baseline,
        "during": during,
    }


def _bytes(count: int | None) -> str:
    if count is None:
        return "-"
    return f"{count / 1e6:.2f} MB" if count >= 100_000 else f"{count / 1e3:.0f} kB"


def report_store(name: str, figures: dict[str, Any]) -> list[str]:
    steps = figures["steps"]
    tables = list(steps[0][1])
    lines = [
        "",
        f"{name}: {figures['runs']:,} runs in {figures['seconds']:.0f} s "
        f"({figures['runs'] / figures['seconds']:.0f} runs/s), in two rounds each followed "
        "by a prune; rows (bytes) per table",
    ]
    rows = [
        [
            table_name,
            *(f"{step[1][table_name][0]:,} ({_bytes(step[1][table_name][1])})" for step in steps),
            "",
        ]
        for table_name in tables
    ]
    if any(step[2] for step in steps):
        rows.append(["file (with -wal)", *(_bytes(step[2]) for step in steps), ""])
    lines += table(["table", *(step[0] for step in steps), ""], rows)
    for label, _, _, pruned, took in steps:
        if pruned is not None:
            deleted = {k: v for k, v in pruned.counts().items() if v}
            lines.append(f"{label}: {took:.2f} s, deleted {deleted}")
    return lines


def report(sqlite: dict[str, Any], postgres: dict[str, Any], server: str) -> str:
    lines = header("satsuma retention benchmark", f"sqlite {sqlite3.sqlite_version}", server)
    lines += report_store("SQLite", sqlite)
    lines += report_store("PostgreSQL (cluster)", postgres)
    baseline, during = postgres["baseline"], postgres["during"]
    if during:
        lines.append(
            f"cluster.run on another conversation: median {statistics.median(baseline):.1f} ms, "
            f"max {max(baseline):.1f} ms before the prune ({len(baseline)} runs); median "
            f"{statistics.median(during):.1f} ms, max {max(during):.1f} ms while it ran "
            f"({len(during)} runs)"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10_000, help="runs per store (default 10,000)")
    parser.add_argument("--dsn", help="an existing server whose role may create databases")
    parser.add_argument("--quick", action="store_true", help="300 runs, to test the harness")
    options = parser.parse_args(argv)
    runs = 300 if options.quick else options.runs
    with contextlib.ExitStack() as stack:
        admin = options.dsn or stack.enter_context(embedded_server())
        dsn = stack.enter_context(database(admin))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        with psycopg.connect(dsn) as probe_connection:
            server = f"PostgreSQL {probe_connection.info.server_version // 10000}"
        sqlite = trio.run(measure_sqlite, folder, runs)
        postgres = trio.run(measure_postgres, dsn, runs)
    print(report(sqlite, postgres, server if options.dsn else f"{server} (embedded)"))


if __name__ == "__main__":
    main(sys.argv[1:])
