"""Deferred human approval: a run pauses awaiting_approval in its store and is resumed
with decisions, in this process or after a restart (the store tests' ``store`` fixture:
every kind of store)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import Approve, Deny
from satsuma.store import ApprovalDecision, MemoryStore, SQLiteStore, Store
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


def mixed_turn(*answers: str | Reply) -> ScriptedModel:
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


async def paused(agent: satsuma.AgentHandle) -> satsuma.RunResult:
    result = await agent.run("Pay Bob 10")
    assert result.status == "awaiting_approval"
    (call,) = result.pending
    assert (call.tool_name, call.input) == ("transfer", {"to": "bob", "amount": 10})
    return result


async def test_a_deferred_run_pauses_and_resumes_with_an_approval(store: Store) -> None:
    model = mixed_turn("Paid.")
    async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b1") as agent:
        first = await paused(agent)
        assert done == ["balance main"]  # the call that needed no decision ran at once
        (record,) = await store.runs("b1")
        assert record.status == "awaiting_approval"
        assert [p.tool_use_id for p in await store.pending_calls(first.run_id)] == [
            first.pending[0].id
        ]
        journal = {e.tool_name: e for e in await store.calls(first.run_id)}
        assert journal["balance"].finished and journal["balance"].content == "main: 100"
        result = await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
        check_conversation(agent.history)
    assert (result.run_id, result.status, result.output) == (first.run_id, "completed", "Paid.")
    assert results_read(model) == ["main: 100", "sent 10 to bob"]
    assert done == ["balance main", "transfer 10 to bob"]  # each ran once
    (record,) = await store.runs("b1")
    assert record.status == "completed"


async def test_a_denial_is_what_the_model_reads(store: Store) -> None:
    model = mixed_turn("Denied.")
    async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b2") as agent:
        first = await paused(agent)
        await agent.resume(first.run_id, decisions={first.pending[0].id: Deny("not today")})
        assert results_read(model) == ["main: 100", "Error: Denied: not today"]
        check_conversation(agent.history)
    assert done == ["balance main"]


async def test_an_invalid_edit_is_refused_naming_the_call_and_the_run_still_waits(
    store: Store,
) -> None:
    two = Reply(
        tool_calls=[("transfer", {"to": "x", "amount": 5}), ("transfer", {"to": "y", "amount": 6})]
    )
    model = ScriptedModel([two, "Paid."])
    async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b2") as agent:
        first = await agent.run("Pay x 5 and y 6")
        x, y = (call.id for call in first.pending)
        with pytest.raises(ValueError) as caught:
            await agent.resume(
                first.run_id,
                decisions={
                    x: Approve(input={"to": "x", "amount": "five"}),
                    y: Approve(input={"to": "y", "amount": 6, "memo": float("nan")}),
                },
            )
        assert str(caught.value) == (
            f"run {first.run_id}: the edited input of call {x!r} (transfer): expected amount "
            f"to be an integer, got: string; of call {y!r} (transfer): expected memo to be a "
            "finite number, got: NaN; nothing was run, and the run still waits for decisions"
        )
        (record,) = await store.runs("b2")
        assert record.status == "awaiting_approval"
        # Fixed, it goes through.
        result = await agent.resume(
            first.run_id,
            decisions={x: Approve(input={"to": "x", "amount": 3}), y: Deny("no")},
        )
        assert result.status == "completed"
        assert results_read(model) == ["sent 3 to x", "Error: Denied: no"]
        check_conversation(agent.history)
    assert done == ["transfer 3 to x"]


async def test_an_edited_approval_runs_with_the_edit(store: Store) -> None:
    async with satsuma.open_agent(
        Banker, model=mixed_turn("Paid."), store=store, agent_id="b3"
    ) as agent:
        first = await paused(agent)
        edit = Approve(input={"to": "bob", "amount": 3})
        await agent.resume(first.run_id, decisions={first.pending[0].id: edit})
    assert done == ["balance main", "transfer 3 to bob"]


async def test_wrong_decisions_are_clear_errors_and_leave_the_run_waiting(store: Store) -> None:
    async with satsuma.open_agent(
        Banker, model=mixed_turn("Paid."), store=store, agent_id="b4"
    ) as agent:
        first = await paused(agent)
        call_id = first.pending[0].id
        with pytest.raises(ValueError, match=f"has no pending call 'nope' .*'{call_id}'"):
            await agent.resume(first.run_id, decisions={"nope": Approve(), call_id: Approve()})
        with pytest.raises(ValueError, match=f"no decision for pending call '{call_id}'"):
            await agent.resume(first.run_id, decisions={})
        with pytest.raises(TypeError, match="must be Approve or Deny"):
            await agent.resume(first.run_id, decisions={call_id: True})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="is awaiting approval: resume it with decisions"):
            await agent.resume(first.run_id)
        with pytest.raises(ValueError, match="has no run 'run_nope'"):
            await agent.resume("run_nope", decisions={})
        result = await agent.resume(first.run_id, decisions={call_id: Approve()})
        assert result.status == "completed"
        with pytest.raises(satsuma.RunNotAwaitingApproval) as caught:
            await agent.resume(first.run_id, decisions={call_id: Approve()})
    assert isinstance(caught.value, ValueError)  # as before the class existed
    assert (caught.value.run_id, caught.value.status) == (first.run_id, "completed")
    assert str(caught.value) == f"run {first.run_id} is not awaiting approval (it is completed)"
    assert done == ["balance main", "transfer 10 to bob"]


async def test_a_resume_records_who_decided_what_in_the_store(store: Store) -> None:
    two = Reply(
        tool_calls=[("transfer", {"to": "x", "amount": 5}), ("transfer", {"to": "y", "amount": 6})]
    )
    model = ScriptedModel(
        [two, "Paid.", Reply(tool_calls=[("transfer", {"to": "z", "amount": 7})]), "Sent."]
    )
    async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b10") as agent:
        first = await agent.run("Pay x 5 and y 6")
        x, y = (call.id for call in first.pending)
        before = time.time()
        await agent.resume(
            first.run_id,
            decisions={
                x: Approve(input={"to": "x", "amount": 3}, by="alice"),
                y: Deny("not y", by="bob"),
            },
        )
        after = time.time()
        assert await store.pending_calls(first.run_id) == []  # decided: no longer pending
        second = await agent.run("Pay z 7")
        (z,) = (call.id for call in second.pending)
        await agent.resume(second.run_id, decisions={z: Approve()})
    records = await store.approvals(first.run_id)
    assert [(r.tool_use_id, r.input) for r in records] == [
        (x, {"to": "x", "amount": 5}),  # what the model asked for
        (y, {"to": "y", "amount": 6}),
    ]
    edit, denial = (r.decision for r in records)
    assert edit is not None and denial is not None
    assert (edit.verdict, edit.input, edit.reason, edit.decided_by) == (
        "edited",
        {"to": "x", "amount": 3},
        None,
        "alice",
    )
    assert (denial.verdict, denial.input, denial.reason, denial.decided_by) == (
        "denied",
        None,
        "not y",
        "bob",
    )
    assert before <= edit.decided_at == denial.decided_at <= after
    (plain,) = await store.approvals(second.run_id)
    assert plain.decision is not None
    assert (plain.tool_use_id, plain.decision.verdict, plain.decision.decided_by) == (
        z,
        "approved",
        None,
    )
    assert done == ["transfer 3 to x", "transfer 7 to z"]


class ClaimedElsewhereFirst:
    """A store where, just before this agent claims a paused run, another process claims
    it (the race that the check of the run's status cannot see)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim_paused_run(self, run_id: str, **kwargs: Any) -> bool:
        elsewhere = ApprovalDecision(
            verdict="denied", reason="no", decided_by="carol", decided_at=1.0
        )
        assert await self.inner.claim_paused_run(
            run_id,
            decisions={
                call.tool_use_id: elsewhere for call in await self.inner.pending_calls(run_id)
            },
        )
        return await self.inner.claim_paused_run(run_id, **kwargs)


async def test_a_resume_that_loses_the_race_raises_run_not_awaiting_approval() -> None:
    real = MemoryStore()
    store: Any = ClaimedElsewhereFirst(real)
    async with satsuma.open_agent(Banker, model=mixed_turn(), store=store, agent_id="b11") as agent:
        first = await paused(agent)
        call_id = first.pending[0].id
        with pytest.raises(satsuma.RunNotAwaitingApproval) as caught:
            await agent.resume(first.run_id, decisions={call_id: Approve(by="alice")})
    assert (caught.value.run_id, caught.value.status) == (first.run_id, None)
    assert str(caught.value) == (
        f"run {first.run_id} is not awaiting approval any more: another decision on it came first"
    )
    (record,) = await real.approvals(first.run_id)
    assert record.decision is not None and record.decision.decided_by == "carol"  # not alice
    assert done == ["balance main"]  # the transfer never ran here


async def test_two_resumes_at_once_run_the_call_once(store: Store) -> None:
    async with satsuma.open_agent(
        Banker, model=mixed_turn("Paid."), store=store, agent_id="b5"
    ) as agent:
        first = await paused(agent)
        decisions = {first.pending[0].id: Approve()}
        outcomes: list[object] = []

        async def resume() -> None:
            try:
                outcomes.append((await agent.resume(first.run_id, decisions=decisions)).status)
            except satsuma.RunNotAwaitingApproval as exc:
                outcomes.append(str(exc))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume)
            nursery.start_soon(resume)
    assert sorted(map(str, outcomes)) == [
        "completed",
        f"run {first.run_id} is not awaiting approval (it is completed)",
    ]
    (record,) = await store.approvals(first.run_id)
    assert record.decision is not None and record.decision.verdict == "approved"
    assert done == ["balance main", "transfer 10 to bob"]


