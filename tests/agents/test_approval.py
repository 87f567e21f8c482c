"""Human approval in an agent's runs, inline: an approver answers while the run waits.
Deferred approval (a run paused in its store) is tested in tests/store/test_agent_approval.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import Approve, Deny, PendingCall
from satsuma.store import MemoryStore
from satsuma.testing import Reply, ScriptedModel, check_conversation

done: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    done.clear()


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much (at least 1).
    """
    if amount < 1:
        raise satsuma.ToolError("amount must be at least 1")
    done.append(f"transfer {amount} to {to}")
    return f"sent {amount} to {to}"


@satsuma.tool
async def balance(account: str) -> str:
    """Read a balance.

    Args:
        account: The account.
    """
    done.append(f"balance {account}")
    return f"{account}: 100"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [transfer, balance]


def mixed_turn(*answers: str) -> ScriptedModel:
    return ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ("balance", {"account": "main"}),
                    ("transfer", {"to": "bob", "amount": 10}),
                ]
            ),
            *answers,
        ]
    )


def results_read(model: ScriptedModel) -> list[Any]:
    """The tool_result contents of the last request the model received."""
    return [
        block["content"]
        for block in model.requests[-1].messages[-1].content
        if block.get("type") == "tool_result"
    ]


async def test_an_inline_approver_answers_while_the_run_waits() -> None:
    asked: list[PendingCall] = []

    async def approver(call: PendingCall) -> Approve:
        asked.append(call)
        return Approve()

    model = mixed_turn("Paid.")
    async with satsuma.open_agent(Banker, model=model, approver=approver) as agent:
        result = await agent.run("Pay Bob 10")
    assert (result.status, result.output, result.pending) == ("completed", "Paid.", ())
    assert [(c.tool_name, c.input, c.reason) for c in asked] == [
        ("transfer", {"to": "bob", "amount": 10}, "transfer requires approval")
    ]
    assert results_read(model) == ["main: 100", "sent 10 to bob"]
    assert sorted(done) == ["balance main", "transfer 10 to bob"]  # the calls run in parallel


async def test_an_approver_on_the_class_and_events_in_the_stream() -> None:
    async def no(call: PendingCall) -> Deny:
        return Deny("not today")

    class Careful(Banker):
        name = "careful"
        approver = no

    model = mixed_turn("Not paid.")
    async with satsuma.open_agent(Careful, model=model) as agent:
        events = [event async for event in agent.stream("Pay Bob 10")]
    assert results_read(model) == ["main: 100", "Error: Denied: not today"]
    decided = [e for e in events if isinstance(e, satsuma.ApprovalDecided)]
    assert [(e.tool_name, e.approved, e.reason, e.agent) for e in decided] == [
        ("transfer", False, "not today", "careful")
    ]
    requested = [e for e in events if isinstance(e, satsuma.ApprovalRequested)]
    assert satsuma.event_to_json(requested[0])["type"] == "ApprovalRequested"
    assert satsuma.event_to_json(decided[0])["reason"] == "not today"
    assert done == ["balance main"]


async def test_an_approver_that_does_not_answer_in_time_denies(autojump_clock: Any) -> None:
    async def away(call: PendingCall) -> Approve:
        await trio.sleep_forever()
        raise AssertionError

    class Hurried(Banker):
        name = "hurried"
        approval_timeout = 60

    model = mixed_turn("Timed out.")
    async with satsuma.open_agent(Hurried, model=model, approver=away) as agent:
        start = trio.current_time()
        result = await agent.run("Pay Bob 10")
    assert trio.current_time() - start == pytest.approx(60)
    assert result.status == "completed"
    assert results_read(model) == ["main: 100", "Error: Denied: no decision within 60s"]
    assert done == ["balance main"]


