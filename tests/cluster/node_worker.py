"""The node processes of the cluster tests: a Node serving one agent class, which the
tests kill (SIGKILL) or pause (SIGSTOP) in the middle of its work.

Usage: ``python node_worker.py DSN LOG [ROLE NAME LEASE_SECONDS TOOL_SECONDS]``.

- ``payer`` (the default; test_failover.py): serves ``Payer`` and prints ``CHARGED
  <tool_use_id>`` once ``charge`` has made its side effect (a line in LOG) and before it
  returns; ``charge`` then hangs, so a kill leaves the call in doubt.
- ``clerk`` (test_chaos.py, test_fencing.py): serves ``Clerk``, whose runs take three
  turns of slow tools (``fetch``, idempotent; ``record``, not), each execution a line in
  LOG and ``CALL <tool> <run_id> <tool_use_id>`` on stdout when it starts.

Prints ``READY <pid>`` once the node serves. Warnings (the node's and the agents') go to
stderr. The tests import this module for the same agents and models on their own nodes.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import satsuma
from satsuma.cluster import Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply
from satsuma.tools import ToolCall

CHARGE_FOREVER = "charge_forever"  # a context key: charge hangs after its side effect
TOOL_SECONDS = "tool_seconds"  # a context key: how long Clerk's tools take


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


# --- payer (test_failover.py) -------------------------------------------------------------


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


# --- clerk (test_chaos.py, test_fencing.py) -----------------------------------------------


async def _execute(ctx: satsuma.ToolContext, tool: str, key: str) -> str:
    # The line is the side effect: one per execution, whichever node runs it.
    append_line(ctx.extra["log"], f"{tool} {key} {ctx.tool_use_id} {os.getpid()}")
    say("CALL", tool, key, ctx.tool_use_id)
    await trio.sleep(ctx.extra.get(TOOL_SECONDS, 0.1))
    return f"{tool} {key} done"


@satsuma.tool(idempotent=True)
async def fetch(ctx: satsuma.ToolContext, key: str) -> str:
    """Read the ledger entry (idempotent: may run again after a failover)."""
    return await _execute(ctx, "fetch", key)


@satsuma.tool
async def record(ctx: satsuma.ToolContext, key: str) -> str:
    """Write a ledger entry (not idempotent: runs at most once)."""
    return await _execute(ctx, "record", key)


class Clerk(satsuma.Agent):
    name = "clerk"
    tools = [fetch, record]


def _prompt_and_turn(request: satsuma.ModelRequest) -> tuple[str, int]:
    """The run's prompt (the last user text) and how many answers the model gave since."""
    for index in range(len(request.messages) - 1, -1, -1):
        message = request.messages[index]
        if message.role == "user" and any(b.get("type") == "text" for b in message.content):
            text = "".join(b["text"] for b in message.content if b.get("type") == "text")
            turns = sum(1 for m in request.messages[index:] if m.role == "assistant")
            return text, turns
    raise AssertionError("no prompt in the conversation")


def clerk_reply(request: satsuma.ModelRequest) -> Reply | str:
    """Three turns: fetch and record at once; record again; then ``done <prompt>``. Call
    ids are made of the prompt, unique in the conversation (prompts are)."""
    prompt, turn = _prompt_and_turn(request)
    key = prompt.replace(" ", "_")
    if turn == 0:
        return Reply(
            tool_calls=[
                ToolCall(f"toolu_{key}_fetch", "fetch", {"key": key}),
                ToolCall(f"toolu_{key}_record1", "record", {"key": key}),
            ]
        )
    if turn == 1:
        return Reply(tool_calls=[ToolCall(f"toolu_{key}_record2", "record", {"key": key})])
    return f"done {prompt}"


# --- the process ----------------------------------------------------------------------------


async def main(argv: list[str]) -> None:
    dsn, log = argv[0], argv[1]
    role = argv[2] if len(argv) > 2 else "payer"
    options: dict[str, Any]
    if role == "payer":
        options = {
            "agents": [Payer],
            "name": "doomed",
            "model": FunctionModel(reply),
            "context": {"log": log, CHARGE_FOREVER: True},
            "lease_seconds": 1.5,
        }
    else:
        name, lease, tool_seconds = argv[3], float(argv[4]), float(argv[5])
        options = {
            "agents": [Clerk],
            "name": name,
            "model": FunctionModel(clerk_reply),
            "context": {"log": log, TOOL_SECONDS: tool_seconds},
            "lease_seconds": lease,
            "max_agents": 4,
        }
    # A node paused mid-transaction holds its locks until the server ends it: soon, here.
    async with PostgresStore(dsn, transaction_timeout=2.0) as store:
        node = Node(store, poll_interval=0.2, **options)
        async with trio.open_nursery() as nursery:
            await nursery.start(node.serve)
            say("READY", os.getpid())


# --- the tests' side: node processes and their output ----------------------------------------


class NodeProcess:
    """A node process started by a test: its stdout lines are collected by ``pump`` (run
    it in a nursery), and waited for with ``wait_for``."""

    def __init__(self, process: trio.Process, stderr: Path) -> None:
        self.process = process
        self.pid = process.pid
        self.stderr = stderr
        self.lines: list[str] = []
        self._changed = trio.Event()
        self.ended = False

    @classmethod
    async def start(cls, dsn: str, log: Path, folder: Path, *args: object) -> NodeProcess:
        """Start ``node_worker.py DSN LOG *args``; its stderr goes to a file in ``folder``."""
        stderr = folder / f"node-{'-'.join(map(str, args[:2])) or 'payer'}.err"
        with stderr.open("wb") as file:
            process = await trio.lowlevel.open_process(
                [sys.executable, __file__, dsn, str(log), *map(str, args)],
                stdout=subprocess.PIPE,
                stderr=file,
            )
        return cls(process, stderr)

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        try:
            while chunk := await self.process.stdout.receive_some():
                buffer += chunk
                *complete, rest = buffer.split(b"\n")
                buffer = rest
                self.lines.extend(line.decode() for line in complete)
                self._changed.set()
                self._changed = trio.Event()
        finally:
            self.ended = True
            self._changed.set()

    async def wait_for(self, predicate: Callable[[list[str]], bool]) -> None:
        """Until ``predicate(lines)`` holds; AssertionError if the process ends first."""
        while not predicate(self.lines):
            if self.ended:
                raise AssertionError(
                    f"node process {self.pid} ended; stderr:\n{self.stderr.read_text()}"
                )
            await self._changed.wait()

    def calls(self) -> list[list[str]]:
        """The CALL lines so far, split: ``[tool, key, tool_use_id]``."""
        return [line.split()[1:] for line in self.lines if line.startswith("CALL ")]

    async def kill(self) -> None:
        """SIGKILL (a stopped process too) and reap it."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    trio.run(main, sys.argv[1:])
