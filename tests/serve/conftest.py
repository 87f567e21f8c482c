"""The serving tests' server: ``serve_http`` starts a real ``Server`` on 127.0.0.1, port
0, on hypercorn's trio worker, and gives its URL and an ``httpx.AsyncClient`` on it::

    async def test_something(serve_http: ServeHTTP) -> None:
        async with serve_http([Support], store=SQLiteStore(tmp_path / "a.db")) as served:
            answer = await served.client.get("/v1/runs/nope")

Leaving the block stops the server (its connections and every run task). Any keyword
of ``Server`` may be given; ``runs=`` serves a ``Runs`` of the test's own.

``EchoSurface`` (under ``/test/``) and ``TinyRuns`` are this folder's own: a surface and
runs small enough to test the app in front of every surface by.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

# Tests are imported in importlib mode (no package): make serve_agents importable.
sys.path.insert(0, str(Path(__file__).parent))

from satsuma.serve import (
    AlreadyDecided,
    BadDecision,
    Busy,
    HTTPError,
    JSONAnswer,
    Request,
    RunView,
    ServeContext,
    Server,
    ServerSentEvent,
    SSEAnswer,
    UnknownAgent,
    UnknownRun,
    agent_id_from,
)


@attrs.frozen
class Served:
    """A server serving: its ``url`` and a ``client`` whose base URL is it."""

    server: Server
    url: str
    client: httpx.AsyncClient


ServeHTTP = Callable[..., AbstractAsyncContextManager[Served]]


@asynccontextmanager
async def _serve_http(agents: Sequence[Any] = (), **options: Any) -> AsyncIterator[Served]:
    options.setdefault("port", 0)
    server = Server(agents, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            yield Served(server, server.url, client)
        nursery.cancel_scope.cancel()


@pytest.fixture
def serve_http() -> ServeHTTP:
    """``async with serve_http(agents, **Server options) as served:`` (see the module)."""
    return _serve_http


# --- a surface and runs to test the app by ----------------------------------------------


@attrs.define(eq=False)
class TinyRuns:
    """Runs that never run anything: what the app asks of them is ``ready``."""

    is_ready: bool = True
    agents: Mapping[str, Any] = attrs.field(factory=dict)

    async def ready(self) -> bool:
        return self.is_ready

    async def get(self, run_id: str) -> RunView:
        raise UnknownRun(f"no run {run_id!r}")


@attrs.define(eq=False)
class Stream:
    """Events an ``EchoSurface`` stream sends, and whether the stream was closed."""

    send: trio.MemorySendChannel[ServerSentEvent]
    receive: trio.MemoryReceiveChannel[ServerSentEvent]
    closed: trio.Event = attrs.field(factory=trio.Event)
    fail_first: Exception | None = None

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        try:
            if self.fail_first is not None:
                raise self.fail_first
            async for event in self.receive:
                yield event
        finally:
            self.closed.set()


_RAISED: dict[str, Exception] = {
    "unknown-run": UnknownRun("no run 'r-1'"),
    "unknown-agent": UnknownAgent("no agent 'nobody'"),
    "busy": Busy("a run is in progress"),
    "decided": AlreadyDecided("the call was decided already"),
    "bad-decision": BadDecision("no call 'c-9' in the run"),
    "value": ValueError("the prompt is empty"),
    "bug": RuntimeError("a bug: secret internals at /srv/app.py line 3"),
    "teapot": HTTPError(418, "teapot", "short and stout", headers={"X-Kind": "tea"}),
}


@attrs.define(eq=False)
class EchoSurface:
    """``/test/...``: echoes the request, raises on demand, streams on demand."""

    context: ServeContext
    prefix: str = "/test/"
    streams: list[Stream] = attrs.field(factory=list)
    slots_held: list[Any] = attrs.field(factory=list)

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        what = request.path.removeprefix("/test/")
        if what == "echo":
            return JSONAnswer(
                200,
                {
                    "method": request.method,
                    "path": request.path,
                    "query": dict(request.query),
                    "body": request.body.decode("utf-8", "replace"),
                    "principal": request.principal.name,
                },
            )
        if what == "json":
            return JSONAnswer(201, {"got": request.json()})
        if what.startswith("raise/"):
            raise _RAISED[what.removeprefix("raise/")]
        if what.startswith("agent/"):
            return JSONAnswer(200, {"agent_id": agent_id_from(what.removeprefix("agent/"))})
        if what.startswith("need/"):
            scope, _, agent = what.removeprefix("need/").partition("/")
            request.require(scope, agent or None)  # type: ignore[arg-type]
            return JSONAnswer(200, {"ok": True})
        if what == "run":
            slot = self.context.slots.take(request.principal)
            self.slots_held.append((request.principal.name, slot))
            return JSONAnswer(202, {"held": len(self.slots_held)})
        if what == "release":
            mine = next(held for held in self.slots_held if held[0] == request.principal.name)
            self.slots_held.remove(mine)
            mine[1].release()
            return JSONAnswer(200, {"held": len(self.slots_held)})
        if what.startswith("stream"):
            send, receive = trio.open_memory_channel[ServerSentEvent](100)
            stream = Stream(send, receive)
            if what == "stream/unknown":
                stream.fail_first = UnknownRun("no run 'r-2'")
            self.streams.append(stream)
            return SSEAnswer(stream.events(), headers={"X-Stream": str(len(self.streams))})
        raise HTTPError(404, "not_found", "no such test path")


@attrs.define(eq=False)
class Echo:
    """The surface factory, keeping the surface it built for the test to look at."""

    built: list[EchoSurface] = attrs.field(factory=list)

    def __call__(self, context: ServeContext) -> EchoSurface:
        surface = EchoSurface(context)
        self.built.append(surface)
        return surface

    @property
    def surface(self) -> EchoSurface:
        return self.built[-1]


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def tiny_runs() -> TinyRuns:
    return TinyRuns()


# --- PostgreSQL, for the cluster front's tests -------------------------------------------
# The store tests' server fixtures (tests/store/conftest.py), loaded as tests/cluster does.
import importlib.util as _importlib_util  # noqa: E402

_spec = _importlib_util.spec_from_file_location(
    "_satsuma_store_conftest_serve", Path(__file__).parent.parent / "store" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_store_conftest = _importlib_util.module_from_spec(_spec)
_spec.loader.exec_module(_store_conftest)
postgres_server = _store_conftest.postgres_server
postgres_dsn = _store_conftest.postgres_dsn
