"""The answer phase of a run with an output type (docs/output.md): the model's
``final_answer`` call parsed, verified and taken, or refused with what is wrong, within
the run's ``output_retries``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..tools import ToolCall, ToolOutcome, error_outcome, format_results
from ._act import act
from ._events import OutputRejected, OutputValidated
from ._output import (
    ANSWER_TAKEN_TEXT,
    NOT_RUN_TEXT,
    ONE_ANSWER_TEXT,
    OUTPUT_TOOL,
    STEERED_TEXT,
    answer_json,
    invalid_answer_text,
)
from ._verifiers import verification_text
from ._verify import verify

if TYPE_CHECKING:
    from ._result import RunStatus
    from ._runstate import Run

__all__ = ["reject", "take_answer"]


def reject(run: Run, errors: list[str], why: Callable[[], str]) -> str | None:
    """Count an answer that is not one (invalid, or missing); the reason the run
    fails when no retry is left, else None (the model tries again)."""
    run.answers_rejected += 1
    left = run.output_retries - run.answers_rejected
    run.emit(run.event(OutputRejected, errors=tuple(errors), retries_left=max(left, 0)))
    if left >= 0:
        return None
    return f"no valid answer after {run.output_retries} retries (output_retries): {why()}"


async def take_answer(run: Run, calls: Sequence[ToolCall]) -> tuple[RunStatus, str | None] | None:
    """A turn with a final_answer call. A valid answer that the verifiers pass ends
    the run (the turn's other calls are not run: each reads NOT_RUN_TEXT); otherwise
    the answer's tool_result says what is wrong, the other calls run as in any turn,
    and the loop goes on. Only the first final_answer call of a turn is read. The
    status and error when the run ends, else None."""
    assert run.output_spec is not None
    ctx = run.ctx
    first = next(call for call in calls if call.name == OUTPUT_TOOL)
    others = [call for call in calls if call.name != OUTPUT_TOOL]
    answered: dict[str, ToolOutcome] = {
        call.id: error_outcome(call.id, OUTPUT_TOOL, "skipped", ONE_ANSWER_TEXT)
        for call in calls
        if call.name == OUTPUT_TOOL and call is not first
    }
    value, errors = (
        (None, [first.refused]) if first.refused is not None else run.output_spec.parse(first.input)
    )
    ended: tuple[RunStatus, str | None] | None = None
    if errors:
        failed = reject(
            run,
            errors,
            lambda: (
                # A refused answer is {} here: what JSON could not carry is not shown.
                "the last answer"
                + ("" if first.refused is not None else f", {answer_json(first.input)},")
                + " is invalid: "
                + "; ".join(errors)
            ),
        )
        answered[first.id] = error_outcome(
            first.id, OUTPUT_TOOL, "invalid_args", invalid_answer_text(errors)
        )
        if failed is not None:
            ended = ("failed", failed)
    elif ctx.steering.waiting():
        # The user spoke while the model answered: the answer may no longer hold, so
        # it is not taken (nor counted), and the model answers again after reading it.
        answered[first.id] = error_outcome(first.id, OUTPUT_TOOL, "skipped", STEERED_TEXT)
    else:
        run.emit(run.event(OutputValidated, output=value))
        reason = await verify(run, value)
        if reason is None:
            run.answer = value
            answered[first.id] = ToolOutcome(
                tool_use_id=first.id,
                tool_name=OUTPUT_TOOL,
                content=ANSWER_TAKEN_TEXT,
                is_error=False,
            )
            ended = ("completed", None)
        else:
            answered[first.id] = error_outcome(
                first.id, OUTPUT_TOOL, "failed", verification_text(reason)
            )
    if ended is not None:
        # The run ends here: the other calls are answered, never run.
        for call in others:
            answered[call.id] = error_outcome(call.id, call.name, "skipped", NOT_RUN_TEXT)
        run.pending = []
        run.finished = {}
        run.commit_user(format_results([answered[call.id] for call in calls]))
        return ended
    if not others:
        run.pending = []
        run.commit_user(format_results([answered[call.id] for call in calls]))
        return None
    if ctx.persistence is not None:
        # Journaled like the turn's other calls, so that a pause on one of them
        # (awaiting approval) or a kill is resumed with the answer's own result.
        answers = [call for call in calls if call.name == OUTPUT_TOOL]
        # The turn is stored before its calls are journaled, as in act: a journal
        # record then always belongs to a call the stored conversation holds.
        await ctx.conversation.flush()
        await ctx.persistence.calls_started(run.run_id, answers)
        for call in answers:
            await ctx.persistence.call_finished(run.run_id, answered[call.id])
    tripped = await act(run, others, answered=answered, order=calls)
    return ("failed", tripped) if tripped is not None else None