async def test_a_new_run_goes_past_a_paused_one(store: Store) -> None:
    model = mixed_turn("Not paid, then.", "Hello.")
    async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b6") as agent:
        first = await paused(agent)
        second = await agent.run("Never mind")
        assert second.status == "completed"
        assert results_read(model) == [
            "main: 100",
            f"Error: Denied: no decision was made before run {second.run_id} started",
        ]
        check_conversation(agent.history)
        with pytest.raises(ValueError, match="is not awaiting approval \\(it is cancelled\\)"):
            await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
    assert done == ["balance main"]


async def test_a_paused_run_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    async with (
        SQLiteStore(path) as store,
        satsuma.open_agent(Banker, model=mixed_turn(), store=store, agent_id="b7") as agent,
    ):
        first = await paused(agent)
    # Another process, later: the same file, the same agent id.
    model = ScriptedModel(["Paid."])
    async with (
        SQLiteStore(path) as store,
        satsuma.open_agent(Banker, model=model, store=store, agent_id="b7") as agent,
    ):
        assert agent.interrupted == ()  # still waiting, untouched
        (record,) = await store.runs("b7")
        assert record.status == "awaiting_approval"
        result = await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
        check_conversation(agent.history)
    assert (result.status, result.output) == ("completed", "Paid.")
    assert results_read(model) == ["main: 100", "sent 10 to bob"]
    assert done == ["balance main", "transfer 10 to bob"]


