"""What a store keeps besides messages: run records and tool-call journal entries."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from .._messages import Usage

__all__ = [
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalVerdict",
    "JournalEntry",
    "PendingApproval",
    "RunRecord",
    "RunRecordStatus",
    "outcome_entry",
]

ApprovalVerdict: TypeAlias = Literal["approved", "edited", "denied"]
"""What a person decided on a call: run it as asked, run it with edited input, or not."""

RunRecordStatus: TypeAlias = Literal[
    "running", "interrupted", "completed", "max_iterations", "deadline_exceeded", "cancelled",
    "failed", "awaiting_approval",
]  # fmt: skip


@attrs.frozen(kw_only=True)
class RunRecord:
    """One run of an agent, as stored.

    Attributes:
        run_id: The run's id.
        agent_id: The agent it belongs to.
        status: ``running`` while it runs, ``interrupted`` once found running by an agent
            that started afresh (the process stopped or the agent crashed), else the
            RunResult status it ended with (``awaiting_approval``: paused until its
            pending calls are decided, see ``Store.pause_run``).
        prompt: The user's prompt.
        started_at: When it started (seconds since the epoch).
        ended_at: When it ended, or None.
        usage: Tokens it used.
        error: What ended a failed run, or None.
        position: Where the run's prompt is in the conversation (the index of the
            message it starts with), or None when not known (a record written by an
            older satsuma). What the run added is the conversation from there to where
            the next run starts.
        agent: The agent class's ``name`` (``Agent.name``, as ``satsuma serve`` names
            it), or None for a record written before satsuma kept it.
    """

    run_id: str
    agent_id: str
    status: RunRecordStatus
    prompt: str
    started_at: float
    ended_at: float | None = None
    usage: Usage = attrs.Factory(Usage)
    error: str | None = None
    position: int | None = None
    agent: str | None = None


@attrs.frozen(kw_only=True)
class JournalEntry:
    """One tool call, recorded as started before the tool runs and as finished after.

    Attributes:
        run_id: The run the call belongs to.
        tool_use_id: The call's id.
        tool_name: The tool.
        input: The arguments it was run with.
        finished: Whether the call's outcome was recorded.
        content: The outcome's content (when finished).
        is_error: The outcome's is_error (when finished).
        error_kind: The outcome's error_kind (when finished).
    """

    run_id: str
    tool_use_id: str
    tool_name: str
    input: Any
    finished: bool = False
    content: Any = None
    is_error: bool = False
    error_kind: str | None = None


def outcome_entry(
    run_id: str, tool_use_id: str, *, content: Any, is_error: bool, error_kind: str | None
) -> JournalEntry:
    """A call's outcome as ``call_finished`` is given it: the stored entry it finishes
    keeps its tool's name and input."""
    return JournalEntry(
        run_id=run_id,
        tool_use_id=tool_use_id,
        tool_name="",
        input=None,
        finished=True,
        content=content,
        is_error=is_error,
        error_kind=error_kind,
    )


@attrs.frozen(kw_only=True)
class PendingApproval:
    """A tool call of a paused run, waiting for a person's decision.

    Attributes:
        run_id: The run it belongs to.
        tool_use_id: The call's id.
        tool_name: The tool.
        input: The arguments it would run with.
        reason: Why it needs a decision.
    """

    run_id: str
    tool_use_id: str
    tool_name: str
    input: Any
    reason: str


@attrs.frozen(kw_only=True)
class ApprovalDecision:
    """A person's decision on a call of a paused run, as stored when the run was resumed
    with it (see ``Store.claim_paused_run``).

    Attributes:
        verdict: ``approved`` (run as asked), ``edited`` (run with ``input``) or
            ``denied``.
        input: The edited input it ran with (``edited`` only, else None).
        reason: The denial's reason, which the model read (``denied`` only, else None).
        decided_by: Who decided, as the decision said (``Approve(by=...)``), or None.
        decided_at: When the run was resumed with it (seconds since the epoch).
    """

    verdict: ApprovalVerdict
    input: Any = None
    reason: str | None = None
    decided_by: str | None = None
    decided_at: float


@attrs.frozen(kw_only=True)
class ApprovalRecord:
    """A call a run paused on, and what was decided on it: what an audit reads
    (``Store.approvals``).

    Attributes:
        run_id: The run it belongs to.
        tool_use_id: The call's id.
        tool_name: The tool.
        input: The arguments the model asked for (after any hook's rewrite).
        reason: Why it needed a decision.
        decision: The decision it was resumed with, or None while undecided (also for
            good, when a later run went past the paused one).
    """

    run_id: str
    tool_use_id: str
    tool_name: str
    input: Any
    reason: str
    decision: ApprovalDecision | None = None
