"""satsuma's own API over real HTTP (hypercorn's trio worker, httpx): runs waited for or
not, SSE with Last-Event-ID, approvals across a restart of the server, a client that goes
away, tokens and the per-token cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import serve_agents
import trio
from serve_agents import Banker, Greeter, scripted, two_transfers

from satsuma.serve import create_token
from satsuma.store import SQLiteStore
from satsuma.testing import Reply


@pytest.fixture(autouse=True)
def _reset() -> None:
    serve_agents.done.clear()
    serve_agents.gate["open"] = trio.Event()


def parse_sse(text: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(id, event, data) of each event of an SSE text (comments skipped)."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "data" in fields:
            events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


async def read_sse(
    client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None
) -> list[tuple[int, str, dict[str, Any]]]:
    """The events of an SSE answer, read to its end (the run's end)."""
    async with client.stream("GET", path, headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        return parse_sse((await answer.aread()).decode())


async def read_sse_until(url: str, path: str, until: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The events of an SSE answer up to the first of type ``until``; then the client
    closes its connection mid-stream (a raw socket: a client that goes away)."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    received = b""
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        marker = f"event: {until}".encode()
        while marker not in received or b"\n\n" not in received.partition(marker)[2]:
            chunk = await stream.receive_some()
            assert chunk, "the stream ended early"
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    # Chunked transfer: keep the lines that are SSE, drop the chunk sizes.
    lines = [ln for ln in body.decode().split("\r\n") if not _is_hex(ln)]
    events = parse_sse("".join(lines))
    return events[: [e[1] for e in events].index(until) + 1]


def _is_hex(line: str) -> bool:
    return bool(line) and all(c in "0123456789abcdefABCDEF" for c in line)


async def test_runs_waited_for_and_not_and_their_events(serve_http: Any) -> None:
    model = scripted("Hello.", Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with serve_http([Banker, Greeter], model=model) as served:
        client = served.client
        answer = await client.post("/v1/agents/banker/t-1/runs", json={"prompt": "Hi"})
        assert answer.status_code == 200
        run = answer.json()
        assert (run["status"], run["output"], run["pending"]) == ("completed", "Hello.", [])
        assert (await client.get(f"/v1/runs/{run['run_id']}")).json() == run
        messages = (await client.get("/v1/agents/banker/t-1/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"]

        answer = await client.post(
            "/v1/agents/banker/t-1/runs", json={"prompt": "Go", "wait": False}
        )
        assert answer.status_code == 202
        run_id = answer.json()["run_id"]
        # A client that reads part of the stream and goes away cancels nothing...
        first = await read_sse_until(served.url, f"/v1/runs/{run_id}/events", "ToolCallStart")
        assert [e[0] for e in first] == list(range(1, len(first) + 1))
        serve_agents.gate["open"].set()
        # ...and one that comes back with Last-Event-ID gets the rest, once each.
        rest = await read_sse(
            client, f"/v1/runs/{run_id}/events", {"Last-Event-ID": str(first[-1][0])}
        )
        ids = [e[0] for e in first + rest]
        assert ids == list(range(1, len(ids) + 1))
        assert rest[-1][1] == "RunEnd"
        assert rest[-1][2]["result"]["status"] == "completed"
        assert (await client.get(f"/v1/runs/{run_id}")).json()["output"] == "Finished."


async def test_a_client_that_disconnects_mid_run_cancels_nothing(serve_http: Any) -> None:
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with serve_http([Banker], model=model) as served:
        with trio.move_on_after(0.2):  # the client gives up waiting and closes its connection
            await served.client.post("/v1/agents/banker/t/runs", json={"prompt": "Go"})
        runs = (await served.client.get("/v1/approvals")).json()
        assert runs == {"approvals": []}
        serve_agents.gate["open"].set()
        # The run goes on: its answer is in the conversation.
        async with httpx.AsyncClient(base_url=served.url) as again:
            for _ in range(200):
                messages = (await again.get("/v1/agents/banker/t/messages")).json()["messages"]
                if len(messages) == 4:
                    break
                await trio.sleep(0.01)
        assert messages[-1]["content"][0]["text"] == "Finished."
        assert serve_agents.done == ["slow a"]


async def test_approvals_decided_one_at_a_time_across_a_restart(
    serve_http: Any, tmp_path: Path
) -> None:
    db = tmp_path / "agents.db"
    async with (
        SQLiteStore(db) as store,
        serve_http([Banker], store=store, model=scripted(*two_transfers())) as served,
    ):
        answer = await served.client.post("/v1/agents/banker/t/runs", json={"prompt": "Pay"})
        run = answer.json()
        assert (answer.status_code, run["status"]) == (200, "awaiting_approval")
        first, second = (p["call_id"] for p in run["pending"])
        decided = await served.client.post(
            f"/v1/approvals/{run['run_id']}/{first}", json={"decision": "approve"}
        )
        assert decided.status_code == 202
    async with (
        SQLiteStore(db) as store,
        serve_http([Banker], store=store, model=scripted("Paid.")) as served,
    ):
        listed = (await served.client.get("/v1/approvals")).json()["approvals"]
        # Undecided calls survive a restart; a decision taken before it does not (yet):
        # see docs/serve.md, the pending call is listed again.
        assert second in [p["call_id"] for p in listed]
        for call in listed:
            answer = await served.client.post(
                f"/v1/approvals/{run['run_id']}/{call['call_id']}", json={"decision": "approve"}
            )
        assert (answer.status_code, answer.json()["output"]) == (200, "Paid.")
        again = await served.client.post(
            f"/v1/approvals/{run['run_id']}/{second}", json={"decision": "deny"}
        )
        assert again.status_code == 409


async def test_tokens_scopes_and_the_run_cap(serve_http: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    reader = create_token(tokens, name="reader", scopes=["read"], agents=["banker"])
    runner = create_token(tokens, name="runner", scopes=["run", "read"], agents=["banker"])
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with serve_http(
        [Banker, Greeter], model=model, tokens=tokens, max_runs_per_token=1
    ) as served:
        client = served.client
        as_runner = {"Authorization": f"Bearer {runner}"}
        as_reader = {"Authorization": f"Bearer {reader}"}
        assert (await client.get("/v1/approvals")).status_code == 401
        refused = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Go"}, headers=as_reader
        )
        assert refused.status_code == 403
        elsewhere = await client.post(
            "/v1/agents/greeter/t/runs", json={"prompt": "Go"}, headers=as_runner
        )
        assert elsewhere.status_code == 403
        started = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Go", "wait": False}, headers=as_runner
        )
        assert started.status_code == 202
        capped = await client.post(
            "/v1/agents/banker/u/runs", json={"prompt": "Too", "wait": False}, headers=as_runner
        )
        assert capped.status_code == 429
        assert capped.headers["retry-after"] == "1"
        serve_agents.gate["open"].set()
        run_id = started.json()["run_id"]
        events = await read_sse(client, f"/v1/runs/{run_id}/events", as_reader)
        assert events[-1][1] == "RunEnd"
        for _ in range(100):  # the slot is given back once the run has ended
            again = await client.post(
                "/v1/agents/banker/u/runs", json={"prompt": "Now", "wait": False}, headers=as_runner
            )
            if again.status_code == 202:
                break
            await trio.sleep(0.01)
        assert again.status_code == 202


async def test_bad_paths_over_http(serve_http: Any) -> None:
    async with serve_http([Banker], model=scripted()) as served:
        for path in ["/v1/agents/banker/a%2Fb/runs", "/v1/agents/banker/a%00b/runs"]:
            answer = await served.client.post(path, json={"prompt": "x"})
            assert answer.status_code == 400, path
            assert "agent_id" in answer.json()["error"]["message"]
        answer = await served.client.get("/v1/runs/nope/events", headers={"Last-Event-ID": "x"})
        assert answer.status_code == 400


async def test_a_paused_run_makes_its_conversation_busy_and_a_bare_denial_says_denied(
    serve_http: Any,
) -> None:
    model = scripted(*two_transfers("Other.", "Not paid."))
    async with serve_http([Banker], model=model) as served:
        client = served.client
        run = (await client.post("/v1/agents/banker/t/runs", json={"prompt": "Pay"})).json()
        assert run["status"] == "awaiting_approval"
        # The conversation is busy while its run waits on a person, not only while it runs.
        refused = await client.post(
            "/v1/agents/banker/t/runs", json={"prompt": "Again", "if_busy": "reject"}
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["type"] == "busy"
        assert "awaiting approval" in refused.json()["error"]["message"]
        # Another conversation is not.
        other = await client.post(
            "/v1/agents/banker/u/runs", json={"prompt": "x", "if_busy": "reject"}
        )
        assert other.status_code == 200 and other.json()["output"] == "Other.", other.text
        # Denials without a reason, and with a blank one: the model reads "denied".
        first, second = (p["call_id"] for p in run["pending"])
        path = f"/v1/approvals/{run['run_id']}"
        assert (await client.post(f"{path}/{first}", json={"decision": "deny"})).status_code == 202
        done = await client.post(f"{path}/{second}", json={"decision": "deny", "reason": "  "})
        assert done.status_code == 200 and done.json()["output"] == "Not paid.", done.text
        messages = (await client.get("/v1/agents/banker/t/messages")).json()["messages"]
        results = [
            block
            for message in messages
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        assert len(results) == 2
        assert all("Denied: denied" in json.dumps(block["content"]) for block in results)
        assert serve_agents.done == []  # nothing was transferred
