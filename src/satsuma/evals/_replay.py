"""Replay: an agent class whose tools answer with a stored run's outcomes.

``tools="replay"`` evaluates an agent without repeating any side effect. The class under
evaluation is subclassed with each of its tools replaced by a stand-in of the same name,
description and input schema (so the model sees the same tools). A call whose name and
input match a recorded call gets that call's outcome and runs nothing; any other call
gets an ``is_error`` "not recorded" outcome, unless its tool is marked ``idempotent``, in
which case the real tool runs (through a ToolRunner of the original tools, with its
deadline and crash capture).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from .._messages import Message
from ..agents import Agent
from ..tools import Tool, ToolContext, ToolDefinition, ToolResult, ToolRunner, ToolServer
from ._case import RecordedCall

__all__ = ["RECORDING_KEY", "Recording", "not_recorded_text", "replaying"]

RECORDING_KEY: Final = "satsuma.evals.recording"
"""Where a replay tool finds its case's recorded calls: a key of the agent's context."""


def not_recorded_text(name: str) -> str:
    return (
        f"Error: not recorded: this evaluation replays recorded tool calls, and no recorded "
        f"call of {name} had these arguments"
    )


@attrs.define
class Recording:
    """One run's recorded calls; each answers one replayed call, in order, then the last
    match answers again (a run that asks the same thing twice gets the same answer)."""

    calls: Sequence[RecordedCall]
    _used: set[int] = attrs.field(factory=set, init=False)
    replayed: int = attrs.field(default=0, init=False)
    missed: int = attrs.field(default=0, init=False)

    def answer(self, name: str, arguments: Any) -> RecordedCall | None:
        last = None
        for index, call in enumerate(self.calls):
            if call.matches(name, arguments):
                last = call
                if index not in self._used:
                    self._used.add(index)
                    return call
        return last


def replaying(agent: type[Agent[Any]]) -> type[Agent[Any]]:
    """``agent`` with its tools replaced by replay stand-ins.

    Raises:
        ValueError: the agent lists a server of tools (an MCP server, an A2A agent):
            its tools are listed only once it runs, and replaying them is not built.
    """
    servers = [item for item in agent.tools if isinstance(item, ToolServer)]
    if servers:
        raise ValueError(
            f"tools='replay' cannot replay {servers[0]!r}: the tools of a tool server are "
            "listed only once it runs; evaluate with tools='live', or list its tools directly"
        )
    originals = ToolRunner(agent.tools)
    stand_ins = [_stand_in(definition, originals) for definition in originals.definitions]
    return type(agent.__name__, (agent,), {"tools": stand_ins, "__module__": agent.__module__})


def _stand_in(definition: ToolDefinition, originals: ToolRunner) -> type[Tool]:
    async def run(self: Tool, args: Any, ctx: ToolContext) -> ToolResult:
        recording = ctx.extra.get(RECORDING_KEY)
        assert isinstance(recording, Recording), "a replay tool runs only under evaluate"
        found = recording.answer(definition.name, args)
        if found is not None:
            recording.replayed += 1
            return ToolResult(found.content, is_error=found.is_error)
        recording.missed += 1
        if not definition.idempotent:
            return ToolResult(not_recorded_text(definition.name), is_error=True)
        [outcome] = await originals.execute(
            [{"id": ctx.tool_use_id, "name": definition.name, "input": args}],
            {"working_dir": ctx.working_dir, "capabilities": ctx.capabilities, **ctx.extra},
        )
        return ToolResult(outcome.content, is_error=outcome.is_error)

    namespace: dict[str, Any] = {
        "name": definition.name,
        "description": definition.description,
        "input_schema": dict(definition.input_schema),
        "idempotent": definition.idempotent,
        "run": run,
        "__module__": __name__,
    }
    return type(f"Replayed_{definition.name}", (Tool,), namespace)


def tool_calls(messages: Sequence[Message]) -> list[tuple[str, Any]]:
    """The tool calls a run's messages hold, in order: ``(name, input)``."""
    return [(block["name"], block.get("input")) for m in messages for block in m.tool_uses]
