"""Attacking a ``satsuma serve`` process by killing it: SIGKILL mid-run (one run in
flight, another awaiting approval), then a new process on the same SQLite file. Real
subprocesses, real HTTP, the real Anthropic SDK against a loopback MessagesServer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from satsuma.testing import MessagesServer, Reply

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
    """``satsuma serve banker_agents:Banker --store agents.db`` in ``where``: the process
    and its URL; killed (SIGKILL) if still running when the block ends."""
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


async def _events(client: httpx.AsyncClient, run_id: str, last: int | None) -> list[dict[str, Any]]:
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


async def test_a_killed_server_restarts_on_its_store(tmp_path: Path) -> None:
    (tmp_path / "banker_agents.py").write_text(AGENTS)
    script = [
        Reply(tool_calls=[("hang", {"label": "a"})]),
        Reply(tool_calls=[("transfer", {"to": "bob", "amount": 10})]),
        "Sent 10 to bob.",
        "Back again.",
    ]
    async with MessagesServer(script) as model:
        async with serving(tmp_path, model) as (process, url):
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                started = await client.post(
                    "/v1/agents/banker/hanging/runs", json={"prompt": "hang", "wait": False}
                )
                hanging = started.json()["run_id"]
                paused = (
                    await client.post("/v1/agents/banker/paying/runs", json={"prompt": "pay"})
                ).json()
                assert paused["status"] == "awaiting_approval", paused
                seen = await _events(client, paused["run_id"], None)
                assert [e["id"] for e in seen] == [1, 2, 3, 4, 5]
                assert (await client.get(f"/v1/runs/{hanging}")).json()["status"] == "running"
            process.kill()  # SIGKILL: nothing of the process's own runs to the end
            assert await process.wait() == -signal.SIGKILL
        async with (
            serving(tmp_path, model) as (process, url),
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            # The killed run is no longer said to be running: it was interrupted.
            killed = (await client.get(f"/v1/runs/{hanging}")).json()
            assert killed["status"] == "interrupted", killed
            assert await _events(client, hanging, None) == []  # it has no end to show

            # The pending approval outlived the kill; deciding it resumes the run.
            (waiting,) = (await client.get("/v1/approvals")).json()["approvals"]
            (call,) = paused["pending"]
            assert (waiting["run_id"], waiting["call_id"]) == (
                paused["run_id"],
                call["call_id"],
            )
            decided = await client.post(
                f"/v1/approvals/{paused['run_id']}/{call['call_id']}",
                json={"decision": "approve"},
            )
            assert decided.status_code == 200, decided.text
            assert decided.json()["status"] == "completed"
            assert decided.json()["output"] == "Sent 10 to bob."
            assert (await client.get("/v1/approvals")).json()["approvals"] == []

            # A client resuming with its Last-Event-ID of the killed process is told
            # what it cannot have (EventsLost), then gets every new event: no id repeats.
            resumed = await _events(client, paused["run_id"], seen[-1]["id"])
            lost, *after = resumed
            assert lost["type"] == "EventsLost" and lost["first_id"] == 6
            assert lost["last_id"] == lost["id"] == after[0]["id"] - 1
            ids = [e["id"] for e in after]
            assert ids == list(range(ids[0], ids[0] + len(ids)))
            assert not set(ids) & {e["id"] for e in seen}
            assert after[0]["type"] == "RunStart" and after[-1]["type"] == "RunEnd"
            assert after[-1]["result"]["status"] == "completed"
            # From the start, the same: the gap first, then the same new events.
            again = await _events(client, paused["run_id"], None)
            assert again[0]["type"] == "EventsLost" and again[0]["first_id"] == 1
            assert again[1:] == after

            # The conversation whose run was killed takes a new run.
            answer = await client.post("/v1/agents/banker/hanging/runs", json={"prompt": "hi"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
            assert answer.json()["output"] == "Back again."
