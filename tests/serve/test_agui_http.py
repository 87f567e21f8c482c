"""The AG-UI surface through real HTTP: hypercorn's trio worker on port 0, httpx
streaming, every ``data:`` line parsed by ag_ui's models.

Until the server's own app is merged, a small ASGI adapter here hands the surface its
requests the way that app does (body read, principal known, HTTPError as JSON, SSE
framed); the surface's code under test is the same.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import hypercorn.config
import hypercorn.trio
import trio
from ag_ui.core import EventType
from agui_rules import check_order, parse

import satsuma
from satsuma.serve._agui import AGUISurface
from satsuma.serve._http import HTTPError, JSONAnswer, Principal, Request
from satsuma.serve._open_runs import open_local_runs
from satsuma.testing import Reply, ScriptedModel


@satsuma.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


class Adder(satsuma.Agent):
    """Adds numbers."""

    name = "adder"
    tools = [add]


@attrs.frozen
class _Everyone(Principal):
    def allows(self, scope: Any, agent: str | None = None) -> bool:
        return True


@attrs.frozen(kw_only=True)
class _Request(Request):
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise HTTPError(400, "bad_request", "the body is not JSON") from None

    def require(self, scope: Any, agent: str | None = None) -> None:
        pass


def _adapter(surface: AGUISurface) -> Any:
    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = _Request(
            method=scope["method"],
            path=scope["path"],
            query={},
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            body=body,
            principal=_Everyone(None, frozenset()),
        )
        try:
            answer = await surface.handle(request)
        except HTTPError as error:
            answer = JSONAnswer(
                error.status, {"error": {"type": error.kind, "message": error.message}}
            )
        if isinstance(answer, JSONAnswer):
            data = json.dumps(answer.body).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": answer.status, "headers": headers})
            await send({"type": "http.response.body", "body": data})
            return
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        async for event in answer.events:
            frame = "".join(f"data: {line}\n" for line in event.data.split("\n")) + "\n"
            await send({"type": "http.response.body", "body": frame.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return asgi


@asynccontextmanager
async def _serving(surface: AGUISurface) -> AsyncIterator[str]:
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        shutdown = trio.Event()
        binds = await nursery.start(
            lambda task_status: hypercorn.trio.serve(
                _adapter(surface), config, shutdown_trigger=shutdown.wait, task_status=task_status
            )
        )
        try:
            yield binds[0]
        finally:
            shutdown.set()


async def test_a_run_streams_valid_ag_ui_events_over_http() -> None:
    model = ScriptedModel([Reply(text="Adding.", tool_calls=[("add", {"a": 2, "b": 2})]), "4."])
    body = {
        "threadId": "web-1",
        "runId": "r-1",
        "messages": [{"id": "m1", "role": "user", "content": "2+2?"}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    async with (
        open_local_runs([Adder], model=model) as runs,
        _serving(AGUISurface(runs)) as base,
        httpx.AsyncClient(base_url=base) as client,
        client.stream("POST", "/ag-ui/adder", json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = []
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(parse(line[len("data: ") :]))
            else:
                assert line == "", line  # no id:, no event: lines; frames end blank
    check_order(events)
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].result["output"] == "4."
    assert {e.type for e in events} >= {
        EventType.TEXT_MESSAGE_CONTENT,
        EventType.TOOL_CALL_RESULT,
        EventType.STEP_FINISHED,
    }


async def test_a_bad_body_is_a_json_400_over_http() -> None:
    async with (
        open_local_runs([Adder], model=ScriptedModel([])) as runs,
        _serving(AGUISurface(runs)) as base,
        httpx.AsyncClient(base_url=base) as client,
    ):
        response = await client.post(
            "/ag-ui/adder", json={"threadId": "t", "runId": "r", "messages": []}
        )
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "type": "bad_request",
                "message": "messages must end with the new user message",
            }
        }
        not_json = await client.post("/ag-ui/adder", content=b"{")
        assert not_json.status_code == 400
