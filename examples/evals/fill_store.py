"""Fill a SQLite store with real runs of ``Support`` on the offline fake model: what a
week of production leaves behind. Three conversations, a refund among them (its ledger
line is written once, here).

    python examples/evals/fill_store.py prod.db
"""

from __future__ import annotations

import sys

import trio
from support import Support

import satsuma
from satsuma.store import SQLiteStore
from satsuma.testing import FakeModel

CONVERSATIONS = {
    "t-100": ["hello", 'use lookup_order {"order": "A1"}'],
    "t-101": ['use lookup_order {"order": "B7"}', 'use send_refund {"order": "B7", "amount": 30}'],
    "t-102": ['use lookup_order {"order": "C3"}'],
}


async def fill(path: str) -> None:
    async with SQLiteStore(path) as store:
        for agent_id, prompts in CONVERSATIONS.items():
            async with satsuma.open_agent(
                Support, model=FakeModel(), store=store, agent_id=agent_id
            ) as agent:
                for prompt in prompts:
                    result = await agent.run(prompt)
                    print(f"{agent_id}: {prompt!r} -> {result.status}: {result.output}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python fill_store.py STORE.db")
    trio.run(fill, sys.argv[1])
