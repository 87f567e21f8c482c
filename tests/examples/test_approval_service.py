"""examples/approval_service end to end: the service runs as a real subprocess on
127.0.0.1 with its offline model and a SQLite store in tmp_path, and is driven over HTTP
(satsuma's API, /v1/).

A run pauses on two transfers over the limit (one under it is paid at once); one is
approved with an edit, and the service is stopped with SIGTERM and started again on the
same store, now with a token file: the other call is still pending there, the decision
taken before the restart stands, and a second decision on it is a 409. The other call is
denied by a person's token, and the run completes. Two approvals of one call at once pay
once, and the second gets a 409. The ledger file the transfer tool writes is how the
test counts payments; the store, read after the service stopped, says who decided what.
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

from satsuma.serve import create_token
from satsuma.store import SQLiteStore

APP = Path(__file__).resolve().parents[2] / "examples" / "approval_service" / "app.py"
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)$")
RUNS = "/v1/agents/payments/{}/runs"


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
        """SIGTERM: the service drains and stops by itself, exit status 0."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await self.process.wait() == 0
            await self.log.wait_for(lambda line: line == "approvals: stopped")


@asynccontextmanager
async def running_service(tmp_path: Path, *options: str) -> AsyncIterator[Service]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("ANTHROPIC_")}
    env["LEDGER"] = str(tmp_path / "ledger.txt")
    command = [sys.executable, str(APP), "--port=0", f"--store={tmp_path / 'approvals.db'}"]
    process = await trio.lowlevel.open_process(
        [*command, *options], stdout=subprocess.PIPE, env=env
    )
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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_approvals_over_http_survive_a_restart_and_never_pay_twice(
    tmp_path: Path,
) -> None:
    edit = {"decision": "approve", "input": {"to": "bob", "amount": 50}}
    async with running_service(tmp_path) as service:
        client = service.client
        run_id, bob, carol = await _pause_a_run(client, tmp_path)
        # A decision while the run waits on another one: kept in the store at once.
        response = await client.post(f"/v1/approvals/{run_id}/{bob}", json=edit)
        assert response.status_code == 202, response.text
        carol_waits = (await client.get("/v1/approvals")).json()["approvals"]
        assert [call["call_id"] for call in carol_waits] == [carol]
        assert response.json() == {
            "run_id": run_id,
            "call_id": bob,
            "status": "awaiting_approval",
            "pending": carol_waits,
        }
        await _a_new_run_goes_past_a_paused_one(client, tmp_path)
        await service.stop()
    assert payments(tmp_path) == ["30 EUR to alice"]

    # Started again on the same store, with tokens: the shop's client may run payments
    # and read them, and only ann and bo may decide.
    tokens = tmp_path / "tokens.txt"
    shop = create_token(tokens, name="shop", scopes=["run", "read"])
    ann = create_token(tokens, name="ann", scopes=["approve", "read"])
    bo = create_token(tokens, name="bo", scopes=["approve", "read"])
    async with running_service(tmp_path, f"--token-file={tokens}") as service:
        client = service.client
        # The pending call is in the store, and so is the decision taken on the other
        # one before the restart: only carol's call waits.
        listed = (await client.get("/v1/approvals", headers=bearer(shop))).json()["approvals"]
        assert listed == carol_waits
        run = (await client.get(f"/v1/runs/{run_id}", headers=bearer(shop))).json()
        assert run["status"] == "awaiting_approval"
        assert carol in {call["call_id"] for call in run["pending"]}

        await _refusals(client, run_id, carol, shop=shop, ann=ann)

        again = await client.post(
            f"/v1/approvals/{run_id}/{bob}",
            json={"decision": "deny", "reason": "no"},
            headers=bearer(ann),
        )
        assert again.status_code == 409, again.text
        assert again.json()["error"] == {
            "type": "already_decided",
            "message": f"call {bob} of run {run_id} was decided already",
        }
        assert payments(tmp_path) == ["30 EUR to alice"]

        response = await client.post(
            f"/v1/approvals/{run_id}/{carol}",
            json={"decision": "deny", "reason": "not this month"},
            headers=bearer(ann),
        )
        assert response.status_code == 200, response.text
        body = response.json()
        output = "Done: sent 30 EUR to alice; sent 50 EUR to bob; Error: Denied: not this month"
        assert (body["run_id"], body["agent_id"]) == (run_id, "acme")
        assert (body["status"], body["output"], body["pending"]) == ("completed", output, [])
        assert payments(tmp_path) == ["30 EUR to alice", "50 EUR to bob"]
        stored = await client.get(f"/v1/runs/{run_id}", headers=bearer(shop))
        assert stored.json() == body
        late = await client.post(
            f"/v1/approvals/{run_id}/{carol}", json={"decision": "approve"}, headers=bearer(ann)
        )
        assert late.status_code == 409, late.text
        assert late.json()["error"]["message"] == (
            f"run {run_id} is not awaiting approval (it is completed)"
        )

        await _two_people_approve_at_once(client, tmp_path, shop=shop, people=[ann, bo])
        assert (await client.get("/v1/approvals", headers=bearer(ann))).json() == {"approvals": []}
        await service.stop()
    assert payments(tmp_path) == ["30 EUR to alice", "50 EUR to bob", "700 EUR to erin"]

    # Who decided what, as the store keeps it for an audit: the token's name.
    async with SQLiteStore(tmp_path / "approvals.db") as store:
        decided = {record.tool_use_id: record.decision for record in await store.approvals(run_id)}
    assert decided[bob] is not None and decided[carol] is not None
    assert (decided[bob].verdict, decided[bob].input) == ("edited", {"to": "bob", "amount": 50})
    assert decided[bob].decided_by is None  # no tokens then: nobody to name
    assert (decided[carol].verdict, decided[carol].reason) == ("denied", "not this month")
    assert decided[carol].decided_by == "ann"