async def test_cancelling_the_run_cancels_the_wait(autojump_clock: Any) -> None:
    waiting = trio.Event()

    async def slow(call: PendingCall) -> Approve:
        waiting.set()
        await trio.sleep_forever()
        raise AssertionError

    async with satsuma.open_agent(Banker, model=mixed_turn(), approver=slow) as agent:
        async with trio.open_nursery() as nursery:
            results: list[satsuma.RunResult] = []

            async def run() -> None:
                results.append(await agent.run("Pay Bob 10"))

            nursery.start_soon(run)
            await waiting.wait()
            await agent.cancel()
        check_conversation(agent.history)
    (result,) = results
    assert result.status == "cancelled"
    assert done == ["balance main"]


async def test_without_a_store_or_an_approver_the_call_is_denied() -> None:
    model = mixed_turn("Could not.")
    async with satsuma.open_agent(Banker, model=model) as agent:
        result = await agent.run("Pay Bob 10")
    assert result.status == "completed"
    assert results_read(model)[1] == (
        "Error: Denied: transfer requires approval, and there is no approver to ask"
    )


async def test_a_supervised_agent_takes_its_approver_and_timeout_from_start_child(
    autojump_clock: Any,
) -> None:
    async def away(call: PendingCall) -> Approve:
        await trio.sleep_forever()
        raise AssertionError

    model = mixed_turn("Timed out.")
    async with satsuma.Supervisor() as sup:
        agent = await sup.start_child(Banker, model=model, approver=away, approval_timeout=30)
        start = trio.current_time()
        result = await agent.run("Pay Bob 10")
        assert trio.current_time() - start == pytest.approx(30)
        with pytest.raises(ValueError, match="approval_timeout must be a positive number"):
            await sup.start_child(Banker, model=model, approval_timeout=0)
        with pytest.raises(TypeError, match="approver must be an async function"):
            await sup.start_child(Banker, model=model, approver="yes")
    assert result.status == "completed"
    assert results_read(model) == ["main: 100", "Error: Denied: no decision within 30s"]
    assert done == ["balance main"]


async def test_open_agent_takes_an_approval_timeout(autojump_clock: Any) -> None:
    async def slow(call: PendingCall) -> Approve:
        await trio.sleep(1000)  # past the class's 300 s
        return Approve()

    model = mixed_turn("Timed out.")
    async with satsuma.open_agent(Banker, model=model, approver=slow, approval_timeout=30) as a:
        start = trio.current_time()
        await a.run("Pay Bob 10")
        assert trio.current_time() - start == pytest.approx(30)
    assert results_read(model) == ["main: 100", "Error: Denied: no decision within 30s"]
    # None: no limit, the person may take as long as they need.
    model = mixed_turn("Paid.")
    async with satsuma.open_agent(Banker, model=model, approver=slow, approval_timeout=None) as a:
        await a.run("Pay Bob 10")
    assert results_read(model) == ["main: 100", "sent 10 to bob"]
    for wrong in (0, -1, "30", True, float("nan")):
        with pytest.raises(
            ValueError,
            match=f"approval_timeout must be a positive number of seconds or None, got: {wrong!r}",
        ):
            async with satsuma.open_agent(Banker, model=model, approval_timeout=wrong):  # type: ignore[arg-type]
                raise AssertionError("started")


