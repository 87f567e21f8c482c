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

import hashlib
import json
import os
import urllib.parse
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal, final

from .._exceptions import ConfigurationError, ModelError
from .._sse import sse_data
from ._chat_codec import ChatAccumulator
from ._chat_requests import UnsupportedContent, request_params
from ._clients import Provider
from ._limits import ModelLimits
from ._model import ModelListener, ModelRequest, ModelResponse
from ._retries import check_retry_settings, retryable_status
from ._sdk_model import MALFORMED, Reading, SDKModel, check_limits, malformed_detail

if TYPE_CHECKING:
    import openai

__all__ = ["OPENAI", "OpenAIModel", "import_openai", "missing_openai_key", "prompt_cache_key"]


@final
class OpenAIModel(SDKModel["openai.AsyncOpenAI", ChatAccumulator]):
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
        prompt_cache_key: Send ``prompt_cache_key`` (OpenAI's hint that routes requests
            sharing a prefix to the same cache) with each request whose ``cache`` is
            not None: a digest of the model, system prompt and tool definitions, the
            same for every call of an agent. None (the default): only when the
            client's base URL is OpenAI's own API, as other servers may refuse it.
        limits: Limits on this model's calls (a ModelLimits), for every agent of the trio
            run that uses this model object, as for AnthropicModel (docs/limits.md).

    Raises:
        ValueError: A negative retry count or backoff, an unknown ``max_tokens_param``,
            or a ``prompt_cache_key`` that is not a bool or None.
        TypeError: ``limits`` is not a ModelLimits or None.
        ConfigurationError: No ``OPENAI_API_KEY`` in the environment (without a client),
            or the ``openai`` package is not installed.
    """

    _SDK = "openai"
    _ACCUMULATOR = ChatAccumulator
    _UNFINISHED = "stream interrupted: it ended before a finish_reason"

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
        prompt_cache_key: bool | None = None,
    ) -> None:
        check_retry_settings(max_retries, backoff_base, backoff_cap)
        if prompt_cache_key not in (None, True, False):
            raise ValueError(
                f"prompt_cache_key must be True, False or None, got: {prompt_cache_key!r}"
            )
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise ValueError(
                'max_tokens_param must be "max_completion_tokens" or "max_tokens", '
                f"got: {max_tokens_param!r}"
            )
        check_limits(limits)
        sdk = import_openai()
        owns_client = client is None
        if client is None:
            if not os.environ.get("OPENAI_API_KEY"):
                raise missing_openai_key()
            client = sdk.AsyncOpenAI()
        self.max_tokens_param = max_tokens_param
        if prompt_cache_key is None:
            # Only OpenAI's own API is known to take it; another server may refuse a
            # parameter it does not know.
            prompt_cache_key = urllib.parse.urlsplit(str(client.base_url)).hostname == (
                "api.openai.com"
            )
        self.prompt_cache_key = prompt_cache_key
        self._last_key: tuple[object, str | None, str, str] | None = None
        self._use(
            client, owns_client, max_retries, backoff_base, backoff_cap, jitter, stream, limits
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
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
        if self.prompt_cache_key and request.cache is not None:
            # Made again only when the prefix changes: an agent class's tools are one
            # tuple, sent with each of its calls.
            last = self._last_key
            if not (
                last is not None
                and last[0] is request.tools
                and last[1] == request.system
                and last[2] == request.model
            ):
                last = self._last_key = (
                    request.tools,
                    request.system,
                    request.model,
                    prompt_cache_key(request),
                )
            params["prompt_cache_key"] = last[3]
        return params

    async def _whole(
        self,
        params: dict[str, Any],
        model: str,
        listener: ModelListener,
        accumulator: ChatAccumulator,
    ) -> ModelResponse:
        raw = await self._api.chat.completions.with_raw_response.create(**params)
        try:
            accumulator.feed_completion(json.loads(raw.http_response.content))
        except MALFORMED as exc:
            raise _malformed("the answer is not a chat.completion", exc) from exc
        return self._response(accumulator, model)

    async def _read_stream(self, params: dict[str, Any], reading: Reading[ChatAccumulator]) -> None:
        # The events are closed explicitly: a generator left suspended (on a cancel, say)
        # would be finalised by the garbage collector, which trio warns about.
        accumulator = reading.accumulator
        async with (
            self._api.chat.completions.with_streaming_response.create(
                **params, stream=True, stream_options={"include_usage": True}
            ) as response,
            aclosing(sse_data(response.iter_lines())) as events,
        ):
            async for data in events:
                # Read to the end, past [DONE] and past a failure, so that the connection
                # is left clean for the next request.
                if reading.failure is not None or data.startswith("[DONE]"):
                    continue
                try:
                    accumulator.feed(json.loads(data))
                except MALFORMED as exc:
                    reading.failure = _malformed("a stream chunk is malformed", exc)
                    continue
                if accumulator.error is not None:
                    reading.failure = _stream_error(accumulator.error)

    def _finished(self, accumulator: ChatAccumulator) -> bool:
        return accumulator.finished

    def _status_message(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        if isinstance(body, dict):
            message = body.get("message")
            if isinstance(message, str) and message:
                return message
        return exc.message


def _malformed(what: str, exc: Exception) -> ModelError:
    return ModelError(f"malformed response: {what} ({malformed_detail(exc)})", retryable=True)


def _stream_error(error: dict[str, Any]) -> ModelError:
    # An error inside a stream that began with 200: no status to go by, and the servers
    # that send one (OpenRouter, vLLM) do so for upstream failures, worth a retry.
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else None
    message = str(error.get("message") or "error in the stream")
    return ModelError(message, status=status, retryable=status is None or retryable_status(status))


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


def prompt_cache_key(request: ModelRequest) -> str:
    """The ``prompt_cache_key`` of a request: a digest of what begins every request of
    an agent (its model, system prompt and tool definitions), so that its calls share a
    cache and those of agents with another prefix do not crowd it."""
    digest = hashlib.sha256()
    digest.update(request.model.encode())
    digest.update(b"\0" + (request.system or "").encode())
    for tool in request.tools:
        digest.update(b"\0" + json.dumps(tool, sort_keys=True, default=str).encode())
    return "satsuma-" + digest.hexdigest()[:32]
