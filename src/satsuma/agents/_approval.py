"""The approve phase of a run: pausing ``awaiting_approval`` on the calls that need a
decision, and going on with the decisions given: checked against what the run waits on,
the run claimed in the store so that only one set of decisions ever runs its calls (two
people clicking at once, two processes resuming at once), then its calls run.

A claim that fails on the store fails that resume only (``not_resumed``): nothing ran,
and the run still awaits approval. Should the failed claim have committed all the same
(a connection lost as it commits), the agent takes it back (``store.release_claim``), at
once or, while the store is still away, before the next resume of that run claims it."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._exceptions import (
    LeaseLost,
    RunNotAwaitingApproval,
    StoreClosed,
    StoreError,
    StoreUnavailable,
    StoreUnreadable,
)
from .._jsonvalue import json_problem
from ..store import ApprovalDecision, PendingApproval, release_claim
from ..tools import (
    Approve,
    Deny,
    PendingCall,
    ToolCall,
    ToolDefinition,
    ToolOutcome,
    format_results,
)
from ._repair import dangling_tool_uses, interrupted_outcome, journaled_outcome

if TYPE_CHECKING:
    from ._job import Job
    from ._runcontext import RunContext
    from ._runstate import Run

__all__ = [
    "ClaimInDoubt",
    "check_decisions",
    "check_edit",
    "check_edits",
    "claim_paused",
    "edit_problems",
    "not_resumed",
    "pause",
    "run_decided",
    "stored_decisions",
]

logger = logging.getLogger("satsuma.agents")


@attrs.frozen(kw_only=True)
class ClaimInDoubt:
    """A claim of a paused run whose write failed on the store, so that whether it
    committed is unknown, and that ran nothing: the agent takes it back before the run
    is claimed again. Known by its decisions' time (each decided call records it)."""

    call_ids: tuple[str, ...]
    decided_at: float


def check_decisions(
    run_id: str, pending: Sequence[PendingApproval], decisions: Mapping[str, object]
) -> None:
    """Raises ValueError unless ``decisions`` decides exactly the pending calls, and
    TypeError for a decision that is not ``Approve`` or ``Deny``."""
    if not isinstance(decisions, Mapping):
        raise TypeError(f"decisions must be a mapping of call ids, got: {decisions!r}")
    ids = [call.tool_use_id for call in pending]
    unknown = [call_id for call_id in decisions if call_id not in ids]
    if unknown:
        raise ValueError(
            f"run {run_id} has no pending call {', '.join(map(repr, unknown))} "
            f"(its pending calls: {', '.join(map(repr, ids))})"
        )
    missing = [call for call in pending if call.tool_use_id not in decisions]
    if missing:
        named = ", ".join(f"{call.tool_use_id!r} ({call.tool_name})" for call in missing)
        raise ValueError(
            f"run {run_id}: no decision for pending call {named}; every pending call needs one"
        )
    for call_id, decision in decisions.items():
        if not isinstance(decision, (Approve, Deny)):
            raise TypeError(
                f"the decision for call {call_id!r} must be Approve or Deny, got: {decision!r}"
            )
        if isinstance(decision, Approve) and not (
            decision.input is None or isinstance(decision.input, Mapping)
        ):
            raise TypeError(
                f"Approve(input=...) for call {call_id!r} must be a mapping, got: "
                f"{decision.input!r}"
            )


def edit_problems(
    tool_name: str, edit: Mapping[str, Any], definitions: Sequence[ToolDefinition]
) -> list[str]:
    """What is wrong with ``edit`` as input for the tool (each with its path): what the
    model's own arguments are checked for, JSON values first."""
    definition = next((d for d in definitions if d.name == tool_name), None)
    if definition is None:
        return []  # no longer one of the agent's tools: the call answers so when it runs
    edit = dict(edit)
    unsendable = json_problem(edit, "")
    return [unsendable] if unsendable is not None else definition.check(edit)[1]


def check_edit(
    call: PendingCall | PendingApproval, edit: object, definitions: Sequence[ToolDefinition]
) -> None:
    """Raises TypeError unless ``edit`` is a mapping, and ValueError (naming the call and
    its run, when known) when resume would refuse it as the call's edited input."""
    if not isinstance(call, (PendingCall, PendingApproval)):
        raise TypeError(f"call must be a PendingCall or a PendingApproval, got: {call!r}")
    call_id = call.id if isinstance(call, PendingCall) else call.tool_use_id
    if not isinstance(edit, Mapping):
        raise TypeError(f"the edited input of call {call_id!r} must be a mapping, got: {edit!r}")
    errors = edit_problems(call.tool_name, edit, definitions)
    if errors:
        run = f"run {call.run_id}: " if isinstance(call, PendingApproval) else ""
        raise ValueError(
            f"{run}the edited input of call {call_id!r} ({call.tool_name}): {'; '.join(errors)}"
        )


