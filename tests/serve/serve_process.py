"""Subprocesses of ``satsuma serve`` for the attack tests: a banker agent module written
into the test's folder, served on a SQLite file, its model a MessagesServer of the test
(the real Anthropic SDK, ANTHROPIC_BASE_URL), and reading a run's events over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from satsuma.testing import MessagesServer

AGENTS = '''
import trio

import satsuma


@satsuma.tool
async def hang(label: str) -> str:
    """Wait until the process ends.

    Args:
        label: A label.
    """
    await trio.sleep_forever()
    return label


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much.
    """
    return f"sent {amount} to {to}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [hang, transfer]
'''


def _environment(server: MessagesServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.base_url}


@asynccontextmanager
async def serving(where: Path, server: MessagesServer) -> AsyncIterator[tuple[trio.Process, str]]:
    """``satsuma serve banker_agents:Banker --store agents.db`` in ``where`` (AGENTS
    written there first): the process and its URL; killed if running when the block ends."""
    (where / "banker_agents.py").write_text(AGENTS)
    process = await trio.lowlevel.open_process(
        [
            sys.executable, "-m", "satsuma.cli", "serve", "banker_agents:Banker",
            "--port", "0", "--store", "agents.db",
        ],
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_environment(server),
    )  # fmt: skip
    assert process.stdout is not None
    try:
        first = b""
        while not first.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, "satsuma serve ended before it listened"
            first += chunk
        yield process, first.decode().strip().removeprefix("listening on ")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def read_events(
    client: httpx.AsyncClient, run_id: str, last: int | None
) -> list[dict[str, Any]]:
    """The run's events (each with its ``id``), from after ``last``, to the stream's end."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    found: list[dict[str, Any]] = []
    async with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as answer:
        assert answer.status_code == 200
        event_id = None
        async for line in answer.aiter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                found.append({"id": event_id, **json.loads(line[6:])})
    return found


async def wait_for_event(url: str, run_id: str, kind: str) -> None:
    """Read the run's event stream until an event of type ``kind``, then go away (a raw
    socket: httpx's stream, left mid-way, leaves generators for the collector)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    marker = f'"type": "{kind}"'.encode()
    received = b""
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        request = f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\n\r\n"
        await stream.send_all(request.encode())
        while marker not in received:
            chunk = await stream.receive_some()
            assert chunk, f"run {run_id}'s events ended before a {kind}"
            received += chunk
