"""ScriptedServer: a loopback model API played from a script, whatever the API's dialect.

It takes each request's answer from the script (a reply, an exception, a ``Failure``
played as the fault it stands for, or a function of the request body) and keeps the
requests it received; a dialect (``MessagesServer``, ``ChatCompletionsServer``) gives
the paths, the bodies and the stream's encoding. The HTTP is ``_http``'s.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import json
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, ClassVar, Self, TypeAlias, TypeVar

import attrs
import h11
import trio

from .. import models as _codec
from .._exceptions import ModelError
from ._bedrock_stream import EVENT_STREAM, bedrock_stream
from ._http import Answer, Drop, JSONAnswer, StreamAnswer, serve_connection
from ._script import (
    DEFAULT_KEPT_REQUESTS,
    Failure,
    Reply,
    as_reply,
    checked_keep,
    remember,
    unsendable,
)

__all__ = [
    "ReceivedRequest",
    "Route",
    "ScriptedServer",
    "ServerAnswer",
    "ServerScriptItem",
]

_ClientT = TypeVar("_ClientT")

ServerAnswer: TypeAlias = "Reply | str | Failure | Exception"
"""What the server answers one request with."""

ServerScriptItem: TypeAlias = (
    "ServerAnswer | Callable[[dict[str, Any]], ServerAnswer | Awaitable[ServerAnswer]]"
)
"""A script item: an answer, or a function of the request body that returns one."""

# An OAuth 2.0 token endpoint, for Google's credentials (a service account's file, say)
# whose token_uri is this server's: what Claude on Vertex AI authenticates with.
_TOKEN_PATH = "/token"
_TOKEN_SECONDS = 3600


@attrs.frozen(kw_only=True)
class ReceivedRequest:
    """A request as a ScriptedServer received it, for tests of what went over the wire.

    Attributes:
        method: The HTTP method.
        path: The path, without the query.
        headers: The headers, names in lower case (a repeated one: the last value).
        body: The JSON body.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]


@attrs.frozen
class Route:
    """What the path says about a request: body fields it stands for, and the fields
    the body itself must have."""

    implied: Mapping[str, Any]
    required: tuple[str, ...]
    # A stream in AWS's event-stream encoding (Bedrock's) rather than Server-Sent Events.
    event_stream: bool = False


def _header_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


def _check_item(item: object, where: str, *, function_allowed: bool = True) -> None:
    reply = item.then if isinstance(item, Failure) else item
    if isinstance(reply, Reply):
        # Refused here rather than when it is sent: a server cannot write such an input
        # in a body (ScriptedModel can hand it over, for the agent's gate to refuse).
        problem = unsendable(reply)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
    if isinstance(item, Failure):
        if item.kind not in _FAILURE_KINDS:
            raise ValueError(f"{where}: unknown Failure kind {item.kind!r}")
    elif not isinstance(item, (Reply, str, Exception)) and not (
        function_allowed and callable(item)
    ):
        raise TypeError(
            f"{where} must be a str, a Reply, a Failure, an exception"
            f"{' or a function of the request body' if function_allowed else ''}, got: {item!r}"
        )


