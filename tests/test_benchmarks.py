"""The benchmark harness runs and reports; its figures are never asserted here."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "runner_overhead.py"

ROW_NAMES = ("parallel overhead", "function calls per call", "sequential", "parallel I/O")


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runner_overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_quick(script: Path, *, timeout: float) -> str:
    """Run a benchmark with --quick; check it exits 0 with its header; return its output."""
    result = subprocess.run(
        [sys.executable, str(script.relative_to(ROOT)), "--quick"],
        cwd=ROOT,
        capture_output=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "trio" in result.stdout
    assert "machine:" in result.stdout
    return result.stdout


def _quick_rows(script: Path, names: tuple[str, ...]) -> dict[str, str]:
    """Run a benchmark with --quick and return its rows."""
    out = _run_quick(script, timeout=120)
    lines = out.splitlines()
    rows = {}
    for name in names:
        row = next((line for line in lines if line.startswith(name)), None)
        assert row is not None, f"no row {name!r} in:\n{out}"
        rows[name] = row
    return rows


def test_quick_run_prints_the_table() -> None:
    rows = _quick_rows(SCRIPT, ROW_NAMES)
    for name in ("parallel overhead", "parallel I/O"):
        assert rows[name].endswith(("target met", "target MISSED")), rows[name]


def test_measurements_are_importable_and_return_their_fields() -> None:
    module = _load_script()
    overhead = module.measure_overhead(20, 1)
    for key in ("floor_us", "parallel_us", "sequential_us", "ratio"):
        assert isinstance(overhead[key], float)
    assert isinstance(overhead["target_met"], bool)
    assert set(overhead["samples"]) == {"floor", "parallel", "sequential"}
    assert isinstance(module.measure_parallel_io(5), float)
    counted = module.count_calls(5)
    # A supervised call does more than a bare task in a cancel scope, and both do something.
    assert counted["satsuma"] > counted["floor"] > 0


AGENT_LOOP_SCRIPT = ROOT / "benchmarks" / "agent_loop.py"

AGENT_LOOP_ROW_NAMES = (
    "loop overhead (µs/turn)",
    "memory per idle agent (KiB)",
    "concurrent 3-turn runs (s)",
)


def test_agent_loop_quick_run_prints_the_table() -> None:
    for row in _quick_rows(AGENT_LOOP_SCRIPT, AGENT_LOOP_ROW_NAMES).values():
        assert row.endswith(("target met", "target MISSED")), row


SUPERVISOR_SCRIPT = ROOT / "benchmarks" / "supervisor.py"

SUPERVISOR_ROW_NAMES = (
    "agent restart latency (ms)",
    "service restart latency (µs)",
    "start_child, idle agent (µs/child)",
    "memory per supervised child (KiB)",
    "shutdown, all children (s)",
)


def test_supervisor_quick_run_prints_the_table() -> None:
    for row in _quick_rows(SUPERVISOR_SCRIPT, SUPERVISOR_ROW_NAMES).values():
        assert row.endswith("no target"), row


STORE_SCRIPT = ROOT / "benchmarks" / "store.py"

STORE_ROW_NAMES = (
    "write_tail, 1 agent (msg/s)",
    "write_tail, 50 agents (msg/s)",
    "write_tail, 1 agent, full (msg/s)",
    "write_tail, 50 agents, full (msg/s)",
    "agent turn (µs/turn)",
    "agent turn, full (µs/turn)",
)


def test_store_quick_run_prints_the_table() -> None:
    for row in _quick_rows(STORE_SCRIPT, STORE_ROW_NAMES).values():
        assert row.endswith("no target"), row


BUILTIN_TOOLS_SCRIPT = ROOT / "benchmarks" / "builtin_tools.py"

BUILTIN_TOOLS_ROW_NAMES = (
    "read_file 4 KiB (µs/call)",
    "read_file vs read_text (µs/call)",
    "sandbox resolve (µs/call)",
    "write_file 4 KiB (µs/call)",
    "write_file vs fsync (µs/call)",
    "bash true (ms/call)",
    "bash large output (s)",
    "bash large output, RSS growth (KiB)",
    "search literal (ms/search)",
    "search, empty directory (ms/search)",
)


def test_builtin_tools_quick_run_prints_the_table() -> None:
    for name, row in _quick_rows(BUILTIN_TOOLS_SCRIPT, BUILTIN_TOOLS_ROW_NAMES).items():
        # Cells are two spaces apart or more: name, size, built-in, floor, ratio, added, notes.
        cells = re.split(r"\s{2,}", row.strip())
        assert cells[0] == name and len(cells) == 7, cells
        float(cells[2].replace(",", ""))  # the built-in's figure is a number
        assert cells[-1].startswith(("floor:", "grep not found", "ru_maxrss")), row


SIDE_BY_SIDE_SCRIPT = ROOT / "benchmarks" / "run.py"

SIDE_BY_SIDE_LIBRARIES = (
    "satsuma",
    "satsuma, as the docs show it",
    "satsuma, stream=True",
    "anthropic tool_runner",
    "pydantic-ai",
    "openai-agents",
    "plain asyncio loop",
    "plain loop, streaming",
    "plain trio loop",
    "plain trio loop, streaming",
)

SIDE_BY_SIDE_SECTIONS = (
    "1. dispatch",
    "2. parallel I/O",
    "3. conversation",
    "4. many agents",
    "5. failure handling",
)


def test_side_by_side_quick_run_reports_every_library() -> None:
    # --quick writes no page: docs/benchmarks.md holds a full run's figures.
    out = _run_quick(SIDE_BY_SIDE_SCRIPT, timeout=300)
    lines = out.splitlines()
    for section in SIDE_BY_SIDE_SECTIONS:
        assert any(line.startswith(section) for line in lines), f"no {section!r} in:\n{out}"
    for library in SIDE_BY_SIDE_LIBRARIES:
        # A row in each of the five tables; a library whose runs broke says "failed".
        rows = [line for line in lines if re.match(rf"{re.escape(library)}\s{{2,}}", line)]
        assert len(rows) == len(SIDE_BY_SIDE_SECTIONS), f"rows of {library!r}:\n{out}"
        assert not any("failed" in row for row in rows), f"{library!r} failed:\n{out}"
        assert f"{library}:" in lines, f"no workload 5 texts for {library!r}:\n{out}"
    # The bars: the default path against the floor, a row each, with a verdict (the
    # figures of a quick run mean nothing, so only the shape is checked).
    bars = lines[next(i for i, line in enumerate(lines) if line.startswith("6. the bars")) :]
    rows = [line for line in bars[4:] if line.strip()]
    assert {row.split()[-1] for row in rows} <= {"yes", "no"}, out
    for figure in (
        "first round trip, no tools",
        "a run with 1 call",
        "per extra call, 5 calls",
        "parallel calls, one turn",
        "conversation (runs/s)",
        "conversation (CPU ms/run)",
        "4 concurrent agents",
        "10 concurrent agents",
    ):
        assert sum(figure in row for row in rows) == 1, f"{figure!r}:\n{out}"
    # What satsuma's model reads is its contract (DESIGN.md), not a figure.
    satsuma_texts = lines[lines.index("satsuma:") + 1 : lines.index("satsuma:") + 3]
    assert satsuma_texts == [
        "  fail: is_error=true Error: Tool crashed: RuntimeError: disk on fire",
        "  hang: is_error=true Error: Tool timed out after 0.1s",
    ], out


LONG_LIVED_SCRIPT = ROOT / "benchmarks" / "long_lived.py"

LONG_LIVED_ROW_NAMES = ("hand loop (floor)", "satsuma, model by name", "satsuma beyond the floor")


def test_long_lived_quick_run_prints_the_table() -> None:
    rows = _quick_rows(LONG_LIVED_SCRIPT, LONG_LIVED_ROW_NAMES)
    for name in LONG_LIVED_ROW_NAMES[:2]:
        # name, wall early, wall late, CPU early, CPU late, late/early
        cells = re.split(r"\s{2,}", rows[name].strip())
        assert cells[0] == name and len(cells) == 6, cells
        assert all(cell.endswith(" ms") for cell in cells[1:5]), cells


DEFAULT_PATH_SCRIPT = ROOT / "benchmarks" / "default_path.py"

DEFAULT_PATH_ROWS = (
    "open_agent(Notes)",
    "RSS",
    "traced Python memory",
    "hand trio loop, one client (peer)",
    "satsuma, model by name",
    "satsuma, AnthropicModel(stream=True)",
)

DEFAULT_PATH_COUNT_ROWS = (
    "function calls, text-only run",
    "function calls, 1-call run",
    "function calls per extra tool call",
    "function calls per extra tool call from 2 calls",
    "function calls per turn (3 calls)",
    "task steps, 1-call run",
)


DEFAULT_PATH_PHASE_ROWS = (
    "open_agent (enter)",
    "agent.run",
    "leaving the block",
    "satsuma, whole",
    "floor",
)


def test_default_path_quick_run_prints_both_tables() -> None:
    # One run of the script for all its tables.
    every = _quick_rows(
        DEFAULT_PATH_SCRIPT, DEFAULT_PATH_ROWS + DEFAULT_PATH_COUNT_ROWS + DEFAULT_PATH_PHASE_ROWS
    )
    rows = {name: every[name] for name in DEFAULT_PATH_ROWS}
    assert rows["open_agent(Notes)"].endswith(" ms"), rows
    assert rows["traced Python memory"].endswith(" KiB"), rows
    for name in DEFAULT_PATH_ROWS[3:]:
        # name, ms/run, RSS warm, RSS end, growth, peak
        cells = re.split(r"\s{2,}", rows[name].strip())
        assert cells[0] == name and len(cells) == 6, cells
        assert cells[4].endswith("%") and cells[5].endswith(" MiB"), cells
    counts = {name: every[name] for name in DEFAULT_PATH_COUNT_ROWS}
    for name, row in counts.items():
        # name, as the docs show it, client passed in, floor, ratio
        cells = re.split(r"\s{2,}", row.strip())
        assert cells[0] == name and len(cells) == 5 and cells[4].endswith("x"), cells
        figures = [float(cell.replace(",", "")) for cell in cells[1:4]]
        # Every run calls functions and steps tasks; none is counted as nothing.
        assert all(figure > 0 for figure in figures), cells
    phases = {}
    for name in DEFAULT_PATH_PHASE_ROWS:
        # name, scheduler batches, task steps, tasks spawned, function calls
        cells = re.split(r"\s{2,}", every[name].strip())
        assert cells[0] == name and len(cells) == 5, cells
        phases[name] = [int(cell.replace(",", "")) for cell in cells[1:]]
    parts = [phases[name] for name in DEFAULT_PATH_PHASE_ROWS[:3]]
    assert phases["satsuma, whole"] == [sum(column) for column in zip(*parts, strict=True)]
    # A round trip over HTTP waits for the server at least once, in either.
    assert phases["agent.run"][0] > 0 and phases["floor"][0] > 0
    # The agent's own task: started by its first run (an idle agent holds none).
    assert phases["open_agent (enter)"][2] == 0
    assert phases["agent.run"][2] == 1


POSTGRES_STORE_SCRIPT = ROOT / "benchmarks" / "postgres_store.py"

POSTGRES_STORE_ROW_NAMES = (
    "write_tail under a lease (µs/call)",
    "load_messages, 20 messages (µs/call)",
    "agent turn, 5 turns x 2 (µs/turn)",
)


def test_postgres_store_quick_run_prints_the_table() -> None:
    # Against SATSUMA_TEST_POSTGRES_DSN's server, or one it starts itself (a few seconds).
    for name, row in _quick_rows(POSTGRES_STORE_SCRIPT, POSTGRES_STORE_ROW_NAMES).items():
        cells = re.split(r"\s{2,}", row.strip())
        assert cells[0] == name and len(cells) == 4, cells
        for cell in cells[1:]:  # postgres, sqlite, memory
            float(cell.replace(",", ""))


CLUSTER_SCRIPT = ROOT / "benchmarks" / "cluster.py"

CLUSTER_ROW_NAMES = (
    "raw queue round trip (floor)",
    "open_agent, SQLiteStore",
    "open_agent, PostgresStore",
    "cluster.run, 2 nodes",
    "in-process, SQLiteStore",
    "in-process, PostgresStore",
    "cluster, 2 nodes",
    "takeover, lease_seconds=1",
    "cluster: caller + node",
    "cluster.run latency",
    "the run: cluster.run",
    "node: finish (in its thread)",
)


def test_cluster_quick_run_prints_the_tables() -> None:
    # Two node processes and a model server, on SATSUMA_TEST_POSTGRES_DSN's server or one
    # it starts itself; it stops them all, and the takeover kills one node.
    rows = _quick_rows(CLUSTER_SCRIPT, CLUSTER_ROW_NAMES)
    for name in CLUSTER_ROW_NAMES[:4]:
        # name, ms/run, p90, ratio to the raw queue
        cells = re.split(r"\s{2,}", rows[name].strip())
        assert cells[0] == name and len(cells) == 4, cells
        assert cells[3].endswith("x"), cells
    # name, runs/s, ratio, p50, busy, CPU ms/run: caller, nodes, postgres, model, all;
    # the runs/s that much CPU per run allows
    for name in CLUSTER_ROW_NAMES[4:7]:
        cells = re.split(r"\s{2,}", rows[name].strip())
        assert len(cells) == 11 and cells[4].endswith("%"), cells
    # name, heartbeat, bound, claim p50, claim max, finish p50, what was killed
    cells = re.split(r"\s{2,}", rows["takeover, lease_seconds=1"].strip())
    assert len(cells) == 7 and cells[6].startswith("1 kills"), cells
    float(cells[3])
    # name, then store calls, transactions, statements, round trips, NOTIFYs per run
    cells = re.split(r"\s{2,}", rows["cluster: caller + node"].strip())
    assert len(cells) == 6 and all(float(cell) > 0 for cell in cells[1:]), cells
    # name, ratio, bar, verdict
    cells = re.split(r"\s{2,}", rows["cluster.run latency"].strip())
    assert cells[1].endswith("x") and cells[3] in ("met", "not met"), cells
    # The timeline: name, start ms, end ms, ms it took
    for name in CLUSTER_ROW_NAMES[-2:]:
        cells = re.split(r"\s{2,}", rows[name].strip())
        assert len(cells) == 4 and float(cells[2]) > float(cells[1]) >= 0, cells


MODEL_LIMITS_SCRIPT = ROOT / "benchmarks" / "model_limits.py"

MODEL_LIMITS_ROW_NAMES = (
    "throughput (requests/s)",
    "floor, no limits (requests/s)",
    "peak calls in progress",
    "leaked slots",
    "waiters left after cancels",
)


def test_model_limits_quick_run_prints_the_table_and_leaks_nothing() -> None:
    rows = _quick_rows(MODEL_LIMITS_SCRIPT, MODEL_LIMITS_ROW_NAMES)
    assert "% of the ideal" in rows["throughput (requests/s)"]
    # Not a figure but the contract: no slot and no waiter outlives its run.
    for name in ("leaked slots", "waiters left after cancels"):
        measured = rows[name][len(name) :].split()[0]
        assert measured == "0", rows[name]


AIO_SCRIPT = ROOT / "benchmarks" / "aio.py"
AIO_ROW_NAMES = (
    "10-turn conversation (runs/s)",
    "20 agents at once (wall s)",
    "10 ms ticker, 20 parallel calls: lateness p99 (ms)",
    "idle asyncio loop",
)


def test_aio_quick_run_prints_both_modes_side_by_side() -> None:
    rows = _quick_rows(AIO_SCRIPT, AIO_ROW_NAMES)
    for name in AIO_ROW_NAMES[:3]:
        assert rows[name].endswith(("target met", "target MISSED")), rows[name]


SERVE_SCRIPT = ROOT / "benchmarks" / "serve.py"
SERVE_ROWS = (
    "one run, p50 (ms)",
    "A2A SendMessage, p50 (ms)",
    "5 conversations at once (runs/s)",
    "20 event streams held: server RSS per stream (KiB)",
    "an event reaching them all, p99 (ms)",
)


def test_serve_quick_run_prints_every_figure_with_its_bar() -> None:
    rows = _quick_rows(SERVE_SCRIPT, SERVE_ROWS)
    for name in SERVE_ROWS:
        assert rows[name].endswith(("target met", "target MISSED")), rows[name]


def test_evals_quick_run_prints_the_table() -> None:
    rows = _quick_rows(ROOT / "benchmarks" / "evals.py", ("wall time per case", "peak RSS"))
    assert rows["wall time per case"].endswith(("target met", "target MISSED"))


COST_SCRIPT = ROOT / "benchmarks" / "cost.py"
COST_ROW_NAMES = (
    "cache=None (input tokens)",
    'cache="auto" (input tokens)',
    'cache="auto" / cache=None',
    "TokenBudget(",
    "Compaction(",
    "Compaction / sent whole",
    "usd_per_run $",
    "4 spenders, one daily ledger: overrun",
    "cache, prices and budget: CPU per call",
)


def test_cost_quick_run_prints_every_figure_with_its_bar() -> None:
    rows = _quick_rows(COST_SCRIPT, COST_ROW_NAMES)
    for name in COST_ROW_NAMES[2:5]:
        assert "target met" in rows[name] or "target MISSED" in rows[name], rows[name]
    assert "summaries" in rows["Compaction("] and "runs failed" in rows["Compaction("]


def test_prices_quick_run_prints_every_case_with_its_bar() -> None:
    rows = _quick_rows(
        ROOT / "benchmarks" / "prices.py",
        ("sum only", "dated id", "alias", "bedrock id", "no prices"),
    )
    for name in ("dated id", "alias", "bedrock id", "no prices"):
        assert rows[name].endswith(("target met", "target MISSED")), rows[name]
