"""Code written as the docs write it, checked by ``mypy --strict`` (tests/test_typing.py)
and run: a ``@tool`` function keeps its signature, ``satsuma.ToolReturn`` types the
``("error", reason)`` form, and ``open_agent`` hands back an ``AgentHandle``.

Each annotation below is an assertion: mypy fails the test if the type it states is not
what satsuma gives.
"""

from __future__ import annotations

from typing import Any

import trio

import satsuma
from satsuma.testing import ScriptedModel


@satsuma.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@satsuma.tool(timeout=5, name="shout_text")
async def shout(text: str, times: int = 1) -> str:
    """Repeat a text in capitals."""
    return text.upper() * times


@satsuma.tool
async def lookup(key: str) -> satsuma.ToolReturn:
    """Look a key up."""
    if key == "missing":
        return ("error", f"Unknown key: {key}")
    if key == "partial":
        return ("ok", "half of it", True)
    if key == "blocks":
        return ("ok", [{"type": "text", "text": key}])
    return key


class Capital(satsuma.Tool):
    name = "capital"
    description = "Look up the capital city of a country"
    parameters = {"country": {"type": "string", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> satsuma.ToolReturn:
        if args["country"] != "France":
            return ("error", f"No capital known for {args['country']!r}")
        return satsuma.ToolResult("Paris", details={"source": "memory"})


class Notebook(satsuma.Toolset):
    def __init__(self) -> None:
        self.notes: list[str] = []

    @satsuma.tool
    def write_note(self, text: str) -> int:
        """Keep a note; returns how many there are."""
        self.notes.append(text)
        return len(self.notes)


class Helper(satsuma.Agent):
    name = "helper"
    model = "claude-sonnet-4-5"
    tools = [add, shout, lookup, Capital, Notebook()]


total: int = add(1, 2)
total_by_name: int = add(a=1, b=2)
book = Notebook()
notes: int = book.write_note("first")
unbound: satsuma.FunctionTool[[Notebook, str], int] = Notebook.write_note
schema: dict[str, Any] = add.schema()
definition: satsuma.ToolDefinition = shout.definition
as_tool: satsuma.Tool = add
runner = satsuma.ToolRunner([add, shout, lookup, Capital, book])


async def main() -> None:
    loud: str = await shout("hi", times=2)
    found: satsuma.ToolReturn = await lookup("missing")
    async with satsuma.open_agent(Helper, model=ScriptedModel(["Hello."])) as agent:
        handle: satsuma.AgentHandle = agent
        result: satsuma.RunResult = await handle.run("Say hello")
    assert (loud, found, result.output) == ("HIHI", ("error", "Unknown key: missing"), "Hello.")


assert (total, total_by_name, notes, book.notes) == (3, 3, 1, ["first"])
assert shout.definition.name == "shout_text" and shout.definition.timeout == 5.0
trio.run(main)
