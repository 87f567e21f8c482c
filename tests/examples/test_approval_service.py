"""examples/approval_service end to end: the service runs as a real subprocess on
127.0.0.1 with its offline model and a SQLite store in tmp_path, and is driven over HTTP.

A run pauses on two transfers over the limit (one under it is paid at once); the service
is stopped with SIGTERM and started again on the same store, and the calls are still
pending there; one is approved with an edit, the other denied, and the run completes. Two
approvals of one call at once pay once, and the second gets a 409. The ledger file the
transfer tool writes is how the test counts payments.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio

APP = Path(__file__).resolve().parents[2] / "examples" / "approval_service" / "app.py"
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)$")


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


@attrs.define(eq=False)
class Service:
    process: trio.Process
    log: ServiceLog
    client: httpx2.AsyncClient

    async def stop(self) -> None:
        """SIGTERM: the service stops by itself, exit status 0."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await self.process.wait() == 0
            await self.log.wait_for(lambda line: line == "approvals: stopped")


@asynccontextmanager
async def running_service(tmp_path: Path) -> AsyncIterator[Service]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("ANTHROPIC_")}
    command = [
        sys.executable,
        str(APP),
        "--port=0",
        f"--store={tmp_path / 'approvals.db'}",
        f"--ledger={tmp_path / 'ledger.txt'}",
    ]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    try:
        assert process.stdout is not None
        log = ServiceLog()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.read, process.stdout)
            # Start-up is mostly imports (the Anthropic SDK takes seconds): a loaded
            # machine can take a while.
            with trio.fail_after(60):
                listening = LISTENING.search(await log.wait_for(LISTENING.search))
            assert listening is not None
            async with httpx2.AsyncClient(
                base_url=listening.group(1), timeout=30.0, trust_env=False
            ) as client:
                yield Service(process, log, client)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


def payments(tmp_path: Path) -> list[str]:
    """The transfers made, from the ledger ("30 EUR to alice"), in order."""
    ledger = tmp_path / "ledger.txt"
    if not ledger.exists():
        return []
    return [line.split(" (")[0] for line in ledger.read_text().splitlines()]


