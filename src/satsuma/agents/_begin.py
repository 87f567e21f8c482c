"""How a run begins, before its first model call: a new run goes past the runs it leaves
behind (paused, interrupted) and adds its prompt; a resumed run finds what it had done;
a run going on with decisions runs its decided calls. Calls a crash or a kill left
without a result are answered first (``_repair``), so that every ``tool_use`` has its
``tool_result`` before the model reads the conversation again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._messages import Message
from ._approval import run_decided
from ._output import reminder_text
from ._persist import gone_past, own_answer, run_part, stored_answer
from ._repair import dangling_tool_uses, repair
from ._runstate import said

if TYPE_CHECKING:
    from ._result import RunStatus
    from ._runstate import Run

__all__ = ["begin"]

logger = logging.getLogger("satsuma.agents")


async def begin(run: Run) -> tuple[RunStatus, str | None] | None:
    """Make the conversation ready for the run's first model call; the run's status
    and error when it ends here, None when its loop goes on."""
    ctx = run.ctx
    job = run.job
    history = ctx.conversation.messages
    persistence = ctx.persistence
    if job.decisions is not None:
        # Going on with a run paused awaiting approval (claimed by the actor).
        assert job.resume is not None
        run.usage = job.resume.usage
        problem = await run_decided(run)
        if problem is not None:
            return "failed", problem
    elif job.resume is not None:
        # Resumed now: no later run may close it as abandoned.
        ctx.interrupted[:] = [r for r in ctx.interrupted if r.run_id != run.run_id]
        assert persistence is not None
        runs = await persistence.store.runs(ctx.agent_id)
        if run.output_spec is not None:
            # A typed answer taken before the end could be recorded: the run's.
            found = stored_answer(run_part(job.resume, history))
            if found is not None:
                try:
                    run.answer = run.output_spec.from_input(found[0])
                except ValueError as exc:
                    return "failed", said(exc)
                return "completed", None
        try:
            answer = own_answer(job.resume, runs, history)
        except ValueError as exc:
            return "failed", said(exc)
        if answer is not None:
            # The run had its answer; only its end was not recorded.
            run.output = answer
            return "completed", None
        await repair(run, run.run_id, rerun=True)
        last = history[-1] if history else None
        if last is not None and last.role == "assistant":
            if run.output_spec is not None:
                # It ended a turn in text where a typed answer was due.
                run.commit_user([{"type": "text", "text": reminder_text()}])
                return None
            run.output = last.text  # its calls were all answered by the journal
            return "completed", None
    else:
        if history or persistence is not None or ctx.interrupted:
            # (A conversation's first run, without a store, has nothing to go past.)
            await _go_past(run)
            _drop_unanswered_prompt(run)
        # What the conversation was before this run, to go back to if the model never
        # answers it (see _run's roll back).
        run.before = (len(history), history[-1] if history else None)
        run.commit_user([{"type": "text", "text": job.prompt}, *run.take_steering()])
        if persistence is not None:
            # The prompt and the run record in one transaction: a kill never leaves a
            # prompt without its run.
            await persistence.start_run(run.run_id, job.prompt, history)
    return None


async def _go_past(run: Run) -> None:
    """A new run answers the calls left dangling and ends the runs it goes past: paused
    ones and interrupted ones can no longer be resumed."""
    ctx = run.ctx
    persistence = ctx.persistence
    dangling = bool(dangling_tool_uses(ctx.conversation.messages))
    # Which runs wait is read from the store now, not remembered: a decision
    # taken elsewhere, a restart or a prune cannot leave a stale list. (The first run
    # after an open that found none waiting is told so without a read: none can
    # appear but through this agent; see Persistence.none_left.)
    left = (
        await persistence.runs_left(run.run_id, claimed=dangling) if persistence is not None else []
    )
    if dangling and left:
        # The calls a paused run waits on: no one decided them before this run
        # (or someone did through the store, and nothing ran them).
        await repair(
            run,
            left[-1].run_id,
            rerun=False,
            undecided=f"no decision was made before run {run.run_id} started",
            taken=left[-1].status == "running",
        )
    elif dangling:
        previous = ctx.interrupted[-1].run_id if ctx.interrupted else ""
        await repair(run, previous, rerun=False)
    if persistence is not None:
        # A new run goes past the paused ones: they can no longer be resumed.
        for record in left:
            await persistence.end_run(
                record.run_id,
                "cancelled",
                record.usage,
                gone_past(record, f"before run {run.run_id} started"),
            )
    if persistence is not None and ctx.interrupted:
        # A new run goes past the interrupted ones: they can no longer be resumed.
        for record in ctx.interrupted:
            await persistence.end_run(
                record.run_id,
                "cancelled",
                record.usage,
                f"interrupted, and not resumed before run {run.run_id} started",
            )
        ctx.interrupted.clear()


def _drop_unanswered_prompt(run: Run) -> None:
    """Take out of the conversation the text that ends it unanswered: the prompt (and
    steering) of a run that was interrupted and not resumed, or that a store of an
    older satsuma kept without its run. It is never sent again: the new run's
    prompt would otherwise be joined to it. Tool results stay (they answer calls)."""
    conversation = run.ctx.conversation
    history = conversation.messages
    if not history or history[-1].role != "user":
        return
    last = history[-1]
    kept = [block for block in last.content if block.get("type") == "tool_result"]
    if len(kept) == len(last.content):
        return
    logger.warning(
        "agent %s: run %s does not send the unanswered prompt that ended the "
        "conversation (%r): its run was not resumed",
        run.ctx.agent_id,
        run.run_id,
        last.text[:200],
    )
    if kept:
        conversation.replace_last(Message(role="user", content=kept))
    else:
        history.pop()
        conversation.changed_from(len(history))
