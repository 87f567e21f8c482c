"""Stored rows to records and back, for every SQL store: one set of decoders, so a row
that does not decode is reported in the same words whichever database holds it.

Messages, usage and journal contents are stored as JSON text (never a database's own
JSON type: PostgreSQL's jsonb reorders keys, and a conversation must come back byte for
byte as it was sent, or the model provider's prompt cache misses).
"""

from __future__ import annotations

import json
from typing import Any, Final, get_args

from .._messages import Message, Usage
from ._records import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalVerdict,
    JournalEntry,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
)

__all__ = [
    "APPROVAL_COLUMNS",
    "RUN_COLUMNS",
    "Damaged",
    "approval_record",
    "decision_values",
    "decoded",
    "journal_entry",
    "message",
    "pending_approval",
    "run_record",
    "usage_json",
]

RUN_COLUMNS: Final = (
    "run_id, agent_id, status, prompt, started_at, ended_at, usage, error, position, agent"
)
"""The columns :func:`run_record` reads, in its order."""


class Damaged(Exception):
    """A stored row that does not decode; the store turns it into a StoreError that names
    the row."""


def usage_json(usage: Usage) -> str:
    # The cost (null when unknown) and the hour's cache writes follow the four counts;
    # rows written before satsuma priced its calls have only the counts, and read back
    # with their cost unknown.
    return json.dumps(
        [
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            usage.cost_usd,
            usage.cache_creation_1h_input_tokens,
        ]
    )


def _usage(text: object) -> Usage:
    try:
        a, b, c, d, *priced = json.loads(text)  # type: ignore[arg-type]
        if len(priced) > 2:
            raise ValueError(f"{len(priced) + 4} items, not 4 to 6")
        cost = priced[0] if priced else None
        hour = priced[1] if len(priced) == 2 else 0
        return Usage(
            input_tokens=_count(a),
            output_tokens=_count(b),
            cache_creation_input_tokens=_count(c),
            cache_read_input_tokens=_count(d),
            cache_creation_1h_input_tokens=_count(hour),
            cost_usd=_cost(cost),
        )
    except (TypeError, ValueError) as exc:
        raise Damaged(
            f"its usage {_shown(text)} is not four token counts and a cost ({exc})"
        ) from exc


