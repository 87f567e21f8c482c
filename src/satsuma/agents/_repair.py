"""The repair: answers for the calls a crash, a kill or a pause left without a result
at the end of the conversation, from the journal, the decisions in the store, or by
running an idempotent tool again; and the fixed texts of those answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._messages import Message
from ..store import ApprovalDecision, ApprovalRecord, JournalEntry
from ..tools import (
    INTERRUPTED_TEXT,
    Approve,
    Deny,
    ToolCall,
    ToolOutcome,
    denied_text,
    error_outcome,
    format_results,
)

if TYPE_CHECKING:
    from ._runstate import Run

__all__ = [
    "dangling_tool_uses",
    "decided_outcome",
    "decision_of",
    "interrupted_outcome",
    "journaled_outcome",
    "repair",
]


def dangling_tool_uses(history: Sequence[Message]) -> list[dict[str, Any]]:
    """The tool_use blocks of the last message when it is an assistant message whose
    calls were never answered (the process stopped, or the agent crashed, mid-tool)."""
    if not history or history[-1].role != "assistant":
        return []
    return [dict(block) for block in history[-1].content if block.get("type") == "tool_use"]


def decision_of(stored: ApprovalDecision) -> Approve | Deny:
    """A stored decision as ``resume`` takes it (``stored_decisions`` the other way)."""
    if stored.verdict == "denied":
        return Deny(stored.reason or "denied", by=stored.decided_by)
    edit = stored.input if stored.verdict == "edited" else None
    return Approve(edit, by=stored.decided_by)


def journaled_outcome(entry: JournalEntry) -> ToolOutcome:
    """The recorded outcome of a finished call, as the model first saw it."""
    return ToolOutcome(
        tool_use_id=entry.tool_use_id,
        tool_name=entry.tool_name,
        content=entry.content,
        is_error=entry.is_error,
        error_kind=entry.error_kind,  # type: ignore[arg-type]
    )


def interrupted_outcome(tool_use: dict[str, Any]) -> ToolOutcome:
    return error_outcome(tool_use["id"], tool_use.get("name", ""), "interrupted", INTERRUPTED_TEXT)


def decided_outcome(
    tool_use: dict[str, Any], decision: ApprovalDecision, *, never_run: bool
) -> ToolOutcome:
    """A call decided in the store whose run stopped before its outcome was journaled.
    A denial is what the person said (a denied call never runs). An approval: with
    ``never_run``, the run was taken up without the agent's lease, so the tool did not
    run; else (the run was interrupted: the agent took it up and stopped, or it was
    taken up while no process served the agent, which the store cannot tell apart) the
    tool may or may not have started, and is said so."""
    call_id, name = tool_use["id"], tool_use.get("name", "")
    if decision.verdict == "denied":
        return error_outcome(call_id, name, "denied", denied_text(decision.reason or "denied"))
    by = f" by {decision.decided_by}" if decision.decided_by else ""
    if never_run:
        return error_outcome(
            call_id,
            name,
            "cancelled",
            f"Error: Not run: this call was {decision.verdict}{by}, but the agent never "
            "went on with its run after the decision, so the tool did not run.",
        )
    return error_outcome(
        call_id,
        name,
        "interrupted",
        f"Error: Interrupted: this call was {decision.verdict}{by}, and the process stopped "
        "before it finished (it may not have started); not re-run because the tool is not "
        "idempotent.",
    )


async def repair(
    run: Run, run_id: str, *, rerun: bool, undecided: str | None = None, taken: bool = False
) -> None:
    """Answer the calls a crash or a kill left without a result: a finished call with
    its journaled outcome; an unfinished one by running it again if ``rerun`` and its
    tool is idempotent (with its decision, for a call approved in the store), else
    with the fixed Interrupted text (saying the decision, for a call decided in the
    store). With ``undecided``, the run paused awaiting
    approval: its pending calls never ran, and are denied with that reason. With
    ``taken``, the run was taken up through the store without the agent's lease: its
    decided calls never ran, and say so."""
    ctx = run.ctx
    tool_uses = dangling_tool_uses(ctx.conversation.messages)
    if not tool_uses:
        return
    journal = {}
    waiting: set[str] = set()
    decided: dict[str, ApprovalDecision] = {}
    asked: dict[str, ApprovalRecord] = {}
    if ctx.persistence is not None and run_id:
        store = ctx.persistence.store
        journal = {e.tool_use_id: e for e in await store.calls(run_id)}
        if undecided is not None:
            pending = await store.pending_calls(run_id)
            waiting = {call.tool_use_id for call in pending}
        # Calls decided in the store whose run was then never run on: taken up
        # without the agent's lease, or stopped between its claim and its calls.
        asked = {a.tool_use_id: a for a in await store.approvals(run_id)}
        decided = {k: a.decision for k, a in asked.items() if a.decision is not None}
    runner = ctx.tools.runner
    idempotent = {d.name for d in runner.definitions if d.idempotent}
    answers: dict[str, ToolOutcome] = {}
    again: list[ToolCall] = []
    # An approved call run again goes with its decision (and as it was asked about, an
    # edit applied): without it, its tool would deny it for want of an approver.
    decisions: dict[str, Approve | Deny] = {}
    for block in tool_uses:
        entry = journal.get(block["id"])
        if undecided is not None and block["id"] in waiting:
            answers[block["id"]] = error_outcome(
                block["id"], block.get("name", ""), "denied", denied_text(undecided)
            )
        elif entry is not None and entry.finished:
            answers[block["id"]] = journaled_outcome(entry)
        elif block["id"] in decided and (taken or decided[block["id"]].verdict == "denied"):
            answers[block["id"]] = decided_outcome(block, decided[block["id"]], never_run=taken)
        elif rerun and block.get("name") in idempotent:
            if block["id"] in decided:
                decisions[block["id"]] = decision_of(decided[block["id"]])
                again.append(ToolCall(block["id"], block["name"], asked[block["id"]].input))
            else:
                again.append(ToolCall(block["id"], block["name"], block.get("input", {})))
        elif block["id"] in decided:
            answers[block["id"]] = decided_outcome(block, decided[block["id"]], never_run=False)
        else:
            answers[block["id"]] = interrupted_outcome(block)
    if again:
        if ctx.persistence is not None:
            await ctx.persistence.calls_started(run.run_id, again)
        for outcome in await runner.execute(
            again,
            ctx.tool_context,
            events=run.tool_sink(),
            agent=ctx.handle,
            on_outcome=run.journal,
            decisions=decisions or None,
        ):
            answers[outcome.tool_use_id] = outcome
    run.commit_user(format_results([answers[block["id"]] for block in tool_uses]))
    await ctx.conversation.flush()
