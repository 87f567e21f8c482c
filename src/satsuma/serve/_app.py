"""The server's ASGI application: everything a request meets before a surface answers it.

In order: without tokens, the DNS-rebinding check (_rebinding: 421 for a foreign
``Host``, 403 for a foreign ``Origin``); ``/healthz`` and ``/readyz`` (no token needed: they say nothing but whether
the server is up); a CORS preflight from a listed origin; the body, read in chunks and
refused past the limit (413, never buffered past it; a ``Content-Length`` far over it
refused without reading); the token (401; not asked on a surface's public paths, such
as A2A's agent cards); the surface whose prefix the path starts with (404 for none).
Whatever a surface raises becomes a JSON error here, in one place for every surface: its
``HTTPError``, the ``Runs`` exceptions by the table below, and anything else a 500 that
says only "internal error" (its traceback goes to the ``satsuma.serve`` log, never to
the client; no token is in a request the log describes).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, final
from urllib.parse import parse_qsl

import attrs
import trio

from .._exceptions import StoreError
from ._http import (
    NOBODY,
    ASGIApp,
    HTTPError,
    JSONAnswer,
    Principal,
    Request,
    SSEAnswer,
    Surface,
)
from ._rebinding import rebinding_refusal
from ._runs import AlreadyDecided, BadDecision, Busy, NotResumed, Runs, UnknownAgent, UnknownRun
from ._slots import CURRENT_PRINCIPAL, RunSlots
from ._sse import KEEPALIVE_SECONDS, send_stream
from ._tokens import TokenBook, TokenFileError

__all__ = ["MAX_BODY", "App", "error_for"]

MAX_BODY = 1024 * 1024
# A body refused as too large is read and dropped (see _discard) up to this many times
# the limit; past that the 413 is sent without reading it.
_DRAIN_LIMIT = 4
EVERYONE = Principal(None, frozenset({"run", "read", "approve", "admin"}))
PRINCIPAL_KEY = "satsuma.principal"
"""Where an ASGI surface (MCP's) finds the request's principal in its scope."""

log = logging.getLogger("satsuma.serve")

# The Runs exceptions as HTTP errors, for every surface. Checked in order: BadDecision
# is a ValueError, and ValueError (what Runs raises for bad input) comes last.
_RUNS_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (UnknownRun, 404, "not_found"),
    (UnknownAgent, 404, "unknown_agent"),
    (Busy, 409, "busy"),
    (AlreadyDecided, 409, "already_decided"),
    (BadDecision, 400, "bad_decision"),
    (ValueError, 400, "bad_request"),
)
_CORS_METHODS = b"GET, POST, DELETE, OPTIONS"
_CORS_HEADERS = (
    b"authorization, content-type, last-event-id, a2a-version, a2a-extensions, "
    b"mcp-session-id, mcp-protocol-version, accept"
)


def error_for(error: Exception) -> HTTPError:
    """The HTTP error ``error`` stands for: itself, or a ``Runs`` exception mapped.

    Raises:
        Exception: ``error`` itself when it maps to nothing (a bug: a 500).
    """
    if isinstance(error, HTTPError):
        return error
    if isinstance(error, NotResumed):  # logged where it happened (LocalRuns)
        return HTTPError(503, "unavailable", error.public)
    if isinstance(error, StoreError):  # a full disk, a lost database: said, not shown
        log.warning("the store failed: %s", error)
        return HTTPError(503, "unavailable", "the store failed to answer; try again later")
    for kind, status, name in _RUNS_ERRORS:
        if isinstance(error, kind):
            return HTTPError(status, name, str(error) or kind.__name__)
    raise error


def _headers(scope: Mapping[str, Any]) -> dict[str, str]:
    joined: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = bytes(raw_name).decode("latin-1").lower()
        value = bytes(raw_value).decode("latin-1")
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined


def _encode(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]


@final
@attrs.define(eq=False)
class App:
    """The ASGI app of a server: ``server.asgi``. Mount it in another trio ASGI app as
    it is; it answers ``lifespan`` itself.

    Attributes:
        surfaces: What answers under each prefix (the longest prefix wins).
        runs: Asked by ``/readyz``.
        tokens: The accepted tokens; None serves every request with every scope.
        cors_origins: Origins whose browsers may call the server (none by default).
        max_body: Bodies longer than this are a 413.
        slots: The cap on runs in flight per token (for surfaces: ``admit``/``take``).
        max_subscribers: SSE streams open at once at most; past it, a 503.
        keepalive: Seconds between keep-alive comments on a quiet SSE stream.
    """

    surfaces: Sequence[Surface]
    runs: Runs
    tokens: TokenBook | None = None
    cors_origins: frozenset[str] = frozenset()
    max_body: int = MAX_BODY
    slots: RunSlots = attrs.field(factory=lambda: RunSlots(16))
    max_subscribers: int = 1000
    keepalive: float = KEEPALIVE_SECONDS
    stopping: trio.Event = attrs.field(factory=trio.Event)
    subscribers: int = attrs.field(default=0, init=False)

    def in_flight(self, principal: Principal) -> Any:
        """``async with app.in_flight(principal):`` holds a run slot (429 past the cap)."""
        return self.slots.admit(principal)

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Any,
        send: Any,
    ) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            # A websocket: no surface speaks it. Refused before it is accepted.
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        started = False

        async def start(status: int, headers: list[tuple[bytes, bytes]]) -> None:
            nonlocal started
            started = True
            await send({"type": "http.response.start", "status": status, "headers": headers})

        cors = self._cors(scope)
        try:
            try:
                await self._answer(scope, receive, send, start, cors)
            except Exception as error:
                # The one place every surface's failures become answers.
                raise error_for(error) from error
        except HTTPError as error:
            if started:
                log.warning(
                    "%s %s failed after its answer began: %s",
                    scope.get("method"),
                    scope.get("path"),
                    error.message,
                )
                return
            await _send_json(
                start,
                send,
                error.status,
                {"error": {"type": error.kind, "message": error.message}},
                {
                    **error.headers,
                    **({"WWW-Authenticate": "Bearer"} if error.status == 401 else {}),
                },
                cors,
            )
        except Exception:
            log.exception("internal error answering %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _send_json(
                    start,
                    send,
                    500,
                    {"error": {"type": "internal", "message": "internal error"}},
                    {},
                    cors,
                )

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _cors(self, scope: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
        origin = _headers(scope).get("origin")
        if origin is None or origin not in self.cors_origins:
            return []
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"origin"),
            (b"access-control-expose-headers", b"retry-after, mcp-session-id"),
        ]

    async def _answer(
        self,
        scope: MutableMapping[str, Any],
        receive: Any,
        send: Any,
        start: Any,
        cors: list[tuple[bytes, bytes]],
    ) -> None:
        method = str(scope.get("method", "GET")).upper()
        path = str(scope.get("path", "/"))
        headers = _headers(scope)
        if self.tokens is None:
            # A browser's request from elsewhere (DNS rebinding, a cross-origin page).
            refusal = rebinding_refusal(scope, headers, self.cors_origins)
            if refusal is not None:
                raise refusal
        if path in ("/healthz", "/readyz"):
            await self._health(path, method, start, send, cors)
            return
        if method == "OPTIONS" and cors and "access-control-request-method" in headers:
            await start(
                204,
                [
                    *cors,
                    (b"access-control-allow-methods", _CORS_METHODS),
                    (b"access-control-allow-headers", _CORS_HEADERS),
                    (b"access-control-max-age", b"600"),
                ],
            )
            await send({"type": "http.response.body", "body": b""})
            return
        surface = self._surface(path)
        if getattr(surface, "authenticates", False):
            # The console: its own login page and session cookie (and CSRF on POSTs).
            await surface.asgi(scope, self._bounded(receive, headers), send)  # type: ignore[attr-defined]
            return
        is_public = getattr(surface, "is_public", None)
        if self.tokens is not None and is_public is not None and is_public(path):
            principal = NOBODY
        else:
            principal = self._authenticate(headers, method)
        # Per request task (trio copies the context into each task it starts).
        CURRENT_PRINCIPAL.set(principal)
        asgi: ASGIApp | None = getattr(surface, "asgi", None)
        if asgi is not None:
            scope[PRINCIPAL_KEY] = principal
            await asgi(scope, self._bounded(receive, headers), send)
            return
        body = await self._body(receive, headers)
        query = dict(
            parse_qsl(
                bytes(scope.get("query_string", b"")).decode("latin-1"), keep_blank_values=True
            )
        )
        request = Request(
            method=method,
            path=path,
            query=query,
            headers=headers,
            body=body,
            principal=principal,
            scheme=str(scope.get("scheme", "http")),
            tokens_required=self.tokens is not None,
        )
        answer = await surface.handle(request)
        if isinstance(answer, JSONAnswer):
            await _send_json(start, send, answer.status, answer.body, answer.headers, cors)
            return
        await self._stream(answer, start, send, receive, cors)

    async def _health(
        self, path: str, method: str, start: Any, send: Any, cors: list[tuple[bytes, bytes]]
    ) -> None:
        if method not in ("GET", "HEAD"):
            raise HTTPError(
                405, "method_not_allowed", f"{path} answers GET only", headers={"Allow": "GET"}
            )
        if path == "/healthz":
            await _send_json(start, send, 200, {"status": "ok"}, {}, cors)
            return
        try:
            ready = await self.runs.ready()
        except Exception as error:  # a store that fails to answer is a server not ready
            log.warning("readyz: the store did not answer: %s", type(error).__name__)
            ready = False
        if self.stopping.is_set():
            raise HTTPError(503, "unavailable", "the server is stopping")
        if not ready:
            raise HTTPError(503, "unavailable", "the store is not open yet")
        await _send_json(start, send, 200, {"status": "ready"}, {}, cors)

    def _surface(self, path: str) -> Surface:
        best: Surface | None = None
        for surface in self.surfaces:
            exact = getattr(surface, "exact_paths", ())
            if path in exact:
                return surface
            prefix = surface.prefix
            root = prefix.rstrip("/")
            if (path == root or path.startswith(root + "/")) and (
                best is None or len(prefix) > len(best.prefix)
            ):
                best = surface
        if best is None:
            raise HTTPError(404, "not_found", "no such path")
        return best

    def _authenticate(self, headers: Mapping[str, str], method: str = "GET") -> Principal:
        if self.tokens is None:
            return EVERYONE
        given = headers.get("authorization")
        if given is None and method in ("GET", "HEAD"):
            # A console session's cookie reads too (a browser's EventSource sends no
            # header); it never sends a POST to another surface, where no CSRF token
            # is checked.
            for surface in self.surfaces:
                signed_in = getattr(surface, "signed_in", None)
                principal = signed_in(headers) if signed_in is not None else None
                if isinstance(principal, Principal):
                    return principal
        if given is None:
            raise HTTPError(
                401, "unauthorized", "a bearer token is required: Authorization: Bearer TOKEN"
            )
        scheme, _, token = given.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise HTTPError(401, "unauthorized", "the Authorization header is not 'Bearer TOKEN'")
        try:
            principal = self.tokens.authenticate(token)
        except TokenFileError as error:
            log.error("every token refused: %s", error)
            raise HTTPError(503, "unavailable", "the server cannot read its token file") from None
        if principal is None:
            # The token itself is never repeated: not here, not in a log.
            raise HTTPError(401, "unauthorized", "the bearer token is not valid")
        return principal

    def _too_large(self) -> HTTPError:
        return HTTPError(413, "too_large", f"the body is over {self.max_body} bytes")

    def _declared(self, headers: Mapping[str, str]) -> int | None:
        length = headers.get("content-length", "").strip()
        return int(length) if length.isdigit() else None

    def _check_length(self, headers: Mapping[str, str]) -> None:
        declared = self._declared(headers)
        if declared is not None and declared > self.max_body:
            raise self._too_large()

    async def _body(self, receive: Any, headers: Mapping[str, str]) -> bytes:
        declared = self._declared(headers)
        if declared is not None and declared > self.max_body:
            if declared <= _DRAIN_LIMIT * self.max_body:
                await _discard(receive, declared)
            raise self._too_large()
        chunks: list[bytes] = []
        size = 0
        # Hypercorn's receive is a trio channel's: a message already queued is taken
        # without a pass of the scheduler (one per message: two for a short body).
        queued = getattr(getattr(receive, "__self__", None), "receive_nowait", None)
        while True:
            try:
                if queued is None:
                    raise trio.WouldBlock
                message = queued()
            except trio.WouldBlock:
                message = await receive()
            if message["type"] == "http.disconnect":
                raise HTTPError(400, "bad_request", "the client went away before its body ended")
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > self.max_body:
                await _discard(receive, _DRAIN_LIMIT * self.max_body - size)
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _bounded(self, receive: Any, headers: Mapping[str, str]) -> Any:
        """``receive`` for an ASGI surface, with the body limit kept."""
        self._check_length(headers)
        size = 0

        async def bounded() -> Any:
            nonlocal size
            message = await receive()
            if message.get("type") == "http.request":
                size += len(message.get("body", b""))
                if size > self.max_body:
                    raise self._too_large()
            return message

        return bounded

    async def _stream(
        self,
        answer: SSEAnswer,
        start: Any,
        send: Any,
        receive: Any,
        cors: list[tuple[bytes, bytes]],
    ) -> None:
        if self.subscribers >= self.max_subscribers:
            aclose = getattr(answer.events, "aclose", None)
            if aclose is not None:
                await aclose()
            raise HTTPError(
                503,
                "unavailable",
                f"{self.max_subscribers} event streams are open already; retry later",
                headers={"Retry-After": "5"},
            )
        self.subscribers += 1
        try:
            await send_stream(
                answer,
                start=start,
                send=send,
                receive=receive,
                headers=[*_encode(answer.headers), *cors],
                stopping=self.stopping,
                to_error=error_for,
                keepalive=self.keepalive if self.keepalive > 0 else math.inf,
            )
        finally:
            self.subscribers -= 1


async def _discard(receive: Any, at_most: int) -> None:
    """Read and drop the rest of a body refused as too large, up to ``at_most`` bytes.

    A server that answers before the body is read and then closes leaves bytes unread in
    its socket, and closing such a socket sends a reset that can destroy the answer on
    its way: the client would see "connection reset" rather than the 413. Nothing read
    here is kept, and a body far over the limit is not read at all.
    """
    while at_most > 0:
        message = await receive()
        if message.get("type") != "http.request" or not message.get("more_body", False):
            return
        at_most -= len(message.get("body", b""))


async def _send_json(
    start: Any,
    send: Any,
    status: int,
    body: Any,
    headers: Mapping[str, str],
    cors: list[tuple[bytes, bytes]],
) -> None:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    await start(
        status,
        [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode("ascii")),
            *_encode(headers),
            *cors,
        ],
    )
    await send({"type": "http.response.body", "body": data})
