"""The cluster benchmark's sections 2 and 3: runs per second from concurrent callers
(with the CPU time of each kind of process), and the takeover of a killed node's runs."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

import trio
from _cluster_agent import Courier, ship
from _cluster_cpu import CpuMeter
from _cluster_procs import Child, progress

from satsuma.cluster import Cluster, QueuedRun

TAKEOVER_RUNS = 8
TAKEOVER_TOOL_SECONDS = 0.5


async def concurrent(
    run: Callable[[str], Awaitable[None]], tag: str, callers: int, runs: int
) -> tuple[float, list[float]]:
    """``runs`` runs by ``callers`` tasks, one after another each; wall seconds and the
    runs' latencies."""
    latencies: list[float] = []
    counter = iter(range(runs))

    async def caller() -> None:
        for index in counter:
            started = time.perf_counter()
            await run(f"{tag}-{index}")
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    return time.perf_counter() - started, latencies


class Throughput:
    """Repetitions of one contender: runs/s, latency, CPU."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.latencies: list[float] = []
        self.busy: list[float] = []
        self.cpu: dict[str, list[float]] = {}

    def add(
        self,
        runs: int,
        wall: float,
        latencies: list[float],
        before: dict[str, float],
        after: dict[str, float],
    ) -> None:
        self.rates.append(runs / wall)
        self.latencies.append(statistics.median(latencies))
        self.busy.append((after["busy"] - before["busy"]) / (after["total"] - before["total"]))
        for kind in ("benchmark", "nodes", "postgres", "model server"):
            self.cpu.setdefault(kind, []).append((after[kind] - before[kind]) / runs)


async def measure_throughput(
    label: str,
    results: dict[str, Throughput],
    run: Callable[[str], Awaitable[None]],
    meter: CpuMeter,
    sizes: argparse.Namespace,
) -> None:
    figures = results.setdefault(label, Throughput())
    progress(f"throughput: {label}")
    await concurrent(run, f"{label}-warm", sizes.callers, sizes.callers * 2)
    for repeat in range(sizes.repeats):
        before = meter.read()
        wall, latencies = await concurrent(run, f"{label}-{repeat}", sizes.callers, sizes.runs)
        figures.add(sizes.runs, wall, latencies, before, meter.read())


# --- 3. takeover -------------------------------------------------------------------------


async def takeover(cluster: Cluster, nodes: Sequence[Child], tag: str) -> dict[str, float]:
    """Kill the node holding the most of TAKEOVER_RUNS runs mid-tool; seconds from the
    kill to another node claiming, and finishing, the first of its runs."""
    progress(f"takeover: {tag}")
    ids = [
        await cluster.submit(Courier, f"{tag}-{index}", ship(TAKEOVER_TOOL_SECONDS))
        for index in range(TAKEOVER_RUNS)
    ]
    with trio.fail_after(30):
        while True:
            listed = {run.run_id: run for run in await cluster.runs(status="running", limit=1000)}
            if all(run_id in listed for run_id in ids):
                break
            await trio.sleep(0.01)
    await trio.sleep(0.1)  # each run is in its tools now (they sleep 0.5 s)
    by_node: dict[str, list[str]] = {}
    for run_id in ids:
        node_id = listed[run_id].node_id
        assert node_id is not None
        by_node.setdefault(node_id, []).append(run_id)
    victim = next(
        node for node in nodes if node.word == max(by_node, key=lambda n: len(by_node[n]))
    )
    orphans = by_node[victim.word]
    victim.process.kill()
    killed = time.time()  # the database's clock is this machine's
    async with trio.open_nursery() as nursery:
        for run_id in ids:
            nursery.start_soon(_result, cluster, run_id)
    rows: dict[str, QueuedRun] = {run.run_id: run for run in await cluster.runs(limit=1000)}
    taken = [rows[run_id] for run_id in orphans if rows[run_id].attempts > 1]
    if not taken:
        raise SystemExit("no run of the killed node was taken over")
    claimed = min(run.claimed_at or 0.0 for run in taken)
    ended = min(run.ended_at or 0.0 for run in taken)
    return {"claim": claimed - killed, "finish": ended - killed, "orphans": len(orphans)}


async def _result(cluster: Cluster, run_id: str) -> None:
    result = await cluster.result(run_id, timeout=60)
    if result.status != "completed":
        raise SystemExit(f"run {run_id} ended {result.status}: {result.error}")
