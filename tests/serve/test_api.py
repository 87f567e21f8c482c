"""satsuma's own API (/v1/) over LocalRuns, request by request through the surface's
``handle``: every row of DESIGN's table, scopes, and bad input as JSON errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import serve_agents
import trio
from serve_agents import Banker, Greeter, scripted, two_transfers

from satsuma.serve._api import ApiSurface
from satsuma.serve._app import error_for
from satsuma.serve._http import HTTPError, JSONAnswer, Principal, Request, SSEAnswer
from satsuma.serve._open_runs import open_local_runs
from satsuma.store import SQLiteStore
from satsuma.testing import Reply, ScriptedModel

EVERYTHING = Principal(None, frozenset({"admin"}))


@pytest.fixture(autouse=True)
def _reset() -> None:
    serve_agents.done.clear()
    serve_agents.gate["open"] = trio.Event()


@asynccontextmanager
async def api(model: ScriptedModel, store: SQLiteStore | None = None) -> AsyncIterator[ApiSurface]:
    async with open_local_runs([Banker, Greeter], model=model, store=store) as runs:
        yield ApiSurface(runs)


def request(
    method: str,
    path: str,
    body: Any = None,
    *,
    principal: Principal = EVERYTHING,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> Request:
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return Request(
        method=method,
        path=path,
        query=query or {},
        headers=headers or {},
        body=raw,
        principal=principal,
    )


async def call(surface: ApiSurface, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    try:
        try:
            answer = await surface.handle(request(*args, **kwargs))
        except Exception as error:
            raise error_for(error) from error  # as the app maps every surface's errors
    except HTTPError as exc:
        return exc.status, {"error": {"type": exc.kind, "message": exc.message}}
    assert isinstance(answer, JSONAnswer)
    json.dumps(answer.body)  # always JSON
    return answer.status, answer.body


async def sse(surface: ApiSurface, path: str, **kwargs: Any) -> list[tuple[int, str, Any]]:
    answer = await surface.handle(request("GET", path, **kwargs))
    assert isinstance(answer, SSEAnswer)
    events = []
    try:
        async for event in answer.events:
            assert event.id is not None and event.event is not None
            events.append((int(event.id), event.event, json.loads(event.data)))
    finally:
        await answer.events.aclose()  # type: ignore[attr-defined]
    return events


async def tool_started(surface: ApiSurface, run_id: str) -> None:
    """Until the run's slow tool has started (its model call is then spent)."""
    answer = await surface.handle(request("GET", f"/v1/runs/{run_id}/events"))
    assert isinstance(answer, SSEAnswer)
    try:
        async for event in answer.events:
            if event.event == "ToolCallStart":
                return
    finally:
        await answer.events.aclose()  # type: ignore[attr-defined]


async def test_a_run_waited_for_then_read_then_its_events() -> None:
    async with api(scripted("Hello.")) as surface:
        status, run = await call(surface, "POST", "/v1/agents/banker/t-1/runs", {"prompt": "Hi"})
        assert status == 200
        assert {k: run[k] for k in ("agent", "agent_id", "status", "output", "pending")} == {
            "agent": "banker",
            "agent_id": "t-1",
            "status": "completed",
            "output": "Hello.",
            "pending": [],
        }
        assert set(run) >= {"run_id", "error", "usage"}
        # A scripted model has no prices: its cost is unknown, null rather than 0.
        assert run["usage"]["cost_usd"] is None and run["usage"]["output_tokens"] > 0
        assert await call(surface, "GET", f"/v1/runs/{run['run_id']}") == (200, run)
        events = await sse(surface, f"/v1/runs/{run['run_id']}/events")
        assert [e[0] for e in events] == list(range(1, len(events) + 1))
        assert events[-1][1] == "RunEnd"
        # Last-Event-ID (or ?after=) resumes: nothing lost, nothing repeated.
        cut = len(events) // 2
        rest = await sse(
            surface, f"/v1/runs/{run['run_id']}/events", headers={"last-event-id": str(cut)}
        )
        assert [e[0] for e in events[:cut]] + [e[0] for e in rest] == [e[0] for e in events]
        again = await sse(surface, f"/v1/runs/{run['run_id']}/events", query={"after": "1"})
        assert [e[0] for e in again] == [e[0] for e in events[1:]]
        status, body = await call(surface, "GET", "/v1/agents/banker/t-1/messages")
        assert status == 200
        assert [m["role"] for m in body["messages"]] == ["user", "assistant"]


