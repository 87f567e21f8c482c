"""An A2A agent built with the official a2a-sdk, run by the tests in its own process.

It runs under asyncio (uvicorn), as real remote agents do: the tests start it with
``sys.executable``, read ``port N`` from its first line of output, and kill it at the end.
What the agent does depends on the first word of the user's message:

- ``text``: completes with a text artifact; ``data``: with a data artifact.
- ``progress``: two ``working`` status updates, then completes.
- ``fail``: fails with the message ``disk on fire``.
- ``input``: asks for input (``input-required``).
- ``slow``: works until cancelled; its ``cancel`` is recorded in the log file.
- ``die``: a ``working`` update, then the process exits at once.
- ``headers``: completes with the request's Authorization header as its text.
- ``echo``: completes with the task and context ids it was given, and the text.

With ``--fault`` the card sends calls to ``/fault`` instead, which answers what no good
server would, named by the message's first word: ``http503``, ``rpc-error``,
``not-json``, ``short-stream`` (a stream that ends while the task works), ``bad-event``
(a stream event that is not JSON), ``silent`` (nothing, ever), ``stuck`` (the task
starts working and nothing more comes; its ``CancelTask`` is recorded, never answered),
``poll`` (``SendMessage`` answers a working task; ``GetTask`` then answers it working,
then completed).

Usage: ``python sdk_server.py LOG_FILE [--no-streaming] [--bad-card] [--grpc-only]
[--fault]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import (
    get_message_text,
    new_data_artifact_update_event,
    new_task_from_user_message,
    new_text_artifact_update_event,
    new_text_status_update_event,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send


def record(log: str, entry: dict[str, Any]) -> None:
    """One JSON line in the log file the tests read."""
    with open(log, "a", encoding="utf-8") as file:
        file.write(json.dumps(entry) + "\n")


class Recorder:
    """ASGI middleware: records each POST's Authorization header."""

    def __init__(self, app: ASGIApp, log: str) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            record(self.log, {"post": headers.get("authorization", "")})
        await self.app(scope, receive, send)


class Executor(AgentExecutor):
    """The remote agent: its behaviour is named by the message's first word."""

    def __init__(self, log: str) -> None:
        self.log = log

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = get_message_text(context.message)
        word = text.split()[0] if text.split() else ""
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        tid, cid = task.id, task.context_id

        async def status(state: int, words: str) -> None:
            await event_queue.enqueue_event(new_text_status_update_event(tid, cid, state, words))  # type: ignore[arg-type]

        async def answer_text(words: str) -> None:
            event = new_text_artifact_update_event(tid, cid, "answer", words, last_chunk=True)
            await event_queue.enqueue_event(event)
            await status(TaskState.TASK_STATE_COMPLETED, "done")

        if word == "text":
            await answer_text("the answer is 42")
        elif word == "data":
            event = new_data_artifact_update_event(
                tid, cid, "invoice", {"total": 12.5, "lines": [1, 2]}, last_chunk=True
            )
            await event_queue.enqueue_event(event)
            await status(TaskState.TASK_STATE_COMPLETED, "done")
        elif word == "progress":
            await status(TaskState.TASK_STATE_WORKING, "reading the ledger")
            await asyncio.sleep(0.05)
            await status(TaskState.TASK_STATE_WORKING, "adding it up")
            await asyncio.sleep(0.05)
            await answer_text("balanced")
        elif word == "fail":
            await status(TaskState.TASK_STATE_FAILED, "disk on fire")
        elif word == "input":
            await status(TaskState.TASK_STATE_INPUT_REQUIRED, "which account?")
        elif word == "slow":
            record(self.log, {"started": tid})
            await status(TaskState.TASK_STATE_WORKING, "working slowly")
            await asyncio.sleep(3600)
        elif word == "die":
            await status(TaskState.TASK_STATE_WORKING, "about to die")
            await asyncio.sleep(0.2)
            os._exit(3)
        elif word == "headers":
            await answer_text("seen")
        elif word == "echo":
            await answer_text(f"task={context.task_id} context={context.context_id} text={text}")
        else:
            await answer_text(f"unknown: {text}")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        record(self.log, {"cancelled": context.task_id})
        tid, cid = context.task_id or "", context.context_id or ""
        event = new_text_status_update_event(tid, cid, TaskState.TASK_STATE_CANCELED, "stopped")
        await event_queue.enqueue_event(event)


