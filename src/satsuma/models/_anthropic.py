"""AnthropicModel: the Model for the Anthropic Messages API, through the official SDK.

Every call streams, so that text and thinking reach the listener as they are written, and
the message is assembled from the raw events by ``_codec.StreamAccumulator`` rather than
by the SDK's ``messages.stream()``, whose accumulator raises on a tool input that is not
valid JSON and so loses the whole response for one bad call.

Retries are satsuma's own (``_retries``, shared with OpenAIModel; the SDK's are turned
off) so that each one is reported to the listener, and so that a stream that breaks
mid-message or an ``error`` event inside it is retried like a 529 is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeAlias, final

from .._exceptions import ConfigurationError, ModelError, missing_api_key
from .._messages import message_param
from ._clients import Provider
from ._codec import StreamAccumulator, error_status
from ._context_editing import ContextEditing, check_context_editing, log_applied_edits
from ._definitions import plain_definitions
from ._limits import ModelLimits
from ._model import ModelListener, ModelRequest, ModelResponse
from ._plaincopy import plain_block
from ._requests import conversation_breakpoints, request_params
from ._retries import check_retry_settings, retryable_status
from ._sdk_model import MALFORMED, Reading, SDKModel, check_limits, malformed_detail

if TYPE_CHECKING:
    import anthropic
    import httpx2

__all__ = ["ANTHROPIC", "AnthropicModel", "AnyAnthropicClient", "anthropic_params"]

AnyAnthropicClient: TypeAlias = (
    "anthropic.AsyncAnthropic | anthropic.AsyncAnthropicBedrock | anthropic.AsyncAnthropicVertex"
)
"""The Anthropic SDK's clients: the API's own, Claude on Bedrock, Claude on Vertex AI."""


@final
class AnthropicModel(SDKModel["AnyAnthropicClient", StreamAccumulator]):
    """The Model for the Anthropic Messages API.

    A response is streamed when someone listens to the run's text as it is written (the
    listener says so: ``wants_deltas``), and otherwise asked for whole, which costs the
    client less (see ``stream``). 429, 529 and other 5xx answers, dropped connections and timeouts, a stream that
    breaks off, and an ``overloaded_error`` or ``api_error`` event inside a stream are
    retried up to ``max_retries`` times, after an exponential backoff (the n-th retry
    waits up to ``backoff_base * 2**(n - 1)`` seconds, at most ``backoff_cap``; with
    ``jitter``, a random time up to that), or after what the API's ``retry-after`` header
    asked for (also at most ``backoff_cap``). Each retry is reported with
    ``listener.retry`` before the wait.

    A tool_use whose streamed input is not valid JSON does not fail the response: its
    block holds ``{}`` and its ToolCall keeps the raw text, so that only that call is
    answered with ``Invalid arguments``.

    Args:
        client: The client to use: an ``AsyncAnthropic``, or the same SDK's
            ``AsyncAnthropicBedrock`` or ``AsyncAnthropicVertex`` for Claude on Bedrock or
            Vertex AI (the extras ``satsuma[bedrock]``, ``satsuma[vertex]``). By default
            one is built from the
            environment (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``); ``aclose()``
            closes only a client built here. Its own retry setting is ignored.
        max_retries: Retries after the first attempt (0 for none).
        backoff_base: The longest wait before the first retry, in seconds.
        backoff_cap: The longest wait before any retry, in seconds.
        jitter: Wait a random time up to the backoff ("full jitter"), so that many
            clients failing together do not retry together.
        stream: None (the default): stream a response when the listener wants text and
            thinking as they are written (a run with an event callback, ``agent.stream``,
            the live view), else ask for it whole, as one JSON message, where each tool
            call costs about a fifth as much to read; also streamed when the SDK refuses
            a whole response that could take over 10 minutes (a large ``max_tokens``).
            True: always stream. False: never (its text is reported in one piece once it
            has arrived).
        limits: Limits on this model's calls (a ModelLimits), for every agent of the
            trio run that uses this model object, whichever model ids they name; see
            docs/limits.md. None (the default): none, unless set by model id with
            ``satsuma.set_model_limits``. A ``retry-after`` answer pauses every agent
            using a configuration with limits, not just the one it answered.
        context_editing: The API's server-side context editing (a ContextEditing):
            every request (and token count) carries its ``context_management`` field
            and beta header, and the edits the API reports applying are logged
            (``satsuma.models``, INFO). None (the default): none. See docs/agents.md.

    Raises:
        ValueError: A negative retry count or backoff.
        TypeError: ``limits`` is not a ModelLimits or None, ``context_editing`` not a
            ContextEditing or None.
        ConfigurationError: No API key: none in the environment (without a client), or
            none in the client passed.
    """

    _SDK = "anthropic"
    _ACCUMULATOR = StreamAccumulator
    _UNFINISHED = "stream interrupted: it ended before message_stop"

    def __init__(
        self,
        client: AnyAnthropicClient | None = None,
        *,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        jitter: bool = True,
        stream: bool | None = None,
        limits: ModelLimits | None = None,
        context_editing: ContextEditing | None = None,
    ) -> None:
        check_retry_settings(max_retries, backoff_base, backoff_cap)
        check_limits(limits)
        check_context_editing(context_editing)
        # Imported here rather than at the top: the SDK takes seconds to import, and
        # importing satsuma.agents should not cost that to code that never calls a model.
        import anthropic

        if client is None:
            if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
                raise missing_api_key()
            owns_client, client = True, anthropic.AsyncAnthropic()
        elif (
            isinstance(client, anthropic.AsyncAnthropic)
            and client.api_key is None
            and client.auth_token is None
        ):
            # The SDK would build every request and then refuse it with a TypeError.
            raise ConfigurationError(
                "the AnthropicModel's client has no API key",
                "Build it with api_key= (or auth_token=), or set ANTHROPIC_API_KEY "
                "before it is built",
            )
        else:
            owns_client = False
        # Bedrock streams the API's events in AWS's event-stream encoding, not as SSE.
        self._bedrock = isinstance(client, anthropic.AsyncAnthropicBedrock)
        # Anthropic's own API takes the top-level (automatic) cache_control; Bedrock and
        # Vertex AI take breakpoints on blocks only.
        self._automatic_cache = isinstance(client, anthropic.AsyncAnthropic)
        self.context_editing = context_editing
        # Built once: the same header and body on every request. The header is added to
        # the betas the client already sends (extra_headers would replace them).
        self._editing: dict[str, Any] = {}
        if context_editing is not None:
            self._editing = context_editing.request_options()
            betas = client.default_headers.get("anthropic-beta")
            if isinstance(betas, str) and betas:
                sent = betas.split(",")
                added = [beta for beta in context_editing.betas if beta not in sent]
                self._editing["extra_headers"] = {"anthropic-beta": ",".join([*sent, *added])}
        self._use(
            client, owns_client, max_retries, backoff_base, backoff_cap, jitter, stream, limits
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params = anthropic_params(request, automatic=self._automatic_cache)
        if self._editing:
            params.update(self._editing)
        return params

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The request's input tokens as the API's count endpoint counts them (one call,
        not retried, costing no tokens); None on Bedrock, whose API has no such
        endpoint on this client.

        Raises:
            ModelError: the API refused the count or could not be reached.
        """
        if self._bedrock:
            return None
        import anthropic

        params = self._params(request)
        params.pop("max_tokens", None)
        try:
            counted = await self._api.messages.count_tokens(**params)
        except anthropic.APIStatusError as exc:
            raise ModelError(
                f"counting tokens: {self._status_message(exc)}", status=exc.status_code
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"counting tokens: {exc.message}", retryable=True) from exc
        return int(counted.input_tokens)

    async def _whole(
        self,
        params: dict[str, Any],
        model: str,
        listener: ModelListener,
        accumulator: StreamAccumulator,
    ) -> ModelResponse:
        try:
            raw = await self._api.messages.with_raw_response.create(**params)
        except ValueError as exc:
            # The SDK refuses, before sending, a whole response that could take more
            # than 10 minutes (a large max_tokens): streamed instead when the choice was
            # ours; else a mistake to state, not a bug that crashes the agent.
            if self.stream is None:
                return await self._respond_once(params, model, listener, True)
            raise ModelError(f"stream=False cannot be used here: {exc}") from exc
        try:
            message = json.loads(raw.http_response.content)
            accumulator.feed_message(message, plain_block)
            if "context_management" in message:
                log_applied_edits(message)
        except MALFORMED as exc:
            raise ModelError(
                f"the API's answer is not a message: {malformed_detail(exc)}", retryable=True
            ) from exc
        return self._response(accumulator, model)

    async def _read_stream(
        self, params: dict[str, Any], reading: Reading[StreamAccumulator]
    ) -> None:
        events = await self._api.messages.create(**params, stream=True)
        async with events:
            read = _read_bedrock if self._bedrock else _read_sse
            reading.failure = await read(events.response, reading.accumulator)

    def _finished(self, accumulator: StreamAccumulator) -> bool:
        return accumulator.complete

    def _status_message(self, exc: anthropic.APIStatusError) -> str:
        return exc.api_message or exc.message