async def test_wait_false_answers_202_and_the_run_goes_on() -> None:
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with api(model) as surface:
        status, body = await call(
            surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Go", "wait": False}
        )
        assert status == 202 and body["status"] in ("queued", "running")
        # A waiting client that goes away cancels nothing.
        with trio.move_on_after(0.01):
            await call(surface, "GET", f"/v1/runs/{body['run_id']}")
            await call(surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "x"})
        serve_agents.gate["open"].set()
        events = await sse(surface, f"/v1/runs/{body['run_id']}/events")
        assert events[-1][2]["result"]["status"] == "completed"


async def test_approvals_one_call_at_a_time_then_the_resumed_run() -> None:
    async with api(scripted(*two_transfers("Paid."))) as surface:
        status, run = await call(surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Pay"})
        assert (status, run["status"], len(run["pending"])) == (200, "awaiting_approval", 2)
        status, body = await call(surface, "GET", "/v1/approvals")
        assert status == 200 and body["approvals"] == run["pending"]
        first, second = (p["call_id"] for p in run["pending"])
        path = f"/v1/approvals/{run['run_id']}"
        status, body = await call(surface, "POST", f"{path}/{first}", {"decision": "approve"})
        assert status == 202 and [p["call_id"] for p in body["pending"]] == [second]
        status, body = await call(surface, "POST", f"{path}/{first}", {"decision": "deny"})
        assert (status, body["error"]["type"]) == (409, "already_decided")
        status, body = await call(
            surface, "POST", f"{path}/{second}", {"decision": "approve", "input": {"to": 1}}
        )
        assert (status, body["error"]["type"]) == (400, "bad_decision")
        status, body = await call(
            surface, "POST", f"{path}/{second}", {"decision": "deny", "reason": "too small"}
        )
        assert (status, body["status"], body["output"]) == (200, "completed", "Paid.")
        assert serve_agents.done == ["transfer 10 to bob"]
        assert await call(surface, "GET", "/v1/approvals") == (200, {"approvals": []})


async def test_a_decision_after_a_restart_of_the_server(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    async with SQLiteStore(db) as store, api(scripted(*two_transfers()), store) as surface:
        _, run = await call(surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Pay"})
    async with SQLiteStore(db) as store, api(scripted("Paid."), store) as surface:
        status, body = await call(surface, "GET", "/v1/approvals")
        assert [p["call_id"] for p in body["approvals"]] == [p["call_id"] for p in run["pending"]]
        path = f"/v1/approvals/{run['run_id']}"
        first, second = (p["call_id"] for p in run["pending"])
        assert (await call(surface, "POST", f"{path}/{first}", {"decision": "approve"}))[0] == 202
        status, body = await call(surface, "POST", f"{path}/{second}", {"decision": "approve"})
        assert (status, body["status"], body["output"]) == (200, "completed", "Paid.")


async def test_cancel_and_if_busy() -> None:
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Second.")
    async with api(model) as surface:
        _, first = await call(
            surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "One", "wait": False}
        )
        status, body = await call(
            surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Two", "if_busy": "reject"}
        )
        assert (status, body["error"]["type"]) == (409, "busy")
        await tool_started(surface, first["run_id"])
        status, body = await call(surface, "POST", f"/v1/runs/{first['run_id']}/cancel")
        assert (status, body["status"]) == (200, "cancelled")
        status, body = await call(surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Two"})
        assert (status, body["status"]) == (200, "completed")


async def test_scopes_and_agents_a_token_reaches() -> None:
    reader = Principal("reader", frozenset({"read"}), frozenset({"banker"}))
    runner = Principal("runner", frozenset({"run"}), frozenset({"greeter"}))
    async with api(scripted(*two_transfers())) as surface:
        _, run = await call(surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Pay"})
        run_path = f"/v1/runs/{run['run_id']}"
        assert (await call(surface, "GET", run_path, principal=reader))[0] == 200
        forbidden = [
            ("POST", "/v1/agents/banker/t/runs", {"prompt": "x"}, reader),
            ("POST", "/v1/agents/banker/t/runs", {"prompt": "x"}, runner),
            ("POST", f"{run_path}/cancel", None, reader),
            ("GET", "/v1/agents/banker/t/messages", None, runner),
            ("POST", f"/v1/approvals/{run['run_id']}/x", {"decision": "approve"}, reader),
        ]
        for method, path, body, principal in forbidden:
            status, answer = await call(surface, method, path, body, principal=principal)
            assert (status, answer["error"]["type"]) == (403, "forbidden"), (method, path)
        # A run of an agent the token does not reach is not found: nothing leaks.
        other = Principal("other", frozenset({"read", "run"}), frozenset({"greeter"}))
        assert (await call(surface, "GET", run_path, principal=other))[0] == 404
        assert (await call(surface, "POST", f"{run_path}/cancel", principal=other))[0] == 404
        status, body = await call(surface, "GET", "/v1/approvals", principal=other)
        assert (status, body) == (200, {"approvals": []})
        with pytest.raises(HTTPError) as caught:
            await surface.handle(request("GET", f"{run_path}/events", principal=other))
        assert caught.value.status == 404
        assert (await call(surface, "GET", run_path))[1]["status"] == "awaiting_approval"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", "/v1/agents/banker/" + "x" * 201 + "/runs", {"prompt": "a"}, 400, "agent_id"),
        ("POST", "/v1/agents/banker/a/b/runs", {"prompt": "a"}, 400, "'/'"),
        ("POST", "/v1/agents/banker//runs", {"prompt": "a"}, 400, "agent_id"),
        ("POST", "/v1/agents/banker/a\x07b/runs", {"prompt": "a"}, 400, "control"),
        ("POST", "/v1/agents/banker/t/runs", b"{not json", 400, "JSON"),
        ("POST", "/v1/agents/banker/t/runs", [1], 400, "object"),
        ("POST", "/v1/agents/banker/t/runs", {}, 400, "prompt"),
        ("POST", "/v1/agents/banker/t/runs", {"prompt": 3}, 400, "'prompt' must be a string"),
        ("POST", "/v1/agents/banker/t/runs", {"prompt": "a", "wait": 1}, 400, "'wait'"),
        ("POST", "/v1/agents/banker/t/runs", {"prompt": "a", "wiat": True}, 400, "'wiat'"),
        ("POST", "/v1/agents/banker/t/runs", {"prompt": "a", "if_busy": "x"}, 400, "if_busy"),
        ("POST", "/v1/agents/nobody/t/runs", {"prompt": "a"}, 404, "nobody"),
        ("GET", "/v1/agents/banker/t/runs", None, 405, "POST"),
        ("GET", "/v1/runs/run_nope", None, 404, "run_nope"),
        ("POST", "/v1/runs/run_nope/cancel", None, 404, "run_nope"),
        ("GET", "/v1/runs/run_nope/events", None, 404, "run_nope"),
        ("POST", "/v1/approvals/run_nope/c", {"decision": "approve"}, 404, "run_nope"),
        ("GET", "/v1/nothing", None, 404, "no such endpoint"),
        ("DELETE", "/v1/runs/x", None, 405, "GET"),
    ],
)
async def test_bad_requests_are_json_errors_naming_the_problem(
    method: str, path: str, body: Any, status: int, words: str
) -> None:
    async with api(scripted()) as surface:
        got, answer = await call(surface, method, path, body)
        assert got == status
        assert words in answer["error"]["message"]


async def test_bad_decisions_and_resume_ids() -> None:
    async with api(scripted(*two_transfers())) as surface:
        _, run = await call(surface, "POST", "/v1/agents/banker/t/runs", {"prompt": "Pay"})
        path = f"/v1/approvals/{run['run_id']}/{run['pending'][0]['call_id']}"
        for body, words in [
            ({"decision": "maybe"}, "'decision'"),
            ({"decision": "approve", "reason": "x"}, "'reason'"),
            ({"decision": "deny", "input": {}}, "'input'"),
            ({"decision": "approve", "input": [1]}, "'input' must be an object"),
        ]:
            status, answer = await call(surface, "POST", path, body)
            assert status == 400 and words in answer["error"]["message"], body
        status, answer = await call(
            surface, "POST", f"/v1/approvals/{run['run_id']}/toolu_nope", {"decision": "approve"}
        )
        assert (status, answer["error"]["type"]) == (400, "bad_decision")
        with pytest.raises(HTTPError) as caught:
            await surface.handle(
                request("GET", f"/v1/runs/{run['run_id']}/events", headers={"last-event-id": "x"})
            )
        assert caught.value.status == 400


async def test_a_served_runs_usage_carries_its_cost_in_usd() -> None:
    from satsuma import AnthropicModel
    from satsuma.models import prices_for
    from satsuma.testing import MessagesServer

    async with (
        MessagesServer(["Hello."]) as server,
        open_local_runs([Greeter], model=AnthropicModel(server.client())) as runs,
    ):
        status, run = await call(
            ApiSurface(runs), "POST", "/v1/agents/greeter/t-1/runs", {"prompt": "Hi"}
        )
    assert status == 200 and run["status"] == "completed"
    usage = run["usage"]
    prices = prices_for(server.requests[0]["model"])
    assert prices is not None
    assert usage["cost_usd"] == pytest.approx(
        (usage["input_tokens"] * prices.input + usage["output_tokens"] * prices.output) / 1_000_000
    )
    assert usage["cost_usd"] > 0
