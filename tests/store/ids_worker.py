"""A worker for test_reused_ids.py: an agent on a SQLite store whose provider (a
MessagesServer or a ChatCompletionsServer, in this process) numbers its calls ``call_0``
in every turn. The run pays 1, then 2; the worker stops for ever at WHERE in the second
turn, printing ``AT WHERE``, to be killed there with SIGKILL.

Usage: ``python ids_worker.py DB DIALECT WHERE LOG``, where DIALECT is ``messages`` or
``chat``, WHERE is

- ``started``: inside the journal's ``call_started`` for the second turn's call, before it
  writes: the turn is stored, its call is not journaled yet;
- ``finished``: just after the journal recorded the second call's outcome, before its
  result reaches the conversation;

and LOG is a file that each payment made appends a line to (``pay N``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

import satsuma
from satsuma.store import SQLiteStore, Store
from satsuma.testing import ChatCompletionsServer, MessagesServer, Reply, tool_call


def at(where: str) -> None:
    sys.stdout.write(f"AT {where}\n")
    sys.stdout.flush()


class StoppingStore:
    """The store, stopping for ever at ``where`` in the second journaled call."""

    def __init__(self, inner: Store, where: str) -> None:
        self.inner = inner
        self.where = where
        self.started = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def call_started(self, *args: Any, **kwargs: Any) -> None:
        self.started += 1
        if self.where == "started" and self.started == 2:
            at("started")
            await trio.sleep_forever()
        await self.inner.call_started(*args, **kwargs)

    async def call_finished(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.call_finished(*args, **kwargs)
        if self.where == "finished" and self.started == 2:
            at("finished")
            await trio.sleep_forever()


async def main(db: str, dialect: str, where: str, log: str) -> None:
    @satsuma.tool
    def pay(amount: int) -> str:
        """Pay an amount.

        Args:
            amount: How much.
        """
        with Path(log).open("a") as file:
            file.write(f"pay {amount}\n")
        return f"paid {amount}"

    class Payer(satsuma.Agent):
        name = "payer"
        tools = [pay]

    script: list[Reply | str] = [
        Reply(tool_calls=[tool_call("pay", {"amount": 1}, id="call_0")]),
        Reply(tool_calls=[tool_call("pay", {"amount": 2}, id="call_0")]),
        "Paid twice.",
    ]
    server = MessagesServer(script) if dialect == "messages" else ChatCompletionsServer(script)
    async with server, SQLiteStore(db) as opened:
        model: Any = (
            satsuma.AnthropicModel(server.client())  # type: ignore[arg-type]
            if dialect == "messages"
            else satsuma.OpenAIModel(server.client())  # type: ignore[arg-type]
        )
        store: Any = StoppingStore(opened, where)
        async with satsuma.open_agent(Payer, model=model, store=store, agent_id="a") as agent:
            await agent.run("Pay 1, then 2.")


if __name__ == "__main__":
    db, dialect, where, log = sys.argv[1:5]
    trio.run(main, db, dialect, where, log)