def check_edits(
    run_id: str,
    pending: Sequence[PendingApproval],
    decisions: Mapping[str, Approve | Deny],
    definitions: Sequence[ToolDefinition],
) -> None:
    """Raises ValueError when an ``Approve(input=...)`` is an edit its tool would refuse,
    naming each such call and what is wrong with it (with its path).

    Checked before the run is claimed: the person fixes the edit and decides again, and
    the run waits meanwhile. (An approver's invalid edit has no one to be raised to: the
    model reads it, as it would its own invalid arguments.)
    """
    problems: list[str] = []
    for call in pending:
        decision = decisions[call.tool_use_id]
        if not isinstance(decision, Approve) or decision.input is None:
            continue
        errors = edit_problems(call.tool_name, decision.input, definitions)
        if errors:
            problems.append(f"call {call.tool_use_id!r} ({call.tool_name}): {'; '.join(errors)}")
    if problems:
        raise ValueError(
            f"run {run_id}: the edited input of {'; of '.join(problems)}; nothing was run, "
            "and the run still waits for decisions"
        )


def stored_decisions(
    decisions: Mapping[str, Approve | Deny], at: float
) -> dict[str, ApprovalDecision]:
    """The decisions (checked) as the store keeps them, made at ``at``."""
    stored = {}
    for call_id, decision in decisions.items():
        if isinstance(decision, Deny):
            record = ApprovalDecision(
                verdict="denied", reason=decision.reason, decided_by=decision.by, decided_at=at
            )
        elif decision.input is not None:
            record = ApprovalDecision(
                verdict="edited",
                input=dict(decision.input),
                decided_by=decision.by,
                decided_at=at,
            )
        else:
            record = ApprovalDecision(verdict="approved", decided_by=decision.by, decided_at=at)
        stored[call_id] = record
    return stored


async def claim_paused(
    ctx: RunContext, job: Job, in_doubt: MutableMapping[str, ClaimInDoubt]
) -> None:
    """Check the job's decisions and take its run up in the store (its status becomes
    ``running``, and the decisions are recorded on its calls); fill the job with the
    run's record, prompt and pending calls. ``in_doubt`` holds the agent's claims that
    failed on the store (by run id): one of this run's is taken back first, and a
    claim of this job's that ``StoreUnavailable`` leaves in doubt joins it unless it
    is taken back at once (a node's job excepted: its node takes its claims back).

    Raises:
        RunNotAwaitingApproval: the run is not awaiting approval, or another decision
            took it first.
        ValueError: the agent has no store, the run is not one of its runs, the
            decisions do not match its pending calls, or an edit is not valid input for
            its tool.
        TypeError: a decision is not Approve or Deny.
        StoreError: the store failed; nothing ran, and the run still awaits approval.
    """
    persistence = ctx.persistence
    if persistence is None:
        raise ValueError(f"agent {ctx.spec.name} has no store: only a stored run can be resumed")
    assert job.decisions is not None
    store = persistence.store
    doubt = in_doubt.get(job.run_id)
    if doubt is not None:
        # Before the run is read: taken back, a claim that did commit leaves the run
        # awaiting approval again, for these decisions to claim.
        await _take_back(ctx, job.run_id, doubt)
        del in_doubt[job.run_id]
    record = await store.get_run(job.run_id)
    if record is None or record.agent_id != ctx.agent_id:
        raise ValueError(f"agent {ctx.agent_id} has no run {job.run_id!r}")
    if record.status != "awaiting_approval":
        raise RunNotAwaitingApproval(job.run_id, record.status)
    pending = await store.pending_calls(job.run_id)
    check_decisions(job.run_id, pending, job.decisions)
    check_edits(job.run_id, pending, job.decisions, ctx.tools.runner.definitions)
    at = time.time()
    decided = stored_decisions(job.decisions, at)
    try:
        claimed = await persistence.claim_paused_run(job.run_id, decided)
    except StoreError as exc:
        if job.hands_back or not isinstance(exc, StoreUnavailable):
            # A node's (it takes its claims back); or the store refused the claim, and
            # so wrote none of it: only a store that became unreachable may have.
            raise
        doubt = ClaimInDoubt(call_ids=tuple(decided), decided_at=at)
        in_doubt[job.run_id] = doubt
        try:
            # At once, so that the store shows the run awaiting approval: a connection
            # lost as the claim committed is often the only one lost. Kept in doubt
            # unless taken back: a claim sent before its connection was lost may yet
            # commit on the server, so the next resume takes it back again first.
            if await _take_back(ctx, job.run_id, doubt):
                del in_doubt[job.run_id]
        except StoreError:
            logger.warning(
                "agent %s: the claim of run %s failed on the store, which cannot take it "
                "back yet; it is taken back before the run is claimed again",
                ctx.agent_id,
                job.run_id,
                exc_info=True,
            )
        raise
    if not claimed:
        raise RunNotAwaitingApproval(job.run_id)
    job.resume = record
    job.prompt = record.prompt
    job.pending = tuple(pending)


