"""A FastAPI service whose conversations are supervised satsuma agents, on asyncio.

Run it with ``python examples/fastapi/app.py --port 8000`` (or ``uvicorn app:app``
from this folder), then::

    curl -s localhost:8000/ask -H 'content-type: application/json' \\
        -d '{"conversation": "c1", "prompt": "Where is order 42?"}'
    curl -sN localhost:8000/stream -H 'content-type: application/json' \\
        -d '{"conversation": "c1", "prompt": "And order 7?"}'

The app has no trio code of its own: its lifespan opens a ``satsuma.aio.Runtime`` (trio
as a guest of uvicorn's asyncio loop), each conversation is an agent started under the
runtime's supervisor with its history in a SQLite file, and the endpoints await the
agents' handles. A client that disconnects from ``/stream`` cancels its run, which ends
``cancelled`` in the store. Shutdown (Ctrl-C, SIGTERM) stops the agents gracefully.

With ANTHROPIC_API_KEY set the agents use the Anthropic API; without it, an offline
model that looks orders up with the ``lookup_order`` tool (one whose prompt contains
``SLOW`` takes a minute, for trying a disconnect). See README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

import satsuma
from satsuma.aio import AsyncioAgentHandle, Runtime
from satsuma.store import SQLiteStore
from satsuma.testing import FunctionModel, Reply

SLOW_MARKER = "SLOW"


@satsuma.tool
async def lookup_order(order_id: int, slow: bool = False) -> str:
    """Look an order up by its number."""
    # A trio tool, as any satsuma tool: the service around it is asyncio.
    await trio.sleep(60 if slow else 0.05)
    return f"order {order_id}: shipped"


class Assistant(satsuma.Agent):
    name = "assistant"
    system = "You answer customers' questions about their orders, briefly."
    tools = [lookup_order]
    max_iterations = 4


def offline_reply(request: satsuma.ModelRequest) -> Reply:
    """The offline model: look up the order a prompt names, then say what the tool said."""
    last = request.messages[-1]
    texts = [b["text"] for b in last.content if b.get("type") == "text"]
    results = [b for b in last.content if b.get("type") == "tool_result"]
    if results and not texts:  # (a new prompt may follow a cancelled run's answers)
        content = results[0]["content"]
        said = content if isinstance(content, str) else content[0]["text"]
        return Reply(text=f"Here is what I found: {said}.")
    prompt = texts[-1] if texts else ""
    order = re.search(r"order (\d+)", prompt)
    if order is None:
        return Reply(text=f"You said: {prompt}")
    call = {"order_id": int(order.group(1)), "slow": SLOW_MARKER in prompt}
    return Reply(text="Let me look.", tool_calls=[("lookup_order", call)])


def model() -> satsuma.Model | None:
    """The Anthropic API with a key in the environment; the offline model without."""
    return None if os.environ.get("ANTHROPIC_API_KEY") else FunctionModel(offline_reply)


class Ask(BaseModel):
    conversation: str
    prompt: str


class Conversations:
    """One supervised agent per conversation, started on first use; its history is kept
    in the store under the conversation's id, so it survives restarts of the agent and
    of the service."""

    def __init__(self, rt: Runtime, store: SQLiteStore) -> None:
        self.rt = rt
        self.store = store
        self._agents: dict[str, AsyncioAgentHandle[str]] = {}
        self._lock = asyncio.Lock()

    async def get(self, conversation: str) -> AsyncioAgentHandle[str]:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", conversation):
            raise HTTPException(400, "a conversation id is 1 to 64 letters, digits, - or _")
        async with self._lock:  # two first requests of a conversation start one agent
            if conversation not in self._agents:
                self._agents[conversation] = await self.rt.start_child(
                    Assistant,
                    id=conversation,
                    model=model(),
                    store=self.store,
                    agent_id=conversation,
                )
            return self._agents[conversation]


def create_app(database: Path) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Everything satsuma runs lives inside this block: leaving it (at shutdown)
        # cancels runs in flight (they end ``cancelled``, stored) and stops the agents.
        async with Runtime(max_restarts=10, within=60) as rt:
            app.state.conversations = Conversations(rt, SQLiteStore(database))
            yield

    app = FastAPI(title="satsuma on FastAPI", lifespan=lifespan)

    def conversations(request: Request) -> Conversations:
        found: Conversations = request.app.state.conversations
        return found

    @app.post("/ask")
    async def ask(body: Ask, request: Request) -> dict[str, Any]:
        agent = await conversations(request).get(body.conversation)
        try:
            result = await agent.run(body.prompt)
        except (satsuma.AgentCrashed, satsuma.AgentUnavailable) as exc:
            raise HTTPException(503, str(exc)) from exc
        return {"output": result.output, "status": result.status, "run_id": result.run_id}

    @app.post("/stream")
    async def stream(body: Ask, request: Request) -> StreamingResponse:
        agent = await conversations(request).get(body.conversation)

        async def sse() -> AsyncIterator[str]:
            # Starlette cancels this generator's task when the client goes away; the
            # cancellation reaches the run in trio, which ends ``cancelled``.
            async for event in agent.stream(body.prompt):
                data = json.dumps(satsuma.event_to_json(event), default=str)
                yield f"event: {type(event).__name__}\ndata: {data}\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    @app.get("/conversations/{conversation}/runs")
    async def runs(conversation: str, request: Request) -> list[dict[str, Any]]:
        found = conversations(request)
        records = await found.rt.run(found.store.runs, conversation)
        return [{"run_id": r.run_id, "status": r.status, "prompt": r.prompt} for r in records]

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        return conversations(request).rt.supervisor.count_children()

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--database", type=Path, default=Path("conversations.db"))
    args = parser.parse_args()
    uvicorn.run(create_app(args.database), host=args.host, port=args.port)


# For ``uvicorn app:app``: the store next to where it runs.
app = create_app(Path(os.environ.get("SATSUMA_DATABASE", "conversations.db")))

if __name__ == "__main__":
    main()
