"""The agent loop's spans: ``invoke_agent <agent>`` around a run and ``chat <model>``
around each model call, with the GenAI semantic conventions' attributes (the span
machinery, and the rules on cancellation and failures, are ``satsuma._telemetry``'s).

Neither prompts, outputs nor tool arguments are recorded: the conventions make content
opt-in, and satsuma's events (or a ``JsonLinesLog``) are the place for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.trace import INVALID_SPAN, SpanKind

from .. import _telemetry
from .._telemetry import SpanScope

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..models import ModelRequest, ModelResponse
    from ._result import RunResult

__all__ = ["end_chat", "end_run", "retried", "start_chat", "start_run", "waited"]


def start_run(
    *, agent: str, model: str, agent_id: str, run_id: str, parent: Context | None
) -> SpanScope:
    """The ``invoke_agent`` span of a run, current in the agent's task until it ends;
    ``parent`` is the context of the task that asked for the run."""
    tracer = _telemetry.tracer()
    if tracer is None:
        return _telemetry.null_scope()  # no attributes built for a span nobody records
    return _telemetry.start_span(
        tracer,
        f"invoke_agent {agent}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": _telemetry.PROVIDER,
            "gen_ai.agent.name": agent,
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": agent_id,
            "satsuma.run_id": run_id,
        },
        parent=parent,
    )


def end_run(scope: SpanScope, result: RunResult) -> None:
    """Record how the run ended: a cancelled run is not an error, nor is one that paused
    ``awaiting_approval`` (with ``satsuma.run.pending_calls``, how many calls wait); a run
    that ended ``failed``, ``max_iterations`` or ``deadline_exceeded`` is, with the status
    as ``error.type`` (a crash then overrides it with the exception's type)."""
    if scope.span is INVALID_SPAN:
        return  # a null scope (no tracer): nothing it is given is recorded
    scope.set(
        {
            "satsuma.run.status": result.status,
            "satsuma.run.iterations": result.iterations,
            **_telemetry.usage_attributes(result.usage),
        }
    )
    if result.status == "cancelled":
        scope.set({"satsuma.cancelled": True})
    elif result.status == "awaiting_approval":
        scope.set({"satsuma.run.pending_calls": len(result.pending)})
    elif result.status != "completed":
        scope.fail(result.status, result.error)


def start_chat(request: ModelRequest) -> SpanScope:
    """The ``chat`` span of one model call (a CLIENT span: the model is a remote
    service), retries included."""
    tracer = _telemetry.tracer()
    if tracer is None:
        return _telemetry.null_scope()
    return _telemetry.start_span(
        tracer,
        f"chat {request.model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _telemetry.PROVIDER,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_tokens,
        },
        kind=SpanKind.CLIENT,
    )


def end_chat(scope: SpanScope, response: ModelResponse) -> None:
    if scope.span is INVALID_SPAN:
        return
    attributes = _telemetry.usage_attributes(response.usage)
    if response.model:
        attributes["gen_ai.response.model"] = response.model
    if response.id:
        attributes["gen_ai.response.id"] = response.id
    if response.stop_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (response.stop_reason,)
    scope.set(attributes)


def retried(scope: SpanScope, attempt: int, delay: float, reason: str) -> None:
    """A failed attempt of the model call, retried after ``delay`` seconds."""
    scope.add_event(
        "satsuma.model.retry",
        {"satsuma.retry.attempt": attempt, "satsuma.retry.delay": delay, "error.message": reason},
    )


def waited(scope: SpanScope, seconds: float) -> None:
    """How long the model call waited for its configuration's limits before it was sent
    (docs/limits.md); set only on calls that have limits, 0.0 when there was no wait."""
    scope.set({"satsuma.model.wait_seconds": seconds})
