"""satsuma.testing: run_tool, tool_call, EventRecorder, and the pytest plugin's fixtures
(used here exactly as a user's test would, through the pytest11 entry point)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import satsuma
from satsuma import ToolCallEnd, ToolCallStart, ToolProgress
from satsuma.testing import EventRecorder, run_tool, tool_call


class WriteNote(satsuma.Tool):
    name = "write_note"
    description = "Write a note into the working directory"
    parameters = {"text": {"type": "string", "required": True}}

    def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        if "write" not in ctx.capabilities:
            return ("error", "Tool capability denied: write")
        ctx.progress("writing")
        (ctx.working_dir / "note.txt").write_text(args["text"])
        return "written"


async def test_fixtures_give_a_workspace_context_and_a_recorder(
    tool_workspace: Path, tool_context: dict[str, Any], tool_events: EventRecorder
) -> None:
    assert tool_workspace.is_dir()
    assert list(tool_workspace.iterdir()) == []
    assert tool_context["working_dir"] == tool_workspace
    assert set(tool_context["capabilities"]) == {"read", "write", "shell", "network"}
    outcome = await run_tool(WriteNote, {"text": "hello"}, tool_context, events=tool_events)
    assert outcome.content == "written"
    assert (tool_workspace / "note.txt").read_text() == "hello"
    assert [type(e) for e in tool_events.events] == [ToolCallStart, ToolProgress, ToolCallEnd]
    assert tool_events.of_type(ToolProgress)[0].text == "writing"


async def test_run_tool_goes_through_validation_and_capabilities(tool_workspace: Path) -> None:
    invalid = await run_tool(WriteNote, {})
    assert invalid.content == "Error: Invalid arguments: missing required parameter: text"
    denied = await run_tool(WriteNote, {"text": "x"}, {"working_dir": tool_workspace})
    assert denied.content == "Error: Tool capability denied: write"


def test_tool_call_makes_fresh_ids_unless_given() -> None:
    first, second = tool_call("a"), tool_call("a", {"x": 1})
    assert first.id != second.id
    assert first.id.startswith("toolu_test_")
    assert first.input == {}
    assert second.input == {"x": 1}
    assert tool_call("a", id="mine").id == "mine"


@pytest.mark.parametrize("test", ["first", "second"])
async def test_tool_call_ids_start_again_in_each_test(test: str) -> None:
    # Whichever test runs first, each sees the same ids: expected output is stable.
    assert [tool_call("a").id, tool_call("b").id] == ["toolu_test_1", "toolu_test_2"]
    outcome = await run_tool(WriteNote, {})
    assert outcome.tool_use_id == "toolu_test_3"


def test_loading_the_plugin_imports_nothing_of_satsuma() -> None:
    # pytest loads installed plugins in every session, of any project: it must be free.
    code = (
        "import sys, _satsuma_pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('satsuma', 'trio')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


USERS_TESTS = """
from satsuma.testing import tool_call


def test_one(tool_workspace, tool_context, tool_events):
    assert tool_context["working_dir"] == tool_workspace
    assert tool_events.events == []
    assert tool_call("x").id == "toolu_test_1"


def test_two():
    assert [tool_call("x").id, tool_call("y").id] == ["toolu_test_1", "toolu_test_2"]
"""


def test_a_users_project_gets_the_fixtures_with_no_conftest(tmp_path: Path) -> None:
    (tmp_path / "test_users.py").write_text(USERS_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_users.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