def by_payee(calls: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {call["input"]["to"]: call for call in calls}


async def test_approvals_over_http_survive_a_restart_and_never_pay_twice(
    tmp_path: Path,
) -> None:
    async with running_service(tmp_path) as service:
        run_id, bob, carol = await _pause_a_run(service.client, tmp_path)
        # A decision the service holds while the run waits on another one.
        edit = {"input": {"to": "bob", "amount": 50}, "by": "ann"}
        response = await service.client.post(f"/approvals/{run_id}/{bob}/approve", json=edit)
        assert response.status_code == 202, response.text
        assert response.json() == {
            "run_id": run_id,
            "call_id": bob,
            "decision": "approved",
            "decided_by": "ann",
            "status": "awaiting_approval",
            "undecided": [carol],
        }
        listed = by_payee((await service.client.get("/approvals")).json()["approvals"])
        assert (listed["bob"]["decision"], listed["bob"]["decided_by"]) == ("approved", "ann")
        assert (listed["carol"]["decision"], listed["carol"]["decided_by"]) == (None, None)
        await service.stop()
    assert payments(tmp_path) == ["30 EUR to alice"]

    async with running_service(tmp_path) as service:
        client = service.client
        # The pending calls are in the store; the decision held in memory is not (nothing
        # ran on it): both calls wait for a decision again.
        listed = by_payee((await client.get("/approvals")).json()["approvals"])
        assert sorted(listed) == ["bob", "carol"]
        assert [call["decision"] for call in listed.values()] == [None, None]
        assert [call["decided_by"] for call in listed.values()] == [None, None]
        assert {call["call_id"] for call in listed.values()} == {bob, carol}
        run = (await client.get(f"/runs/{run_id}")).json()
        assert run["status"] == "awaiting_approval"
        assert {call["call_id"] for call in run["pending"]} == {bob, carol}

        await _refusals(client, run_id, bob, carol)

        response = await client.post(f"/approvals/{run_id}/{bob}/approve", json=edit)
        assert response.status_code == 202, response.text
        again = await client.post(f"/approvals/{run_id}/{bob}/deny", json={"reason": "no"})
        assert again.status_code == 409, again.text
        assert again.json() == {"error": f"call {bob} of run {run_id} was approved by ann already"}
        assert payments(tmp_path) == ["30 EUR to alice"]

        response = await client.post(
            f"/approvals/{run_id}/{carol}/deny", json={"reason": "not this month"}
        )
        assert response.status_code == 200, response.text
        output = "Done: sent 30 EUR to alice; sent 50 EUR to bob; Error: Denied: not this month"
        assert response.json() == {
            "run_id": run_id,
            "agent_id": "acme",
            "status": "completed",
            "output": output,
        }
        assert payments(tmp_path) == ["30 EUR to alice", "50 EUR to bob"]
        stored = await client.get(f"/runs/{run_id}")
        assert stored.json() == response.json()
        late = await client.post(f"/approvals/{run_id}/{carol}/approve")
        assert late.status_code == 409, late.text
        assert late.json() == {"error": f"run {run_id} is not awaiting approval (it is completed)"}

        await _two_people_approve_at_once(client, tmp_path)
        assert (await client.get("/approvals")).json() == {"approvals": []}
        await service.stop()
    assert payments(tmp_path) == ["30 EUR to alice", "50 EUR to bob", "700 EUR to erin"]


async def _pause_a_run(client: httpx2.AsyncClient, tmp_path: Path) -> tuple[str, str, str]:
    """A run with a transfer under the limit (paid at once) and two over it (pending).
    Returns the run id and the ids of the calls paying bob and carol."""
    prompt = "pay alice 30, pay bob 500, pay carol 900"
    response = await client.post("/runs", json={"agent_id": "acme", "prompt": prompt})
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    assert (body["agent_id"], body["status"]) == ("acme", "awaiting_approval")
    pending = by_payee(body["pending"])
    assert sorted(pending) == ["bob", "carol"]
    for payee, amount in [("bob", 500), ("carol", 900)]:
        assert pending[payee] == {
            "run_id": run_id,
            "agent_id": "acme",
            "call_id": pending[payee]["call_id"],
            "tool": "transfer",
            "input": {"to": payee, "amount": amount},
            "reason": f"{amount} EUR is over the 100 EUR limit",
        }
    assert payments(tmp_path) == ["30 EUR to alice"]

    # A new run on the agent would go past the paused one (its calls denied for good).
    refused = await client.post("/runs", json={"agent_id": "acme", "prompt": "pay dave 5"})
    assert refused.status_code == 409, refused.text
    assert f"agent acme has run {run_id} awaiting approval" in refused.json()["error"]

    listed = by_payee((await client.get("/approvals")).json()["approvals"])
    assert listed == {
        payee: {**call, "prompt": prompt, "decision": None, "decided_by": None}
        for payee, call in pending.items()
    }
    return run_id, pending["bob"]["call_id"], pending["carol"]["call_id"]


async def _refusals(client: httpx2.AsyncClient, run_id: str, bob: str, carol: str) -> None:
    """Unknown runs, calls and paths are 404s; bodies that cannot be a decision, 400s
    that name the problem; and none of them decides anything."""

    async def error(method: str, path: str, status: int, **kwargs: Any) -> str:
        response = await client.request(method, path, **kwargs)
        assert response.status_code == status, (path, response.text)
        body = response.json()
        assert list(body) == ["error"], body
        assert isinstance(body["error"], str)
        return body["error"]

    assert await error("POST", "/approvals/run_nope/x/approve", 404) == "no run run_nope"
    problem = await error("POST", f"/approvals/{run_id}/toolu_nope/deny", 404, json={})
    assert problem.startswith(f"run {run_id} has no pending call toolu_nope (it waits on: ")
    assert bob in problem and carol in problem
    assert await error("GET", "/runs/run_nope", 404) == "no run run_nope"
    assert await error("GET", "/nothing/here", 404) == "no such path: /nothing/here"
    assert await error("GET", f"/approvals/{run_id}/{bob}/approve", 405) == (
        f"/approvals/{run_id}/{bob}/approve takes POST only"
    )
    problem = await error("POST", f"/approvals/{run_id}/{bob}/approve", 400, content=b"{nope")
    assert problem.startswith("the body is not valid JSON: ")
    problem = await error(
        "POST",
        f"/approvals/{run_id}/{bob}/approve",
        400,
        json={"input": {"to": "bob", "amount": "lots"}},
    )
    assert problem == (
        f"run {run_id}: the edited input of call {bob!r} (transfer): expected amount to be an "
        "integer, got: string"
    )
    # Checked as resume checks it: a value JSON cannot carry (Python's json reads NaN).
    problem = await error(
        "POST",
        f"/approvals/{run_id}/{bob}/approve",
        400,
        content=b'{"input": {"to": "bob", "amount": 5, "memo": NaN}}',
    )
    assert problem == (
        f"run {run_id}: the edited input of call {bob!r} (transfer): expected memo to be a "
        "finite number, got: NaN"
    )
    problem = await error(
        "POST", f"/approvals/{run_id}/{bob}/approve", 400, json={"input": ["bob", 50]}
    )
    assert problem.startswith("input must be a JSON object")
    problem = await error("POST", f"/approvals/{run_id}/{carol}/deny", 400, json={})
    assert problem == 'a denial needs a reason the model reads: {"reason": "..."}'
    problem = await error(
        "POST", f"/approvals/{run_id}/{carol}/deny", 400, json={"reason": "no", "by": 7}
    )
    assert problem == "by must be a non-empty string (who decides), got: 7"
    problem = await error("POST", "/runs", 400, json={"agent_id": "a b", "prompt": "hi"})
    assert problem.startswith("agent_id must match ")
    # None of these decided anything.
    listed = (await client.get("/approvals")).json()["approvals"]
    assert [call["decision"] for call in listed] == [None, None]


async def _two_people_approve_at_once(client: httpx2.AsyncClient, tmp_path: Path) -> None:
    response = await client.post("/runs", json={"agent_id": "globex", "prompt": "pay erin 700"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "awaiting_approval"
    [call] = body["pending"]
    path = f"/approvals/{body['run_id']}/{call['call_id']}/approve"
    responses: list[httpx2.Response] = []

    async def approve() -> None:
        responses.append(await client.post(path))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(approve)
        nursery.start_soon(approve)
    first, second = sorted(responses, key=lambda response: response.status_code)
    assert first.status_code == 200, first.text
    assert first.json()["output"] == "Done: sent 700 EUR to erin"
    assert second.status_code == 409, second.text
    assert body["run_id"] in second.json()["error"]
    assert payments(tmp_path).count("700 EUR to erin") == 1
