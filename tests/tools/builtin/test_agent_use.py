"""An agent works on a real workspace with the built-in tools, its model scripted."""

from __future__ import annotations

from pathlib import Path

import satsuma
from satsuma.testing import Reply, ScriptedModel, check_conversation
from satsuma.tools.builtin import Bash, EditFile, ListDir, ReadFile, Search, WriteFile


class Coder(satsuma.Agent):
    name = "coder"
    model = "claude-sonnet-4-5"
    tools = [ReadFile, WriteFile, EditFile, ListDir, Search, Bash]
    system = "You write Python."


async def test_an_agent_writes_edits_runs_and_is_refused_outside(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ("write_file", {"path": "fib.py", "content": "def fib(n):\n    return n\n"}),
                    ("read_file", {"path": "../secret.txt"}),
                ]
            ),
            Reply(
                tool_calls=[
                    (
                        "edit_file",
                        {
                            "path": "fib.py",
                            "old": "    return n\n",
                            "new": "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
                        },
                    )
                ]
            ),
            Reply(
                tool_calls=[
                    ("bash", {"command": "python3 -c 'import fib; print(fib.fib(10))'"}),
                    ("search", {"pattern": "def fib"}),
                    ("bash", {"command": "curl -s https://example.com", "timeout": 5}),
                ]
            ),
            "fib(10) is 55.",
        ]
    )
    context = {"working_dir": workspace, "capabilities": {"read", "write"}}
    async with satsuma.open_agent(Coder, model=model, context=context) as agent:
        result = await agent.run("Write fib and check it")
        history = agent.history
    assert result.status == "completed"
    check_conversation(history)
    results = [block for message in history for block in message.tool_results]
    by_turn = [(block["content"], block["is_error"]) for block in results]
    assert by_turn[0] == ("Created fib.py (25 bytes)", False)
    assert by_turn[1] == ("Error: Path escapes workspace root: ../secret.txt", True)
    assert by_turn[2] == ("Edited fib.py: replaced 1 occurrence at line 2", False)
    # No shell capability in this context: bash is refused, the other call still runs.
    assert by_turn[3] == ("Error: Tool capability denied: shell", True)
    assert by_turn[4] == ("fib.py:1: def fib(n):", False)
    assert by_turn[5] == ("Error: Tool capability denied: shell", True)
    assert "TOP-SECRET" not in str(history)
    assert (workspace / "fib.py").read_text().endswith("fib(n - 2)\n")


async def test_with_shell_granted_the_agent_runs_its_code(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Reply(tool_calls=[("write_file", {"path": "a.py", "content": "print(6 * 7)\n"})]),
            Reply(tool_calls=[("bash", {"command": "python3 a.py"})]),
            "It prints 42.",
        ]
    )
    context = {"working_dir": tmp_path, "capabilities": {"write", "shell"}}
    async with satsuma.open_agent(Coder, model=model, context=context) as agent:
        result = await agent.run("Run it")
        history = agent.history
    assert result.status == "completed"
    contents = [block["content"] for message in history for block in message.tool_results]
    assert contents == ["Created a.py (13 bytes)", "42\n"]
