"""SDKModel: what AnthropicModel and OpenAIModel share, a Model on a provider's SDK client.

Both turn the SDK's retries off and retry with satsuma's policy (``_retries``), so that
each retry is reported to the listener; both ask for a whole answer when no one listens
to its text as it is written, and stream it otherwise; both read the answer raw into
their codec's accumulator and say the SDK's failures as the same ModelErrors. A
provider's module gives only what differs: how a request's parameters are written, how
a whole answer and a stream are read, and where an error's message is in the SDK's
exception.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import attrs
import trio

from .._exceptions import ModelError
from .._messages import Usage
from .._toolcall import ToolCall
from ._codec import StreamedMessage
from ._limits import ModelLimits
from ._model import ModelListener, ModelRequest, ModelResponse
from ._prices import priced, with_compaction
from ._responses import checked_plain_response, checked_response
from ._retries import retry_after_seconds, retryable_status, retrying

__all__ = ["MALFORMED", "Reading", "SDKModel", "check_limits", "malformed_detail"]

# What reading a provider's answer raises when it has not the expected shape (a key
# missing, a wrong type, nesting no parser survives): a bad response, to retry, not a bug
# of the agent's to crash it.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)


def malformed_detail(exc: Exception) -> str:
    """What was wrong with a malformed answer, for a ModelError's message."""
    if isinstance(exc, RecursionError):
        return "it is nested too deeply to read"
    return f"{type(exc).__name__}: {exc}"


def check_limits(limits: object) -> None:
    """Refuse ``limits`` that are not a ModelLimits or None (a TypeError), as a model is
    built."""
    if limits is not None and not isinstance(limits, ModelLimits):
        raise TypeError(f"limits must be a satsuma.ModelLimits or None, got: {limits!r}")


class _Client(Protocol):
    def with_options(self, *, max_retries: int) -> Any: ...

    async def close(self) -> None: ...


class _Accumulator(Protocol):
    def result(self) -> StreamedMessage: ...


_C = TypeVar("_C", bound=_Client)
_A = TypeVar("_A", bound=_Accumulator)


@attrs.define(eq=False)
class Reading(Generic[_A]):
    """A streamed answer being read: its accumulator, and the first failure the stream
    carried (an error event, a malformed event), if any. The stream is read on to its
    end after a failure, so that its connection is left clean for the next request."""

    accumulator: _A
    failure: ModelError | None = None


