"""Who may reach the A2A surface, over real HTTP: a token's cap on runs in flight holds
for A2A's runs as for any other (a non-blocking SendMessage included)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from serve_agents import Banker, gate, scripted

from satsuma.serve import TokenBook, create_token
from satsuma.testing import Reply

pytestmark = pytest.mark.trio

_ids = iter(range(1, 1_000_000))


def rpc(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}


def send(text: str, **configuration: Any) -> dict[str, Any]:
    message = {"messageId": f"m{next(_ids)}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return rpc("SendMessage", {"message": message, "configuration": configuration})


async def test_a_non_blocking_send_counts_against_the_tokens_cap(
    serve_http: Any, tmp_path: Path
) -> None:
    gate["open"] = trio.Event()
    path = tmp_path / "tokens.txt"
    one = {"Authorization": f"Bearer {create_token(path, name='one', scopes=['run', 'read'])}"}
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "First.", "Second.")
    options = {"model": model, "tokens": TokenBook.from_file(path), "max_runs_per_token": 1}
    async with serve_http([Banker], **options) as served:
        client = served.client
        started = await client.post(
            "/a2a/banker", json=send("go", returnImmediately=True), headers=one
        )
        task = started.json()["result"]["task"]
        assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")

        # The run waits at the gate, holding the token's one slot: every other way to
        # start a run (A2A's three, satsuma's API) is refused with the app's 429.
        for body in (
            send("again", returnImmediately=True),
            send("again, waiting"),
            {**send("streamed"), "method": "SendStreamingMessage"},
        ):
            refused = await client.post("/a2a/banker", json=body, headers=one)
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["type"] == "too_many_runs"
        api = await client.post("/v1/agents/banker/x/runs", json={"prompt": "hi"}, headers=one)
        assert api.status_code == 429

        # Once the run ends, its slot is the token's again.
        subscribe = rpc("SubscribeToTask", {"id": task["id"]})
        async with client.stream("POST", "/a2a/banker", json=subscribe, headers=one) as stream:
            gate["open"].set()
            last = [line async for line in stream.aiter_lines() if line.startswith("data:")][-1]
        final = json.loads(last.removeprefix("data:"))["result"]["statusUpdate"]["status"]
        assert final["state"] == "TASK_STATE_COMPLETED"
        answer = None
        for _ in range(200):  # the slot is given back by a task of the server's own
            answer = await client.post("/a2a/banker", json=send("next"), headers=one)
            if answer.status_code != 429:
                break
            await trio.sleep(0.01)
        assert answer is not None and answer.status_code == 200, answer
        assert answer.json()["result"]["task"]["artifacts"][0]["parts"] == [{"text": "Second."}]
