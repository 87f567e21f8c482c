"""OpenAIModel: the Model for any OpenAI-compatible Chat Completions endpoint, through the
official ``openai`` SDK (the extra ``satsuma[openai]``).

The SDK's ``AsyncOpenAI`` runs under trio as it is: its transport is httpx2 over anyio,
as the Anthropic SDK's is. Responses are read raw and assembled by
``_chat_codec.ChatAccumulator`` into the Anthropic content blocks every satsuma history
holds, so that a call whose arguments are not JSON spoils only that call, and an error
sent inside a stream is retried rather than raised from inside the SDK's generators.
Retries are satsuma's own (``_retries``), as AnthropicModel's are (the SDK's are turned
off), each one reported to the listener.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, final

from .._exceptions import ConfigurationError, ModelError
from .._messages import Usage
from ..tools import ToolCall
from ._chat_codec import ChatAccumulator, UnsupportedContent, request_params
from ._clients import Provider
from ._limits import ModelLimits
from ._model import ClientModel, ModelListener, ModelRequest, ModelResponse
from ._responses import checked_response
from ._retries import check_retry_settings, retry_after_seconds, retryable_status, retrying

if TYPE_CHECKING:
    import openai

__all__ = ["OPENAI", "OpenAIModel", "import_openai", "missing_openai_key"]

_MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)


@final
class OpenAIModel(ClientModel):
    """The Model for an OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama,
    OpenRouter...).

    Conversations keep satsuma's own (Anthropic) shape and are translated for each
    request, so an agent moves between providers by its ``model`` string alone. A tool
    result with ``is_error`` reaches the model as a tool message whose text begins
    ``Error: `` (Chat Completions has no such field). 429 and 5xx answers, dropped
    connections, a stream that breaks off or carries an error are retried as
    AnthropicModel retries them, honouring ``retry-after``.

    Args:
        client: The client to use. By default one is built from the environment
            (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``); ``aclose()`` closes only a client
            built here. Its own retry setting is ignored.
        max_retries: Retries after the first attempt (0 for none).
        backoff_base: The longest wait before the first retry, in seconds.
        backoff_cap: The longest wait before any retry, in seconds.
        jitter: Wait a random time up to the backoff.
        stream: None (the default): stream when the listener wants deltas; True: always;
            False: never.
        max_tokens_param: The request parameter that carries ``max_tokens``:
            ``"max_completion_tokens"`` (OpenAI's current name, which its reasoning models
            require) or ``"max_tokens"`` (for servers that know only the older one).
        limits: Limits on this model's calls (a ModelLimits), for every agent of the trio
            run that uses this model object, as for AnthropicModel (docs/limits.md).

    Raises:
        ValueError: A negative retry count or backoff, or an unknown ``max_tokens_param``.
        TypeError: ``limits`` is not a ModelLimits or None.
        ConfigurationError: No ``OPENAI_API_KEY`` in the environment (without a client),
            or the ``openai`` package is not installed.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        jitter: bool = True,
        stream: bool | None = None,
        max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        limits: ModelLimits | None = None,
    ) -> None:
        check_retry_settings(max_retries, backoff_base, backoff_cap)
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise ValueError(
                'max_tokens_param must be "max_completion_tokens" or "max_tokens", '
                f"got: {max_tokens_param!r}"
            )
        if limits is not None and not isinstance(limits, ModelLimits):
            raise TypeError(f"limits must be a satsuma.ModelLimits or None, got: {limits!r}")
        sdk = import_openai()
        self._owns_client = client is None
        if client is None:
            if not os.environ.get("OPENAI_API_KEY"):
                raise missing_openai_key()
            client = sdk.AsyncOpenAI()
        self.client: openai.AsyncOpenAI = client
        # A copy that shares the connection pool; retries are ours, each one reported.
        self._api = self.client.with_options(max_retries=0)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.jitter = jitter
        self.stream = stream
        self.max_tokens_param = max_tokens_param
        self.limits = limits

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        """Send one request and return the assistant's response.

        Raises:
            ModelError: The endpoint refused the request (``retryable`` False), retries
                ran out (``retryable`` True), or the conversation holds something Chat
                Completions cannot carry (a document block, an Anthropic server tool).
        """
        try:
            params = request_params(
                model=request.model,
                system=request.system,
                messages=request.messages,
                tools=request.tools,
                max_tokens=request.max_tokens,
                max_tokens_param=self.max_tokens_param,
            )
        except UnsupportedContent as exc:
            raise ModelError(f"cannot send this conversation to Chat Completions: {exc}") from exc
        stream = self.stream
        if stream is None:
            stream = bool(getattr(listener, "wants_deltas", True))
        return await retrying(
            self, partial(self._respond_once, params, request.model, listener, stream), listener
        )

    async def _respond_once(
        self, params: dict[str, Any], model: str, listener: ModelListener, stream: bool
    ) -> ModelResponse:
        import httpx2
        import openai

        accumulator = ChatAccumulator(
            on_text=listener.text,
            on_thinking=listener.thinking,
            on_tool_input=getattr(listener, "tool_input", None),
        )
        failure: ModelError | None = None
        try:
            if not stream:
                raw = await self._api.chat.completions.with_raw_response.create(**params)
                try:
                    accumulator.feed_completion(json.loads(raw.http_response.content))
                except _MALFORMED as exc:
                    raise _malformed("the answer is not a chat.completion", exc) from exc
                return _response(accumulator, model)
            # The events are closed explicitly: a generator left suspended (on a
            # cancel, say) would be finalised by the garbage collector, which trio warns
            # about.
            async with (
                self._api.chat.completions.with_streaming_response.create(
                    **params, stream=True, stream_options={"include_usage": True}
                ) as response,
                aclosing(_sse_data(response.iter_lines())) as events,
            ):
                async for data in events:
                    # Read to the end, past [DONE] and past a failure, so that the
                    # connection is left clean for the next request.
                    if failure is not None or data.startswith("[DONE]"):
                        continue
                    try:
                        accumulator.feed(json.loads(data))
                    except _MALFORMED as exc:
                        failure = _malformed("a stream chunk is malformed", exc)
                        continue
                    if accumulator.error is not None:
                        failure = _stream_error(accumulator.error)
        except openai.APIStatusError as exc:
            raise ModelError(
                _api_message(exc),
                status=exc.status_code,
                retryable=retryable_status(exc.status_code),
                retry_after=retry_after_seconds(exc.response.headers),
            ) from exc
        except openai.APIConnectionError as exc:  # APITimeoutError too
            cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
            raise ModelError(f"{exc.message}{cause}", retryable=True) from exc
        except httpx2.TransportError as exc:
            # A stream that breaks after its headers comes through as the transport's.
            if failure is None:
                raise ModelError(f"stream interrupted: {exc}", retryable=True) from exc
        if failure is not None:
            raise failure
        if not accumulator.finished:
            raise ModelError("stream interrupted: it ended before a finish_reason", retryable=True)
        return _response(accumulator, model)


