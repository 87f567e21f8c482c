"""``satsuma eval``, as a subprocess, offline (--model fake): a store filled by ``satsuma
run``, replayed without repeating its side effect, gated on failures and regressions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

AGENTS = '''
import pathlib
import satsuma

LEDGER = pathlib.Path(__file__).with_name("ledger.txt")


@satsuma.tool
async def refund(order: str) -> str:
    """Refund an order (writes the ledger: a side effect)."""
    with LEDGER.open("a") as ledger:
        ledger.write(order + "\\n")
    return f"refunded {order}"


class Shop(satsuma.Agent):
    name = "shop"
    tools = [refund]


class Desk(satsuma.Agent):
    name = "desk"


def mentions_a_refund(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
    if "refunded" in str(ctx.output):
        return satsuma.Verdict.ok()
    return satsuma.Verdict.retry("the answer says nothing of a refund")


class Careful(satsuma.Agent):
    name = "careful"
    tools = [refund]
    verifiers = [mentions_a_refund]
    max_iterations = 3
'''


def satsuma(folder: Path, *words: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update({"PYTHONPATH": str(folder), "COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "satsuma.cli", *words],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_eval_replays_a_store_and_gates_on_failures_and_regressions(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text(AGENTS)
    ran = satsuma(
        tmp_path,
        "run",
        "agents:Shop",
        'use refund {"order": "A1"}',
        "--model",
        "fake",
        "--store",
        "prod.db",
    )
    assert ran.returncode == 0, ran.stderr
    ledger = tmp_path / "ledger.txt"
    assert ledger.read_text() == "A1\n"

    first = satsuma(
        tmp_path,
        "eval",
        "agents:Shop",
        "--from-store",
        "prod.db",
        "--model",
        "fake",
        "--check",
        "tools-inputs",
        "--check",
        "output",
        "--report",
        "base.json",
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert ledger.read_text() == "A1\n"  # replayed: nothing refunded twice
    assert "| case | passed | tools_exact_inputs | output_equal | tokens |" in first.stdout
    assert "[1/1]" in first.stderr and "passed" in first.stderr
    report = json.loads((tmp_path / "base.json").read_text())
    assert report["version"] == 1 and report["passed"] is True
    assert report["cases"][0]["runs"][0]["replayed"] == 1

    again = satsuma(
        tmp_path,
        "eval",
        "agents:Shop",
        "--from-store",
        "prod.db",
        "--model",
        "fake",
        "--check",
        "tools-inputs",
        "--baseline",
        "base.json",
    )
    assert again.returncode == 0, again.stdout + again.stderr

    # A case the agent now fails: exit 1, and the baseline shows which case regressed.
    case_id = report["cases"][0]["id"]
    (tmp_path / "cases.json").write_text(
        json.dumps([{"id": case_id, "prompt": "use refund", "expected_tools": ["lookup"]}])
    )
    worse = satsuma(
        tmp_path,
        "eval",
        "agents:Shop",
        "--dataset",
        "cases.json",
        "--model",
        "fake",
        "--check",
        "tools",
        "--baseline",
        "base.json",
    )
    assert worse.returncode == 1, worse.stdout + worse.stderr
    assert f"regressed: {case_id}" in worse.stdout
    assert "FAILED: tools_exact" in worse.stderr
    assert ledger.read_text() == "A1\n"  # an unrecorded call is not run either


def test_eval_refuses_bad_input_with_status_2(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text(AGENTS)
    (tmp_path / "bad.json").write_text('[{"id": "a"}]')
    cases = [
        (["--dataset", "missing.json"], "cannot be read"),
        (["--dataset", "bad.json"], "cases[0] ('a'): field 'prompt' is missing"),
        (["--from-store", "nowhere.db"], "no such store: nowhere.db"),
        (["--dataset", "bad.json", "--limit", "3"], "--since go with --from-store"),
        (["--dataset", "bad.json", "--pass-share", "2"], "must be more than 0 and at most 1"),
        (["--dataset", "bad.json", "--baseline", "bad.json"], "not a satsuma evals report"),
    ]
    for words, text in cases:
        result = satsuma(tmp_path, "eval", "agents:Shop", "--model", "fake", *words)
        assert result.returncode == 2, (words, result.stderr)
        assert text in result.stderr, (words, result.stderr)
        assert "Traceback" not in result.stderr


def test_eval_takes_a_store_s_runs_by_class_conversation_and_age(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text(AGENTS)
    for target, agent_id in [("agents:Shop", "a"), ("agents:Shop", "b"), ("agents:Desk", "a")]:
        ran = satsuma(
            tmp_path, "run", target, "hello", "--model", "fake", "--store", "prod.db",
            "--agent-id", agent_id,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr

    def cases(*words: str) -> int:
        result = satsuma(
            tmp_path, "eval", "agents:Shop", "--from-store", "prod.db", "--model", "fake", *words
        )
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads((tmp_path / "r.json").read_text())
        return len(report["cases"])

    assert cases("--report", "r.json") == 2  # the evaluated class's runs, every conversation
    assert cases("--report", "r.json", "--agent", "desk") == 1
    assert cases("--report", "r.json", "--agent-id", "a") == 2  # both classes' runs of a
    assert cases("--report", "r.json", "--agent-id", "a", "--agent", "shop") == 1
    assert cases("--report", "r.json", "--since", "1h", "--limit", "1") == 1
    nothing = satsuma(
        tmp_path, "eval", "agents:Shop", "--from-store", "prod.db", "--model", "fake",
        "--agent", "nobody",
    )  # fmt: skip
    assert nothing.returncode == 2 and "no cases" in nothing.stderr
    bad = satsuma(tmp_path, "eval", "agents:Shop", "--from-store", "prod.db", "--since", "soon")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_eval_scores_runs_with_the_agent_s_own_verifiers(tmp_path: Path) -> None:
    (tmp_path / "agents.py").write_text(AGENTS)
    ran = satsuma(
        tmp_path, "run", "agents:Careful", 'use refund {"order": "A1"}', "--model", "fake",
        "--store", "prod.db",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    common = ["eval", "agents:Careful", "--model", "fake", "--check", "verifiers"]
    good = satsuma(tmp_path, *common, "--from-store", "prod.db")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "| case | passed | verifiers | tokens |" in good.stdout
    (tmp_path / "cases.json").write_text(json.dumps([{"id": "greet", "prompt": "hello"}]))
    bad = satsuma(tmp_path, *common, "--dataset", "cases.json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "greet: FAILED" in bad.stderr
    none = satsuma(tmp_path, "eval", "agents:Shop", "--model", "fake", "--check", "verifiers",
                   "--dataset", "cases.json")  # fmt: skip
    assert none.returncode == 2 and "agent shop lists no verifiers" in none.stderr