def polled(asked: int) -> dict[str, Any]:
    """The ``poll`` task as ``GetTask`` answers it the n-th time (0: when it is sent)."""
    words = ["queued", "halfway", "done"][min(asked, 2)]
    task: dict[str, Any] = {
        "id": "p1",
        "contextId": "c1",
        "status": {
            "state": "TASK_STATE_COMPLETED" if asked >= 2 else "TASK_STATE_WORKING",
            "message": {"messageId": str(asked), "role": "ROLE_AGENT", "parts": [{"text": words}]},
        },
    }
    if asked >= 2:
        task["artifacts"] = [{"artifactId": "a", "parts": [{"text": "polled answer"}]}]
    return task


async def fault(request: Request) -> Response:
    """Answers as no good A2A server would, as the message's first word says."""
    body = await request.json()
    rpc = {"jsonrpc": "2.0", "id": body["id"]}
    if body["method"] == "CancelTask":
        record(request.app.state.log, {"cancel-unanswered": body["params"]["id"]})
        await asyncio.sleep(3600)
    if body["method"] == "GetTask":
        asked = request.app.state.asked = getattr(request.app.state, "asked", 0) + 1
        record(request.app.state.log, {"get": body["params"]["id"]})
        return JSONResponse({**rpc, "result": polled(asked)})
    word = body["params"]["message"]["parts"][0]["text"].split()[0]
    if word == "poll":
        return JSONResponse({**rpc, "result": {"task": polled(0)}})
    if word == "http503":
        return PlainTextResponse("overloaded, come back later", status_code=503)
    if word == "rpc-error":
        return JSONResponse({**rpc, "error": {"code": -32004, "message": "not today"}})
    if word == "not-json":
        return HTMLResponse("<html>a login page</html>")
    if word == "silent":
        await asyncio.sleep(3600)
    if word == "bad-event":
        return Response("data: {oops\n\n", media_type="text/event-stream")
    # short-stream: the task starts working, and the stream ends there.
    task = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}
    event = json.dumps({**rpc, "result": {"task": task}})
    if word == "stuck":

        async def forever() -> AsyncIterator[str]:
            yield f"data: {event}\n\n"
            await asyncio.sleep(3600)

        return StreamingResponse(forever(), media_type="text/event-stream")
    return Response(f"data: {event}\n\n", media_type="text/event-stream")


def main() -> None:
    log = sys.argv[1]
    streaming = "--no-streaming" not in sys.argv
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    card = AgentCard(
        name="ledger",
        description="Keeps the books and answers questions about them.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/{'fault' if '--fault' in sys.argv else ''}",
                # --grpc-only: a card whose one interface is not JSON-RPC.
                protocol_binding="GRPC" if "--grpc-only" in sys.argv else "JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id="books", name="books", description="Bookkeeping", tags=["books"])],
    )
    handler = DefaultRequestHandler(Executor(log), InMemoryTaskStore(), card)
    routes: list[Any] = [
        *create_jsonrpc_routes(handler, "/"),
        Route("/fault", fault, methods=["POST"]),
    ]
    if "--bad-card" in sys.argv:

        async def garbage(request: Request) -> PlainTextResponse:
            return PlainTextResponse("this is not a card", media_type="application/json")

        routes.append(Route("/.well-known/agent-card.json", garbage))
    else:
        routes.extend(create_agent_card_routes(card))
    starlette = Starlette(routes=routes)
    starlette.state.log = log
    app = Recorder(starlette, log)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    sys.stdout.write(f"port {port}\n")
    sys.stdout.flush()
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
