"""Attacking a ``satsuma serve`` process by killing it: SIGKILL mid-run (one run in
flight, another awaiting approval), then a new process on the same SQLite file. Real
subprocesses, real HTTP, the real Anthropic SDK against a loopback MessagesServer."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
from serve_process import read_events, serving

from satsuma.testing import MessagesServer, Reply


async def test_a_killed_server_restarts_on_its_store(tmp_path: Path) -> None:
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
                seen = await read_events(client, paused["run_id"], None)
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
            assert await read_events(client, hanging, None) == []  # it has no end to show

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
            resumed = await read_events(client, paused["run_id"], seen[-1]["id"])
            lost, *after = resumed
            assert lost["type"] == "EventsLost" and lost["first_id"] == 6
            assert lost["last_id"] == lost["id"] == after[0]["id"] - 1
            ids = [e["id"] for e in after]
            assert ids == list(range(ids[0], ids[0] + len(ids)))
            assert not set(ids) & {e["id"] for e in seen}
            assert after[0]["type"] == "RunStart" and after[-1]["type"] == "RunEnd"
            assert after[-1]["result"]["status"] == "completed"
            # From the start, the same: the gap first, then the same new events.
            again = await read_events(client, paused["run_id"], None)
            assert again[0]["type"] == "EventsLost" and again[0]["first_id"] == 1
            assert again[1:] == after

            # The conversation whose run was killed takes a new run.
            answer = await client.post("/v1/agents/banker/hanging/runs", json={"prompt": "hi"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
            assert answer.json()["output"] == "Back again."
