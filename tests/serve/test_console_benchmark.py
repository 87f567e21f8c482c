"""The console's benchmark (benchmarks/console.py) runs in its quick mode and prints a
row for every page and the live event, each with its bar; its figures are never
asserted (a shared machine's timings are not a test's business)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = (
    "overview",
    "agents, page 1",
    "agents, search",
    "approvals (20 waiting)",
    "conversation (10 runs)",
    "conversation (5000 messages), latest page",
    "conversation (5000 messages), earliest page",
    "run (ended)",
    "usage",
    "cluster (none)",
    "live event on the run page",
)


def test_the_quick_run_prints_every_row_with_its_bar() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/console.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("The console: 100 agents, 1000 runs in SQLite")
    assert any(line.startswith("machine:") for line in lines)
    for name in ROWS:
        row = next((line for line in lines if line.startswith(name)), None)
        assert row is not None, f"no row {name!r} in:\n{result.stdout}"
        assert row.endswith(("target met", "target MISSED")), row
