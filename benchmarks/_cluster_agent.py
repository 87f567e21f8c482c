"""The cluster benchmark's agent, as the docs show one (two tools, one idempotent), and
the loopback model's answers to it (benchmarks/cluster.py)."""

from __future__ import annotations

from typing import Any

import trio

import satsuma
from satsuma.testing import Reply

MODEL = "claude-sonnet-4-5"
ANSWER = "Booked: the courier comes tomorrow."
PING = "ping"  # a prompt the model answers at once, with no tool call


@satsuma.tool(idempotent=True)
async def check_stock(item: str, seconds: float) -> str:
    """How many of an item are in stock (idempotent: it only reads).

    Args:
        item: The item.
        seconds: How long the stock system takes to answer.
    """
    await trio.sleep(seconds)
    return f"{item}: 12 in stock"


@satsuma.tool
async def book_courier(item: str, seconds: float) -> str:
    """Book a courier for an item (not idempotent: a second call books a second one).

    Args:
        item: The item.
        seconds: How long the courier's system takes to answer.
    """
    await trio.sleep(seconds)
    return f"courier booked for {item}"


class Courier(satsuma.Agent):
    name = "courier"
    model = MODEL
    system = "You ship customers' orders."
    tools = [check_stock, book_courier]


def ship(seconds: float) -> str:
    """A prompt for which the model asks for both tools at once, each taking ``seconds``
    (the tools sleep the time the model passes them: one agent class serves every
    phase, whatever its tools' time)."""
    return f"ship a kettle wait={seconds:g}"


def respond(body: dict[str, Any]) -> Reply:
    """Two calls at once for a new prompt, the answer once their results are in; a ping
    is answered at once."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return Reply(text=ANSWER)
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    if text.startswith(PING):
        return Reply(text="pong")
    tool_input = {"item": "kettle", "seconds": float(text.rpartition("wait=")[2])}
    return Reply(tool_calls=[("check_stock", tool_input), ("book_courier", tool_input)])
