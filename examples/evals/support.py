"""The agent the evals example evaluates: a support desk that looks orders up and
refunds them.

``send_refund`` has a side effect, a line appended to ``ledger.txt`` beside this file
(the example's bank): an evaluation that replays the stored runs must never write it.
``SupportNext`` is the same agent after a change (its refund tool renamed): the
evaluation against the baseline says which stored conversations it now gets wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

import satsuma

LEDGER = Path(os.environ.get("SUPPORT_LEDGER", Path(__file__).with_name("ledger.txt")))
ORDERS = {"A1": "shipped on 2 May", "B7": "waiting for stock", "C3": "delivered"}


@satsuma.tool(idempotent=True)
async def lookup_order(order: str) -> str:
    """Read an order's status (harmless to run again)."""
    return f"order {order}: {ORDERS.get(order, 'unknown')}"


def _refund(order: str, amount: int) -> str:
    with LEDGER.open("a", encoding="utf-8") as ledger:
        ledger.write(f"refund {order} {amount}\n")
    return f"refunded {amount} EUR on {order}"


@satsuma.tool
async def send_refund(order: str, amount: int) -> str:
    """Refund an order: money leaves (appends to the ledger)."""
    return _refund(order, amount)


@satsuma.tool
async def refund_order(order: str, amount: int) -> str:
    """Refund an order (SupportNext's name for it)."""
    return _refund(order, amount)


class Support(satsuma.Agent):
    """The support desk as it runs in production."""

    name = "support"
    system = "You help customers with their orders. Look an order up before refunding it."
    tools = [lookup_order, send_refund]


class SupportNext(Support):
    """The same agent after a change: its refund tool is renamed, and the conversations
    that refunded now fail (the model still asks for ``send_refund``)."""

    tools = [lookup_order, refund_order]