async def _sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The ``data`` of each Server-Sent Event, from the body's lines (Chat Completions
    sends data-only events; multi-line data is joined as the SSE rules say). Closing it
    closes ``lines``."""
    data: list[str] = []
    try:
        async for line in lines:
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            yield "\n".join(data)
    finally:
        close = getattr(lines, "aclose", None)
        if close is not None:
            await close()


def _api_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    return exc.message


def _malformed(what: str, exc: Exception) -> ModelError:
    detail = (
        "it is nested too deeply to read"
        if isinstance(exc, RecursionError)
        else f"{type(exc).__name__}: {exc}"
    )
    return ModelError(f"malformed response: {what} ({detail})", retryable=True)


def _stream_error(error: dict[str, Any]) -> ModelError:
    # An error inside a stream that began with 200: no status to go by, and the servers
    # that send one (OpenRouter, vLLM) do so for upstream failures, worth a retry.
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else None
    message = str(error.get("message") or "error in the stream")
    return ModelError(message, status=status, retryable=status is None or retryable_status(status))


def _response(accumulator: ChatAccumulator, model: str) -> ModelResponse:
    message = accumulator.result()
    return checked_response(
        ModelResponse(
            content=message.content,
            calls=tuple(ToolCall(id, name, arguments) for id, name, arguments in message.tool_uses),
            stop_reason=message.stop_reason,
            usage=Usage(
                input_tokens=message.input_tokens,
                output_tokens=message.output_tokens,
                cache_read_input_tokens=message.cache_read_input_tokens,
            ),
            model=message.model or model,
            id=message.id,
        ),
        fresh=True,
    )


def import_openai() -> Any:
    """The ``openai`` module, or a ConfigurationError naming the extra to install."""
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            "the openai package is not installed: OpenAI-compatible models need it",
            'Install the extra: pip install "satsuma[openai]"',
        ) from exc
    return openai


def missing_openai_key(agent: str | None = None, model: str | None = None) -> ConfigurationError:
    """The error for an ``openai:`` model with no key in the environment."""
    who = ""
    if agent is not None:
        declared = f" declares its model by name ({model!r}) and" if model else ""
        who = f": agent {agent!r}{declared} needs an OpenAI API key"
    return ConfigurationError(
        f"OPENAI_API_KEY is not set{who}",
        "Set OPENAI_API_KEY (any non-empty value for a local server that checks none, such "
        "as vLLM or Ollama), and OPENAI_BASE_URL for an endpoint other than OpenAI's, or "
        "pass a model built with your own client: OpenAIModel(openai.AsyncOpenAI(...))",
    )


# --- the provider of openai: model strings (_aliases.PROVIDERS) -------------------------


def _build_openai() -> OpenAIModel:
    from ._pool import ShardedTransport, _behind_a_proxy

    openai = import_openai()
    http_client = (
        None if _behind_a_proxy() else openai.DefaultAsyncHttpxClient(transport=ShardedTransport())
    )
    return OpenAIModel(openai.AsyncOpenAI(http_client=http_client))


def _check_openai(agent: str | None, declared: str | None) -> None:
    import_openai()  # a ConfigurationError naming the extra, before anything else
    if not os.environ.get("OPENAI_API_KEY"):
        raise missing_openai_key(agent, declared)
    base_url = os.environ.get("OPENAI_BASE_URL")
    if base_url:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"OPENAI_BASE_URL is not an http(s) URL: {base_url!r}",
                "Set it to the endpoint's base, such as http://localhost:8000/v1 for vLLM "
                "or http://localhost:11434/v1 for Ollama, or unset it for OpenAI's",
            )


OPENAI = Provider(
    ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
    _check_openai,
    _build_openai,
)