class ScriptedServer:
    """A loopback model API played from a script: the HTTP and the script, for a
    dialect (a subclass) to give the paths, the bodies and the stream's encoding.

    See MessagesServer for the script and the arguments.
    """

    # The name the dialect's messages use.
    _server_name: ClassVar[str] = "ScriptedServer"

    def __init__(
        self,
        script: Iterable[ServerScriptItem] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        then: Callable[[dict[str, Any]], ServerAnswer | Awaitable[ServerAnswer]] | None = None,
        keep_requests: int | None = DEFAULT_KEPT_REQUESTS,
    ) -> None:
        items = list(script)
        for index, item in enumerate(items):
            _check_item(item, f"script[{index}]")
        if then is not None and not callable(then):
            raise TypeError(f"then must be a function of the request body, got: {then!r}")
        self.host = host
        self.port = port
        self._then = then
        self._keep = checked_keep(keep_requests)
        self.requests: list[dict[str, Any]] = []
        self.request_count = 0
        self.received: list[ReceivedRequest] = []
        self.token_requests: list[ReceivedRequest] = []
        self.access_tokens: list[str] = []
        self._script: deque[ServerScriptItem] = deque(items)
        self._played = 0
        self._response_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._state = _State.NEW
        self._base_url = ""
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        # Clients made by client(), closed when the server stops.
        self._clients: list[Any] = []

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the running server.

        Raises:
            RuntimeError: The server is not running.
        """
        if self._state is not _State.RUNNING:
            raise RuntimeError(f"the {self._server_name} is {self._state.value}, not running")
        return self._base_url

    @property
    def token_uri(self) -> str:
        """The URL of the server's OAuth 2.0 token endpoint, for a credentials file's
        ``token_uri`` (see ``access_tokens``).

        Raises:
            RuntimeError: The server is not running.
        """
        return f"{self.base_url}{_TOKEN_PATH}"

    @property
    def remaining(self) -> int:
        """How many script items have not been played yet."""
        return len(self._script)

    async def __aenter__(self) -> Self:
        if self._state is not _State.NEW:
            raise RuntimeError(f"a {self._server_name} can be started only once")
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        host, port = listeners[0].socket.getsockname()[:2]
        self._base_url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        # The sockets listen already, so a client may connect before the task first runs.
        # Connections are served in this nursery too, so that a crash of one (a script
        # function that raised) comes out in one exception group, not two nested ones.
        self._nursery.start_soon(
            partial(
                trio.serve_listeners,
                self._serve_connection,
                listeners,
                handler_nursery=self._nursery,
            )
        )
        self._state = _State.RUNNING
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._nursery is not None and self._nursery_manager is not None
        with trio.CancelScope(shield=True):
            for client in self._clients:
                await client.close()
        self._state = _State.CLOSED
        self._nursery.cancel_scope.cancel()
        # The body's own exception is not handed to the nursery, which would wrap it in an
        # ExceptionGroup: it propagates as it is once the server's tasks are gone. Only a
        # crash of the server itself (a bug, or a script function that raised) comes out
        # of the nursery.
        await self._nursery_manager.__aexit__(None, None, None)

    def _keep_client(
        self, make: Callable[..., _ClientT], base_url: str, options: Mapping[str, Any]
    ) -> _ClientT:
        """A client of the dialect's SDK for this server: a test key, no SDK retries,
        ``options`` over those; closed when the server stops."""
        settings: dict[str, Any] = {
            "api_key": "test-key",
            "base_url": base_url,
            "max_retries": 0,
            **options,
        }
        client = make(**settings)
        self._clients.append(client)
        return client

    # --- The dialect ---------------------------------------------------------------------

    def _route(self, method: str, path: str) -> Route | None:
        """How the script answers a request to this path, or None (a 404)."""
        raise NotImplementedError

    def _wants_stream(self, payload: dict[str, Any]) -> bool:
        return payload.get("stream") is True

    def _error(self, status: int, message: str, *headers: tuple[str, str]) -> JSONAnswer:
        raise NotImplementedError

    def _reply(
        self, reply: Reply, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> JSONAnswer | StreamAnswer:
        raise NotImplementedError

    def _stream_error(self, message: str) -> bytes:
        """An overloaded error sent inside a stream."""
        raise NotImplementedError

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        await serve_connection(stream, self._answer, self._response_ids)

    # --- The script ----------------------------------------------------------------------

    async def _answer(self, request: h11.Request, body: bytes) -> Answer:
        method = request.method.decode("ascii", "replace")
        path = request.target.decode("ascii", "replace").split("?", 1)[0]
        if method == "POST" and path == _TOKEN_PATH:
            return self._token(request, method, path, body)
        route = self._route(method, path)
        if route is None:
            return self._error(404, f"Not found: {method} {path}")
        try:
            payload = json.loads(body)
        except ValueError:
            return self._error(400, "The request body is not valid JSON")
        if not isinstance(payload, dict):
            return self._error(400, "The request body must be a JSON object")
        missing = [key for key in route.required if key not in payload]
        if missing:
            return self._error(400, f"{missing[0]}: Field required")
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in request.headers
        }
        remember(
            self.received,
            ReceivedRequest(method=method, path=path, headers=headers, body=payload),
            self._keep,
        )
        remember(self.requests, payload, self._keep)
        self.request_count += 1
        # What the path says (a Bedrock request's model and stream) is the script's too.
        payload = {**payload, **route.implied}
        if self._script:
            item = self._script.popleft()
        elif self._then is not None:
            item = self._then
        else:
            return self._error(
                500, f"{self._server_name} script exhausted after {self._played} requests"
            )
        self._played += 1
        if not callable(item):
            return _encoded(await self._play(item, payload, len(body)), route)
        answer = item(payload)
        if inspect.isawaitable(answer):
            answer = await answer
        where = (
            "the then function returned"
            if item is self._then
            else f"the function at script[{self._played - 1}] returned"
        )
        _check_item(answer, where, function_allowed=False)
        return _encoded(await self._play(answer, payload, len(body)), route)

    def _token(self, request: h11.Request, method: str, path: str, body: bytes) -> Answer:
        """Issue an access token for an OAuth 2.0 token request (a form, not JSON), as
        Google's token endpoint does; the script is not played."""
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
        if "grant_type" not in form:
            return JSONAnswer(400, {"error": "invalid_request"})
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in request.headers
        }
        self.token_requests.append(
            ReceivedRequest(method=method, path=path, headers=headers, body=form)
        )
        token = f"ya29.loopback-{len(self.access_tokens) + 1}"
        self.access_tokens.append(token)
        return JSONAnswer(
            200, {"access_token": token, "expires_in": _TOKEN_SECONDS, "token_type": "Bearer"}
        )

    async def _play(self, item: object, payload: dict[str, Any], prompt_chars: int) -> Answer:
        stream = self._wants_stream(payload)
        if isinstance(item, Failure):
            return await _FAILURES[item.kind](self, item, payload, prompt_chars, stream)
        if isinstance(item, ModelError):
            headers = []
            if item.retry_after is not None:
                headers.append(("retry-after", _header_seconds(item.retry_after)))
            return self._error(item.status or 500, item.message, *headers)
        if isinstance(item, Exception):
            return self._error(500, str(item))
        assert isinstance(item, (Reply, str))
        return self._reply(as_reply(item), payload, prompt_chars, stream)

    async def _status(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> Answer:
        headers = []
        if failure.retry_after is not None:
            headers.append(("retry-after", _header_seconds(failure.retry_after)))
        status = failure.status or 500
        return self._error(status, failure.message or _codec.error_type(status), *headers)

    async def _cut(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> Answer:
        if not stream:
            return Drop()
        answer = self._reply(as_reply(failure.then or ""), payload, prompt_chars, stream=True)
        assert isinstance(answer, StreamAnswer)
        return StreamAnswer(answer.frames, cut_after=failure.after_events)

    async def _error_event(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> Answer:
        message = failure.message or "Overloaded"
        if not stream:
            # Without a stream there is no event to send: the API answers with the status.
            return self._error(529, message)
        answer = self._reply(as_reply(failure.then or ""), payload, prompt_chars, stream=True)
        assert isinstance(answer, StreamAnswer)
        return StreamAnswer(
            answer.frames[: failure.after_events], error=self._stream_error(message)
        )

    async def _slow(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> Answer:
        await trio.sleep(failure.delay)
        return await self._play(failure.then or "", payload, prompt_chars)


def _encoded(answer: Answer, route: Route) -> Answer:
    """The answer in the route's stream encoding (Bedrock's: see ``_bedrock_stream``)."""
    if not route.event_stream or not isinstance(answer, StreamAnswer):
        return answer
    frames, error = bedrock_stream(answer.frames, answer.error)
    return attrs.evolve(answer, frames=frames, error=error, content_type=EVENT_STREAM)


_FailureHandler: TypeAlias = Callable[
    [ScriptedServer, Failure, dict[str, Any], int, bool], Awaitable[Answer]
]

# Failure.kind -> how the server plays it.
_FAILURES: dict[str, _FailureHandler] = {
    "status": ScriptedServer._status,
    "cut": ScriptedServer._cut,
    "error_event": ScriptedServer._error_event,
    "slow": ScriptedServer._slow,
}
_FAILURE_KINDS = frozenset(_FAILURES)