async def _take_back(ctx: RunContext, run_id: str, doubt: ClaimInDoubt) -> bool:
    """Take back a claim in doubt, if it committed; whether it had.

    Raises:
        StoreError: the store still fails.
    """
    assert ctx.persistence is not None
    persistence = ctx.persistence
    taken = await release_claim(
        persistence.store, run_id, doubt.call_ids, doubt.decided_at, lease=persistence.lease
    )
    if taken:
        logger.info(
            "agent %s: run %s was claimed by a resume that failed on the store, and ran "
            "nothing: it awaits approval again",
            ctx.agent_id,
            run_id,
        )
    return taken


def not_resumed(run_id: str, exc: StoreError) -> StoreError:
    """What a resume with decisions raises when its claim failed on the store: the
    store's error, of the same class (``StoreUnavailable``: try again later), saying
    what became of the run."""
    # The nearest of satsuma's classes: a Store of a user's own may raise a subclass
    # that is made otherwise.
    kind = next(cls for cls in type(exc).__mro__ if cls in _STORE_ERRORS)
    refused = kind(
        exc.location,
        f"{exc.problem}; run {run_id} was not resumed: none of its calls ran, and it "
        "still awaits approval (resume it with its decisions again once the store works)",
    )
    refused.__cause__ = exc
    return refused


_STORE_ERRORS: Final = (StoreUnavailable, LeaseLost, StoreUnreadable, StoreClosed, StoreError)


async def pause(run: Run, pending: Sequence[PendingCall], outcomes: Sequence[ToolOutcome]) -> None:
    """End the turn waiting for decisions on ``pending``: the other calls ran and are
    journaled; the tool_use message stays unanswered until the run is resumed.

    Raises:
        StoreError: the pause could not be recorded (the run fails; the calls that
            ran keep their outcomes, the pending ones are answered as cancelled).
    """
    ctx = run.ctx
    assert ctx.persistence is not None
    waiting = {call.id for call in pending}
    run.add_subagent_usage(outcome for outcome in outcomes if outcome.tool_use_id not in waiting)
    await ctx.conversation.flush()
    await ctx.persistence.pause_run(
        run.run_id,
        [
            PendingApproval(
                run_id=run.run_id,
                tool_use_id=call.id,
                tool_name=call.tool_name,
                input=call.input,
                reason=call.reason,
            )
            for call in pending
        ],
        run.usage,
    )
    # Recorded: from here on nothing answers these calls but a resume with decisions
    # (or a later run that goes past this one).
    run.pending = []
    run.finished = {}
    run.awaiting = tuple(pending)


async def run_decided(run: Run) -> str | None:
    """Answer the calls of the turn a run paused on: those that needed no decision
    with their journaled outcomes (they ran before the pause, and do not run again),
    the pending ones by running them with their decisions. A reason when the run
    cannot go on."""
    ctx = run.ctx
    job = run.job
    assert ctx.persistence is not None and job.decisions is not None
    tool_uses = dangling_tool_uses(ctx.conversation.messages)
    pending = {call.tool_use_id: call for call in job.pending}
    if not pending.keys() <= {block["id"] for block in tool_uses}:
        return f"run {run.run_id}: the conversation no longer ends with its pending calls"
    journal = {e.tool_use_id: e for e in await ctx.persistence.store.calls(run.run_id)}
    answers: dict[str, ToolOutcome] = {}
    decided: list[ToolCall] = []
    for block in tool_uses:
        waiting = pending.get(block["id"])
        entry = journal.get(block["id"])
        if waiting is not None:
            decided.append(ToolCall(waiting.tool_use_id, waiting.tool_name, waiting.input))
        elif entry is not None and entry.finished:
            answers[block["id"]] = journaled_outcome(entry)
        else:
            answers[block["id"]] = interrupted_outcome(block)
    # Should the run be cancelled now, the calls that have answers keep them.
    run.pending = [block["id"] for block in tool_uses]
    run.finished = dict(answers)
    if decided:
        await ctx.persistence.calls_started(run.run_id, decided)
        job.decided_began = True
        outcomes = await ctx.tools.runner.execute(
            decided,
            ctx.tool_context,
            events=run.tool_sink(),
            agent=ctx.handle,
            on_outcome=run.keep_and_journal,
            decisions=job.decisions,
        )
        answers.update((outcome.tool_use_id, outcome) for outcome in outcomes)
        run.add_subagent_usage(outcomes)
    run.pending = []
    run.finished = {}
    run.commit_user(format_results([answers[block["id"]] for block in tool_uses]))
    await ctx.conversation.flush()
    return None
