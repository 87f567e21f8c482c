"""One run of an agent: begin → gather (call the model) → act (run its tool calls) →
repeat until the model ends its turn → verify, or answer for a typed output; approve
when calls wait for a decision. This module drives the phases in order (each is a
module of its own) and owns the run's cancel scopes and its ending: however it ends —
completed, out of iterations or time, cancelled, failed, or torn down with its agent —
the conversation it leaves is valid: every ``tool_use`` has exactly one ``tool_result``.

The phases reach the agent through the run's ``RunContext`` only (``_runcontext``).

With an OpenTelemetry TracerProvider configured, a run is an ``invoke_agent`` span and
each model call a ``chat`` span inside it (see ``_tracing``); the runner's
``execute_tool`` spans nest under the run's span, which is current in the run's task.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from .._exceptions import (
    BudgetExceeded,
    ConfigurationError,
    LeaseLost,
    ModelError,
    StoreClosed,
    StoreError,
)
from .._text import MESSAGE_LIMIT, describe_exception, describe_exception_text, reportable
from ..models import ContextWindowExceeded
from ..tools import cancelled_text, error_outcome, format_results
from . import _tracing
from ._act import act
from ._answer import reject, take_answer
from ._begin import begin
from ._events import RunEnd, RunStart
from ._gather import EMPTY_RESPONSE_TEXT, call, commit_response, prepare
from ._output import OUTPUT_TOOL, reminder_text
from ._result import NO_ANSWER, RunResult, RunStatus
from ._runstate import Run, said
from ._verifiers import verification_text
from ._verify import verify

if TYPE_CHECKING:
    from ._job import Job
    from ._runcontext import RunContext

__all__ = ["execute_run"]

logger = logging.getLogger("satsuma.agents")


async def execute_run(ctx: RunContext, job: Job) -> RunResult[Any]:
    """Run one job to its end. If the agent itself is being torn down (an outer
    cancellation) or crashes, the run still ends — ``cancelled`` or ``failed`` — with a
    valid history, and the cancellation or the crash goes on. With a store, the
    conversation and the run record are written at the end in every case."""
    run = Run(ctx, job)
    # One coroutine, not one inside another: every frame of the chain is resumed each
    # time the run's task is (every model call's reads, every tool round).
    with _tracing.start_run(
        agent=run.agent,
        model=ctx.model_id,
        agent_id=ctx.agent_id,
        run_id=run.run_id,
        parent=job.trace_context,
    ) as span:
        try:
            return await _within_scopes(run)
        except Exception as exc:
            if run.result is None:
                _answer_pending(run, "the agent crashed")
                crash = describe_exception(exc, limit=MESSAGE_LIMIT)
                _finish(run, "failed", f"the agent crashed: {crash}")
            printable = reportable(exc)
            if printable is not exc:
                raise printable from exc
            raise
        finally:
            try:
                if run.result is None:
                    _answer_pending(run, "the agent stopped")
                    _finish(run, "cancelled", "the agent stopped")
                if ctx.persistence is not None and not job.left_to_node():
                    await _save_end(run)
            finally:
                # Before the span's exit, which then adds a crash's exception (or marks
                # an outer cancellation) on top of what the result says.
                if run.result is not None:
                    _tracing.end_run(span, run.result)


async def _within_scopes(run: Run) -> RunResult[Any]:
    """The run inside its caller's cancel scope and its max_duration's (when it has one)."""
    ctx, job = run.ctx, run.job
    spec = ctx.spec
    if job.sink is not None:
        run.emit(RunStart(agent=run.agent, run_id=run.run_id, iteration=0, prompt=job.prompt))
    ended: tuple[RunStatus, str | None] = ("completed", None)
    deadline_scope = None
    with job.scope:
        if spec.max_duration is None:
            ended = await _phases(run)
        else:
            deadline = trio.current_time() + spec.max_duration
            with trio.CancelScope(deadline=deadline) as deadline_scope:
                ended = await _phases(run)
    status, error = ended
    if job.scope.cancelled_caught:
        status, error = "cancelled", None
        _answer_pending(run, "the run was cancelled")
    elif deadline_scope is not None and deadline_scope.cancelled_caught:
        status, error = "deadline_exceeded", f"max_duration of {spec.max_duration:g}s exceeded"
        _answer_pending(run, "the run passed its max_duration")
    return _finish(run, status, error)


async def _phases(run: Run) -> tuple[RunStatus, str | None]:
    """The run's phases, and how they ended it (a store's failure included)."""
    ctx, job = run.ctx, run.job
    try:
        ended = await begin(run)
        return ended if ended is not None else await _loop(run)
    except StoreError as exc:
        if isinstance(exc, (LeaseLost, StoreClosed)) and ctx.is_current():
            # No later write of this agent can succeed (another owner has it, or
            # the store is done): the agent stops, rather than go on serving runs
            # whose writes are refused or lost. Its callers get AgentCrashed
            # naming this. (An incarnation a supervisor replaced just ends the
            # run: the newer one serves on.)
            raise
        # What was committed stays; the run ends here with the store's reason.
        job.store_error = exc
        if job.left_to_node():
            # Its node hands it back, to be resumed from its journal: the calls in
            # flight stay unanswered there (finished ones keep their outcomes, in-doubt
            # ones re-run when idempotent), and nothing of this end is written.
            return "failed", said(exc)
        _answer_pending(run, "the run failed on a store error")
        return "failed", said(exc)


async def _loop(run: Run) -> tuple[RunStatus, str | None]:
    ctx = run.ctx
    spec = ctx.spec
    while True:
        steering = run.take_steering()
        if steering:
            run.commit_user(steering)
        if run.iteration >= spec.max_iterations:
            return "max_iterations", f"max_iterations ({spec.max_iterations}) reached"
        run.iteration += 1
        # Committed before every model call: a kill now loses nothing sent so far.
        await ctx.conversation.flush()
        try:
            request, held = await prepare(run)
            response = await call(run, request, held)
        except (ModelError, ContextWindowExceeded) as exc:
            # What retries could not cure (or a request too large to send) fails the
            # run; anything else raised by the model is a bug, and crashes the agent
            # (a supervisor restarts it).
            return "failed", said(exc)
        except (BudgetExceeded, ConfigurationError) as exc:
            # A budget refused the call (or cannot be kept: a model without prices):
            # named by its kind, which serve's run JSON shows as the error's type.
            return "failed", describe_exception_text(exc)
        commit_response(run, response)
        if response.stop_reason == "pause_turn":
            continue  # the API paused a long turn: send it back as it is to go on
        if response.calls:
            if run.output_spec is not None and any(
                call.name == OUTPUT_TOOL for call in response.calls
            ):
                ended = await take_answer(run, response.calls)
                if ended is not None:
                    return ended
                if run.awaiting:
                    return "awaiting_approval", None
                continue
            tripped = await act(run, response.calls)
            if tripped is not None:
                return "failed", tripped
            if run.awaiting:
                return "awaiting_approval", None
            continue
        run.output = response.text if response.content else ""
        if ctx.steering.waiting():
            continue  # the user spoke while the model answered: that is the next turn
        if run.output_spec is not None:
            # A typed answer is due, and the model ended its turn in text.
            failed = reject(
                run,
                [f"the turn ended without a {OUTPUT_TOOL} call"],
                lambda: (
                    f"the model ended its turn without calling {OUTPUT_TOOL}; its last "
                    f"text: {run.output[:2000]!r}"
                ),
            )
            if failed is not None:
                return "failed", failed
            run.commit_user([{"type": "text", "text": reminder_text()}])
            continue
        reason = await verify(run, run.output) if ctx.verifiers else None
        if reason is None:
            return "completed", None
        run.commit_user([{"type": "text", "text": verification_text(reason)}])


# --- ending -------------------------------------------------------------------------


def _answer_pending(run: Run, why: str) -> None:
    """Give every tool_use still without a result one, so the history stays valid: a
    call that finished its real outcome, any other the cancellation text."""
    if not run.pending:
        return
    names = {
        block["id"]: block.get("name", "")
        for message in run.messages
        if message.role == "assistant"
        for block in message.content
        if block.get("type") == "tool_use"
    }
    outcomes = []
    for call_id in run.pending:
        outcome = run.finished.get(call_id)
        if outcome is None:
            outcome = error_outcome(
                call_id, names.get(call_id, ""), "cancelled", cancelled_text(why)
            )
            run.unjournaled.append(outcome)
        outcomes.append(outcome)
    run.pending = []
    run.finished = {}
    run.commit_user(format_results(outcomes))


def _roll_back(run: Run) -> None:
    """Take this run's prompt out of the conversation again when the model never
    answered it (the run failed, crashed or was cancelled before any answer).

    Otherwise the prompt would stay, and the next run's prompt would be joined to it
    in one user message: a prompt that is too long, or that crashes the model, would
    fail every run after it.
    """
    if run.before is None or any(m.role == "assistant" for m in run.messages):
        return
    length, last = run.before
    conversation = run.ctx.conversation
    history = conversation.messages
    del history[length:]
    if last is not None and history and history[-1] is not last:
        history[-1] = last  # the prompt had been merged into this user message
    conversation.changed_from(len(history) - 1 if last is not None else 0)
    run.messages = []


def _finish(run: Run, status: RunStatus, error: str | None) -> RunResult[Any]:
    if status != "completed" and not run.job.left_to_node():
        _roll_back(run)
    output: Any
    if run.output_spec is not None:
        output = run.answer if status == "completed" else NO_ANSWER
    else:
        if not run.output:
            for message in reversed(run.messages):
                if message.role == "assistant" and message.text not in ("", EMPTY_RESPONSE_TEXT):
                    run.output = message.text
                    break
        output = run.output
    result: RunResult[Any] = RunResult(
        run_id=run.run_id,
        output=output,
        status=status,
        messages=tuple(run.messages),
        usage=run.usage,
        iterations=run.iteration,
        error=error,
        pending=run.awaiting,
    )
    run.result = result
    if run.job.sink is not None:
        run.emit(RunEnd(agent=run.agent, run_id=run.run_id, iteration=run.iteration, result=result))
    return result


async def _save_end(run: Run) -> None:
    # Shielded, so that a cancelled run is recorded too; bounded, so that a stuck disk
    # cannot hold a shutdown forever.
    persistence = run.ctx.persistence
    assert persistence is not None and run.result is not None
    with trio.move_on_after(_SAVE_SECONDS, shield=True):
        for outcome in run.unjournaled:
            # The journal agrees with the history: these calls ended cancelled.
            await persistence.call_finished(run.run_id, outcome)
        try:
            result = run.result
            if result.status == "awaiting_approval":  # a pause is recorded by pause
                await run.ctx.conversation.flush()
            else:
                # The rest of the conversation with the run's end, in one transaction.
                await persistence.end_run(
                    result.run_id,
                    result.status,
                    result.usage,
                    result.error,
                    history=run.ctx.conversation.messages,
                )
        except StoreError:
            logger.warning(
                "agent %s: could not record the end of run %s",
                run.ctx.agent_id,
                run.run_id,
                exc_info=True,
            )


_SAVE_SECONDS = 10.0
