"""Agent classes the serve tests serve: a banker whose transfers need a person's
approval, and a greeter that shares its agent ids."""

from __future__ import annotations

import trio

import satsuma
from satsuma.testing import Reply, ScriptedModel

done: list[str] = []
gate = {"open": trio.Event()}


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much (at least 1).
    """
    if amount < 1:
        raise satsuma.ToolError("amount must be at least 1")
    done.append(f"transfer {amount} to {to}")
    return f"sent {amount} to {to}"


@satsuma.tool
async def slow(label: str) -> str:
    """Wait until the test opens the gate.

    Args:
        label: A label.
    """
    await gate["open"].wait()
    done.append(f"slow {label}")
    return f"done {label}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [transfer, slow]


class Greeter(satsuma.Agent):
    name = "greeter"


def two_transfers(*answers: str | Reply) -> list[str | Reply]:
    """A turn asking for two transfers, then ``answers``."""
    return [
        Reply(
            tool_calls=[
                ("transfer", {"to": "bob", "amount": 10}),
                ("transfer", {"to": "al", "amount": 2}),
            ]
        ),
        *answers,
    ]


def scripted(*replies: str | Reply) -> ScriptedModel:
    return ScriptedModel(list(replies))
