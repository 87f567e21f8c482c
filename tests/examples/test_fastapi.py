"""examples/fastapi end to end: the app runs on real uvicorn in a subprocess, with its
offline model and a SQLite file, and is driven with httpx from an asyncio client.

Concurrent requests over several conversations all get their answers; a stream arrives
as server-sent events ending with RunEnd; a client that disconnects mid-stream cancels
its run, which the store records ``cancelled``, and the conversation goes on; SIGTERM
shuts the service down cleanly (its shutdown complete, no traceback, no warning).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "fastapi"
BOUND = 60  # every wait of the test, in seconds: a hang fails it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-W", "error", str(APP_DIR / "app.py"), "--port", str(port),
         "--database", str(tmp_path / "conversations.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(BOUND)
        assert process.stdout is not None
        process.stdout.close()


async def wait_until_up(client: httpx.AsyncClient, process: subprocess.Popen[str]) -> None:
    while True:
        assert process.poll() is None, "the service exited before it answered"
        try:
            if (await client.get("/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.05)


async def sse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of a server-sent event stream."""
    name = ""
    async for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


async def runs_of(client: httpx.AsyncClient, conversation: str) -> list[str]:
    answer = await client.get(f"/conversations/{conversation}/runs")
    answer.raise_for_status()
    return [run["status"] for run in answer.json()]


def test_the_fastapi_example_on_uvicorn(service: tuple[subprocess.Popen[str], str]) -> None:
    process, url = service

    async def drive() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:
            await wait_until_up(client, process)

            # Concurrent requests, several per conversation (each conversation's runs
            # queue on its agent, in order).
            prompts = [(f"c{i % 4}", f"Where is order {i}?") for i in range(12)]
            answers = await asyncio.gather(
                *(client.post("/ask", json={"conversation": c, "prompt": p}) for c, p in prompts)
            )
            for (_, prompt), answer in zip(prompts, answers, strict=True):
                assert answer.status_code == 200, answer.text
                order = prompt.split()[-1].rstrip("?")
                assert answer.json()["output"] == f"Here is what I found: order {order}: shipped."
            assert (await client.get("/health")).json()["active"] == 4

            # A stream, as server-sent events.
            body = {"conversation": "s1", "prompt": "Where is order 5?"}
            async with client.stream("POST", "/stream", json=body) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                events = [pair async for pair in sse(response.aiter_lines())]
            assert events[0][0] == "RunStart"
            assert events[-1][0] == "RunEnd"
            assert events[-1][1]["result"]["status"] == "completed"

            # A client that leaves mid-stream: its run is cancelled and recorded so.
            body = {"conversation": "d1", "prompt": "SLOW: where is order 9?"}
            async with client.stream("POST", "/stream", json=body) as response:
                async for name, _ in sse(response.aiter_lines()):
                    if name == "ToolCallStart":
                        break  # leaving the block closes the connection
            # Another process's state, seen only by asking it again (bounded by BOUND).
            while await runs_of(client, "d1") != ["cancelled"]:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            again = await client.post("/ask", json={"conversation": "d1", "prompt": "Hello"})
            assert again.json()["output"] == "You said: Hello"

            # A bad conversation id is the app's 400, not a crash.
            bad = await client.post("/ask", json={"conversation": "a b", "prompt": "x"})
            assert bad.status_code == 400

    asyncio.run(asyncio.wait_for(drive(), BOUND))

    process.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then raises the signal again with its default
    # handler restored, so that the process ends as killed by it (uvicorn's server.py).
    assert process.wait(BOUND) in (0, -signal.SIGTERM)
    assert process.stdout is not None
    log = process.stdout.read()
    assert "Traceback" not in log, log
    assert "Warning" not in log, log
    assert "Application shutdown complete" in log, log
