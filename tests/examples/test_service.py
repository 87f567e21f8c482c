"""examples/service end to end: the service runs as a real subprocess on 127.0.0.1 with
its offline model, and is driven over HTTP.

One agent crashes mid-request while other requests are in flight: that request gets a
clear 503, every other one succeeds, and the agent serves the next request. Then SIGTERM
arrives while a slow request is in flight: it still gets its answer, and the service
exits 0.

The service's log (its stdout) is how the test knows what happens inside: it waits for
lines, never for time.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import trio

APP = Path(__file__).resolve().parents[2] / "examples" / "service" / "app.py"
POOL_SIZE = 4
GRACEFUL_TIMEOUT = 10.0
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)$")
CRASHED = re.compile(r"agent (agent-\d+) crashed: RuntimeError: .+; it is being restarted")


class ServiceLog:
    """The service's stdout, line by line, as it comes (and echoed to the test's own
    stdout, which pytest shows when the test fails)."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[str](math.inf)

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        buffer = b""
        async with self._send:
            async for chunk in stream:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace")
                    sys.stdout.write(f"service| {text}\n")
                    self._send.send_nowait(text)

    async def wait_for(self, matches: Callable[[str], object]) -> str:
        """The next line that matches (lines before it are passed over)."""
        async for line in self._receive:
            if matches(line):
                return line
        raise AssertionError("the service's output ended before the line awaited")


def _ask_line(prompt: str) -> Callable[[str], bool]:
    # app.py logs "ask -> agent-N: 'prompt'" once an agent has taken the request.
    return lambda line: line.startswith("service: ask -> ") and line.endswith(f": {prompt!r}")


async def test_service_survives_a_crash_and_drains_on_sigterm() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("ANTHROPIC_")}
    command = [
        sys.executable,
        str(APP),
        "--port=0",
        f"--pool-size={POOL_SIZE}",
        f"--graceful-timeout={GRACEFUL_TIMEOUT:g}",
    ]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    try:
        assert process.stdout is not None
        log = ServiceLog()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.read, process.stdout)
            # Start-up is mostly imports (the Anthropic SDK takes seconds): a loaded machine
            # can take a while.
            with trio.fail_after(60):
                listening = LISTENING.search(await log.wait_for(LISTENING.search))
            assert listening is not None
            async with httpx2.AsyncClient(
                base_url=listening.group(1), timeout=10.0, trust_env=False
            ) as client:
                with trio.fail_after(30):
                    crashed = await _crash_one_of_many(client, log)
                    await _agent_is_back(client, crashed)
                with trio.fail_after(GRACEFUL_TIMEOUT + 10):
                    await _sigterm_drains(client, log, process)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


async def _crash_one_of_many(client: httpx2.AsyncClient, log: ServiceLog) -> str:
    """20 requests: 3 slow ones, then, once those are with their agents, 17 more (one of
    them the crash) for the last agent. Returns the id of the agent that crashed."""
    slow = [f"SLOW question {number}" for number in range(POOL_SIZE - 1)]
    quick = [f"question {number}" for number in range(16)]
    crash = "question CRASH"
    responses: dict[str, httpx2.Response] = {}

    async def ask(prompt: str) -> None:
        responses[prompt] = await client.post("/ask", json={"prompt": prompt})

    async with trio.open_nursery() as nursery:
        for prompt in slow:
            nursery.start_soon(ask, prompt)
            await log.wait_for(_ask_line(prompt))
        for prompt in [*quick[:8], crash, *quick[8:]]:
            nursery.start_soon(ask, prompt)

    assert len(responses) == 20
    failed = responses.pop(crash)
    assert failed.status_code == 503, failed.text
    error = failed.json()["error"]
    match = CRASHED.fullmatch(error)
    assert match is not None, error
    assert failed.json() == {"agent": match.group(1), "error": error}
    for prompt, response in responses.items():
        assert response.status_code == 200, (prompt, response.text)
        body = response.json()
        assert body == {
            "agent": body["agent"],
            "output": f"You said: {prompt}",
            "status": "completed",
        }
    return match.group(1)


async def _agent_is_back(client: httpx2.AsyncClient, crashed: str) -> None:
    response = await client.post("/ask", json={"prompt": "are you back?", "agent": crashed})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "agent": crashed,
        "output": "You said: are you back?",
        "status": "completed",
    }
    health = (await client.get("/health")).json()
    assert health["status"] == "ok"
    agents: dict[str, Any] = {agent["id"]: agent for agent in health["agents"]}
    assert sorted(agents) == [f"agent-{number}" for number in range(POOL_SIZE)]
    for agent_id, agent in agents.items():
        assert agent["state"] == "running"
        expected = 1 if agent_id == crashed else 0
        assert (agent["crashes"], agent["restarts"]) == (expected, expected), agent


async def _sigterm_drains(
    client: httpx2.AsyncClient, log: ServiceLog, process: trio.Process
) -> None:
    prompt = "SLOW last words"
    responses: list[httpx2.Response] = []

    async def ask() -> None:
        responses.append(await client.post("/ask", json={"prompt": prompt}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await log.wait_for(_ask_line(prompt))
        process.send_signal(signal.SIGTERM)
    [response] = responses
    assert response.status_code == 200, response.text
    assert response.json()["output"] == f"You said: {prompt}"
    assert await process.wait() == 0
    await log.wait_for(lambda line: line == "service: stopped")
