"""The cluster benchmark's report: its figures as tables, with the issue's bars."""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import psycopg
from _cluster_counts import COUNTED, NO_EVENT_LOG
from _cluster_load import Throughput
from _cluster_timeline import timeline_lines
from _harness import header, median, ratio, table


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def count_lines(counts: dict[str, Any], sizes: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    for workload, sides in counts.items():
        lines += [
            "",
            f"1b. per run ({workload}), exact: what each side asks of PostgreSQL (a store "
            f"call is one hop to a worker thread; mean of {sizes.count_runs} runs)",
            "",
            *table(
                ["", *COUNTED, ""],
                [
                    [side, *(f"{figures[name]:.1f}" for name in COUNTED), ""]
                    for side, figures in sides.items()
                ],
            ),
        ]
    return lines


def _bars(latency: dict[str, list[float]], throughput: dict[str, Throughput]) -> list[str]:
    """The cluster's bars (issue 36), each against the same run in one process on
    PostgreSQL, measured in this run."""

    def cpu(label: str) -> float:
        return sum(median(values) for values in throughput[label].cpu.values())

    one_node = next(label for label in throughput if label.startswith("cluster, "))
    run_ratio = median(latency[next(k for k in latency if k.startswith("cluster.run"))]) / median(
        latency["open_agent, PostgresStore"]
    )
    cpu_ratio = cpu(one_node) / cpu("in-process, PostgresStore")
    rows = [
        ["cluster.run latency", f"{run_ratio:.2f}x", "<= 1.50x", _met(run_ratio, 1.5)],
        [
            f"CPU per run, all processes ({one_node})",
            f"{cpu_ratio:.2f}x",
            "<= 1.30x",
            _met(cpu_ratio, 1.3),
        ],
    ]
    bare = f"{NO_EVENT_LOG}, 1 node"
    if bare in throughput:  # not in a quick run
        bare_ratio = cpu(bare) / cpu("in-process, PostgresStore")
        rows.append([f"  the same, {bare}", f"{bare_ratio:.2f}x", "(what events cost)", ""])
    return [
        "",
        "bars: the cluster against the same run in one process on PostgreSQL",
        "",
        *table(["", "ratio", "bar", ""], rows),
    ]


def _met(figure: float, bar: float) -> str:
    return "met" if figure <= bar else "not met"


def report(figures: dict[str, Any], sizes: argparse.Namespace, server: str) -> list[str]:
    lines = header("satsuma cluster benchmark", f"psycopg {psycopg.__version__}", server)
    lines += [f"load before: {sizes.load_before}; after: {os.getloadavg()[0]:.2f} (1 min)"]
    counted = count_lines(figures["counts"], sizes)
    for label, marks in figures["timelines"].items():
        counted += [
            "",
            f"1c. timeline of {label} (ping), in this process (a cluster's node on a store of "
            f"its own); medians of {sizes.timeline_runs} runs in 4 interleaved rounds, ms "
            "from the call",
            "",
            *timeline_lines(marks),
        ]
    whole = {
        label: median(
            [
                end - start
                for marks in timeline.runs
                for what, start, end in marks
                if what.startswith("the run: ")
            ]
        )
        for label, timeline in figures["timelines"].items()
    }
    cluster_run = whole.pop("cluster.run")
    counted += [
        "",
        "1c. cluster.run against the same run in one process (medians above; target <= 1.5x):",
        *(f"  cluster.run / {label}: {cluster_run / took:.2f}x" for label, took in whole.items()),
    ]
    if sizes.counts_only:
        return [*lines, *counted]
    latency: dict[str, list[float]] = figures["latency"]
    floor = median(latency["raw queue round trip (floor)"])
    lines += [
        "",
        f"1. latency: one caller, runs one after another, the model answers at once "
        f"(median of {sizes.latency_runs})",
        "",
        *table(
            ["", "ms/run", "p90 ms", "vs raw queue", ""],
            [
                [
                    label,
                    _ms(median(samples)),
                    _ms(statistics.quantiles(samples, n=10)[-1]) if len(samples) > 1 else "-",
                    ratio(median(samples), floor),
                    "",
                ]
                for label, samples in latency.items()
            ],
        ),
    ]
    lines += counted
    throughput: dict[str, Throughput] = figures["throughput"]
    base = median(throughput["in-process, PostgresStore"].rates)
    rows = []
    for label, figures_of in throughput.items():
        cpu = {kind: median(values) for kind, values in figures_of.cpu.items()}
        rows.append(
            [
                label,
                f"{median(figures_of.rates):,.1f}",
                ratio(median(figures_of.rates), base),
                _ms(median(figures_of.latencies)),
                f"{median(figures_of.busy) * 100:.0f}%",
                *(_ms(cpu[kind]) for kind in ("benchmark", "nodes", "postgres", "model server")),
                _ms(sum(cpu.values())),
                f"{(os.cpu_count() or 1) / sum(cpu.values()):,.0f}",
            ]
        )
    lines += [
        "",
        f"2. throughput: {sizes.callers} callers, {sizes.runs} runs (each two tool calls of "
        f"{sizes.tool_ms:g} ms at once, then the answer); medians of {sizes.repeats}",
        "",
        *table(
            [
                "",
                "runs/s",
                "vs in-process PG",
                "ms/run p50",
                "CPUs busy",
                "CPU ms/run: caller",
                "nodes",
                "postgres",
                "model",
                "all",
                "CPU-bound runs/s",
            ],
            rows,
        ),
        "",
        f"CPU-bound runs/s: what this machine's {os.cpu_count()} CPUs could do at that CPU "
        "time per run, if nothing else ran on them",
        *_bars(latency, throughput),
    ]
    takeovers: list[tuple[float, dict[str, float]]] = figures["takeover"]
    rows = []
    for lease_seconds in dict.fromkeys(lease for lease, _ in takeovers):
        mine = [t for lease, t in takeovers if lease == lease_seconds]
        claims = [t["claim"] for t in mine]
        finishes = [t["finish"] for t in mine]
        rows.append(
            [
                f"takeover, lease_seconds={lease_seconds:g}",
                f"{lease_seconds / 3:.2f}",
                f"{lease_seconds * 4 / 3:.2f}",
                f"{median(claims):.2f}",
                f"{max(claims):.2f}",
                f"{median(finishes):.2f}",
                f"{len(mine)} kills, {sum(t['orphans'] for t in mine):g} runs taken over",
            ]
        )
    lines += [
        "",
        "3. takeover: a node SIGKILLed with runs mid-tool; seconds from the kill to another "
        "node claiming / finishing the first of its runs (bound: lease_seconds + "
        "lease_seconds/3 + one claim)",
        "",
        *table(
            ["", "heartbeat (s)", "bound (s)", "claim p50", "claim max", "finish p50", ""],
            rows,
        ),
    ]
    turn = figures.get("turn")
    if turn is None:
        return [*lines, "", "4. per agent turn: not measured in a quick run"]
    lines += [
        "",
        f"4. per agent turn (two no-op calls), postgres_store.turn_latency, {sizes.turns} "
        f"turns x {sizes.turn_repeats}",
        "",
        *table(
            ["", "µs/turn", "added over memory", ""],
            [
                [kind, f"{turn[kind]:,.0f}", f"{turn[kind] - turn['memory']:+,.0f}", ""]
                for kind in ("postgres", "sqlite", "memory")
            ],
        ),
    ]
    return lines
