"""A call builds its ToolContext only where someone can see it (a tool that takes one,
or a before_call hook): a ``@tool`` function without ``ctx`` runs without one, and every
one that can see it still gets its own, with its call's id and deadline."""

from __future__ import annotations

import math
from typing import Any

import trio

import satsuma
from satsuma import ToolCall, ToolContext, ToolRunner
from satsuma.tools._tool import takes_context


@satsuma.tool
async def plain(n: int) -> str:
    """No context.

    Args:
        n: A number.
    """
    return f"plain {n}"


seen: list[tuple[str, float]] = []


@satsuma.tool(timeout=5)
async def watched(n: int, ctx: ToolContext) -> str:
    """With its context.

    Args:
        n: A number.
    """
    seen.append((ctx.tool_use_id, ctx.deadline - trio.current_time()))
    return "watched"


class Classy(satsuma.Tool):
    name = "classy"
    description = "A class tool, which always gets a context."
    parameters: Any = {"n": {"type": "integer"}}

    async def run(self, args: Any, ctx: ToolContext) -> str:
        seen.append((ctx.tool_use_id, ctx.deadline))
        return "classy"


def test_which_tools_can_see_their_context() -> None:
    assert not takes_context(plain)
    assert takes_context(watched)
    assert takes_context(Classy())


async def test_each_tool_that_can_see_a_context_gets_its_own(autojump_clock: Any) -> None:
    seen.clear()
    runner = ToolRunner([plain, watched, Classy], timeout=30)
    calls = [
        ToolCall("a", "plain", {"n": 1}),
        ToolCall("b", "watched", {"n": 2}),
        ToolCall("c", "classy", {"n": 3}),
    ]
    outcomes = await runner.execute(calls)
    assert [outcome.content for outcome in outcomes] == ["plain 1", "watched", "classy"]
    by_id = dict(seen)
    assert set(by_id) == {"b", "c"}
    assert by_id["b"] == 5
    assert by_id["c"] != math.inf  # the runner's own deadline


async def test_a_hook_sees_a_context_for_a_tool_that_takes_none() -> None:
    contexts: list[ToolContext] = []

    class Look(satsuma.ToolHook):
        def before_call(self, call: ToolCall, ctx: ToolContext) -> Any:
            contexts.append(ctx)
            return None

    runner = ToolRunner([plain], hooks=Look())
    outcomes = await runner.execute([ToolCall("a", "plain", {"n": 1})])
    assert outcomes[0].content == "plain 1"
    assert [ctx.tool_use_id for ctx in contexts] == ["a"]
    assert contexts[0].cancelled is False  # ended, not abandoned
