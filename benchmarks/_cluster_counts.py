"""The cluster benchmark's sections 1b and 1c: what each side of a run asks of
PostgreSQL, counted exactly, and the timeline of one ``cluster.run`` beside one in
this process."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import trio
from _cluster_agent import PING, Courier, ship
from _cluster_latency import cluster_run, in_process_run
from _cluster_procs import progress
from _cluster_timeline import Timeline
from _store_counts import Counts, count

from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore

NO_EVENT_LOG = "cluster, event_log=None"
COUNTED = ("calls", "transactions", "statements", "round_trips", "notifies")


async def store_counts(dsn: str, prompt: str, label: str, runs: int) -> dict[str, dict[str, float]]:
    """Exact counts per run (``_store_counts``): an in-process run on a PostgresStore,
    and a cluster run's caller and node, the node in this process on a store of its own.
    With SATSUMA_BENCH_CALLERS set, the store calls by where they come from too."""
    progress(f"counts: {label}")
    out: dict[str, dict[str, float]] = {}
    async with PostgresStore(dsn) as alone:
        counts = count(alone)
        await in_process_run(alone, f"count-{label}-warm", prompt)
        counts.reset()
        for index in range(runs):
            await in_process_run(alone, f"count-{label}-{index}", prompt)
        out["in one process"] = counts.per(runs)
    async with (
        PostgresStore(dsn) as caller_store,
        PostgresStore(dsn) as node_store,
        trio.open_nursery() as nursery,
    ):
        caller, node = count(caller_store), count(node_store)
        await nursery.start(Node(node_store, agents=[Courier]).serve)
        cluster = Cluster(caller_store)
        await cluster_run(cluster, f"count-cluster-{label}-warm", prompt)
        await trio.sleep(0.2)  # the node's last writes of the warm-up run
        caller.reset()
        node.reset()
        for index in range(runs):
            await cluster_run(cluster, f"count-cluster-{label}-{index}", prompt)
        await trio.sleep(0.2)
        out["cluster: caller"] = caller.per(runs)
        out["cluster: node"] = node.per(runs)
        both = Counts(**{name: getattr(caller, name) + getattr(node, name) for name in COUNTED})
        out["cluster: caller + node"] = both.per(runs)
        if os.environ.get("SATSUMA_BENCH_CALLERS"):
            for side, counted in (("caller", caller), ("node", node)):
                for where, calls in counted.callers.most_common():
                    progress(f"  {side}: {calls / runs:5.1f} {where}")
        nursery.cancel_scope.cancel()
    return out


async def timelines(dsn: str, runs: int) -> dict[str, Timeline]:
    """Timelines (``_cluster_timeline``) of ``runs`` pings: ``cluster.run`` with the node
    in this process on a store of its own, and ``open_agent`` + run in this process,
    without and with an events callback (a node records its runs' events: a run with a
    listener streams its model's answer, as a node's does), in interleaved rounds."""
    progress("timelines of a cluster.run and of a run in one process")
    clustered, alone, listened = Timeline(), Timeline(), Timeline()
    async with (
        PostgresStore(dsn) as in_process,
        PostgresStore(dsn) as caller_store,
        PostgresStore(dsn) as node_store,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(Node(node_store, agents=[Courier]).serve)
        cluster = Cluster(caller_store)
        for index in range(3):  # warm: connections, prepared statements, the SDK
            await cluster_run(cluster, f"timeline-warm-{index}", PING)
            await in_process_run(in_process, f"timeline-alone-warm-{index}", PING)
            await in_process_run(in_process, f"timeline-heard-warm-{index}", PING, heard=True)
        await trio.sleep(0.2)
        for round_ in range(4):
            with clustered.hooked(caller=caller_store, node=node_store):
                for index in range(runs // 4):
                    clustered.begin()
                    started = time.perf_counter()
                    await cluster_run(cluster, f"timeline-{round_}-{index}", PING)
                    clustered.span("the run: cluster.run", started, time.perf_counter())
                    # The node's last steps (its agent's lease let go) may come after
                    # the caller has the result.
                    await trio.sleep(0.005)
                    clustered.end()
            for timeline, heard in ((alone, False), (listened, True)):
                with timeline.hooked(in_process=in_process):
                    for index in range(runs // 4):
                        timeline.begin()
                        started = time.perf_counter()
                        await in_process_run(
                            in_process, f"timeline-{heard}-{round_}-{index}", PING, heard=heard
                        )
                        timeline.span("the run: open_agent + run", started, time.perf_counter())
                        timeline.end()
        nursery.cancel_scope.cancel()
    return {
        "cluster.run": clustered,
        "open_agent + run, PostgresStore": alone,
        "open_agent + run(events=...), PostgresStore": listened,
    }


async def all_counts(dsn: str, sizes: argparse.Namespace) -> dict[str, Any]:
    return {
        "ping": await store_counts(dsn, PING, "ping", sizes.count_runs),
        "two tools": await store_counts(dsn, ship(sizes.tool_ms / 1000), "tools", sizes.count_runs),
    }
