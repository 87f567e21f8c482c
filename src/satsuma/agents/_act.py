"""The act phase of a run: one turn's tool calls, journaled as they start and finish and
run under the loop guard, their results added to the conversation. Calls that need a
decision pause the run (``_approval.pause``) when the agent has a store and no
approver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..tools import (
    Approver,
    Deferral,
    ToolCall,
    ToolOutcome,
    checked_calls,
    error_outcome,
    format_results,
)
from ._approval import pause
from ._loopguard import loop_guard_reason, loop_guard_refusal, names_of

if TYPE_CHECKING:
    from ._runstate import Run

__all__ = ["act"]


async def act(
    run: Run,
    calls: Sequence[ToolCall],
    *,
    answered: dict[str, ToolOutcome] | None = None,
    order: Sequence[ToolCall] = (),
) -> str | None:
    """Run one turn's calls and commit their results; a loop-guard reason if the run
    must stop. ``answered``: outcomes of other calls of the turn (a final answer's),
    committed with these in the turn's ``order``."""
    ctx = run.ctx
    guard = ctx.spec.loop_guard
    streak = run.streak.add(calls)
    stopped: str | None = None
    outcomes: list[ToolOutcome]
    if guard is not None and streak > guard:
        # The first time the guard fires the model is told and may change course; the
        # run fails only if it asks for the same again.
        if streak > guard + 1:
            stopped = loop_guard_reason(names_of(calls), streak)
            text = f"Error: {stopped}; the run is stopped."
        else:
            text = loop_guard_refusal(names_of(calls), streak)
        outcomes = [error_outcome(call.id, call.name, "denied", text) for call in calls]
    else:
        # The assistant's tool_use message is committed before any call starts, and
        # each call journaled as started (one transaction): a kill from here on leaves
        # calls to repair.
        persistence = ctx.persistence
        if persistence is not None:
            await persistence.calls_started(run.run_id, calls, ctx.conversation.messages)
        run.finished = {}
        # Without an approver, an agent with a store pauses on the calls that need a
        # decision; one without either denies them (the runner's default).
        approver: Approver | Deferral | None = ctx.approver
        deferral = None
        if approver is None and persistence is not None:
            approver = deferral = Deferral()
        outcomes = await ctx.tools.runner.execute(
            # Gated as the response was checked: the runner does not walk them again.
            checked_calls(calls),
            ctx.tool_context,
            interrupt=ctx.steering.event,
            events=run.tool_sink(),
            agent=ctx.handle,
            # Without a store there is nothing to await: a plain callback costs the
            # call no shielded step.
            on_outcome=run.keep_and_journal if persistence is not None else run.keep,
            approver=approver,
            approval_timeout=ctx.spec.approval_timeout,
        )
        if deferral is not None and deferral.pending:
            await pause(run, deferral.pending, outcomes)
            return None
    run.add_subagent_usage(outcomes)
    run.pending = []
    run.finished = {}
    if answered:
        answered.update((outcome.tool_use_id, outcome) for outcome in outcomes)
        outcomes = [answered[call.id] for call in order]
    run.commit_user(format_results(outcomes))
    return stopped
