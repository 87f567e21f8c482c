"""Attacking the store under a server: two ``satsuma serve`` processes on one SQLite file,
and a store that fails while serving (its disk full). Real subprocesses and real HTTP,
real SQLite files."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
from serve_process import serving, wait_for_event

from satsuma.testing import MessagesServer, Reply


async def test_two_servers_on_one_file_share_it_one_conversation_at_a_time(
    tmp_path: Path,
) -> None:
    script = [
        "First answer.",
        Reply(tool_calls=[("hang", {"label": "a"})]),
        "Other answer.",
        "Second answer.",
    ]
    async with (
        MessagesServer(script) as model,
        serving(tmp_path, model) as (first, first_url),
        serving(tmp_path, model) as (_, second_url),
        httpx.AsyncClient(base_url=first_url, timeout=30) as one,
        httpx.AsyncClient(base_url=second_url, timeout=30) as two,
    ):
        answer = await one.post("/v1/agents/banker/shared/runs", json={"prompt": "one"})
        assert answer.json()["status"] == "completed"
        done = answer.json()["run_id"]
        started = await one.post(
            "/v1/agents/banker/busy/runs", json={"prompt": "hang", "wait": False}
        )
        hanging = started.json()["run_id"]
        await wait_for_event(first_url, hanging, "ToolCallStart")

        # The second process serves other conversations of the file.
        other = await two.post("/v1/agents/banker/other/runs", json={"prompt": "other"})
        assert other.status_code == 200, other.text
        assert other.json()["output"] == "Other answer."
        # A conversation the first process holds is refused, clearly, and left alone.
        refused = await two.post("/v1/agents/banker/shared/runs", json={"prompt": "two"})
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["type"] == "busy"
        assert "open in another process" in error["message"]
        # Its runs read from the file: one ended, one running there (not "interrupted":
        # the second process does not take the first's live run for a killed one's).
        assert (await two.get(f"/v1/runs/{done}")).json()["status"] == "completed"
        assert (await two.get(f"/v1/runs/{hanging}")).json()["status"] == "running"
        assert (await one.get(f"/v1/runs/{hanging}")).json()["status"] == "running"

        # Once the first process stops, the second takes the conversation up, whole.
        first.send_signal(signal.SIGTERM)
        assert await first.wait() == 0
        answer = await two.post("/v1/agents/banker/shared/runs", json={"prompt": "two"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"] == "Second answer."
        messages = (await two.get("/v1/agents/banker/shared/messages")).json()["messages"]
        texts = [block["text"] for m in messages for block in m["content"]]
        assert texts == ["one", "First answer.", "two", "Second answer."]
        assert (await two.get(f"/v1/runs/{hanging}")).json()["status"] == "cancelled"
