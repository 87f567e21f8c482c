"""``Server``: agents served over HTTP on hypercorn's trio worker, a supervisable child.

It puts the pieces together: the agents' ``Runs``, the surfaces built over them, the
ASGI ``App`` in front, and hypercorn listening (_listen). Leaving ``serve`` (``shutdown``,
or a cancel, which drains the same way within ``drain_timeout``) closes every connection
and stops every run task it started: nothing of it outlives its scope.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, cast, final

import attrs
import trio

from ..agents import Agent, internal
from ..cluster import Node
from ..models import Model
from ..store import PostgresStore, Store
from ._a2a import A2ACardSurface, A2ASurface
from ._agui import AGUISurface
from ._api import ApiSurface
from ._app import MAX_BODY, App
from ._cluster_runs import ClusterRuns
from ._console import ConsoleSurface
from ._http import JSONAnswer, Request, SSEAnswer, Surface
from ._mcp import MCPApp
from ._open_runs import open_local_runs
from ._rebinding import is_loopback
from ._runs import Runs
from ._slots import CappedRuns, RunSlots
from ._tokens import TokenBook

__all__ = ["DRAIN_TIMEOUT", "SURFACES", "ServeContext", "Server", "SurfaceFactory", "is_loopback"]

log = logging.getLogger("satsuma.serve")
_BACKLOG = 4096
_KEEP_ALIVE = 75.0  # seconds
DRAIN_TIMEOUT = 30.0


@attrs.frozen
class ServeContext:
    """What a surface is built from.

    Attributes:
        runs: The server's runs: every surface's one way to agents. Its ``start``
            counts the run against the request's token (429 past the cap) until the
            run ends or pauses: a surface needs to do nothing for the cap.
        slots: The cap on runs in flight per token, for a surface that holds a slot
            of its own.
        tokens: The server's tokens (None: it has none), for a surface that logs in
            with them itself (the console).
    """

    runs: Runs
    slots: RunSlots
    tokens: TokenBook | None = None


SurfaceFactory = Callable[[ServeContext], Surface]
"""Builds one surface over a server's runs (``MySurface(context)``, say)."""


@final
@attrs.frozen
class _MCPSurface:
    """``/mcp``: the MCP SDK's own ASGI app behind the server's app (which reads no body
    for it, but keeps the limit and leaves the principal in the scope)."""

    app: MCPApp
    prefix: str = "/mcp"

    @property
    def asgi(self) -> Any:
        return self.app

    def open(self) -> AbstractAsyncContextManager[None]:
        return self.app.run()

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        raise AssertionError("an ASGI surface is called through asgi")  # pragma: no cover


SURFACES: list[SurfaceFactory] = [
    lambda context: ApiSurface(context.runs),
    lambda context: A2ASurface(context.runs),
    lambda context: A2ACardSurface(context.runs),
    lambda context: AGUISurface(context.runs),
    lambda context: _MCPSurface(MCPApp(context.runs)),
    lambda context: ConsoleSurface(context.runs, context.tokens),
]
"""The surfaces every ``Server`` serves unless given others: satsuma's API, A2A, AG-UI,
MCP and the console add themselves here, one line each."""


def _served(agents: Iterable[type[Agent[Any]]]) -> dict[str, type[Agent[Any]]]:
    by_name: dict[str, type[Agent[Any]]] = {}
    for agent in agents:
        name = internal.spec_of(agent).name
        if name in by_name and by_name[name] is not agent:
            raise ValueError(
                f"two agent classes are named {name!r} ({by_name[name].__qualname__} and "
                f"{agent.__qualname__}): each served class needs its own Agent.name"
            )
        by_name[name] = agent
    return by_name


RunsFactory = Callable[[], AbstractAsyncContextManager[Runs]]


