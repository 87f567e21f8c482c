"""The AG-UI surface through real HTTP: a ``Server`` on port 0 (hypercorn's trio
worker), httpx streaming, every ``data:`` line parsed by ag_ui's models; tokens, scopes
and the cap on runs in flight as the server applies them."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.lowlevel
import trio.testing
from ag_ui.core import EventType
from agui_rules import check_order, parse

import satsuma
from conftest import ServeHTTP
from satsuma.serve import create_token
from satsuma.testing import Reply, ScriptedModel

gate = {"open": trio.Event()}


@satsuma.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@satsuma.tool
async def wait_for_gate() -> str:
    """Wait until the test opens the gate."""
    await gate["open"].wait()
    return "opened"


@satsuma.tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


class Adder(satsuma.Agent):
    """Adds numbers."""

    name = "adder"
    tools = [add, wait_for_gate, pay]


def _body(text: str = "2+2?", thread: str = "web-1", **fields: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": "r-1",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **fields,
    }


async def _events(client: httpx.AsyncClient, body: Any, headers: Any = None) -> list[Any]:
    async with client.stream("POST", "/ag-ui/adder", json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        events = []
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(parse(line[len("data: ") :]))
            else:
                # Blank lines end frames; comments keep the connection alive.
                assert line == "" or line.startswith(":"), line
    check_order(events)
    return events


async def test_a_run_streams_valid_ag_ui_events_over_http(serve_http: ServeHTTP) -> None:
    model = ScriptedModel([Reply(text="Adding.", tool_calls=[("add", {"a": 2, "b": 2})]), "4."])
    async with serve_http([Adder], model=model) as served:
        events = await _events(served.client, _body())
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].result["output"] == "4."
    assert {e.type for e in events} >= {
        EventType.TEXT_MESSAGE_CONTENT,
        EventType.TOOL_CALL_RESULT,
        EventType.STEP_FINISHED,
    }


async def test_a_pause_and_its_answer_over_http(serve_http: ServeHTTP, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    runner = create_token(tokens, name="runner", scopes=["run"])
    approver = create_token(tokens, name="approver", scopes=["run", "approve", "read"])
    model = ScriptedModel([Reply(tool_calls=[("pay", {"amount": 3})]), "Paid."])
    async with serve_http([Adder], model=model, tokens=tokens) as served:
        as_runner = {"Authorization": f"Bearer {runner}"}
        paused = await _events(served.client, _body("pay 3"), as_runner)
        (interrupt,) = paused[-1].outcome.interrupts
        answer = [
            {"interruptId": interrupt.id, "status": "resolved", "payload": {"decision": "approve"}}
        ]
        # Answering needs the approve scope.
        refused = await served.client.post(
            "/ag-ui/adder", json=_body(resume=answer), headers=as_runner
        )
        assert refused.status_code == 403
        done = await _events(
            served.client, _body(resume=answer), {"Authorization": f"Bearer {approver}"}
        )
        assert done[-1].result["output"] == "Paid."
        # The decision is recorded as the approver's.
        run_id = paused[0].metadata["satsuma"]["run_id"]
        got = await served.client.get(
            f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {approver}"}
        )
        assert got.json()["status"] == "completed"


async def test_tokens_and_bad_bodies_over_http(serve_http: ServeHTTP, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    reader = create_token(tokens, name="reader", scopes=["read"])
    runner = create_token(tokens, name="runner", scopes=["run"], agents=["adder"])
    async with serve_http([Adder], model=ScriptedModel([]), tokens=tokens) as served:
        client = served.client
        missing = await client.post("/ag-ui/adder", json=_body())
        assert missing.status_code == 401
        bad = await client.post(
            "/ag-ui/adder", json=_body(), headers={"Authorization": "Bearer nope"}
        )
        assert bad.status_code == 401
        scoped = await client.post(
            "/ag-ui/adder", json=_body(), headers={"Authorization": f"Bearer {reader}"}
        )
        assert scoped.status_code == 403
        as_runner = {"Authorization": f"Bearer {runner}"}
        for body, status, message in [
            ({"threadId": "t", "runId": "r", "messages": []}, 400, "messages must end"),
            (_body(thread="a/b"), 400, "threadId must contain no '/'"),
            ([1, 2], 400, "the body must be a RunAgentInput object"),
        ]:
            answer = await client.post("/ag-ui/adder", json=body, headers=as_runner)
            assert answer.status_code == status
            assert message in answer.json()["error"]["message"]
        not_json = await client.post("/ag-ui/adder", content=b"{", headers=as_runner)
        assert not_json.status_code == 400
        unknown = await client.post("/ag-ui/nobody", json=_body(), headers=as_runner)
        assert unknown.status_code in (403, 404)  # the token reaches adder only
        assert (await client.get("/ag-ui/adder", headers=as_runner)).status_code == 405


# Leaving a stream early leaves httpx's inner generators to the collector (nested
# async generators are not closed by their reader's aclose), as trio reports.
@pytest.mark.filterwarnings("ignore:Async generator 'httpx:ResourceWarning")
@pytest.mark.filterwarnings("ignore:Async generator 'httpcore:ResourceWarning")
async def test_a_run_in_flight_holds_its_token_slot(serve_http: ServeHTTP, tmp_path: Path) -> None:
    gate["open"] = trio.Event()
    tokens = tmp_path / "tokens.txt"
    token = create_token(tokens, name="one", scopes=["run"])
    headers = {"Authorization": f"Bearer {token}"}
    model = ScriptedModel([Reply(tool_calls=[("wait_for_gate", {})]), "Through.", "Again."])
    options = {"model": model, "tokens": tokens, "max_runs_per_token": 1}
    async with serve_http([Adder], **options) as served:
        # The first run waits at the gate; its client reads its first event and leaves.
        async with (
            served.client.stream(
                "POST", "/ag-ui/adder", json=_body("wait", thread="a"), headers=headers
            ) as response,
            aclosing(response.aiter_lines()) as lines,
        ):
            async for line in lines:
                if line.startswith("data: "):
                    first = parse(line[len("data: ") :])
                    break
        run_id = first.metadata["satsuma"]["run_id"]
        # Gone or not, the run is in flight: a second run is refused until it ends.
        refused = await served.client.post(
            "/ag-ui/adder", json=_body("more", thread="b"), headers=headers
        )
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        gate["open"].set()
        await served.server.asgi.runs.wait(run_id)
        # The slot is given back by a task of its own, once the run ended.
        await trio.testing.wait_all_tasks_blocked()
        events = await _events(served.client, _body("more", thread="b"), headers)
        assert events[-1].result["output"] == "Again."
