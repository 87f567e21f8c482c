"""The agents ``benchmarks/serve.py`` serves: ``echo``, whose model answers at once, and
``ticker``, whose one tool reports the time every half second for an hour."""

from __future__ import annotations

import time

import trio

import satsuma
from satsuma.testing import Reply


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


@satsuma.tool
async def tick(ctx: satsuma.ToolContext) -> str:
    """Report the time every half second, for an hour."""
    for _ in range(7200):
        await trio.sleep(0.5)
        ctx.progress(repr(time.time()))
    return "done"


class Ticker(satsuma.Agent):
    name = "ticker"
    tools = [tick]


def ticker_model(request: satsuma.ModelRequest) -> Reply | str:
    return Reply(tool_calls=[("tick", {})]) if len(request.messages) == 1 else "done"