def anthropic_params(request: ModelRequest, *, automatic: bool = True) -> dict[str, Any]:
    """The Messages API parameters an AnthropicModel sends for ``request`` (without
    ``stream`` and context editing), with its cache breakpoints: top-level automatic
    caching with ``automatic`` (Anthropic's own API), block breakpoints only otherwise.
    Shared with satsuma.testing's FakeModel, which bills the prompt cache on them."""
    params = request_params(
        model=request.model,
        system=request.system,
        messages=(),
        tools=plain_definitions(request.tools),
        max_tokens=request.max_tokens,
        cache=request.cache is not None,
        ttl=request.cache,
    )
    params["messages"] = [message_param(message) for message in request.messages]
    if request.cache is not None:
        conversation_breakpoints(params, ttl=request.cache, automatic=automatic)
    return params


async def _read_sse(response: httpx2.Response, accumulator: StreamAccumulator) -> ModelError | None:
    """Feed the API's stream to the accumulator, reading it to its end; the failure it
    carried (an ``error`` event, a malformed event, a connection that broke), if any.

    The raw Server-Sent Events, not the SDK's parsed ones: on an ``error`` event the SDK
    raises from inside its event generator and leaves the generators under it suspended,
    which trio reports with a ResourceWarning each. So the stream is read to its end (the
    API closes it after an error) and the failure returned afterwards.
    """
    import anthropic
    import httpx2

    failure: ModelError | None = None
    try:
        async for sse in anthropic.AsyncStream.raw_events(response):
            if failure is not None or not sse.data:
                continue
            try:
                event = json.loads(sse.data)
            except RecursionError as exc:
                failure = _malformed(exc)
                continue
            except ValueError:
                failure = ModelError(
                    f"stream interrupted: an event is not JSON: {sse.data[:100]!r}",
                    retryable=True,
                )
                continue
            failure = _take(accumulator, event)
    except httpx2.TransportError as exc:
        # The SDK turns transport errors into APIConnectionError only while it sends the
        # request; one that breaks the stream afterwards comes through as it is.
        return failure or ModelError(f"stream interrupted: {exc}", retryable=True)
    return failure