async def _pause_a_run(client: httpx2.AsyncClient, tmp_path: Path) -> tuple[str, str, str]:
    """A run with a transfer under the limit (paid at once) and two over it (pending).
    Returns the run id and the ids of the calls paying bob and carol."""
    prompt = "pay alice 30, pay bob 500, pay carol 900"
    response = await client.post(RUNS.format("acme"), json={"prompt": prompt})
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    assert (body["agent"], body["agent_id"]) == ("payments", "acme")
    assert (body["status"], body["prompt"]) == ("awaiting_approval", prompt)
    pending = by_payee(body["pending"])
    assert sorted(pending) == ["bob", "carol"]
    for payee, amount in [("bob", 500), ("carol", 900)]:
        assert pending[payee] == {
            "run_id": run_id,
            "agent": "payments",
            "agent_id": "acme",
            "call_id": pending[payee]["call_id"],
            "tool": "transfer",
            "input": {"to": payee, "amount": amount},
            "reason": f"{amount} EUR is over the 100 EUR limit",
        }
    assert payments(tmp_path) == ["30 EUR to alice"]
    listed = (await client.get("/v1/approvals")).json()["approvals"]
    assert by_payee(listed) == pending
    return run_id, pending["bob"]["call_id"], pending["carol"]["call_id"]


async def _a_new_run_goes_past_a_paused_one(client: httpx2.AsyncClient, tmp_path: Path) -> None:
    """A new run of a conversation whose run is paused goes past it, as in a program:
    the paused run ends cancelled, its transfer is never made, and it waits no more."""
    paused = (await client.post(RUNS.format("initech"), json={"prompt": "pay frank 400"})).json()
    assert paused["status"] == "awaiting_approval"
    [frank] = paused["pending"]
    response = await client.post(RUNS.format("initech"), json={"prompt": "balance"})
    assert response.status_code == 200, response.text
    assert response.json()["output"] == "Done: the balance is 9970 EUR"
    gone = (await client.get(f"/v1/runs/{paused['run_id']}")).json()
    assert (gone["status"], gone["pending"]) == ("cancelled", [])
    listed = (await client.get("/v1/approvals")).json()["approvals"]
    assert frank["call_id"] not in {call["call_id"] for call in listed}
    late = await client.post(
        f"/v1/approvals/{paused['run_id']}/{frank['call_id']}", json={"decision": "approve"}
    )
    assert late.status_code == 409, late.text
    assert "frank" not in " ".join(payments(tmp_path))


