"""satsuma.testing: run_tool, tool_call, EventRecorder, and the pytest plugin's fixtures
(used here exactly as a user's test would, through the pytest11 entry point)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
