"""``satsuma eval`` in a real subprocess: Ctrl-C (SIGINT) stops it with a partial report
and exit status 130; the progress is a bar on a terminal (a pty) and plain lines in a
pipe."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

AGENTS = '''
import trio
import satsuma


@satsuma.tool
async def wait(order: str) -> str:
    """Look an order up (the order "slow" never answers)."""
    if order == "slow":
        await trio.sleep(3600)
    return f"order {order}: shipped"


class Desk(satsuma.Agent):
    name = "desk"
    tools = [wait]
'''


def cases(folder: Path, orders: list[str]) -> None:
    (folder / "agents.py").write_text(AGENTS)
    (folder / "cases.json").write_text(
        json.dumps(
            [
                {"id": f"case-{i}-{order}", "prompt": f'use wait {{"order": "{order}"}}'}
                for i, order in enumerate(orders)
            ]
        )
    )


def command(*words: str) -> list[str]:
    return [sys.executable, "-m", "satsuma.cli", "eval", "agents:Desk", "--model", "fake",
            "--dataset", "cases.json", "--tools", "live", *words]  # fmt: skip


def environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update({"PYTHONPATH": str(folder), "COLUMNS": "120", "TERM": "xterm"})
    return env


def test_ctrl_c_writes_the_partial_report_and_exits_130(tmp_path: Path) -> None:
    cases(tmp_path, ["a", "slow", "b"])
    process = subprocess.Popen(
        command("--concurrency", "2", "--report", "partial.json"),
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        # Runs start in the dataset's order: a and slow; then b once a ended. The first
        # line is a's; b may end before the signal is handled, slow never ends.
        first = process.stderr.readline()
        assert first.startswith("[1/3] case-0-a: "), first
        process.send_signal(signal.SIGINT)
        out, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, out + rest
    report = json.loads((tmp_path / "partial.json").read_text())
    assert report["complete"] is False and report["passed"] is False
    finished = {c["id"]: c["finished"] for c in report["cases"]}
    assert finished["case-0-a"] is True and finished["case-1-slow"] is False
    ran = 2 if finished["case-2-b"] else 1
    assert (
        f"interrupted: {ran} of 3 cases ran; the {3 - ran} others are marked not run in "
        "partial.json" in rest
    )
    assert "Traceback" not in rest
    assert "| case-1-slow | not run |" in out


def test_the_progress_is_a_bar_on_a_terminal_and_plain_lines_in_a_pipe(tmp_path: Path) -> None:
    cases(tmp_path, ["a", "b", "c"])
    (tmp_path / "cases.json").write_text(
        json.dumps(
            [*json.loads((tmp_path / "cases.json").read_text()),
             {"id": "wrong", "prompt": "hello", "expected_output": "bye"}]
        )
    )  # fmt: skip
    piped = subprocess.run(
        command("--check", "output"),
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert piped.returncode == 1
    lines = piped.stderr.splitlines()
    # One line per case as it ends (in whatever order they end), counted from 1.
    assert [line.split(" ", 1)[0] for line in lines] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    verdicts = sorted(line.split(" ", 1)[1] for line in lines)
    assert verdicts[:3] == ["case-0-a: passed", "case-1-b: passed", "case-2-c: passed"]
    assert verdicts[3].startswith("wrong: FAILED: output_equal")
    assert "\x1b" not in piped.stderr + piped.stdout  # no escape in a pipe

    # On a terminal: a bar, redrawn in place; the failed case printed above it.
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            command("--check", "output"),
            cwd=tmp_path,
            env=environment(tmp_path),
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
        )
        os.close(follower)
        shown = b""
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, "no output from satsuma eval on its terminal"
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: every writer is gone
                break
            if not chunk:
                break
            shown += chunk
        out, _ = process.communicate(timeout=60)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, out
    text = shown.decode()
    assert "evaluating" in text and "━" in text and "4/4" in text  # the bar, at its end
    assert "wrong: FAILED: output_equal" in text
    assert "case-0-a: passed" not in text  # the bar counts passed cases: no line each
    assert "| wrong | **no** |" in out  # the table on stdout, whatever stderr is
