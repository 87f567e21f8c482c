"""The node process of the failover test (test_failover.py): a Node serving ``Payer``,
which the test kills with SIGKILL in the middle of a tool call.

Usage: ``python node_worker.py DSN LOG``. Prints ``READY`` once the node serves, and
``CHARGED <tool_use_id>`` once ``charge`` has made its side effect (a line in LOG) and
before it returns: a kill then leaves the call in doubt.

The model (a FunctionModel) asks, for a prompt, for two calls at once: ``lookup``
(idempotent; returns at once) and ``charge`` (not idempotent); once they are answered it
says ``paid``. The test imports this module for the same agent and model on its own node.
"""

from __future__ import annotations

import os
import sys

import trio

import satsuma
from satsuma.cluster import Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply
from satsuma.tools import ToolCall

CHARGE_FOREVER = "charge_forever"  # a context key: charge hangs after its side effect


def say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()


def append_line(path: str, line: str) -> None:
    """Append one line to the side-effect log and make it durable."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@satsuma.tool
async def charge(ctx: satsuma.ToolContext, amount: int) -> str:
    """Charge the customer (not idempotent)."""
    append_line(ctx.extra["log"], f"charge {ctx.tool_use_id} {amount}")
    say("CHARGED", ctx.tool_use_id)
    if ctx.extra.get(CHARGE_FOREVER):
        await trio.sleep_forever()
    return f"charged {amount}"


@satsuma.tool(idempotent=True)
async def lookup(ctx: satsuma.ToolContext, amount: int) -> str:
    """Look the customer's balance up (idempotent)."""
    append_line(ctx.extra["log"], f"lookup {ctx.tool_use_id} {amount}")
    return "balance 100"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [lookup, charge]


def reply(request: satsuma.ModelRequest) -> Reply | str:
    last = request.messages[-1]
    if any(block.get("type") == "tool_result" for block in last.content):
        return "paid"
    return Reply(
        tool_calls=[
            ToolCall("toolu_lookup", "lookup", {"amount": 10}),
            ToolCall("toolu_charge", "charge", {"amount": 10}),
        ]
    )


async def main(dsn: str, log: str) -> None:
    async with PostgresStore(dsn) as store:
        node = Node(
            store,
            agents=[Payer],
            name="doomed",
            model=FunctionModel(reply),
            context={"log": log, CHARGE_FOREVER: True},
            lease_seconds=1.5,
            poll_interval=0.2,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(node.serve)
            say("READY")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