async def test_who_decided_is_in_the_events_and_the_json_lines_log(tmp_path: Path) -> None:
    """Inline (the approver's answer) and deferred (the decisions given to resume)."""

    async def approver(call: PendingCall) -> Approve:
        return Approve(by="alice")

    path = tmp_path / "events.jsonl"
    with satsuma.JsonLinesLog(path) as log:
        async with satsuma.open_agent(Banker, model=mixed_turn("Paid."), approver=approver) as a:
            await a.run("Pay Bob 10", events=log)
        model = mixed_turn("Not paid.")
        async with (
            MemoryStore() as store,
            satsuma.open_agent(Banker, model=model, store=store, agent_id="b") as agent,
        ):
            first = await agent.run("Pay Bob 10", events=log)
            (call,) = first.pending
            decisions = {call.id: Deny("over budget", by="bob@example.com")}
            await agent.resume(first.run_id, decisions=decisions, events=log)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    asked = [line for line in lines if line["type"] == "ApprovalRequested"]
    decided = [line for line in lines if line["type"] == "ApprovalDecided"]
    assert [(line["tool_name"], line["input"], line["reason"]) for line in asked] == [
        ("transfer", {"to": "bob", "amount": 10}, "transfer requires approval")
    ] * 2
    assert [(d["approved"], d["decided_by"], d["reason"], d["input"]) for d in decided] == [
        (True, "alice", None, {"to": "bob", "amount": 10}),
        (False, "bob@example.com", "over budget", None),
    ]
    assert decided[1]["run_id"] == first.run_id == asked[1]["run_id"]
    assert sorted(done) == ["balance main", "balance main", "transfer 10 to bob"]


def test_by_is_optional_a_str_and_leaves_hook_denials_as_they_were() -> None:
    assert Deny("no") == Deny("no", by=None) and Deny("no").by is None
    assert Approve({"a": 1}).input == {"a": 1} and Approve().by is None
    with pytest.raises(TypeError, match="'by' must be <class 'str'>"):
        Approve(by=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'by' must be <class 'str'>"):
        Deny("no", by=["alice"])  # type: ignore[arg-type]
    match Deny("reason only"):
        case Deny(reason):
            assert reason == "reason only"


async def test_an_approver_that_swallows_the_cancellation_never_lets_the_call_run(
    autojump_clock: Any,
) -> None:
    waiting = trio.Event()
    cancelled: list[bool] = []

    async def stubborn(call: PendingCall) -> Approve:
        waiting.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)  # a bug in the approver: it says yes anyway
        return Approve()

    async with satsuma.open_agent(Banker, model=mixed_turn(), approver=stubborn) as agent:
        async with trio.open_nursery() as nursery:
            results: list[satsuma.RunResult] = []

            async def run() -> None:
                results.append(await agent.run("Pay Bob 10"))

            nursery.start_soon(run)
            await waiting.wait()
            await agent.cancel()
        check_conversation(agent.history)
    assert cancelled == [True]
    assert [result.status for result in results] == ["cancelled"]
    assert done == ["balance main"]  # the transfer never started


async def test_a_caller_cancelled_while_the_approver_waits_is_cancelled_itself(
    autojump_clock: Any,
) -> None:
    seen: list[str] = []

    async def slow(call: PendingCall) -> Approve:
        try:
            await trio.sleep_forever()
        finally:
            seen.append("the wait ended")
        raise AssertionError

    async with satsuma.open_agent(Banker, model=mixed_turn(), approver=slow) as agent:
        with trio.move_on_after(5) as scope:
            await agent.run("Pay Bob 10")
        assert scope.cancelled_caught  # the caller's own cancellation reached it
        assert seen == ["the wait ended"]
        assert agent.history[-1].role == "user"  # every call answered
        check_conversation(agent.history)
    assert done == ["balance main"]


async def test_an_approver_that_ignores_its_deadline_is_too_late_when_it_answers(
    autojump_clock: Any,
) -> None:
    async def deaf(call: PendingCall) -> Approve:
        with trio.CancelScope(shield=True):  # does not hear the deadline
            await trio.sleep(100)
        return Approve(by="late")

    events: list[Any] = []
    model = mixed_turn("Too late.")
    async with satsuma.open_agent(Banker, model=model, approver=deaf, approval_timeout=30) as a:
        start = trio.current_time()
        await a.run("Pay Bob 10", events=events.append)
        assert trio.current_time() - start == pytest.approx(100)  # its own time, not ours
    assert results_read(model) == ["main: 100", "Error: Denied: no decision within 30s"]
    (decided,) = [e for e in events if isinstance(e, satsuma.ApprovalDecided)]
    assert (decided.approved, decided.decided_by) == (False, None)  # not the late answer's
    assert done == ["balance main"]
