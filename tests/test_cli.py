"""The ``satsuma`` command and its demo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from satsuma._demo import CALLS, run_demo
from satsuma.cli import main


def test_demo_answers_every_call_once_with_each_kind_of_outcome() -> None:
    lines: list[str] = []
    # The real clock: the demo has a sync tool, and an autojump clock would see its worker
    # thread as idle time and jump to the deadline. The demo takes about 0.6 s.
    outcomes = trio.run(run_demo, lines.append)
    assert [o.tool_use_id for o in outcomes] == [call.id for call in CALLS]
    assert [o.error_kind for o in outcomes] == [
        None, None, "crashed", "timeout", "invalid_args", "unknown_tool", "failed",
    ]  # fmt: skip
    assert lines[0].startswith("satsuma demo: offline")
    assert any("progress toolu_02 writing section 4/4" in line for line in lines)
    assert any(line.startswith("wall time") for line in lines)


def test_satsuma_demo_runs_as_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "satsuma.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Error: Tool timed out after 0.5s" in result.stdout
    assert "Error: Unknown tool: send_email" in result.stdout


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fly"])
    assert info.value.code == 2
    assert "invalid choice: 'fly'" in capsys.readouterr().err


def test_the_tools_quickstart_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, "examples/tools_quickstart.py"],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "'content': 'example.org: 3 replies'" in result.stdout
    assert "count must be >= 1, got: 0" in result.stdout
    assert "Error: Tool timed out after 0.2s" in result.stdout