def _cost(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{value!r} is not a cost in USD")
    return float(value)


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a token count")
    return value


_STATUSES: Final = frozenset(get_args(RunRecordStatus))


def run_record(row: tuple[Any, ...]) -> RunRecord:
    """A run record from a row of :data:`RUN_COLUMNS`."""
    run_id, agent_id, status, prompt, started_at, ended_at, usage, error, position, agent = row
    try:
        if status not in _STATUSES:
            raise Damaged(f"its status {_shown(status)} is not one satsuma knows")
        if not isinstance(prompt, str) or not isinstance(started_at, (int, float)):
            raise Damaged("its prompt or start time is missing")
        return RunRecord(
            run_id=run_id,
            agent_id=agent_id,
            status=status,
            prompt=prompt,
            started_at=started_at,
            ended_at=ended_at,
            usage=_usage(usage),
            error=error,
            position=position,
            agent=agent,
        )
    except Damaged as exc:
        raise Damaged(f"run {run_id!r} of agent {agent_id!r} cannot be read: {exc}") from None


def message(agent_id: str, seq: int, expected: int, role: object, content: object) -> Message:
    """The message stored at ``seq``, which must be the ``expected``-th of the agent."""
    where = f"message {seq} of agent {agent_id!r}"
    if seq != expected:
        raise Damaged(f"message {expected} of agent {agent_id!r} is missing (the next is {seq})")
    if role not in ("user", "assistant"):
        raise Damaged(f"{where} cannot be read: its role {_shown(role)} is not user or assistant")
    try:
        blocks = json.loads(content)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise Damaged(f"{where} cannot be read: its content is not JSON ({exc})") from exc
    if not isinstance(blocks, list) or not all(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks
    ):
        raise Damaged(
            f"{where} cannot be read: its content {_shown(content)} is not a list of content blocks"
        )
    return Message(role=role, content=blocks)


def decoded(what: str, text: object) -> Any:
    try:
        return json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise Damaged(f"{what} cannot be read: {_shown(text)} is not JSON ({exc})") from exc


def journal_entry(run_id: str, row: tuple[Any, ...]) -> JournalEntry:
    """A journal entry from a row of ``tool_use_id, tool_name, input, finished, content,
    is_error, error_kind``."""
    tool_use_id, tool_name, input, finished, content, is_error, error_kind = row
    where = f"the journal entry of call {tool_use_id!r} of run {run_id!r}"
    return JournalEntry(
        run_id=run_id,
        tool_use_id=tool_use_id,
        tool_name=tool_name,
        input=decoded(f"{where}: its input", input),
        finished=bool(finished),
        content=decoded(f"{where}: its outcome", content) if content is not None else None,
        is_error=bool(is_error),
        error_kind=error_kind,
    )


def pending_approval(run_id: str, row: tuple[Any, ...]) -> PendingApproval:
    """A pending call from a row of ``tool_use_id, tool_name, input, reason``."""
    tool_use_id, tool_name, input, reason = row
    return PendingApproval(
        run_id=run_id,
        tool_use_id=tool_use_id,
        tool_name=tool_name,
        input=decoded(f"the pending call {tool_use_id!r} of run {run_id!r}: its input", input),
        reason=reason,
    )


APPROVAL_COLUMNS: Final = (
    "tool_use_id, tool_name, input, reason, verdict, decided_input, denial_reason, "
    "decided_by, decided_at"
)
_VERDICTS: Final = frozenset(get_args(ApprovalVerdict))


def decision_values(decision: ApprovalDecision) -> tuple[Any, ...]:
    """``verdict, decided_input, denial_reason, decided_by, decided_at`` for a row."""
    edited = json.dumps(decision.input) if decision.verdict == "edited" else None
    return (decision.verdict, edited, decision.reason, decision.decided_by, decision.decided_at)


def proposal_text(decision: ApprovalDecision) -> str:
    """A decision taken ahead of a resume, as its row keeps it (JSON)."""
    return json.dumps(
        {
            "verdict": decision.verdict,
            "input": decision.input,
            "reason": decision.reason,
            "decided_by": decision.decided_by,
            "decided_at": decision.decided_at,
        }
    )


def proposal(run_id: str, call_id: str, text: str) -> ApprovalDecision:
    """A decision taken ahead, from its row.

    Raises:
        Damaged: the row does not hold one.
    """
    try:
        data = json.loads(text)
        if data["verdict"] not in _VERDICTS:
            raise ValueError(f"unknown verdict {data['verdict']!r}")
        return ApprovalDecision(
            verdict=data["verdict"],
            input=data["input"],
            reason=data["reason"],
            decided_by=data["decided_by"],
            decided_at=float(data["decided_at"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise Damaged(
            f"the decision taken on call {call_id!r} of run {run_id!r} cannot be read: {exc}"
        ) from None


def approval_record(run_id: str, row: tuple[Any, ...]) -> ApprovalRecord:
    """A call a run paused on, from a row of :data:`APPROVAL_COLUMNS`."""
    verdict, edited, reason, decided_by, decided_at = row[4:]
    call = pending_approval(run_id, row[:4])
    decision = None
    if verdict is not None:
        where = f"the decision on call {call.tool_use_id!r} of run {run_id!r}"
        if verdict not in _VERDICTS or not isinstance(decided_at, (int, float)):
            raise Damaged(f"{where} cannot be read: {_shown(verdict)} at {_shown(decided_at)}")
        decision = ApprovalDecision(
            verdict=verdict,
            input=decoded(f"{where}: its edited input", edited) if edited is not None else None,
            reason=reason,
            decided_by=decided_by,
            decided_at=float(decided_at),
        )
    return ApprovalRecord(
        run_id=run_id,
        tool_use_id=call.tool_use_id,
        tool_name=call.tool_name,
        input=call.input,
        reason=call.reason,
        decision=decision,
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
