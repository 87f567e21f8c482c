"""A worker for test_store_hardening.py and test_postgres.py: it opens an agent on a
store (SQLite, or PostgreSQL when DB is a connection string), starts a run with a
prompt, prints where it stands, and waits there for ever, to be killed with SIGKILL at
that point.

Usage: ``python prompt_worker.py DB AGENT_ID PROMPT WHERE``, where WHERE is

- ``start``: inside the store's ``start_run``, before it writes anything: the moment
  between the prompt reaching the store and its run record being written;
- ``model``: inside the model call, once the run and its prompt are committed.

It prints ``AT start`` or ``AT model`` when it is there.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

import satsuma
from satsuma.store import PostgresStore, SQLiteStore, Store
from satsuma.testing import FunctionModel


class Assistant(satsuma.Agent):
    name = "assistant"


def at(where: str) -> None:
    sys.stdout.write(f"AT {where}\n")
    sys.stdout.flush()


class PausingStore:
    """The store, but for start_run, which stops for ever before it writes."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def start_run(self, *args: Any, **kwargs: Any) -> None:
        at("start")
        await trio.sleep_forever()


async def main(db: str, agent_id: str, prompt: str, where: str) -> None:
    async def reply(request: satsuma.ModelRequest) -> str:
        at("model")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    postgres = db.startswith("postgresql:") or "dbname=" in db
    opened: Any = PostgresStore(db) if postgres else SQLiteStore(db)
    async with opened:
        store: Any = PausingStore(opened) if where == "start" else opened
        async with satsuma.open_agent(
            Assistant, model=FunctionModel(reply), store=store, agent_id=agent_id
        ) as agent:
            await agent.run(prompt)


if __name__ == "__main__":
    db, agent_id, prompt, where = sys.argv[1:5]
    trio.run(main, db, agent_id, prompt, where)
