"""The ``execute_tool`` span of one call, when an OpenTelemetry TracerProvider is
configured (see ``satsuma._telemetry``): started in the call's own task, so that it is
current while the call's hooks and tool run (and a sub-agent's run nests under it), its
parent the span of ``execute``'s caller, whose context the task inherits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .. import _telemetry
from ._approval import Deferral
from ._calls import ToolCall
from ._environment import Environment
from ._results import ToolOutcome

__all__ = ["traced"]


async def traced(
    supervised: Callable[
        [ToolCall, Environment, list[ToolOutcome | None], int], Awaitable[ToolOutcome]
    ],
    call: ToolCall,
    env: Environment,
    outcomes: list[ToolOutcome | None],
    index: int,
) -> ToolOutcome:
    """``supervised(call, env, outcomes, index)`` inside the call's span, which records
    how it ended."""
    scope = _telemetry.start_span(
        env.tracer,
        f"execute_tool {call.name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
        },
    )
    with scope:
        outcome = await supervised(call, env, outcomes, index)
        if isinstance(env.approver, Deferral) and env.approver.holds(call.id):
            # Not an outcome: the call waits for a person, and the run pauses on it.
            scope.set({"satsuma.tool.outcome": "awaiting_approval"})
            return outcome
        scope.set(
            {
                "satsuma.tool.outcome": outcome.error_kind or "ok",
                "satsuma.tool.duration": outcome.duration,
            }
        )
        if outcome.error_kind is not None:
            scope.fail(outcome.error_kind)
        return outcome