@final
class Server:
    """Agents served over HTTP: satsuma's API, A2A, AG-UI and MCP (docs/serve.md).

    ``await sup.start_child(server)`` serves until the supervisor stops it;
    ``server.asgi`` is the ASGI app, to mount in another trio ASGI app (its runs then
    need ``server.open_runs()`` held around it).

    Args:
        agents: The agent classes served, each by its ``Agent.name``.
        store: Where conversations, runs and approvals are kept (a memory store when
            None: nothing survives a restart); a ``PostgresStore`` makes the server a
            front of a cluster (docs/serve.md, "In a cluster").
        model: The model every agent uses, or one per agent name; by default each
            class's own.
        tokens: A token file's path (or a ``TokenBook``); None serves everyone with
            every scope, and then only on a loopback host unless ``insecure``.
        host: The address to listen on.
        port: The port; 0 for any free one (``url`` says which, once serving).
        insecure: Allow a host other than loopback without tokens.
        cors_origins: Origins whose browser pages may call the server.
        certfile: A TLS certificate (PEM) to serve HTTPS with, and its ``keyfile``.
        max_body: Bodies longer than this many bytes are refused (413).
        max_runs_per_token: Runs in flight per token at most (429 past it).
        max_subscribers: SSE streams open at once at most (503 past it).
        runs: Serve these runs instead of the agents in this process (a test's, or a
            cluster's); ``agents`` and ``store`` are then ignored.
        surfaces: The surfaces' factories (default: ``SURFACES``).
        node: With a ``PostgresStore`` (a cluster front: runs go through the cluster's
            queue, and any front answers for any run), also run a node serving the
            agents in this process.
        drain_timeout: Seconds a drain (``shutdown``, or ``serve`` cancelled) gives the
            requests and connections in flight to end; those still open then are cut
            (``connections_cut`` says how many).

    Raises:
        ValueError: two classes with one name; a host beyond loopback without tokens
            (and without ``insecure``); a certificate without its key; a negative
            ``drain_timeout``.
        TokenFileError: the token file cannot be read or is wrong.
    """

    def __init__(
        self,
        agents: Sequence[type[Agent[Any]]] = (),
        *,
        store: Store | None = None,
        model: Model | Mapping[str, Model] | None = None,
        tokens: str | os.PathLike[str] | TokenBook | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        insecure: bool = False,
        cors_origins: Iterable[str] = (),
        certfile: str | os.PathLike[str] | None = None,
        keyfile: str | os.PathLike[str] | None = None,
        max_body: int = MAX_BODY,
        max_runs_per_token: int = 16,
        max_subscribers: int = 1000,
        runs: Runs | RunsFactory | None = None,
        surfaces: Sequence[SurfaceFactory] | None = None,
        node: bool = False,
        drain_timeout: float = DRAIN_TIMEOUT,
    ) -> None:
        self.agents = _served(agents)
        if not 0 <= drain_timeout < math.inf:
            raise ValueError(f"drain_timeout is seconds, 0 or more: got {drain_timeout!r}")
        self.drain_timeout = drain_timeout
        self.connections_cut = 0
        """How many connections the last drain cut, still open when its time was up."""
        book = TokenBook.from_file(tokens) if isinstance(tokens, (str, os.PathLike)) else tokens
        if book is None and not insecure and not is_loopback(host):
            raise ValueError(
                f"refusing to serve on {host} without tokens: give a token file "
                "(satsuma serve token create), or insecure=True (--insecure) to serve "
                "anyone who can reach it"
            )
        if (certfile is None) != (keyfile is None):
            raise ValueError("a TLS certificate needs its key: give certfile and keyfile")
        self.host = host
        self.port = port
        self.certfile = certfile
        self.keyfile = keyfile
        self.store = store
        self.model = model
        self._runs_given = runs
        if node and not isinstance(store, PostgresStore):
            raise ValueError(
                "node=True runs a cluster node beside the front: it needs a PostgresStore"
            )
        if node and isinstance(model, Mapping):
            raise ValueError("node=True takes one model for every agent, not one per agent")
        self.node = node
        self._factories = list(SURFACES if surfaces is None else surfaces)
        self._stop = trio.Event()
        self._urls: list[str] = []
        self.asgi = App(
            surfaces=[],
            runs=cast("Runs", _NotOpen()),
            tokens=book,
            cors_origins=frozenset(cors_origins),
            max_body=max_body,
            slots=RunSlots(max_runs_per_token),
            max_subscribers=max_subscribers,
        )

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (or https) once serving, with the real port.

        Raises:
            RuntimeError: not serving yet.
        """
        if not self._urls:
            raise RuntimeError("the server is not serving yet")
        return self._urls[0]

    @asynccontextmanager
    async def open_runs(self) -> AsyncIterator[Runs]:
        """Open the runs and build the surfaces over them, for the block: what ``serve``
        does before listening, for an app that mounts ``asgi`` itself."""
        async with (
            self._open() as runs,
            trio.open_nursery() as watchers,
            AsyncExitStack() as lifetimes,
        ):
            capped = CappedRuns(runs, self.asgi.slots, watchers)
            context = ServeContext(
                runs=cast("Runs", capped), slots=self.asgi.slots, tokens=self.asgi.tokens
            )
            surfaces = [factory(context) for factory in self._factories]
            for surface in surfaces:
                # A surface with a lifetime of its own (MCP's session manager) has it
                # within the runs' own.
                opener = getattr(surface, "open", None)
                if opener is not None:
                    await lifetimes.enter_async_context(opener())
            self.asgi.runs = runs
            self.asgi.surfaces = surfaces
            try:
                yield runs
            finally:
                self.asgi.surfaces = []
                self.asgi.runs = cast("Runs", _NotOpen())
                watchers.cancel_scope.cancel()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Runs]:
        given = self._runs_given
        if given is None and isinstance(self.store, PostgresStore):
            # A cluster front: runs go through the cluster's queue; with node=True a node
            # serving these classes runs here too.
            await self.store.open()
            async with trio.open_nursery() as nursery:
                if self.node:
                    model = None if isinstance(self.model, Mapping) else self.model
                    node = Node(self.store, agents=list(self.agents.values()), model=model)
                    await nursery.start(node.serve)
                yield ClusterRuns(list(self.agents.values()), self.store)
                nursery.cancel_scope.cancel()
        elif given is None:
            async with open_local_runs(
                list(self.agents.values()), store=self.store, model=self.model
            ) as runs:
                yield runs
        elif callable(given) and not hasattr(given, "start"):
            async with given() as runs:
                yield runs
        else:
            yield given  # type: ignore[misc]

    def shutdown(self) -> None:
        """Drain: stop accepting, end the SSE streams, let requests in flight finish
        within ``drain_timeout`` (then cut the connections left), and return from
        ``serve``."""
        self._stop.set()
        self.asgi.stopping.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or ``shutdown``; ``task_status.started()`` once it
        accepts connections (``url`` is then known).

        Cancelled (a supervisor stopping its child), it drains as ``shutdown`` does
        before the cancel goes on: the event streams end cleanly and the requests in
        flight get ``drain_timeout`` seconds. The runs still in flight after that are
        cancelled as the server's runs close, their state kept in the store.
        """
        from ._listen import listen  # hypercorn: imported when serving, not with the room

        config = self._config()
        drained = trio.Event()

        async def listening(task_status: trio.TaskStatus[list[str]]) -> None:
            # Shielded: only shutdown() (or the cancel below, through it) ends it, so a
            # cancel drains rather than drops the connections; the drain is bounded.
            try:
                with trio.CancelScope(shield=True):
                    self.connections_cut = await listen(
                        self.asgi,
                        config,
                        stop=self._stop,
                        drain_timeout=self.drain_timeout,
                        task_status=task_status,
                    )
            finally:
                drained.set()
            if self.connections_cut:
                log.warning(
                    "drained: %d connection(s) still open after %gs were cut",
                    self.connections_cut,
                    self.drain_timeout,
                )

        async with self.open_runs(), trio.open_nursery() as nursery:
            self._urls = await nursery.start(listening)
            task_status.started()
            try:
                await drained.wait()
            except trio.Cancelled:
                self.shutdown()
                raise

    def _config(self) -> Any:
        from hypercorn.config import Config

        config = Config()
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        config.bind = [f"{host}:{self.port}"]
        config.accesslog = None
        # hypercorn's accept queue holds 100 connections by default: a burst past it (a
        # thousand event streams opening at once on a busy machine) had connections
        # reset by the kernel. The kernel caps this at its somaxconn.
        config.backlog = _BACKLOG
        # An idle connection is kept longer than the clients and proxies that reuse it
        # keep it (nginx's upstream keep-alive 60 s, httpx's pool 5 s): closed first by
        # the server, a request sent on it as it closes is lost (a proxy's 502).
        config.keep_alive_timeout = _KEEP_ALIVE
        config.errorlog = logging.getLogger("satsuma.serve.hypercorn")
        if self.certfile is not None:
            config.certfile = os.fspath(self.certfile)
            config.keyfile = os.fspath(self.keyfile) if self.keyfile is not None else None
        return config


class _NotOpen:
    """The runs of a server not serving yet: ``/readyz`` says not ready."""

    async def ready(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("the server's runs are not open: serve() or open_runs() first")
