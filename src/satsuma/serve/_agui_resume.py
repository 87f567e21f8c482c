"""Decisions on paused tool calls as AG-UI sends them: ``RunAgentInput.resume``.

A run that paused for approval ended its AG-UI stream with RUN_FINISHED whose outcome is
``interrupt``, one interrupt per waiting call, its ``id`` the call's id. AG-UI continues
such a run with a new request whose ``resume`` answers those interrupts:

- ``{"interruptId": CALL_ID, "status": "resolved", "payload": {"decision": "approve"}}``
  runs the call (``"input": {...}`` in the payload runs it with edited arguments);
- ``"payload": {"decision": "deny", "reason": "..."}`` refuses it;
- ``"status": "cancelled"`` refuses it too (the person dismissed the question).

The payload is the body of satsuma's own ``POST /v1/approvals/{run_id}/{call_id}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..tools import Approve, Deny
from ._http import HTTPError

__all__ = ["Answer", "parse_resume"]

_CANCELLED_REASON = "the person dismissed the question"


@attrs.frozen
class Answer:
    """One interrupt's answer: the call it decides and how.

    Attributes:
        call_id: The paused call (the interrupt's id).
        decision: ``approve`` or ``deny``.
        input: Edited arguments to run the call with (approve only), or None.
        reason: Why it was denied (deny only), or None.
    """

    call_id: str
    decision: str
    input: Mapping[str, Any] | None = None
    reason: str | None = None

    def to_decision(self, by: str | None) -> Approve | Deny:
        """The decision for ``Runs.decide``, made by ``by``."""
        if self.decision == "approve":
            return Approve(self.input, by=by)
        return Deny(self.reason or "denied", by=by)


def _bad(message: str) -> HTTPError:
    return HTTPError(400, "bad_request", message)


def _answer(entry: Any, index: int) -> Answer:
    where = f"resume[{index}]"
    if not isinstance(entry, Mapping):
        raise _bad(f"{where} must be an object")
    call_id = entry.get("interruptId")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{where}.interruptId must be the id of a paused call")
    status = entry.get("status")
    if status == "cancelled":
        return Answer(call_id, "deny", reason=_CANCELLED_REASON)
    if status != "resolved":
        raise _bad(f"{where}.status must be 'resolved' or 'cancelled'")
    payload = entry.get("payload")
    if not isinstance(payload, Mapping):
        raise _bad(f'{where}.payload must be an object: {{"decision": "approve" | "deny"}}')
    decision = payload.get("decision")
    if decision not in ("approve", "deny"):
        raise _bad(f"{where}.payload.decision must be 'approve' or 'deny'")
    edited = payload.get("input")
    if edited is not None and (decision != "approve" or not isinstance(edited, Mapping)):
        raise _bad(f"{where}.payload.input must be an object, and only on an approval")
    reason = payload.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise _bad(f"{where}.payload.reason must be a string")
    return Answer(call_id, str(decision), input=edited, reason=reason)


def parse_resume(body: Mapping[str, Any]) -> tuple[Answer, ...]:
    """The answers in a ``RunAgentInput``'s ``resume`` (none when it has none).

    Raises:
        HTTPError: 400 naming the entry and what is wrong with it, or a call answered
            twice.
    """
    entries = body.get("resume")
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise _bad("resume must be a list")
    answers = tuple(_answer(entry, index) for index, entry in enumerate(entries))
    seen: set[str] = set()
    for answer in answers:
        if answer.call_id in seen:
            raise _bad(f"resume answers the call {answer.call_id!r} twice")
        seen.add(answer.call_id)
    return answers
