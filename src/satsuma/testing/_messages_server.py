"""MessagesServer: a loopback HTTP server that speaks the Anthropic Messages API.

Tests point the real ``AsyncAnthropic`` client at it and get scripted replies, plain or
streamed, and the faults a real API produces (429, 529, 5xx, a stream cut short, an
``error`` event in a stream, a slow answer), with no network and no key.

The HTTP side and the script (``ScriptedServer``, in ``_server``) do not depend on the
API's dialect: ``ChatCompletionsServer`` plays the same scripts in OpenAI's. The wire
shapes come from ``satsuma._codec``; this module gives the Messages API's paths (and
those of Claude on Bedrock and Vertex AI), bodies and Server-Sent Events.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from typing import TYPE_CHECKING, Any, ClassVar, final

import trio

from .. import models as _codec
from ._billing import PromptCache
from ._http import Answer, JSONAnswer, StreamAnswer, sse
from ._script import Reply, estimate_usage, reply_blocks
from ._server import Route, ScriptedServer
from ._server_compaction import (
    SUMMARY,
    compacted,
    compacting,
    compaction_iteration,
    stream_compaction,
)

if TYPE_CHECKING:
    import anthropic
    import h11

__all__ = ["MessagesServer"]

_MESSAGES_PATH = "/v1/messages"
# The token count endpoint (messages.count_tokens): answered without playing the script.
_COUNT_PATH = "/v1/messages/count_tokens"
# Claude on Bedrock: the model id and whether to stream are in the path; a stream is in
# AWS's event-stream encoding.
_BEDROCK_PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<kind>invoke|invoke-with-response-stream)")
# Claude on Vertex AI (the client's base URL ends with /v1).
_VERTEX_PATH = re.compile(
    r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/"
    r"(?P<model>[^/:]+):(?P<kind>rawPredict|streamRawPredict)"
)


@final
class MessagesServer(ScriptedServer):
    """A loopback Anthropic Messages API for tests, played from a script.

    Each ``POST /v1/messages`` takes the next script item, as do the paths of Claude on
    Vertex AI (``/v1/projects/P/locations/R/publishers/anthropic/models/M:rawPredict``
    and ``:streamRawPredict``, for ``AsyncAnthropicVertex``) and on Bedrock
    (``/model/M/invoke`` and ``/model/M/invoke-with-response-stream``, streamed in AWS's
    event-stream encoding, for ``AsyncAnthropicBedrock``), where the model is the
    path's. (``POST /token`` is an OAuth 2.0 token endpoint instead: see ``token_uri``;
    ``POST /v1/messages/count_tokens`` counts a request's input tokens as the server
    bills them, a token per 4 characters of its body, and plays no script item: the
    bodies it counted are ``count_requests``.)

    - a ``str`` or a ``Reply``: the response (streamed as Server-Sent Events when the
      request has ``"stream": true``, else one JSON message);
    - an exception: a 500 ``api_error`` with the exception's text (a ``ModelError`` with
      a ``status`` gives that status, and its ``retry_after`` a ``retry-after`` header);
    - a ``Failure``: the injected fault (``Failure.rate_limited()``,
      ``Failure.overloaded()``, ``Failure.cut_stream(reply)``, ...);
    - a function of the request body (a dict), sync or async, returning one of the above.

    A request with the API's ``context_management`` field (context editing) is answered
    as any other, its field and ``anthropic-beta`` header recorded in ``received``; the
    server clears nothing, and its answer says so (``"applied_edits": []``). One with the
    compaction edit (``compact_20260112``) is measured from its last ``compaction``
    block on, as the API drops what came before; past the edit's trigger (a token per
    4 characters) the answer begins with a compaction block holding a fixed summary
    (``MessagesServer.compaction_summary``), is billed from the summary on, and reports
    the compaction's own call in ``usage.iterations``.

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

    compaction_summary: ClassVar[str] = SUMMARY
    """The text of every compaction block the server answers with."""

    @functools.cached_property
    def count_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the requests to ``/v1/messages/count_tokens``, in order."""
        return []

    async def _answer(self, request: h11.Request, body: bytes) -> Answer:
        path = request.target.decode("ascii", "replace").split("?", 1)[0]
        if request.method != b"POST" or path != _COUNT_PATH:
            return await super()._answer(request, body)
        try:
            payload = json.loads(body)
        except ValueError:
            return self._error(400, "The request body is not valid JSON")
        if not isinstance(payload, dict):
            return self._error(400, "The request body must be a JSON object")
        for key in ("model", "messages"):
            if key not in payload:
                return self._error(400, f"{key}: Field required")
        self.count_requests.append(payload)
        # As a messages request of this body is billed (estimate_usage): its size counts.
        return JSONAnswer(200, {"input_tokens": max(1, len(body) // 4)})

    @functools.cached_property
    def prompt_cache(self) -> PromptCache:
        """The server's prompt cache: requests with ``cache_control`` breakpoints are
        billed as the API bills them (``cache_creation_input_tokens``,
        ``cache_read_input_tokens``; see docs/testing.md). Its ``min_tokens`` is the
        shortest prefix it caches, 1,024 tokens as for most Claude models; set it lower
        to see caching on a short test conversation."""
        return PromptCache()

    def client(self, **options: Any) -> anthropic.AsyncAnthropic:
        """An ``AsyncAnthropic`` client for this server: a test key, no SDK retries.

        The server closes the clients it made when it stops, so a test need not.

        Args:
            **options: More ``AsyncAnthropic`` arguments (they override the defaults).
        """
        # Imported here: the SDK takes seconds to import, and this package is loaded by
        # the pytest plugin in every session.
        import anthropic

        return self._keep_client(anthropic.AsyncAnthropic, self.base_url, options)

    def _route(self, method: str, path: str) -> Route | None:
        if method != "POST":
            return None
        if path == _MESSAGES_PATH:
            return Route({}, ("model", "max_tokens", "messages"))
        # Bedrock and Vertex AI take the model in the path, and anthropic_version in the
        # body instead of a header.
        if match := _BEDROCK_PATH.fullmatch(path):
            stream = match["kind"] == "invoke-with-response-stream"
            return Route(
                {"model": urllib.parse.unquote(match["model"]), "stream": stream},
                ("anthropic_version", "max_tokens", "messages"),
                event_stream=True,
            )
        if match := _VERTEX_PATH.fullmatch(path):
            stream = match["kind"] == "streamRawPredict"
            return Route(
                {"model": urllib.parse.unquote(match["model"]), "stream": stream},
                ("anthropic_version", "max_tokens", "messages"),
            )
        return None

    def _error(self, status: int, message: str, *headers: tuple[str, str]) -> JSONAnswer:
        return JSONAnswer(status, _codec.error_object(_codec.error_type(status), message), headers)

    def _stream_error(self, message: str) -> bytes:
        return sse("error", _codec.error_object("overloaded_error", message))

    def _reply(
        self, reply: Reply, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> JSONAnswer | StreamAnswer:
        blocks, calls = reply_blocks(reply)
        compaction = compacting(payload, prompt_chars)
        if compaction is not None:
            # Billed as the model reads it: from the last compaction block, or the new one.
            payload, prompt_chars = compaction.payload, compaction.prompt_chars
            if compaction.compacts:
                payload, prompt_chars = compacted(payload)
                blocks = [payload["messages"][0]["content"][0], *blocks]
        estimate = estimate_usage(reply, prompt_chars)
        # The API's fields only (Usage's own cost and hour's writes are not on the wire).
        usage: dict[str, Any] = {
            "input_tokens": estimate.input_tokens,
            "output_tokens": estimate.output_tokens,
            "cache_creation_input_tokens": estimate.cache_creation_input_tokens,
            "cache_read_input_tokens": estimate.cache_read_input_tokens,
        }
        written, hour = (
            estimate.cache_creation_input_tokens,
            estimate.cache_creation_1h_input_tokens,
        )
        if reply.usage is None:
            # Billed as the API bills: what the prompt cache reads and writes.
            bill = self.prompt_cache.bill(payload, usage["input_tokens"], trio.current_time())
            usage["input_tokens"] = bill.input_tokens
            usage["cache_creation_input_tokens"] = written = bill.cache_creation_input_tokens
            usage["cache_read_input_tokens"] = bill.cache_read_input_tokens
            hour = bill.written_for_an_hour
        if reply.usage is None or hour:
            usage["cache_creation"] = {
                "ephemeral_5m_input_tokens": written - hour,
                "ephemeral_1h_input_tokens": hour,
            }
        iterations: list[dict[str, Any]] | None = None
        if compaction is not None and compaction.compacts:
            # The compaction's own call is not in the top-level counts (as on the API).
            iterations = [
                compaction_iteration(compaction.prompt_chars),
                {"type": "message", **usage},
            ]
        message_id = f"msg_test_{next(self._message_ids)}"
        model = str(payload.get("model", ""))
        stop_reason = reply.final_stop_reason
        # Context editing (the context_management field) is accepted and recorded, not
        # applied: the answer reports that no edit was applied, where the API reports
        # the edits it made.
        editing: dict[str, Any] | None = None
        if "context_management" in payload:
            editing = {"applied_edits": []}
        if not stream:
            message = _codec.message_object(
                id=message_id, model=model, content=blocks, stop_reason=stop_reason, usage=usage
            )
            if editing is not None:
                message["context_management"] = editing
            if iterations is not None:
                message["usage"]["iterations"] = iterations
            return JSONAnswer(200, message)
        raw_inputs = {call.id: call.input for call in calls if isinstance(call.input, str)}
        events = _codec.stream_events(
            id=message_id,
            model=model,
            content=blocks,
            stop_reason=stop_reason,
            usage=usage,
            tool_inputs=raw_inputs,
        )
        if iterations is not None:
            stream_compaction(events)
        for event in events:
            if event["type"] == "message_delta":
                if editing is not None:
                    event["context_management"] = editing
                if iterations is not None:
                    event["usage"]["iterations"] = iterations
        return StreamAnswer([sse(event["type"], event) for event in events])
