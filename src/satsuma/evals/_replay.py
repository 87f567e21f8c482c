"""Replay: an agent class whose tools answer with a stored run's outcomes.

``tools="replay"`` evaluates an agent without repeating any side effect. The class under
evaluation is subclassed with each of its tools replaced by a stand-in of the same name,
description and input schema (so the model sees the same tools). A call whose name and
input match a recorded call gets that call's outcome and runs nothing; any other call
gets an ``is_error`` "not recorded" outcome, unless its tool is marked ``idempotent``, in
which case the real tool runs (through a ToolRunner of the original tools, with its
deadline and crash capture). The tools of a server (an MCP server, a remote A2A agent)
are replayed the same way, the server never started nor reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .._messages import Message
from ..agents import Agent
from ..tools import Tool, ToolContext, ToolResult, ToolRunner, ToolServer
from ._case import Case, RecordedCall

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


def replaying(agent: type[Agent[Any]], cases: Sequence[Case] = ()) -> type[Agent[Any]]:
    """``agent`` with its tools replaced by replay stand-ins.

    A tool server the agent lists (an MCP server, a remote A2A agent) is neither started
    nor reached: its tools are known only once it runs, so each tool of it that the
    recorded calls of ``cases`` name gets a stand-in of that name, which accepts any
    object as input (the server's schemas were never recorded) and answers from the
    record like the others.
    """
    servers = [item for item in agent.tools if isinstance(item, ToolServer)]
    originals = ToolRunner([item for item in agent.tools if not isinstance(item, ToolServer)])
    stand_ins = [
        _stand_in(d.name, d.description, d.input_schema, d.idempotent, originals)
        for d in originals.definitions
    ]
    if servers:
        own = {definition.name for definition in originals.definitions}
        served = dict.fromkeys(
            call.name for case in cases for call in case.recorded if call.name not in own
        )
        stand_ins += [
            _stand_in(name, _served_description(name, servers), _ANY_OBJECT, False, originals)
            for name in served
        ]
    return type(agent.__name__, (agent,), {"tools": stand_ins, "__module__": agent.__module__})


_ANY_OBJECT: Final = {"type": "object"}


def _served_description(name: str, servers: Sequence[ToolServer]) -> str:
    owner = next((server for server in servers if _serves(server, name)), None)
    label = getattr(owner, "name", None) if owner is not None else None
    of = f"the tool server {label}" if isinstance(label, str) else "one of the agent's servers"
    return f"A tool of {of}, replayed: it answers with the outcomes recorded in a run."


def _serves(server: ToolServer, name: str) -> bool:
    # An MCP server's tools carry its prefix, if it has one; an A2A agent is one tool.
    prefix = getattr(server, "prefix", None)
    if isinstance(prefix, str):
        return name.startswith(f"{prefix}__")
    return getattr(server, "name", None) == name and not hasattr(server, "prefix")


def _stand_in(
    name: str,
    description: str,
    input_schema: Mapping[str, Any],
    idempotent: bool,
    originals: ToolRunner,
) -> type[Tool]:
    async def run(self: Tool, args: Any, ctx: ToolContext) -> ToolResult:
        recording = ctx.extra.get(RECORDING_KEY)
        assert isinstance(recording, Recording), "a replay tool runs only under evaluate"
        found = recording.answer(name, args)
        if found is not None:
            recording.replayed += 1
            return ToolResult(found.content, is_error=found.is_error)
        recording.missed += 1
        if not idempotent:
            return ToolResult(not_recorded_text(name), is_error=True)
        [outcome] = await originals.execute(
            [{"id": ctx.tool_use_id, "name": name, "input": args}],
            {"working_dir": ctx.working_dir, "capabilities": ctx.capabilities, **ctx.extra},
        )
        return ToolResult(outcome.content, is_error=outcome.is_error)

    namespace: dict[str, Any] = {
        "name": name,
        "description": description,
        "input_schema": dict(input_schema),
        "idempotent": idempotent,
        "run": run,
        "__module__": __name__,
    }
    return type(f"Replayed_{name}", (Tool,), namespace)


def tool_calls(messages: Sequence[Message]) -> list[tuple[str, Any]]:
    """The tool calls a run's messages hold, in order: ``(name, input)``."""
    return [(block["name"], block.get("input")) for m in messages for block in m.tool_uses]
