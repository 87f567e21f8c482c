"""OpenTelemetry spans for runs, model calls and tool calls, after the GenAI semantic
conventions: ``invoke_agent <agent>`` per run, ``chat <model>`` per model call,
``execute_tool <tool>`` per tool call.

Only the OpenTelemetry API is used. Until the application configures a TracerProvider
nothing is recorded: ``tracer()`` returns None and every caller skips its span, so the
cost is one check per run, model call or ``ToolRunner.execute``. The provider is looked
up at each of those points, never at import, so that one configured later is honoured.

Two rules hold for every span here:

- Cancellation is not an error. A span whose block is left by ``trio.Cancelled`` (alone,
  or a group of nothing else) ends with its status unset and ``satsuma.cancelled = True``;
  the exception goes on untouched. (The API's ``start_as_current_span`` would record it
  and set ERROR, which is why spans are started and ended by hand here.)
- Telemetry never breaks a run: whatever the API or a user's provider raises is caught,
  logged once to the ``satsuma.telemetry`` logger, and the run goes on without it.

Lives at the top of the package because both ``tools`` and ``agents`` use it, and
``tools`` may import nothing from ``agents``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Final, final

import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from ._text import MESSAGE_LIMIT, exception_message, type_name, valid_text

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.util.types import AttributeValue

    from ._messages import Usage

__all__ = [
    "PROVIDER",
    "SpanScope",
    "current_context",
    "error_type",
    "null_scope",
    "record_on_current_span",
    "set_on_current_span",
    "start_span",
    "tracer",
    "usage_attributes",
]

logger = logging.getLogger("satsuma.telemetry")

PROVIDER: Final = "anthropic"
"""``gen_ai.provider.name``: satsuma speaks the Anthropic Messages API."""

_cache: tuple[object, Tracer] | None = None
_failure_logged = False


def _failed(what: str) -> None:
    """Log a telemetry failure, once per process: a broken exporter would otherwise log
    at every span, and a run must not notice either way."""
    global _failure_logged
    if _failure_logged:
        logger.debug("telemetry failed again (%s)", what, exc_info=True)
        return
    _failure_logged = True
    logger.warning(
        "OpenTelemetry failed (%s); runs go on, this is logged once", what, exc_info=True
    )


def tracer() -> Tracer | None:
    """satsuma's tracer from the global TracerProvider as it is now, or None when the
    application has configured none (nothing would be recorded, so nothing is done)."""
    global _cache
    try:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            return None
        cached = _cache
        if cached is not None and cached[0] is provider:
            return cached[1]
        from . import __version__  # here: the package is fully imported by the first call

        found = provider.get_tracer("satsuma", __version__)
        _cache = (provider, found)
        return found
    except Exception:
        _failed("getting the tracer")
        return None


def current_context() -> Context | None:
    """The caller's OpenTelemetry context, to parent work done in another task (an
    agent's run happens in the agent's task, not its caller's)."""
    try:
        return otel_context.get_current()
    except Exception:
        _failed("reading the current context")
        return None


def error_type(exc: BaseException) -> str:
    """``error.type`` for an exception: its class's qualified name."""
    cls = type(exc)
    try:
        module, name = cls.__module__, cls.__qualname__
        if type(module) is not str or type(name) is not str:
            raise TypeError(module, name)
    except Exception:  # a class whose metaclass answers for these: its name from type's slot
        return type_name(exc)
    return valid_text(name if module == "builtins" else f"{module}.{name}")


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


