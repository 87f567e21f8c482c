"""examples/service end to end: the service runs as a real subprocess on 127.0.0.1 with
its offline model, and is driven over HTTP through satsuma's API.

One conversation's agent crashes mid-run while runs of it and of other conversations are
in flight: that run ends ``failed`` with a clear ``AgentCrashed`` error, every other run
completes (those queued behind the crash on the restarted agent), and the conversation
goes on without the turn that crashed. /healthz and /readyz answer before and after.
Then SIGTERM arrives while a slow run is in flight: it still gets its answer, and the
service exits 0.

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

import httpx2
import trio

APP = Path(__file__).resolve().parents[2] / "examples" / "service" / "app.py"
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)$")
CRASHY = "crashy"
CRASH_PROMPT = "question CRASH"
CRASH_ERROR = {
    "type": "AgentCrashed",
    "message": (
        f"Agent assistant (assistant/{CRASHY}) crashed: "
        "RuntimeError: injected fault: the prompt contains CRASH"
    ),
}


def runs_path(agent_id: str) -> str:
    return f"/v1/agents/assistant/{agent_id}/runs"


class ServiceLog:
    """The service's stdout, line by line, as it comes (and echoed to the test's own
    stdout, which pytest shows when the test fails). ``lines`` keeps every line read."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[str](math.inf)
        self.lines: list[str] = []

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        buffer = b""
        async with self._send:
            async for chunk in stream:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace")
                    sys.stdout.write(f"service| {text}\n")
                    self.lines.append(text)
                    self._send.send_nowait(text)

    async def wait_for(self, matches: Callable[[str], object]) -> str:
        """The next line that matches (lines before it are passed over)."""
        async for line in self._receive:
            if matches(line):
                return line
        raise AssertionError("the service's output ended before the line awaited")


def _model_line(prompt: str) -> Callable[[str], bool]:
    # app.py logs "model <- 'prompt'" as the model is called: the run is in flight.
    return lambda line: line == f"service: model <- {prompt!r}"


async def test_service_survives_a_crash_and_drains_on_sigterm() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("ANTHROPIC_")}
    command = [sys.executable, str(APP), "--port=0"]
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
                base_url=listening.group(1), timeout=30.0, trust_env=False
            ) as client:
                await _healthy(client)
                with trio.fail_after(60):
                    await _crash_one_of_many(client, log)
                    await _agent_is_back(client, log)
                with trio.fail_after(30):
                    await _sigterm_drains(client, log, process)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


async def _healthy(client: httpx2.AsyncClient) -> None:
    for path in ("/healthz", "/readyz"):
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text)
    assert (await client.get("/healthz")).json() == {"status": "ok"}


def _completed(response: httpx2.Response, agent_id: str, prompt: str) -> None:
    assert response.status_code == 200, (prompt, response.text)
    run = response.json()
    assert (run["agent_id"], run["prompt"]) == (agent_id, prompt), run
    assert (run["status"], run["output"], run["error"]) == (
        "completed",
        f"You said: {prompt}",
        None,
    ), run


async def _crash_one_of_many(client: httpx2.AsyncClient, log: ServiceLog) -> None:
    """16 runs (the server's cap on runs in flight for a client without a token).

    Three slow runs are first with their agents, one of them in conversation ``crashy``.
    Behind it the crash is queued in ``crashy`` (without waiting), then 6 quick runs
    behind the crash, and 6 quick runs in conversations of their own, all at once: the
    crash fails its own run only, and the runs queued behind it in its conversation are
    served by the restarted agent.
    """
    slow = {"slow-0": "SLOW question 0", "slow-1": "SLOW question 1", CRASHY: "SLOW first"}
    quick = [(CRASHY, f"question {number}") for number in range(6)]
    quick += [(f"other-{number}", f"other question {number}") for number in range(6)]
    responses: dict[tuple[str, str], httpx2.Response] = {}

    async def ask(agent_id: str, prompt: str) -> None:
        response = await client.post(runs_path(agent_id), json={"prompt": prompt})
        responses[agent_id, prompt] = response

    async with trio.open_nursery() as nursery:
        for agent_id, prompt in slow.items():
            nursery.start_soon(ask, agent_id, prompt)
            await log.wait_for(_model_line(prompt))
        started = await client.post(runs_path(CRASHY), json={"prompt": CRASH_PROMPT, "wait": False})
        assert started.status_code == 202, started.text
        assert started.json()["status"] == "queued", started.text  # behind "SLOW first"
        for agent_id, prompt in quick:
            nursery.start_soon(ask, agent_id, prompt)

    assert len(responses) == 15
    for (agent_id, prompt), response in responses.items():
        _completed(response, agent_id, prompt)
    # The crashed run, read by its id: it ended before the runs queued behind it ran.
    crashed = await client.get(f"/v1/runs/{started.json()['run_id']}")
    assert crashed.status_code == 200, crashed.text
    run = crashed.json()
    assert (run["agent_id"], run["prompt"]) == (CRASHY, CRASH_PROMPT), run
    assert (run["status"], run["output"], run["error"]) == ("failed", None, CRASH_ERROR), run
    # A run that failed waiting is still a run: 200, its status and error saying so.
    again = await client.post(runs_path("crashy-2"), json={"prompt": CRASH_PROMPT})
    assert again.status_code == 200, again.text
    assert (again.json()["status"], again.json()["error"]["type"]) == ("failed", "AgentCrashed")


async def _agent_is_back(client: httpx2.AsyncClient, log: ServiceLog) -> None:
    prompt = "are you back?"
    _completed(await client.post(runs_path(CRASHY), json={"prompt": prompt}), CRASHY, prompt)
    # Only the agents given the crash crashed, once each: each conversation's own
    # supervisor logs its crash.
    crashes = [line for line in log.lines if " crashed: " in line]
    assert crashes == [
        f"satsuma.supervisor: supervisor assistant/{agent_id}: child assistant/{agent_id} "
        "crashed: "
        "RuntimeError: injected fault: the prompt contains CRASH"
        for agent_id in (CRASHY, "crashy-2")
    ]
    # The restarted agent kept the conversation (the run before the crash, those after
    # it), but not the turn that crashed it: that prompt is not sent again.
    messages = (await client.get(f"/v1/agents/assistant/{CRASHY}/messages")).json()["messages"]
    said = [block["text"] for message in messages for block in message["content"]]
    asked = ["SLOW first", *(f"question {number}" for number in range(6)), prompt]
    assert {*asked, *(f"You said: {text}" for text in asked)} <= set(said), said
    assert not any("CRASH" in text for text in said), said
    await _healthy(client)


async def _sigterm_drains(
    client: httpx2.AsyncClient, log: ServiceLog, process: trio.Process
) -> None:
    prompt = "SLOW last words"
    responses: list[httpx2.Response] = []

    async def ask() -> None:
        responses.append(await client.post(runs_path("last"), json={"prompt": prompt}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await log.wait_for(_model_line(prompt))
        process.send_signal(signal.SIGTERM)
    [response] = responses
    _completed(response, "last", prompt)
    assert await process.wait() == 0
    await log.wait_for(lambda line: line == "service: stopped")
    assert "service: SIGTERM: draining" in log.lines
