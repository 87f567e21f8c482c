"""Human approval in the ToolRunner: who is asked, when, and what the model reads for each
answer (or for no answer)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import satsuma
from satsuma import Approve, Ask, Deny, PendingCall, ToolCall, ToolRunner
from satsuma.tools._approval import Deferral

ran: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


class Transfer(satsuma.Tool):
    name = "transfer"
    description = "Move money"
    parameters = {
        "to": {"type": "string", "required": True},
        "amount": {"type": "integer", "required": True, "minimum": 1},
    }
    requires_approval = True

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> str:
        ran.append(args)
        return f"sent {args['amount']} to {args['to']}"


@satsuma.tool(requires_approval=True)
async def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    ran.append({"path": path})
    return f"deleted {path}"


@satsuma.tool
async def lookup(name: str) -> str:
    """Look a name up.

    Args:
        name: The name.
    """
    ran.append({"name": name})
    return f"found {name}"


def pay(amount: int = 5) -> ToolCall:
    return ToolCall("t1", "transfer", {"to": "bob", "amount": amount})


def test_requires_approval_is_declared_on_classes_and_functions() -> None:
    assert Transfer.__satsuma_definition__ is not None
    assert Transfer.__satsuma_definition__.requires_approval is True
    assert delete_file.definition.requires_approval is True
    assert lookup.definition.requires_approval is False
    with pytest.raises(
        satsuma.ToolDefinitionError, match="requires_approval must be True or False"
    ):

        class Bad(satsuma.Tool):
            name = "bad"
            description = "Bad"
            requires_approval = "yes"  # type: ignore[assignment]

            async def run(self, args: Any, ctx: satsuma.ToolContext) -> str:
                return ""


async def test_without_an_approver_a_call_that_needs_approval_is_denied() -> None:
    (outcome,) = await ToolRunner([Transfer]).execute([pay()])
    assert outcome.error_kind == "denied"
    assert outcome.content == (
        "Error: Denied: transfer requires approval, and there is no approver to ask"
    )
    assert ran == []


async def test_an_approved_call_runs_once_and_events_say_who_was_asked() -> None:
    asked: list[PendingCall] = []
    events: list[object] = []

    async def approver(call: PendingCall) -> Approve:
        asked.append(call)
        return Approve()

    (outcome,) = await ToolRunner([Transfer]).execute(
        [pay()], approver=approver, events=events.append
    )
    assert outcome.content == "sent 5 to bob"
    assert asked == [
        PendingCall(
            id="t1",
            tool_name="transfer",
            input={"to": "bob", "amount": 5},
            reason="transfer requires approval",
        )
    ]
    assert ran == [{"to": "bob", "amount": 5}]
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ToolCallStart", "ApprovalRequested", "ApprovalDecided", "ToolCallEnd"]
    decided = events[2]
    assert isinstance(decided, satsuma.ApprovalDecided)
    assert decided.approved and decided.input == {"to": "bob", "amount": 5}


async def test_an_edit_is_validated_like_the_models_arguments() -> None:
    async def halve(call: PendingCall) -> Approve:
        return Approve(input={**call.input, "amount": call.input["amount"] // 2})

    (outcome,) = await ToolRunner([Transfer]).execute([pay(10)], approver=halve)
    assert outcome.content == "sent 5 to bob"

    async def to_zero(call: PendingCall) -> Approve:
        return Approve(input={"to": "bob", "amount": 0})

    (outcome,) = await ToolRunner([Transfer]).execute([pay(10)], approver=to_zero)
    assert outcome.error_kind == "invalid_args"
    assert outcome.content == "Error: Invalid arguments: amount must be >= 1, got: 0"
    assert ran == [{"to": "bob", "amount": 5}]


async def test_a_denial_gives_the_model_the_persons_reason() -> None:
    async def no(call: PendingCall) -> Deny:
        return Deny("not today")

    events: list[object] = []
    (outcome,) = await ToolRunner([delete_file]).execute(
        [ToolCall("t1", "delete_file", {"path": "/etc"})], approver=no, events=events.append
    )
    assert (outcome.error_kind, outcome.content) == ("denied", "Error: Denied: not today")
    decided = events[2]
    assert isinstance(decided, satsuma.ApprovalDecided)
    assert (decided.approved, decided.reason) == (False, "not today")
    assert ran == []


async def test_an_approver_that_does_not_answer_in_time_denies(autojump_clock: Any) -> None:
    async def away(call: PendingCall) -> Approve:
        await trio.sleep_forever()
        raise AssertionError

    runner = ToolRunner([Transfer, lookup])
    start = trio.current_time()
    denied, found = await runner.execute(
        [pay(), ToolCall("t2", "lookup", {"name": "x"})], approver=away, approval_timeout=30
    )
    assert denied.content == "Error: Denied: no decision within 30s"
    assert trio.current_time() - start == pytest.approx(30)
    assert found.content == "found x"  # the sibling did not wait


async def test_the_default_approval_timeout_is_five_minutes(autojump_clock: Any) -> None:
    async def away(call: PendingCall) -> Approve:
        await trio.sleep_forever()
        raise AssertionError

    (outcome,) = await ToolRunner([Transfer]).execute([pay()], approver=away)
    assert outcome.content == "Error: Denied: no decision within 300s"


async def test_time_waiting_for_approval_does_not_count_against_the_tools_deadline(
    autojump_clock: Any,
) -> None:
    # The runner reuses the call's first clock read as the tool's entry only when nothing
    # was awaited before it: an approval is awaited, so the deadline counts from after it.
    class Takes3(satsuma.Tool):
        name = "takes3"
        description = "Take three seconds"
        timeout = 5
        requires_approval = True

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            await trio.sleep(3)
            return "done"

    async def thinks(call: PendingCall) -> Approve:
        await trio.sleep(4)
        return Approve()

    (outcome,) = await ToolRunner([Takes3]).execute([ToolCall("t1", "takes3")], approver=thinks)
    assert outcome.content == "done"
    assert outcome.duration == 7


async def test_an_approver_that_raises_or_answers_nonsense_denies() -> None:
    async def broken(call: PendingCall) -> Approve:
        raise ConnectionError("the chat UI is gone")

    (outcome,) = await ToolRunner([Transfer]).execute([pay()], approver=broken)
    assert outcome.content == (
        "Error: Denied: the approver failed: ConnectionError: the chat UI is gone"
    )

    async def vague(call: PendingCall) -> Any:
        return "sure"

    (outcome,) = await ToolRunner([Transfer]).execute([pay()], approver=vague)
    assert outcome.content == "Error: Denied: the approver answered 'sure', not Approve or Deny"
    assert ran == []


async def test_cancelling_execute_cancels_the_wait(autojump_clock: Any) -> None:
    waiting = trio.Event()
    cancelled = False

    async def slow(call: PendingCall) -> Approve:
        nonlocal cancelled
        waiting.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled = True
            raise
        raise AssertionError

    with trio.move_on_after(5) as scope:
        await ToolRunner([Transfer]).execute([pay()], approver=slow)
    assert scope.cancelled_caught and waiting.is_set() and cancelled
    assert ran == []


class AskOverLimit(satsuma.ToolHook):
    async def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> satsuma.HookDecision:
        if call.name == "lookup" and call.input.get("name") == "secret":
            return Ask("secret names need a person's yes")
        if call.name == "lookup":
            return satsuma.Rewrite({"name": call.input["name"].upper()})
        return None


async def test_a_hook_asks_for_some_calls_only() -> None:
    asked: list[PendingCall] = []

    async def approver(call: PendingCall) -> Approve:
        asked.append(call)
        return Approve()

    runner = ToolRunner([lookup], hooks=AskOverLimit())
    plain, secret = await runner.execute(
        [ToolCall("t1", "lookup", {"name": "x"}), ToolCall("t2", "lookup", {"name": "secret"})],
        approver=approver,
    )
    assert (plain.content, secret.content) == ("found X", "found secret")
    assert [(c.id, c.reason) for c in asked] == [("t2", "secret names need a person's yes")]


async def test_invalid_arguments_are_refused_without_asking_anyone() -> None:
    async def approver(call: PendingCall) -> Approve:
        raise AssertionError("asked about a call that cannot run")

    (outcome,) = await ToolRunner([Transfer]).execute([pay(0)], approver=approver)
    assert outcome.error_kind == "invalid_args"


async def test_a_deferral_collects_the_calls_and_the_others_run() -> None:
    deferral = Deferral()
    events: list[object] = []
    ends: list[str] = []
    placeholder, found = await ToolRunner([Transfer, lookup]).execute(
        [pay(), ToolCall("t2", "lookup", {"name": "x"})],
        approver=deferral,
        events=events.append,
        on_outcome=lambda call, outcome: ends.append(call.id),
    )
    assert found.content == "found x"
    assert [c.id for c in deferral.pending] == ["t1"]
    assert ends == ["t2"]  # the deferred call has not ended
    assert [type(e).__name__ for e in events if getattr(e, "tool_use_id", "") == "t1"] == [
        "ToolCallStart",
        "ApprovalRequested",
    ]
    assert ran == [{"name": "x"}]
    assert placeholder.tool_use_id == "t1"


async def test_decisions_run_the_deferred_call_without_asking_or_hooks_again() -> None:
    class Count(satsuma.ToolHook):
        calls = 0

        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> satsuma.HookDecision:
            Count.calls += 1
            return Ask("always")

    runner = ToolRunner([Transfer, delete_file], hooks=Count())
    approved, denied = await runner.execute(
        [pay(), ToolCall("t2", "delete_file", {"path": "/x"})],
        decisions={"t1": Approve({"to": "bob", "amount": 7}), "t2": Deny("no")},
    )
    assert (approved.content, denied.content) == ("sent 7 to bob", "Error: Denied: no")
    assert Count.calls == 0
