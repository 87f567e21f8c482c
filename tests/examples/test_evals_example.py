"""examples/evals end to end, with the real CLI in subprocesses: fill a SQLite store
with real runs on the fake model, take a baseline with ``satsuma eval --from-store``,
then evaluate the changed agent against it: exit 1, the refund conversation named as
regressed, and the refund never sent again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evals"


def run(folder: Path, *words: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(
        {"PYTHONPATH": str(EXAMPLE), "SUPPORT_LEDGER": str(folder / "ledger.txt"), "COLUMNS": "200"}
    )
    return subprocess.run(
        [sys.executable, *words], cwd=folder, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_example_gates_a_changed_agent_on_its_stored_conversations(tmp_path: Path) -> None:
    filled = run(tmp_path, str(EXAMPLE / "fill_store.py"), "prod.db")
    assert filled.returncode == 0, filled.stderr
    ledger = tmp_path / "ledger.txt"
    assert ledger.read_text() == "refund B7 30\n"

    eval_ = ["-m", "satsuma.cli", "eval"]
    baseline = run(tmp_path, *eval_, "support:Support", "--from-store", "prod.db", "--model",
                   "fake", "--report", "baseline.json")  # fmt: skip
    assert baseline.returncode == 0, baseline.stdout + baseline.stderr
    assert "| **all** (5 cases x 1) | 100% |" in baseline.stdout
    assert "\n| --- | --- |" in baseline.stdout and "\\n" not in baseline.stdout
    report = json.loads((tmp_path / "baseline.json").read_text())
    refund_case = next(
        case["id"] for case in report["cases"]
        if case["runs"][0]["tool_calls"][:1] == [
            {"name": "send_refund", "input": {"order": "B7", "amount": 30}}
        ]
    )  # fmt: skip

    changed = run(tmp_path, *eval_, "support:SupportNext", "--from-store", "prod.db",
                  "--model", "fake", "--baseline", "baseline.json")  # fmt: skip
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert f"regressed: {refund_case}" in changed.stdout
    assert "| **all** (5 cases x 1) | 80% |" in changed.stdout
    assert ledger.read_text() == "refund B7 30\n"  # replayed: no refund sent again
