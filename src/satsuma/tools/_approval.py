"""Human approval of tool calls: what a person is asked (PendingCall) and what they
answer (Approve, or the hooks' Deny).

A call needs a decision when its tool declares ``requires_approval = True`` or a
``before_call`` hook returns ``Ask(reason)``. The runner asks after the hooks and the
validation of the arguments (a call that would be refused anyway is never put to a
person), and before the tool's own deadline starts. Who answers is the ``approver`` given
to ``ToolRunner.execute``: an async callable, awaited under ``approval_timeout`` (fail
closed: no answer in time denies); or, for an agent with a store and no approver, a
``Deferral``, which takes the question away so that the run can pause and be resumed
with decisions, in this process or another.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeAlias

import attrs
import trio

from .. import _telemetry
from .._text import MESSAGE_LIMIT, describe_exception, valid_str
from ._calls import ToolCall
from ._events import ApprovalDecided, ApprovalRequested, Emitter
from ._hooks import Deny
from ._propagation import raise_propagating
from ._results import ToolOutcome, error_outcome
from ._texts import denied_text

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "Approve",
    "Approver",
    "Decision",
    "Deferral",
    "PendingCall",
    "approval_reason",
    "ask",
    "consult",
    "report_decision",
]

logger = logging.getLogger("satsuma.tools")

DEFAULT_APPROVAL_TIMEOUT: Final = 300.0
"""Seconds an approver has to answer before the call is denied."""


@attrs.frozen(kw_only=True)
class PendingCall:
    """A tool call waiting for a person's decision.

    Attributes:
        id: The call's id (the ``tool_use`` id): the key of ``decisions``.
        tool_name: The tool it calls.
        input: The arguments it would run with (validated; after any hook's rewrite).
        reason: Why it needs a decision (the tool requires approval, or a hook's reason).
    """

    id: str
    tool_name: str
    input: Any
    reason: str


@attrs.frozen
class Approve:
    """Let a waiting call run: with its own arguments, or with ``input`` instead (an
    edit, validated like the model's arguments). ``by`` says who decided (a user name,
    an email): it is recorded in ``ApprovalDecided.decided_by`` and on the call's span.

    Raises:
        TypeError: ``by`` is not a str or None.
    """

    input: Mapping[str, Any] | None = None
    by: str | None = attrs.field(
        default=None,
        kw_only=True,
        converter=valid_str,  # recorded in the store and on spans: valid Unicode
        validator=attrs.validators.optional(attrs.validators.instance_of(str)),
    )


Decision: TypeAlias = Approve | Deny

Approver: TypeAlias = Callable[[PendingCall], Awaitable[Decision]]
"""An async callable that a person answers through: ``PendingCall -> Approve | Deny``."""


@attrs.define(eq=False)
class Deferral:
    """Given as ``approver``: calls that need a decision do not wait and do not run; they
    are collected in ``pending`` (in call order once ``execute`` returns), have no
    ToolCallEnd, and their slots in ``execute``'s
    list are placeholders that must not reach the model. The caller pauses the run and,
    once decided, passes the decisions back with ``execute(..., decisions=...)``."""

    pending: list[PendingCall] = attrs.Factory(list)

    def holds(self, call_id: str) -> bool:
        """Whether the call of this id was collected, to wait for a decision."""
        return any(pending.id == call_id for pending in self.pending)


def approval_reason(tool_name: str) -> str:
    """The reason given for a call whose tool declares ``requires_approval``."""
    return f"{tool_name} requires approval"


async def ask(
    pending: PendingCall,
    approver: Approver | Deferral | None,
    # A deadline for the person, not for this function: it answers Deny when it passes.
    timeout: float | None,  # noqa: ASYNC109
    emitter: Emitter | None,
    *,
    traced: bool = False,
) -> Decision | None:
    """The approver's decision on a call (None: a Deferral took it). Fails closed: no
    approver, no answer within ``timeout``, an approver that raises or answers something
    else, all deny. Cancelling the caller cancels the wait. ``traced``: the call's
    ``execute_tool`` span is current, and is told that the call was put to a person."""
    if traced:
        _telemetry.set_on_current_span(
            {
                "satsuma.approval.requested": True,
                "satsuma.approval.deferred": isinstance(approver, Deferral),
            }
        )
    if emitter is not None:
        emitter.emit(
            ApprovalRequested(
                tool_use_id=pending.id,
                tool_name=pending.tool_name,
                input=pending.input,
                reason=pending.reason,
            )
        )
    if isinstance(approver, Deferral):
        approver.pending.append(pending)
        return None
    if approver is None:
        return Deny(f"{pending.reason}, and there is no approver to ask")
    deadline = trio.current_time() + timeout if timeout is not None else math.inf
    answer: object = None
    try:
        with trio.CancelScope(deadline=deadline) as scope:
            answer = await approver(pending)
    except BaseException as exc:
        raise_propagating(exc)
        logger.warning(
            "tool %s (call %s): the approver failed", pending.tool_name, pending.id, exc_info=exc
        )
        return Deny(f"the approver failed: {describe_exception(exc, limit=MESSAGE_LIMIT)}")
    # An approver that caught the Cancelled of an outer cancellation and answered anyway
    # must not let the call start: the caller is being cancelled, and an async tool
    # would run up to its first checkpoint (its side effect, say) before noticing.
    await trio.lowlevel.checkpoint_if_cancelled()
    # Checked after the scope exits: cancel_called is True only for our own deadline (an
    # outer cancellation raised out of the scope above). An approver that swallowed the
    # Cancelled and answered anyway was still too late.
    if scope.cancel_called:
        assert timeout is not None
        return Deny(f"no decision within {timeout:g}s")
    if isinstance(answer, Deny) and isinstance(answer.reason, str):
        return answer
    if isinstance(answer, Approve) and (answer.input is None or isinstance(answer.input, Mapping)):
        return answer
    return Deny(f"the approver answered {answer!r}, not Approve or Deny")


async def consult(
    call: ToolCall,
    reason: str | None,
    preset: Decision | None,
    approver: Approver | Deferral | None,
    # A deadline for the person, as ``ask``'s.
    timeout: float | None,  # noqa: ASYNC109
    emitter: Emitter | None,
    *,
    traced: bool = False,
) -> ToolCall | ToolOutcome | None:
    """Settle a call that needs a decision: ``preset`` (one already made), else the
    approver's (``ask``, with ``reason``). Returns the call as approved (a new ToolCall
    when the approver edited its input), the denied call's outcome, or None when a
    Deferral took it. The decision is reported (``report_decision``) either way."""
    decision = preset
    if decision is None:
        assert reason is not None
        pending = PendingCall(id=call.id, tool_name=call.name, input=call.input, reason=reason)
        decision = await ask(pending, approver, timeout, emitter, traced=traced)
        if decision is None:
            return None
    if isinstance(decision, Deny):
        report_decision(emitter, call, decision, traced=traced)
        return error_outcome(call.id, call.name, "denied", denied_text(decision.reason))
    if decision.input is not None:
        call = attrs.evolve(call, input=dict(decision.input))
    report_decision(emitter, call, decision, traced=traced)
    return call


def report_decision(
    emitter: Emitter | None, call: ToolCall, decision: Decision, *, traced: bool = False
) -> None:
    """Emit the ApprovalDecided of ``call`` (as it will run, when approved); ``traced``:
    record the decision, and who made it, on the call's span (current in this task).
    The reasons and the input stay off the span: they are content, which the GenAI
    conventions keep opt-in (the events carry them)."""
    approved = isinstance(decision, Approve)
    if traced:
        attributes: dict[str, bool | str] = {
            "satsuma.approval.approved": approved,
            "satsuma.approval.edited": isinstance(decision, Approve) and decision.input is not None,
        }
        if decision.by is not None:
            attributes["satsuma.approval.decided_by"] = decision.by
        _telemetry.set_on_current_span(attributes)
    if emitter is None:
        return
    emitter.emit(
        ApprovalDecided(
            tool_use_id=call.id,
            tool_name=call.name,
            approved=approved,
            input=call.input if approved else None,
            reason=decision.reason if isinstance(decision, Deny) else None,
            decided_by=decision.by,
        )
    )
