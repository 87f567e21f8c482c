"""MessagesServer: a loopback HTTP server that speaks the Anthropic Messages API.

Tests point the real ``AsyncAnthropic`` client at it and get scripted replies, plain or
streamed, and the faults a real API produces (429, 529, 5xx, a stream cut short, an
``error`` event in a stream, a slow answer), with no network and no key.

The HTTP side and the script (``ScriptedServer``) do not depend on the API's dialect:
``ChatCompletionsServer`` plays the same scripts in OpenAI's. The wire shapes come from
``satsuma.models._codec``; this module only speaks HTTP/1.1 (with h11) and Server-Sent Events.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import json
import re
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeAlias, final

import attrs
import h11
import trio

from .. import models as _codec
from .._exceptions import ModelError
from ._bedrock_stream import EVENT_STREAM, bedrock_stream
from ._script import (
    DEFAULT_KEPT_REQUESTS,
    Failure,
    Reply,
    as_reply,
    checked_keep,
    estimate_usage,
    remember,
    reply_blocks,
    unsendable,
)

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "MessagesServer",
    "ReceivedRequest",
    "ScriptedServer",
    "ServerAnswer",
    "ServerScriptItem",
]

ServerAnswer: TypeAlias = "Reply | str | Failure | Exception"
"""What the server answers one request with."""

ServerScriptItem: TypeAlias = (
    "ServerAnswer | Callable[[dict[str, Any]], ServerAnswer | Awaitable[ServerAnswer]]"
)
"""A script item: an answer, or a function of the request body that returns one."""

_MESSAGES_PATH = "/v1/messages"
# Claude on Bedrock: the model id and whether to stream are in the path; a stream is in
# AWS's event-stream encoding.
_BEDROCK_PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<kind>invoke|invoke-with-response-stream)")
# Claude on Vertex AI (the client's base URL ends with /v1).
_VERTEX_PATH = re.compile(
    r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/"
    r"(?P<model>[^/:]+):(?P<kind>rawPredict|streamRawPredict)"
)
# An OAuth 2.0 token endpoint, for Google's credentials (a service account's file, say)
# whose token_uri is this server's: what Claude on Vertex AI authenticates with.
_TOKEN_PATH = "/token"
_TOKEN_SECONDS = 3600
_RECEIVE_SIZE = 65536


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
class _Route:
    """What the path says about a request: body fields it stands for, and the fields
    the body itself must have."""

    implied: Mapping[str, Any]
    required: tuple[str, ...]
    # A stream in AWS's event-stream encoding (Bedrock's) rather than Server-Sent Events.
    event_stream: bool = False


# --- What to send ----------------------------------------------------------------------


@attrs.frozen
class _JSONAnswer:
    status: int
    body: Mapping[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class _StreamAnswer:
    # The body's pieces, each one Server-Sent Event already encoded.
    frames: list[bytes]
    # Frames after which the connection is dropped with no end to the body, or None.
    cut_after: int | None = None
    # An error event, sent after the frames (then the connection is closed).
    error: bytes | None = None
    content_type: str = "text/event-stream"


@attrs.frozen
class _Drop:
    """Close the connection without answering."""


_Answer: TypeAlias = "_JSONAnswer | _StreamAnswer | _Drop"


def _header_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
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

    # --- The dialect ---------------------------------------------------------------------

    def _route(self, method: str, path: str) -> _Route | None:
        """How the script answers a request to this path, or None (a 404)."""
        raise NotImplementedError

    def _wants_stream(self, payload: dict[str, Any]) -> bool:
        return payload.get("stream") is True

    def _error(self, status: int, message: str, *headers: tuple[str, str]) -> _JSONAnswer:
        raise NotImplementedError

    def _reply(
        self, reply: Reply, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> _JSONAnswer | _StreamAnswer:
        raise NotImplementedError

    def _stream_error(self, message: str) -> bytes:
        """An overloaded error sent inside a stream."""
        raise NotImplementedError

    # --- HTTP ----------------------------------------------------------------------------

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await _receive_request(stream, connection)
                if request is None:
                    return
                answer = await self._answer(*request)
                if not await self._send(stream, connection, answer):
                    return
                if connection.our_state is h11.MUST_CLOSE:
                    return
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            # The client went away (a timeout, a closed client) or spoke no HTTP: that
            # connection is over, the server goes on. trio closes the stream.
            return

    async def _send(
        self, stream: trio.SocketStream, connection: h11.Connection, answer: _Answer
    ) -> bool:
        """Send an answer; whether the connection may serve another request."""
        request_id = ("request-id", f"req_test_{next(self._response_ids)}")
        if isinstance(answer, _Drop):
            return False
        if isinstance(answer, _JSONAnswer):
            data = json.dumps(answer.body).encode()
            headers = [
                ("content-type", "application/json"),
                ("content-length", str(len(data))),
                request_id,
                *answer.headers,
            ]
            await _write(
                stream, connection, h11.Response(status_code=answer.status, headers=headers)
            )
            await _write(stream, connection, h11.Data(data=data), h11.EndOfMessage())
            return True
        headers = [("content-type", answer.content_type), ("cache-control", "no-cache"), request_id]
        # No content-length: h11 sends the body chunked, as the API does.
        await _write(stream, connection, h11.Response(status_code=200, headers=headers))
        frames = answer.frames if answer.cut_after is None else answer.frames[: answer.cut_after]
        for frame in frames:
            await _write(stream, connection, h11.Data(data=frame))
        if answer.cut_after is not None:
            # Closed with the chunked body unfinished: the client sees the peer hang up
            # mid-message, as when a connection drops.
            return False
        if answer.error is not None:
            await _write(stream, connection, h11.Data(data=answer.error))
        await _write(stream, connection, h11.EndOfMessage())
        return answer.error is None

    # --- The script ----------------------------------------------------------------------

    async def _answer(self, request: h11.Request, body: bytes) -> _Answer:
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

    def _token(self, request: h11.Request, method: str, path: str, body: bytes) -> _Answer:
        """Issue an access token for an OAuth 2.0 token request (a form, not JSON), as
        Google's token endpoint does; the script is not played."""
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
        if "grant_type" not in form:
            return _JSONAnswer(400, {"error": "invalid_request"})
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in request.headers
        }
        self.token_requests.append(
            ReceivedRequest(method=method, path=path, headers=headers, body=form)
        )
        token = f"ya29.loopback-{len(self.access_tokens) + 1}"
        self.access_tokens.append(token)
        return _JSONAnswer(
            200, {"access_token": token, "expires_in": _TOKEN_SECONDS, "token_type": "Bearer"}
        )

    async def _play(self, item: object, payload: dict[str, Any], prompt_chars: int) -> _Answer:
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
    ) -> _Answer:
        headers = []
        if failure.retry_after is not None:
            headers.append(("retry-after", _header_seconds(failure.retry_after)))
        status = failure.status or 500
        return self._error(status, failure.message or _codec.error_type(status), *headers)

    async def _cut(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> _Answer:
        if not stream:
            return _Drop()
        answer = self._reply(as_reply(failure.then or ""), payload, prompt_chars, stream=True)
        assert isinstance(answer, _StreamAnswer)
        return _StreamAnswer(answer.frames, cut_after=failure.after_events)

    async def _error_event(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> _Answer:
        message = failure.message or "Overloaded"
        if not stream:
            # Without a stream there is no event to send: the API answers with the status.
            return self._error(529, message)
        answer = self._reply(as_reply(failure.then or ""), payload, prompt_chars, stream=True)
        assert isinstance(answer, _StreamAnswer)
        return _StreamAnswer(
            answer.frames[: failure.after_events], error=self._stream_error(message)
        )

    async def _slow(
        self, failure: Failure, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> _Answer:
        await trio.sleep(failure.delay)
        return await self._play(failure.then or "", payload, prompt_chars)


def _encoded(answer: _Answer, route: _Route) -> _Answer:
    """The answer in the route's stream encoding (Bedrock's: see ``_bedrock_stream``)."""
    if not route.event_stream or not isinstance(answer, _StreamAnswer):
        return answer
    frames, error = bedrock_stream(answer.frames, answer.error)
    return attrs.evolve(answer, frames=frames, error=error, content_type=EVENT_STREAM)


_FailureHandler: TypeAlias = Callable[
    [ScriptedServer, Failure, dict[str, Any], int, bool], Awaitable[_Answer]
]

# Failure.kind -> how the server plays it.
_FAILURES: dict[str, _FailureHandler] = {
    "status": ScriptedServer._status,
    "cut": ScriptedServer._cut,
    "error_event": ScriptedServer._error_event,
    "slow": ScriptedServer._slow,
}
_FAILURE_KINDS = frozenset(_FAILURES)


@final
class MessagesServer(ScriptedServer):
    """A loopback Anthropic Messages API for tests, played from a script.

    Each ``POST /v1/messages`` takes the next script item, as do the paths of Claude on
    Vertex AI (``/v1/projects/P/locations/R/publishers/anthropic/models/M:rawPredict``
    and ``:streamRawPredict``, for ``AsyncAnthropicVertex``) and on Bedrock
    (``/model/M/invoke`` and ``/model/M/invoke-with-response-stream``, streamed in AWS's
    event-stream encoding, for ``AsyncAnthropicBedrock``), where the model is the
    path's. (``POST /token`` is an OAuth 2.0 token endpoint instead: see ``token_uri``.)

    - a ``str`` or a ``Reply``: the response (streamed as Server-Sent Events when the
      request has ``"stream": true``, else one JSON message);
    - an exception: a 500 ``api_error`` with the exception's text (a ``ModelError`` with
      a ``status`` gives that status, and its ``retry_after`` a ``retry-after`` header);
    - a ``Failure``: the injected fault (``Failure.rate_limited()``,
      ``Failure.overloaded()``, ``Failure.cut_stream(reply)``, ...);
    - a function of the request body (a dict), sync or async, returning one of the above.

    A request after the last item gets a 500 saying that the script is exhausted, so a
    test that asks for more than it scripted fails clearly; unless ``then`` is given: a
    function of the request body (as a script function) that answers every request
    after the script, for as long as the server runs. Other paths get a 404.

    Use it as an async context manager; it serves from a task of its own until the block
    ends::

        async with MessagesServer(["Hello!"]) as server:
            async with server.client() as client:
                message = await client.messages.create(...)
            assert server.requests[0]["model"] == ...

    Args:
        script: The answers, in order.
        host: The loopback address to listen on.
        port: The port (0, the default: any free one).
        then: Answers every request after the script, if given.
        keep_requests: Keep only the last this many requests in ``requests`` and
            ``received`` (100 by default; None keeps all: each body holds the whole
            conversation so far, so a long test keeping all of them grows as its
            square; 0 keeps none).

    Attributes:
        requests: The JSON bodies of the requests answered from the script, in order:
            the last ``keep_requests`` of them.
        request_count: How many such requests came in all.
        received: Those requests in full (path and headers too), as ReceivedRequest.
        token_requests: The requests to ``token_uri``, as ReceivedRequest whose body is
            the form's fields (a service account's are ``grant_type`` and its signed
            JWT ``assertion``).
        access_tokens: The access tokens issued there, in order (``ya29.loopback-1``,
            ``-2``...), each valid for an hour; point Application Default Credentials at
            the server (``GOOGLE_APPLICATION_CREDENTIALS``: a service account's file
            whose ``token_uri`` is ``token_uri``) to run Claude on Vertex AI offline.
        host: The loopback address it listens on.
    """

    _server_name = "MessagesServer"

    def client(self, **options: Any) -> anthropic.AsyncAnthropic:
        """An ``AsyncAnthropic`` client for this server: a test key, no SDK retries.

        The server closes the clients it made when it stops, so a test need not.

        Args:
            **options: More ``AsyncAnthropic`` arguments (they override the defaults).
        """
        # Imported here: the SDK takes seconds to import, and this package is loaded by
        # the pytest plugin in every session.
        import anthropic

        settings: dict[str, Any] = {
            "api_key": "test-key",
            "base_url": self.base_url,
            "max_retries": 0,
            **options,
        }
        client = anthropic.AsyncAnthropic(**settings)
        self._clients.append(client)
        return client

    def _route(self, method: str, path: str) -> _Route | None:
        if method != "POST":
            return None
        if path == _MESSAGES_PATH:
            return _Route({}, ("model", "max_tokens", "messages"))
        # Bedrock and Vertex AI take the model in the path, and anthropic_version in the
        # body instead of a header.
        if match := _BEDROCK_PATH.fullmatch(path):
            stream = match["kind"] == "invoke-with-response-stream"
            return _Route(
                {"model": urllib.parse.unquote(match["model"]), "stream": stream},
                ("anthropic_version", "max_tokens", "messages"),
                event_stream=True,
            )
        if match := _VERTEX_PATH.fullmatch(path):
            stream = match["kind"] == "streamRawPredict"
            return _Route(
                {"model": urllib.parse.unquote(match["model"]), "stream": stream},
                ("anthropic_version", "max_tokens", "messages"),
            )
        return None

    def _error(self, status: int, message: str, *headers: tuple[str, str]) -> _JSONAnswer:
        return _JSONAnswer(status, _codec.error_object(_codec.error_type(status), message), headers)

    def _stream_error(self, message: str) -> bytes:
        return _sse("error", _codec.error_object("overloaded_error", message))

    def _reply(
        self, reply: Reply, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> _JSONAnswer | _StreamAnswer:
        blocks, calls = reply_blocks(reply)
        # Usage's fields are named as the API names them.
        usage = attrs.asdict(estimate_usage(reply, prompt_chars))
        message_id = f"msg_test_{next(self._message_ids)}"
        model = str(payload.get("model", ""))
        stop_reason = reply.final_stop_reason
        if not stream:
            return _JSONAnswer(
                200,
                _codec.message_object(
                    id=message_id, model=model, content=blocks, stop_reason=stop_reason, usage=usage
                ),
            )
        raw_inputs = {call.id: call.input for call in calls if isinstance(call.input, str)}
        events = _codec.stream_events(
            id=message_id,
            model=model,
            content=blocks,
            stop_reason=stop_reason,
            usage=usage,
            tool_inputs=raw_inputs,
        )
        return _StreamAnswer([_sse(event["type"], event) for event in events])


async def _write(stream: trio.SocketStream, connection: h11.Connection, *events: h11.Event) -> None:
    for event in events:
        data = connection.send(event)
        if data:
            await stream.send_all(data)


async def _next_event(stream: trio.SocketStream, connection: h11.Connection) -> Any:
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        # An empty read (the client closed) tells h11 about the end of the input.
        connection.receive_data(await stream.receive_some(_RECEIVE_SIZE))


async def _receive_request(
    stream: trio.SocketStream, connection: h11.Connection
) -> tuple[h11.Request, bytes] | None:
    """The next request and its body, or None when the client closed the connection."""
    request = await _next_event(stream, connection)
    if not isinstance(request, h11.Request):
        return None
    body = bytearray()
    while True:
        event = await _next_event(stream, connection)
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        else:
            return None