class SDKModel(trio.abc.AsyncResource, Generic[_C, _A]):
    """A Model on a provider's SDK client (see the module): it closes the client only if
    it built it, and is an async context manager that does so."""

    # The SDK's module (imported on first use: it takes seconds), whose APIStatusError
    # and APIConnectionError are read; the codec's accumulator the answers are read
    # into; the error's message when a stream ends without saying so.
    _SDK: ClassVar[str]
    _ACCUMULATOR: ClassVar[Callable[..., Any]]  # builds an _A (a ClassVar takes no TypeVar)
    _UNFINISHED: ClassVar[str]

    client: _C
    max_retries: int
    backoff_base: float
    backoff_cap: float
    jitter: bool
    stream: bool | None
    limits: ModelLimits | None

    def _use(
        self,
        client: _C,
        owns_client: bool,
        max_retries: int,
        backoff_base: float,
        backoff_cap: float,
        jitter: bool,
        stream: bool | None,
        limits: ModelLimits | None,
    ) -> None:
        """Keep the client and the settings (checked by the caller): the constructor's
        arguments, in its order."""
        self._owns_client = owns_client
        self.client = client
        # A copy that shares the connection pool; retries are ours, each one reported.
        self._api = client.with_options(max_retries=0)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.jitter = jitter
        self.stream = stream
        self.limits = limits

    async def aclose(self) -> None:
        """Close the client if this model built it (a client passed in is its owner's)."""
        if self._owns_client:
            await self.client.close()

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        """Send one request (streamed or whole: see ``stream``) and return the
        assistant's response.

        Raises:
            ModelError: The API refused the request (``retryable`` False, raised at once
                with the API's own message), retries ran out (``retryable`` True, with
                the last failure's message and status), or the conversation holds
                something the provider's API cannot carry.
        """
        params = self._params(request)
        stream = self.stream
        if stream is None:
            # A listener that does not say wants what it is given: every delta.
            stream = bool(getattr(listener, "wants_deltas", True))
        return await retrying(
            self, partial(self._respond_once, params, request.model, listener, stream), listener
        )

    async def _respond_once(
        self, params: dict[str, Any], model: str, listener: ModelListener, stream: bool
    ) -> ModelResponse:
        import httpx2

        sdk = _imported.get(self._SDK) or _import(self._SDK)
        reading = Reading(self._accumulator(listener))
        try:
            if not stream:
                return await self._whole(params, model, listener, reading.accumulator)
            await self._read_stream(params, reading)
        except sdk.APIStatusError as exc:
            raise ModelError(
                self._status_message(exc),
                status=exc.status_code,
                retryable=retryable_status(exc.status_code),
                retry_after=retry_after_seconds(exc.response.headers),
            ) from exc
        except sdk.APIConnectionError as exc:  # APITimeoutError too
            cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
            raise ModelError(f"{exc.message}{cause}", retryable=True) from exc
        except httpx2.TransportError as exc:
            # The SDK turns transport errors into APIConnectionError only while it sends
            # the request; one that breaks the stream afterwards comes through as it is.
            if reading.failure is None:
                raise ModelError(f"stream interrupted: {exc}", retryable=True) from exc
        if reading.failure is not None:
            raise reading.failure
        if not self._finished(reading.accumulator):
            raise ModelError(self._UNFINISHED, retryable=True)
        return self._response(reading.accumulator, model)

    def _accumulator(self, listener: ModelListener) -> _A:
        accumulator: _A = self._ACCUMULATOR(
            on_text=listener.text,
            on_thinking=listener.thinking,
            # Only a run whose typed answer someone watches asks for it (see agents' loop).
            on_tool_input=getattr(listener, "tool_input", None),
        )
        return accumulator

    def _response(self, accumulator: _A, model: str) -> ModelResponse:
        """The response, checked as it may enter the history: a malformed one (content
        that JSON cannot carry) is a retryable ModelError, as the API's own errors are.
        Its ids are made unique by the loop, against the whole conversation."""
        message = accumulator.result()
        response = ModelResponse(
            content=message.content,
            calls=tuple([ToolCall(*tool_use) for tool_use in message.tool_uses]),
            stop_reason=message.stop_reason,
            # Priced by the model asked for (the name its prices were set by),
            # else by the one that answered (a dated id the table knows).
            usage=with_compaction(
                priced(
                    Usage(
                        input_tokens=message.input_tokens,
                        output_tokens=message.output_tokens,
                        cache_creation_input_tokens=message.cache_creation_input_tokens,
                        cache_read_input_tokens=message.cache_read_input_tokens,
                        cache_creation_1h_input_tokens=message.cache_creation_1h_input_tokens,
                    ),
                    model,
                    message.model,
                ),
                message.compaction,
                model,
                message.model,
            ),
            model=message.model or model,
            id=message.id,
        )
        # A whole response's blocks were judged as they were copied (``_plaincopy``).
        if message.plain:
            return checked_plain_response(response)
        return checked_response(response, fresh=True)

    # --- what each provider gives -------------------------------------------------------

    @abstractmethod
    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of the SDK's call for ``request``."""

    @abstractmethod
    async def _whole(
        self, params: dict[str, Any], model: str, listener: ModelListener, accumulator: _A
    ) -> ModelResponse:
        """Ask for the answer whole, and read it."""

    @abstractmethod
    async def _read_stream(self, params: dict[str, Any], reading: Reading[_A]) -> None:
        """Ask for the answer streamed, and read the stream to its end into ``reading``."""

    @abstractmethod
    def _finished(self, accumulator: _A) -> bool:
        """Whether the stream said it ended."""

    @abstractmethod
    def _status_message(self, exc: Any) -> str:
        """The message of the SDK's APIStatusError ``exc``."""


# The SDK modules, once import_module has returned them whole: importlib's lookup is
# some ten Python calls, on every model call.
_imported: dict[str, ModuleType] = {}


def _import(name: str) -> ModuleType:
    module = _imported[name] = importlib.import_module(name)
    return module
