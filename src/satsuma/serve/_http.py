"""HTTP as the serving surfaces see it: a request already read, bounded and
authenticated; an answer that is JSON or a stream of server-sent events; an error that
names its status. The ASGI details (reading the body in chunks, the 1 MiB limit,
disconnects, SSE framing and keep-alives, CORS) live here once, under every surface.

A surface (satsuma's API, A2A, AG-UI, the console) is a ``Surface``: the server's app
finds it by the path's prefix, authenticates the request (401 before any surface sees
it; a ``PublicPaths`` surface's public paths excepted), and calls ``handle``. The surface checks scopes with ``request.require`` (403) and
raises ``HTTPError`` for everything else; an exception of any other type is a 500 whose
body says only "internal error" (the traceback goes to the log, never to the client).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Literal, Protocol

import attrs

__all__ = [
    "ASGIApp",
    "HTTPError",
    "NOBODY",
    "JSONAnswer",
    "Principal",
    "PublicPaths",
    "Request",
    "SSEAnswer",
    "ServerSentEvent",
    "Surface",
    "agent_id_from",
]

Scope = Literal["run", "read", "approve", "admin"]

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


@attrs.frozen
class Principal:
    """Who sent a request: a token's name, scopes and the agents it reaches.

    Attributes:
        name: The token's name (``--name``), or None on a server without tokens.
        scopes: What it may do: ``run``, ``read``, ``approve``, ``admin`` (``admin``
            implies the others). A server without tokens gives every scope.
        agents: The agent names it reaches, or None for every agent.
    """

    name: str | None
    scopes: frozenset[Scope]
    agents: frozenset[str] | None = None

    def allows(self, scope: Scope, agent: str | None = None) -> bool:
        """True if it holds ``scope`` (and reaches ``agent`` when given)."""
        if scope not in self.scopes and "admin" not in self.scopes:
            return False
        return agent is None or self.agents is None or agent in self.agents


NOBODY = Principal(None, frozenset())
"""Who sent a request to a public path (an agent card) of a server with tokens: no
token was asked for, so it holds no scope."""


class HTTPError(Exception):
    """An answer other than success: ``{"error": {"type": kind, "message": message}}``
    with ``status`` (and ``headers``, e.g. ``Retry-After`` on a 429)."""

    def __init__(
        self, status: int, kind: str, message: str, *, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.headers = dict(headers or {})


@attrs.frozen(kw_only=True)
class Request:
    """A request, its body read whole (at most the server's limit, else 413 before any
    surface sees it).

    Attributes:
        method: ``GET``, ``POST``, ...
        path: The decoded path, without the query string.
        query: The query string's parameters (the last value of each).
        headers: Lower-case names; repeated headers joined with ``", "``.
        body: The body's bytes.
        principal: Who sent it (already authenticated; ``NOBODY`` on a public path
            of a server with tokens).
        scheme: ``http``, or ``https`` when the server runs under TLS.
        tokens_required: Whether the server asks for a bearer token (it has tokens):
            what an agent card declares.
    """

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    principal: Principal
    scheme: str = "http"
    tokens_required: bool = False

    def json(self) -> Any:
        """The body as JSON.

        Raises:
            HTTPError: 400 when the body is not JSON (or not UTF-8).
        """
        if not self.body:
            raise HTTPError(400, "bad_request", "the body is empty: expected JSON")
        try:
            return json.loads(self.body.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError:
            raise HTTPError(400, "bad_request", "the body is not UTF-8") from None
        except RecursionError:
            # A body of 1 MiB can nest deeper than the parser's recursion allows.
            raise HTTPError(400, "bad_request", "the body's JSON nests too deep") from None
        except ValueError as error:
            raise HTTPError(400, "bad_request", f"the body is not JSON: {error}") from None

    def require(self, scope: Scope, agent: str | None = None) -> None:
        """Raise ``HTTPError`` 403 unless the principal holds ``scope`` (and reaches
        ``agent``)."""
        if self.principal.allows(scope, agent):
            return
        who = f"token {self.principal.name!r}" if self.principal.name else "this token"
        if not self.principal.allows(scope):
            raise HTTPError(403, "forbidden", f"{who} lacks the scope {scope!r}")
        raise HTTPError(403, "forbidden", f"{who} does not reach the agent {agent!r}")


@attrs.frozen
class JSONAnswer:
    """An answer with a JSON body."""

    status: int
    body: Any
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class ServerSentEvent:
    """One event of an SSE stream: ``data`` (one JSON document, or text), with an
    ``id:`` and an ``event:`` line when given."""

    data: str
    id: str | None = None
    event: str | None = None


@attrs.frozen
class SSEAnswer:
    """A ``text/event-stream`` answer: each item of ``events`` is sent as it comes,
    with keep-alive comments while none comes. The stream is closed (and ``events``'
    ``aclose`` called) when the client goes away; that cancels nothing else."""

    events: AsyncIterator[ServerSentEvent]
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)


class Surface(Protocol):
    """A serving surface: the requests under ``prefix`` are its own."""

    @property
    def prefix(self) -> str:
        """The path prefix it answers, e.g. ``/v1/`` or ``/a2a/``."""
        ...

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        """Answer one request.

        Raises:
            HTTPError: for any answer other than success.
        """
        ...


class PublicPaths(Protocol):
    """A surface some of whose paths need no token (an A2A agent card: clients
    discover a server through it before they hold one)."""

    def is_public(self, path: str) -> bool:
        """True when ``path`` is answered without authenticating the request."""
        ...


MAX_AGENT_ID = 200


def agent_id_from(text: str) -> str:
    """``text`` as an ``agent_id`` taken from a path: 1 to 200 characters, none of them
    a control character or ``/``.

    Raises:
        HTTPError: 400 naming what is wrong (the id itself is not quoted: it may be
            anything a client sent).
    """
    if not 1 <= len(text) <= MAX_AGENT_ID:
        raise HTTPError(
            400, "bad_request", f"an agent_id is 1 to {MAX_AGENT_ID} characters, got {len(text)}"
        )
    if "/" in text:
        raise HTTPError(400, "bad_request", "an agent_id may not contain '/'")
    if any(unicodedata.category(char) == "Cc" for char in text):
        raise HTTPError(400, "bad_request", "an agent_id may not contain a control character")
    return text


def _no_constant(name: str) -> Any:
    # NaN and Infinity are Python's extension, not JSON: a body holding them is refused
    # rather than carried into a run where json.dumps would write them back out.
    raise ValueError(f"{name} is not JSON")