async def _refusals(
    client: httpx2.AsyncClient, run_id: str, carol: str, *, shop: str, ann: str
) -> None:
    """Unknown runs, calls and paths, bodies that cannot be a decision, and requests
    without the right token are refused with an error that names the problem; none of
    them decides anything."""

    async def error(
        method: str, path: str, status: int, kind: str, token: str | None = ann, **kwargs: Any
    ) -> str:
        headers = bearer(token) if token is not None else {}
        response = await client.request(method, path, headers=headers, **kwargs)
        assert response.status_code == status, (path, response.text)
        body = response.json()
        assert list(body) == ["error"], body
        assert body["error"]["type"] == kind, body
        assert isinstance(body["error"]["message"], str)
        return str(body["error"]["message"])

    decide = f"/v1/approvals/{run_id}/{carol}"
    approve = {"decision": "approve"}
    assert await error("POST", decide, 401, "unauthorized", None, json=approve) == (
        "a bearer token is required: Authorization: Bearer TOKEN"
    )
    # The shop's own client runs payments, and cannot approve them.
    assert await error("POST", decide, 403, "forbidden", shop, json=approve) == (
        "token 'shop' lacks the scope 'approve'"
    )
    problem = await error("POST", "/v1/approvals/run_nope/x", 404, "not_found", json=approve)
    assert problem == "no run 'run_nope'"
    problem = await error(
        "POST", f"/v1/approvals/{run_id}/toolu_nope", 400, "bad_decision", json=approve
    )
    assert problem == f"run {run_id} has no call 'toolu_nope' waiting for a decision"
    assert await error("GET", "/v1/runs/run_nope", 404, "not_found") == "no run 'run_nope'"
    await error("GET", "/nothing/here", 404, "not_found")
    assert await error("GET", decide, 405, "method_not_allowed") == (
        f"{decide} answers POST, not GET"
    )
    problem = await error("POST", decide, 400, "bad_request", content=b"{nope")
    assert problem == "the body is not valid JSON"
    problem = await error(
        "POST", decide, 400, "bad_decision", json={**approve, "input": {"to": "x", "amount": "y"}}
    )
    assert problem == (
        f"run {run_id}: the edited input of call {carol!r} (transfer): expected amount to be "
        "an integer, got: string"
    )
    # Checked as resume checks it: a value JSON cannot carry (Python's json reads NaN).
    problem = await error(
        "POST",
        decide,
        400,
        "bad_decision",
        content=b'{"decision": "approve", "input": {"to": "c", "amount": 5, "memo": NaN}}',
    )
    assert problem == (
        f"run {run_id}: the edited input of call {carol!r} (transfer): expected memo to be a "
        "finite number, got: NaN"
    )
    problem = await error("POST", decide, 400, "bad_request", json={**approve, "input": [1]})
    assert problem == "field 'input' must be an object, got: an array"
    problem = await error("POST", decide, 400, "bad_request", json={"decision": "maybe"})
    assert problem == "field 'decision' must be 'approve' or 'deny', got: 'maybe'"
    problem = await error("POST", decide, 400, "bad_request", json={**approve, "reason": "ok"})
    assert problem == "field 'reason' goes with a denial only"
    # Who decides is the token's name, never what the body claims.
    problem = await error("POST", decide, 400, "bad_request", json={**approve, "by": "boss"})
    assert problem == "unknown field 'by'; expected: decision, input, reason"
    problem = await error(
        "POST", RUNS.format("a/b"), 400, "bad_request", shop, json={"prompt": "x"}
    )
    assert problem == "an agent_id may not contain '/'"
    # None of these decided anything.
    listed = (await client.get("/v1/approvals", headers=bearer(ann))).json()["approvals"]
    assert [call["call_id"] for call in listed] == [carol]


async def _two_people_approve_at_once(
    client: httpx2.AsyncClient, tmp_path: Path, *, shop: str, people: list[str]
) -> None:
    response = await client.post(
        RUNS.format("globex"), json={"prompt": "pay erin 700"}, headers=bearer(shop)
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "awaiting_approval"
    [call] = body["pending"]
    path = f"/v1/approvals/{body['run_id']}/{call['call_id']}"
    responses: list[httpx2.Response] = []

    async def approve(token: str) -> None:
        responses.append(
            await client.post(path, json={"decision": "approve"}, headers=bearer(token))
        )

    async with trio.open_nursery() as nursery:
        for token in people:
            nursery.start_soon(approve, token)
    first, second = sorted(responses, key=lambda response: response.status_code)
    assert first.status_code == 200, first.text
    assert first.json()["output"] == "Done: sent 700 EUR to erin"
    assert second.status_code == 409, second.text
    assert second.json()["error"]["type"] == "already_decided"
    assert body["run_id"] in second.json()["error"]["message"]
    assert payments(tmp_path).count("700 EUR to erin") == 1
