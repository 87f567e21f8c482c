"""What durable state costs: committed messages per second through a SQLiteStore, and the
latency a SQLiteStore adds to each turn of an agent, each next to MemoryStore as the floor.

Two measurements, on the real clock, against models that answer at once (no network); the
database lives in a temporary directory, removed at the end:

1. Committed messages per second: ``store.write_tail(agent_id, n, [message])``, one
   message at a time (each call one transaction, as an agent commits before each model
   call and each tool call), awaited one after the other:

   * one agent appending N messages to its conversation;
   * 50 agents at once (50 tasks of one nursery), each appending N / 50 messages to its
     own conversation.

   Each is timed with a ``SQLiteStore`` (``durability="normal"``, the default, and
   ``"full"``, for information) and with a ``MemoryStore`` (the floor), in a fresh store
   each time, opened before the clock starts.

2. Added latency per turn: one agent run of T turns; each turn the model (a
   ``FunctionModel`` with no delay) asks for two calls of a no-op tool, the last turn
   answers text. The run is timed with a MemoryStore (the floor) and with a SQLiteStore
   (``"normal"``, and ``"full"`` for information), interleaved, the median of several
   repetitions (each a new agent id in the same open store; ``open_agent`` is outside the
   clock). The figure is µs per turn, and the added latency is SQLite's minus the floor.
   With a store, a turn commits the assistant's tool_use message before the tools run,
   journals each call as started and as finished, and commits the results before the next
   model call; a run also writes its record at the start and at the end.

The issue sets no target for these: every figure is printed next to its floor, for
information. Figures are never asserted: the exit status is 0 whatever they are (it is not
0 when the benchmark itself goes wrong, e.g. a run did not complete or a message is
missing).

    python benchmarks/store.py [--quick]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import trio

from satsuma import Agent, Message, ModelRequest, open_agent, tool
from satsuma.store import MemoryStore, SQLiteStore, Store
from satsuma.testing import FunctionModel, Reply

FULL_MESSAGES = 5_000
FULL_TURNS = 100
FULL_REPEATS = 7
QUICK_MESSAGES = 100
QUICK_TURNS = 5
QUICK_REPEATS = 2
CONCURRENT_AGENTS = 50

StoreKind = Literal["memory", "normal", "full"]
KINDS: tuple[StoreKind, ...] = ("memory", "normal", "full")


def _store(kind: StoreKind, folder: Path, name: str) -> Store:
    if kind == "memory":
        return MemoryStore()
    return SQLiteStore(folder / f"{name}-{kind}.db", durability=kind)


def _message(index: int) -> Message:
    # Alternating roles, as a conversation is; a short text, as most messages are.
    text = f"message {index}: the quick brown fox jumps over the lazy dog"
    content = [{"type": "text", "text": text}]
    if index % 2 == 0:
        return Message(role="user", content=content)
    return Message(role="assistant", content=content)


# --- 1. committed messages per second -----------------------------------------------------


async def _append(store: Store, agent_id: str, count: int) -> None:
    for index in range(count):
        await store.write_tail(agent_id, index, [_message(index)])


async def _check(store: Store, agent_id: str, count: int) -> None:
    stored = await store.load_messages(agent_id)
    if len(stored) != count:
        raise RuntimeError(f"{agent_id}: {len(stored)} messages stored, not {count}")


async def _throughput(store: Store, agents: int, per_agent: int) -> float:
    """Messages per second, ``agents`` tasks each appending ``per_agent`` messages."""
    await store.open()
    try:
        gc.collect()
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for number in range(agents):
                nursery.start_soon(_append, store, f"agent-{number}", per_agent)
        elapsed = time.perf_counter() - started
        for number in range(agents):
            await _check(store, f"agent-{number}", per_agent)
    finally:
        await store.aclose()
    return agents * per_agent / elapsed


def measure_throughput(messages: int, folder: Path) -> dict[str, Any]:
    """Committed messages per second for each store kind, with one agent appending
    ``messages`` and with 50 agents appending ``messages // 50`` each (at least 1).

    Returns ``{"one": {kind: msg/s}, "many": {kind: msg/s}, "messages": ...,
    "per_agent": ...}``.
    """
    if messages < 1:
        raise ValueError("messages must be at least 1")
    per_agent = max(1, messages // CONCURRENT_AGENTS)
    one: dict[str, float] = {}
    many: dict[str, float] = {}
    for kind in KINDS:
        one[kind] = trio.run(_throughput, _store(kind, folder, "one"), 1, messages)
        many[kind] = trio.run(
            _throughput, _store(kind, folder, "many"), CONCURRENT_AGENTS, per_agent
        )
    return {"one": one, "many": many, "messages": messages, "per_agent": per_agent}


# --- 2. added latency per turn ------------------------------------------------------------


@tool
async def noop(n: int) -> str:
    """Do nothing.

    Args:
        n: Which call this is.
    """
    return "ok"


class Worker(Agent):
    name = "worker"
    tools = [noop]
    max_iterations = 1_000_000
    loop_guard = None  # the calls differ anyway; no guard work in the figure


def turns_model(turns: int) -> FunctionModel:
    """T - 1 turns of two calls of ``noop``, then a text answer."""

    def reply(request: ModelRequest) -> Reply | str:
        turn = len(request.messages) // 2  # 1 user prompt, then 2 messages per turn
        if turn >= turns - 1:
            return "done"
        return Reply(tool_calls=[("noop", {"n": 2 * turn}), ("noop", {"n": 2 * turn + 1})])

    return FunctionModel(reply)


async def _one_run(store: Store, agent_id: str, turns: int) -> float:
    async with open_agent(
        Worker, model=turns_model(turns), store=store, agent_id=agent_id
    ) as agent:
        gc.collect()
        started = time.perf_counter()
        result = await agent.run("go")
        elapsed = time.perf_counter() - started
    if result.status != "completed" or result.iterations != turns:
        raise RuntimeError(f"the run ended {result.status} after {result.iterations} turns")
    return elapsed


async def _latency_samples(turns: int, repeats: int, folder: Path) -> dict[str, list[float]]:
    stores = {kind: _store(kind, folder, "turns") for kind in KINDS}
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for store in stores.values():
        await store.open()
    try:
        await _one_run(stores["memory"], "warm-up", turns)  # imports, caches
        for repeat in range(repeats):
            for kind, store in stores.items():  # interleaved: drift hits all alike
                elapsed = await _one_run(store, f"run-{repeat}", turns)
                samples[kind].append(elapsed / turns)
    finally:
        for store in stores.values():
            await store.aclose()
    return samples


def measure_latency(turns: int, repeats: int, folder: Path) -> dict[str, Any]:
    """µs per turn of one agent run of ``turns`` turns, for each store kind (medians of
    ``repeats`` interleaved runs), and the samples (seconds per turn)."""
    if turns < 2 or repeats < 1:
        raise ValueError("turns must be at least 2, repeats at least 1")
    samples = trio.run(_latency_samples, turns, repeats, folder)
    return {
        "turns": turns,
        "repeats": repeats,
        "us": {kind: statistics.median(values) * 1e6 for kind, values in samples.items()},
        "samples": samples,
    }


# --- report -------------------------------------------------------------------------------

NO_TARGET = "no target"


def _ratio(figure: float, floor: float) -> str:
    return f"{figure / floor:.2f}x" if floor > 0 else "-"


def format_report(throughput: dict[str, Any], latency: dict[str, Any]) -> str:
    one, many = throughput["one"], throughput["many"]
    us = latency["us"]
    single = f"{throughput['messages']:,} msgs"
    concurrent = f"{CONCURRENT_AGENTS} x {throughput['per_agent']:,} msgs"
    turns = f"{latency['turns']:,} turns"
    header = ("measurement", "size", "sqlite", "memory (floor)", "ratio", "added", "result")
    rows = [
        (
            "write_tail, 1 agent (msg/s)",
            single,
            f"{one['normal']:,.0f}",
            f"{one['memory']:,.0f}",
            _ratio(one["normal"], one["memory"]),
            "-",
            NO_TARGET,
        ),
        (
            "write_tail, 50 agents (msg/s)",
            concurrent,
            f"{many['normal']:,.0f}",
            f"{many['memory']:,.0f}",
            _ratio(many["normal"], many["memory"]),
            "-",
            NO_TARGET,
        ),
        (
            "write_tail, 1 agent, full (msg/s)",
            single,
            f"{one['full']:,.0f}",
            f"{one['memory']:,.0f}",
            _ratio(one["full"], one["memory"]),
            "-",
            NO_TARGET,
        ),
        (
            "write_tail, 50 agents, full (msg/s)",
            concurrent,
            f"{many['full']:,.0f}",
            f"{many['memory']:,.0f}",
            _ratio(many["full"], many["memory"]),
            "-",
            NO_TARGET,
        ),
        (
            "agent turn (µs/turn)",
            turns,
            f"{us['normal']:.1f}",
            f"{us['memory']:.1f}",
            _ratio(us["normal"], us["memory"]),
            f"{us['normal'] - us['memory']:+.1f}",
            NO_TARGET,
        ),
        (
            "agent turn, full (µs/turn)",
            turns,
            f"{us['full']:.1f}",
            f"{us['memory']:.1f}",
            _ratio(us["full"], us["memory"]),
            f"{us['full'] - us['memory']:+.1f}",
            NO_TARGET,
        ),
    ]
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:-1], widths[1:-1], strict=True)]
        return "  ".join([first, *rest, cells[-1]]).rstrip()

    try:
        satsuma_version = metadata.version("satsuma")
    except metadata.PackageNotFoundError:
        satsuma_version = "unknown"
    samples = latency["samples"]

    def spread(kind: str) -> str:
        values = samples[kind]
        return f"{min(values) * 1e6:.1f}-{max(values) * 1e6:.1f}"

    out = [
        "satsuma store benchmark",
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"trio {trio.__version__}, satsuma {satsuma_version}, sqlite {sqlite3.sqlite_version}",
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs",
        "write_tail: one message per call (one transaction), awaited in turn; "
        "sqlite = SQLiteStore(durability='normal') unless the row says full; "
        "floor: MemoryStore",
        f"agent turn: median of {latency['repeats']} interleaved runs, 2 no-op tool calls "
        "per turn, FunctionModel with no delay; added = sqlite - floor (µs/turn)",
        "",
        line(header),
        line(["-" * width for width in widths]),
        *(line(row) for row in rows),
        "",
        "agent turn min-max (µs/turn): "
        f"memory {spread('memory')}, normal {spread('normal')}, full {spread('full')}",
        "ratio for msg/s is sqlite / memory (below 1: slower); for µs/turn it is "
        "sqlite / memory (above 1: slower)",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    options = parser.parse_args(argv)
    messages, turns, repeats = (
        (QUICK_MESSAGES, QUICK_TURNS, QUICK_REPEATS)
        if options.quick
        else (FULL_MESSAGES, FULL_TURNS, FULL_REPEATS)
    )
    with tempfile.TemporaryDirectory(prefix="satsuma-store-bench-") as name:
        folder = Path(name)
        throughput = measure_throughput(messages, folder)
        latency = measure_latency(turns, repeats, folder)
    print(format_report(throughput, latency))


if __name__ == "__main__":
    main(sys.argv[1:])
