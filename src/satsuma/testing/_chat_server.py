"""ChatCompletionsServer: a loopback OpenAI-compatible Chat Completions endpoint.

It plays the same scripts as MessagesServer (``Reply``, ``Failure``, exceptions,
functions of the request body), so one script tests an agent on either dialect. The
shapes come from ``satsuma.models._chat_codec``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from .. import models as _chat_codec
from ._http import JSONAnswer, StreamAnswer
from ._script import Reply, estimate_usage, reply_blocks
from ._server import Route, ScriptedServer

if TYPE_CHECKING:
    import openai

__all__ = ["ChatCompletionsServer"]

_COMPLETIONS_PATHS = ("/v1/chat/completions", "/chat/completions")


def _data(chunk: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


@final
class ChatCompletionsServer(ScriptedServer):
    """A loopback OpenAI-compatible Chat Completions API for tests, played from a script.

    Each ``POST /v1/chat/completions`` takes the next script item, as a MessagesServer
    does (see there): a ``str`` or ``Reply`` is answered as a ``chat.completion``, or
    streamed as ``chat.completion.chunk`` events ending with ``data: [DONE]`` when the
    request has ``"stream": true`` (with a usage chunk when it asks for one through
    ``stream_options``); an exception or a ``Failure`` as the fault it stands for, with
    OpenAI's error bodies (``Failure.stream_error`` sends an ``{"error": ...}`` chunk
    inside the stream). A reply's thinking is not sent: Chat Completions has no such
    block.

    Use it as an async context manager::

        async with ChatCompletionsServer(["Hello!"]) as server:
            async with server.client() as client:
                completion = await client.chat.completions.create(...)

    Args: as for MessagesServer.

    Attributes:
        requests: The JSON bodies of the requests to ``/v1/chat/completions``, in
            order: the last ``keep_requests`` (100 by default) of them.
        request_count: How many such requests came in all.
        received: Those requests in full (path and headers too), as ReceivedRequest.
        host: The loopback address it listens on.
    """

    _server_name = "ChatCompletionsServer"

    @property
    def openai_base_url(self) -> str:
        """The base URL for an OpenAI client (``OPENAI_BASE_URL``): ``base_url`` + ``/v1``."""
        return f"{self.base_url}/v1"

    def client(self, **options: Any) -> openai.AsyncOpenAI:
        """An ``AsyncOpenAI`` client for this server: a test key, no SDK retries.

        The server closes the clients it made when it stops, so a test need not.

        Args:
            **options: More ``AsyncOpenAI`` arguments (they override the defaults).
        """
        import openai

        return self._keep_client(openai.AsyncOpenAI, self.openai_base_url, options)

    def _route(self, method: str, path: str) -> Route | None:
        if method == "POST" and path in _COMPLETIONS_PATHS:
            return Route({}, ("model", "messages"))
        return None

    def _error(self, status: int, message: str, *headers: tuple[str, str]) -> JSONAnswer:
        return JSONAnswer(status, _chat_codec.error_body(status, message), headers)

    def _stream_error(self, message: str) -> bytes:
        return _data(_chat_codec.error_body(503, message))

    def _reply(
        self, reply: Reply, payload: dict[str, Any], prompt_chars: int, stream: bool
    ) -> JSONAnswer | StreamAnswer:
        blocks, calls = reply_blocks(reply)
        usage = attrs.asdict(estimate_usage(reply, prompt_chars))
        completion_id = f"chatcmpl-test-{next(self._message_ids)}"
        model = str(payload.get("model", ""))
        raw = {call.id: call.input for call in calls if isinstance(call.input, str)}
        shape: dict[str, Any] = {
            "id": completion_id,
            "model": model,
            "content": blocks,
            "stop_reason": reply.final_stop_reason,
            "usage": usage,
            "raw_arguments": raw,
        }
        completion = _chat_codec.completion_object(**shape)
        if not stream:
            return JSONAnswer(200, completion)
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        chunks = _chat_codec.completion_chunks(completion, include_usage=include_usage)
        return StreamAnswer([*map(_data, chunks), b"data: [DONE]\n\n"])