@final
class SpanScope:
    """One span, current in this task's context from creation until ``end`` (or the end
    of a ``with`` block). Every method is safe to call whatever the provider does.

    A block left by an exception records it on the span (status ERROR, ``error.type``,
    an exception event) unless it is a cancellation, which sets ``satsuma.cancelled``
    and leaves the status as it was. The exception always goes on.
    """

    __slots__ = ("_ended", "_token", "span")

    def __init__(self, span: Span, token: object | None) -> None:
        self.span = span
        self._token = token
        self._ended = False

    def __enter__(self) -> SpanScope:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.record_exit(exc)
        self.end()

    def set(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Set attributes (ignored once the span has ended)."""
        try:
            self.span.set_attributes(attributes)
        except Exception:
            _failed("setting span attributes")

    def fail(self, kind: str, description: str | None = None) -> None:
        """Mark the operation as failed: status ERROR with ``error.type = kind``."""
        try:
            self.span.set_attribute("error.type", kind)
            self.span.set_status(Status(StatusCode.ERROR, description))
        except Exception:
            _failed("setting the span status")

    def record_exception(self, exc: BaseException) -> None:
        """Add an exception event (with its stack trace) to the span."""
        try:
            self.span.record_exception(exc)
        except Exception:
            _failed("recording an exception")

    def add_event(self, name: str, attributes: Mapping[str, AttributeValue]) -> None:
        try:
            self.span.add_event(name, attributes)
        except Exception:
            _failed("adding a span event")

    def record_exit(self, exc: BaseException) -> None:
        """What an exception leaving the span's block means for it (see the class)."""
        if _is_cancellation(exc):
            self.set({"satsuma.cancelled": True})
            return
        self.record_exception(exc)
        # Not str(exc): the exception may be a tool's or a hook's, whose __str__ may raise
        # (which would replace the exception leaving the block) or be enormous.
        self.fail(error_type(exc), exception_message(exc, limit=MESSAGE_LIMIT) or None)

    def end(self) -> None:
        """Detach the span from the context and end it; later calls do nothing."""
        if self._ended:
            return
        self._ended = True
        try:
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]  # from attach
        except Exception:
            _failed("detaching the span")
        try:
            self.span.end()
        except Exception:
            _failed("ending a span")


def null_scope() -> SpanScope:
    """A scope whose span records nothing: for code that always wants a scope."""
    return SpanScope(trace.INVALID_SPAN, None)


def start_span(
    tracer: Tracer | None,
    name: str,
    attributes: Mapping[str, AttributeValue],
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Context | None = None,
) -> SpanScope:
    """Start a span and make it current in this task's context (on top of ``parent``
    when given, else of the current context). Without a tracer, or if OpenTelemetry
    fails, the scope records nothing.

    The scope must be ended in the same task, as contextvars tokens require: use it in a
    ``with`` block, or call ``end`` from a ``finally`` of the same function.
    """
    if tracer is None:
        return null_scope()
    try:
        span = tracer.start_span(
            name,
            context=parent,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
    except Exception:
        _failed("starting a span")
        return null_scope()
    token: object | None = None
    try:
        token = otel_context.attach(trace.set_span_in_context(span, parent))
    except Exception:
        _failed("making a span current")
    return SpanScope(span, token)


def record_on_current_span(exc: BaseException) -> None:
    """Add an exception event to the span current in this task (a tool's crash, which
    the runner captures and so never leaves the span's block)."""
    try:
        trace.get_current_span().record_exception(exc)
    except Exception:
        _failed("recording an exception")


def set_on_current_span(attributes: Mapping[str, AttributeValue]) -> None:
    """Set attributes on the span current in this task (a tool call's, while its
    approval is asked and decided). Only for callers that know they started that span:
    without one, the current span is someone else's."""
    try:
        trace.get_current_span().set_attributes(attributes)
    except Exception:
        _failed("setting span attributes")


def usage_attributes(usage: Usage) -> dict[str, AttributeValue]:
    """Token counts in the GenAI conventions' names, and ``satsuma.cost_usd`` when the
    cost is known. As the conventions ask for Anthropic, ``input_tokens`` counts every
    input token, cached ones included."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.usage.input_tokens": usage.total_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
    }
    # An unknown cost is left out: an attribute cannot be None, and 0 would be a lie.
    if usage.cost_usd is not None:
        attributes["satsuma.cost_usd"] = usage.cost_usd
    return attributes