async def _read_bedrock(response: Any, accumulator: StreamAccumulator) -> ModelError | None:
    """Feed a Bedrock stream's events to the accumulator, reading it to its end; the
    failure it carried (an error, a malformed message), if any."""
    import httpx2

    from ._eventstream import bedrock_events

    failure: ModelError | None = None
    async with aclosing(bedrock_events(response.aiter_bytes())) as events:
        try:
            async for event in events:
                if failure is None:
                    failure = _take(accumulator, event)
        except MALFORMED as exc:  # a message that is not Bedrock's (framing, CRC, JSON)
            return failure or _malformed(exc)
        except httpx2.TransportError as exc:
            return failure or ModelError(f"stream interrupted: {exc}", retryable=True)
    return failure


def _take(accumulator: StreamAccumulator, event: Mapping[str, Any]) -> ModelError | None:
    """Feed one event to the accumulator; the failure it is, if any: an event that has
    not the shape of the API's (a delta for a block never started, nesting no parser
    survives), or an ``error`` event."""
    try:
        accumulator.feed(event)
    except MALFORMED as exc:
        return _malformed(exc)
    if "context_management" in event:  # on message_delta: the edits the API applied
        log_applied_edits(event)
    return None if accumulator.error is None else _stream_error(accumulator.error)


def _malformed(exc: Exception) -> ModelError:
    return ModelError(f"malformed response: {malformed_detail(exc)}", retryable=True)


def _stream_error(error: Mapping[str, Any]) -> ModelError:
    # An ``error`` event inside a stream that began with 200: its type tells what the
    # status would have been (an overloaded_error is a 529).
    status = error_status(error.get("type"))
    message = str(error.get("message") or error.get("type") or "error event in the stream")
    return ModelError(message, status=status, retryable=retryable_status(status))


# --- the provider of model strings without a prefix (_aliases.PROVIDERS) --------------


def _build() -> AnthropicModel:
    # The SDK's first import takes over a second and a client's SSL context some more:
    # done in a worker thread, so that the first agent of a service to open does not
    # stall every other task of the run meanwhile.
    import anthropic

    from ._pool import pooled_http_client

    # Passed in, the client is not the model's to close: aclose() on a shared model
    # (reached through AgentHandle.model) leaves it to the run's end.
    return AnthropicModel(anthropic.AsyncAnthropic(http_client=pooled_http_client()))


def _check_anthropic(agent: str | None, declared: str | None) -> None:
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        # Found as the agent starts, not as its first run crashes inside the SDK.
        raise missing_api_key(agent, declared)


ANTHROPIC = Provider(
    ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"),
    _check_anthropic,
    lambda: _build(),  # looked up when called, so that it can be replaced (tests)
)
