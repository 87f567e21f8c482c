"""The worker of the approval kill test (test_approval_kill.py): one process runs an agent
on a store (SQLite, or PostgreSQL when DB is a connection string) until its run pauses
awaiting approval, prints ``PAUSED RUN_ID``, and waits there for ever, to be killed with
SIGKILL. The test then resumes the run in its own process, with the same agent class
(it loads this file for it).

Usage: ``python approval_worker.py DB EFFECTS``. Every tool appends a line to EFFECTS
(fsynced) when it runs, so that the test counts what ran, in whichever process.

The run's one turn asks for three calls: ``balance`` (needs no decision: it runs before
the pause), ``transfer`` and ``wire`` (each requires approval: the run pauses on both).
"""

from __future__ import annotations

import os
import sys

import trio

import satsuma
from satsuma.store import PostgresStore, SQLiteStore
from satsuma.testing import Reply, ScriptedModel

AGENT_ID = "banker-1"
PROMPT = "Pay Bob 10 and Eve 99"

effects: str | None = None  # the side-effect file: set by main here, by the test there


def record(line: str) -> None:
    """Append one line to the side-effect file and make it durable before going on."""
    assert effects is not None, "set approval_worker.effects first"
    fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@satsuma.tool
async def balance(account: str) -> str:
    """Read a balance.

    Args:
        account: The account.
    """
    record(f"balance {account}")
    return f"{account}: 100"


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much.
    """
    record(f"transfer {amount} to {to}")
    return f"sent {amount} to {to}"


@satsuma.tool(requires_approval=True)
async def wire(to: str, amount: int) -> str:
    """Wire money abroad.

    Args:
        to: Who gets it.
        amount: How much.
    """
    record(f"wire {amount} to {to}")
    return f"wired {amount} to {to}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [balance, transfer, wire]


def first_turn() -> Reply:
    return Reply(
        tool_calls=[
            ("balance", {"account": "main"}),
            ("transfer", {"to": "bob", "amount": 10}),
            ("wire", {"to": "eve", "amount": 99}),
        ]
    )


def is_postgres(db: str) -> bool:
    return db.startswith("postgresql:") or "dbname=" in db


async def main(db: str) -> None:
    store = PostgresStore(db) if is_postgres(db) else SQLiteStore(db)
    model = ScriptedModel([first_turn()])
    async with (
        store,
        satsuma.open_agent(Banker, model=model, store=store, agent_id=AGENT_ID) as agent,
    ):
        result = await agent.run(PROMPT)
        # "PAUSED run_..." (anything else: the test fails, showing what it got)
        word = "PAUSED" if result.status == "awaiting_approval" else result.status
        sys.stdout.write(f"{word} {result.run_id}\n")
        sys.stdout.flush()
        await trio.sleep_forever()


if __name__ == "__main__":
    db, effects = sys.argv[1:3]
    trio.run(main, db)