async def test_a_supervised_agent_restarted_while_a_run_waits_keeps_it_waiting(
    tmp_path: Path,
) -> None:
    model = mixed_turn("Paid.")
    async with SQLiteStore(tmp_path / "s.db") as store, satsuma.Supervisor() as sup:
        agent = await sup.start_child(Banker, id="banker", model=model, store=store, agent_id="b8")
        first = await paused(agent)
        await sup.restart_child("banker")  # a new incarnation loads the agent from the store
        assert agent.interrupted == ()
        (record,) = await store.runs("b8")
        assert record.status == "awaiting_approval"
        result = await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
        assert (result.status, result.output) == ("completed", "Paid.")
        check_conversation(agent.history)
    assert done == ["balance main", "transfer 10 to bob"]


class FailsToRenewOnce:
    """A store whose lease renewal fails once when armed, as a store's disk or network can:
    the error is not a StoreError, so the agent crashes (and its supervisor restarts it)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def renew_lease(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            raise OSError("the store's disk went away")
        return await self.inner.renew_lease(*args, **kwargs)


async def test_a_supervised_agent_that_crashes_while_a_run_waits_keeps_it_waiting(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A MemoryStore: the virtual clock would jump past a SQLite store's worker threads.
    events: list[satsuma.SupervisorEvent] = []
    restarted = trio.Event()

    def seen(event: satsuma.SupervisorEvent) -> None:
        events.append(event)
        if isinstance(event, satsuma.ChildStarted) and event.incarnation == 2:
            restarted.set()

    async with MemoryStore() as real, satsuma.Supervisor(events=seen) as sup:
        store: Any = FailsToRenewOnce(real)
        agent = await sup.start_child(
            Banker, id="banker", model=mixed_turn("Paid."), store=store, agent_id="b9"
        )
        first = await paused(agent)
        pending_before = await real.pending_calls(first.run_id)
        store.armed = True  # the next renewal crashes the agent
        with trio.fail_after(600):  # virtual seconds: the lease is renewed every 10
            await restarted.wait()
        (crash,) = [e for e in events if isinstance(e, satsuma.ChildCrashed)]
        assert "the store's disk went away" in crash.error
        # The new incarnation loaded the agent from the store: the run still waits, as it was.
        assert agent.interrupted == ()
        (record,) = await real.runs("b9")
        assert record.status == "awaiting_approval"
        assert await real.pending_calls(first.run_id) == pending_before
        assert done == ["balance main"]
        result = await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
        assert (result.status, result.output) == ("completed", "Paid.")
        check_conversation(agent.history)
    assert done == ["balance main", "transfer 10 to bob"]


async def test_a_reset_goes_past_a_paused_run(store: Store) -> None:
    model = mixed_turn("Hello.")
    async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b12") as agent:
        first = await paused(agent)
        await agent.reset()
        assert agent.history == ()
        (record,) = await store.runs("b12")
        assert (record.status, record.error) == (
            "cancelled",
            "awaiting approval, and not decided before the conversation was reset",
        )
        assert await store.runs_awaiting_approval() == []
        assert await store.pending_calls(first.run_id) == []
        (asked,) = await store.approvals(first.run_id)
        assert asked.decision is None  # never decided
        with pytest.raises(satsuma.RunNotAwaitingApproval, match="it is cancelled"):
            await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
        # The conversation starts afresh, whole.
        second = await agent.run("Hi")
        assert (second.status, second.output) == ("completed", "Hello.")
        assert [m.role for m in agent.history] == ["user", "assistant"]
        check_conversation(agent.history)
    assert done == ["balance main"]


async def test_a_reset_goes_past_an_interrupted_run(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "r.db") as store:
        # A run a killed process left running: the agent finds it interrupted.
        await store.start_run(
            satsuma.store.RunRecord(
                run_id="run_old", agent_id="b13", status="running", prompt="Hi", started_at=1.0
            ),
            start=0,
            messages=[satsuma.Message(role="user", content=[{"type": "text", "text": "Hi"}])],
        )
        model = ScriptedModel(["Hello."])
        async with satsuma.open_agent(Banker, model=model, store=store, agent_id="b13") as agent:
            assert [r.run_id for r in agent.interrupted] == ["run_old"]
            await agent.reset()
            assert agent.interrupted == ()
            with pytest.raises(ValueError, match="run run_old ended cancelled"):
                await agent.resume("run_old")
            assert (await agent.run("Hello?")).output == "Hello."
            assert [m.text for m in agent.history] == ["Hello?", "Hello."]
        (record, _) = await store.runs("b13")
        assert (record.status, record.error) == (
            "cancelled",
            "interrupted, and not resumed before the conversation was reset",
        )


async def test_an_edit_is_checked_as_resume_checks_it_deciding_nothing(store: Store) -> None:
    async with satsuma.open_agent(
        Banker, model=mixed_turn("Paid."), store=store, agent_id="b14"
    ) as agent:
        first = await paused(agent)
        (call,) = first.pending
        (stored,) = await store.pending_calls(first.run_id)
        agent.check_edit(call, {"to": "bob", "amount": 3})  # valid: nothing to say
        with pytest.raises(ValueError) as caught:
            agent.check_edit(call, {"to": "bob", "amount": "three"})
        assert str(caught.value) == (
            f"the edited input of call {call.id!r} (transfer): expected amount to be an "
            "integer, got: string"
        )
        with pytest.raises(ValueError) as caught:
            agent.check_edit(stored, {"to": "bob", "amount": 3, "memo": float("inf")})
        assert str(caught.value) == (
            f"run {first.run_id}: the edited input of call {call.id!r} (transfer): expected "
            "memo to be a finite number, got: Infinity"
        )
        with pytest.raises(TypeError, match="must be a mapping"):
            agent.check_edit(call, ["bob", 3])  # type: ignore[arg-type]
        # Checked, not decided: the run still waits, and is resumed as usual.
        assert [r.run_id for r in await store.runs_awaiting_approval()] == [first.run_id]
        result = await agent.resume(
            first.run_id, decisions={call.id: Approve(input={"to": "bob", "amount": 3})}
        )
        assert result.status == "completed"
    with pytest.raises(satsuma.AgentUnavailable):
        agent.check_edit(call, {"to": "bob", "amount": 3})
    assert done == ["balance main", "transfer 3 to bob"]
