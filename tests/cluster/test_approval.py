"""A run that pauses awaiting approval in a cluster: its decisions come from any process
(``Cluster.resume``), and whichever node claims it next goes on with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply, check_conversation

paid: list[tuple[str, int]] = []


@satsuma.tool(requires_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    paid.append((to, amount))
    return f"paid {amount} to {to}"


def payer(request: satsuma.ModelRequest) -> str | Reply:
    last = request.messages[-1]
    if last.role == "user" and last.text:
        return Reply(tool_calls=[("pay", {"to": "bob", "amount": 10})])
    return f"done: {last.content[0].get('content')!r}"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay]


@asynccontextmanager
async def a_node(store: PostgresStore, name: str = "n1") -> AsyncIterator[Node]:
    async with trio.open_nursery() as nursery:
        node = Node(store, agents=[Payer], name=name, model=FunctionModel(payer), poll_interval=0.5)
        await nursery.start(node.serve)
        yield node
        nursery.cancel_scope.cancel()


async def test_a_paused_run_is_resumed_with_decisions_from_the_client(postgres_dsn: str) -> None:
    paid.clear()
    async with PostgresStore(postgres_dsn) as store, a_node(store):
        cluster = Cluster(store)
        with trio.fail_after(20):
            result = await cluster.run(Payer, "pay-1", "Pay Bob 10")
            assert result.status == "awaiting_approval"
            [call] = result.pending
            assert (call.tool_name, call.input) == ("pay", {"to": "bob", "amount": 10})
            assert paid == []
            await cluster.resume(result.run_id, {call.id: satsuma.Approve(by="ops")})
            resumed = await cluster.result(result.run_id)
        assert resumed.status == "completed", resumed.error
        assert paid == [("bob", 10)]
        [record] = await store.runs("pay-1")
        assert record.status == "completed"
        [approval] = await store.approvals(result.run_id)
        assert approval.decision is not None
        assert (approval.decision.verdict, approval.decision.decided_by) == ("approved", "ops")
        check_conversation(await store.load_messages("pay-1"))
        assert "paid 10 to bob" in resumed.output
        [queued] = await cluster.runs("pay-1")
        assert (queued.status, queued.attempts) == ("completed", 1)


async def pause(cluster: Cluster, agent_id: str) -> satsuma.RunResult:
    with trio.fail_after(20):
        result = await cluster.run(Payer, agent_id, "Pay Bob 10")
    assert result.status == "awaiting_approval"
    return result


async def test_an_edit_and_a_denial_reach_the_tool_and_the_model(postgres_dsn: str) -> None:
    paid.clear()
    async with PostgresStore(postgres_dsn) as store, a_node(store):
        cluster = Cluster(store)
        first = await pause(cluster, "pay-edit")
        await cluster.resume(
            first.run_id, {first.pending[0].id: satsuma.Approve({"to": "bob", "amount": 7})}
        )
        second = await pause(cluster, "pay-deny")
        await cluster.resume(second.run_id, {second.pending[0].id: satsuma.Deny("not today")})
        with trio.fail_after(20):
            edited = await cluster.result(first.run_id)
            denied = await cluster.result(second.run_id)
        assert paid == [("bob", 7)]
        assert (edited.status, denied.status) == ("completed", "completed")
        assert "Denied: not today" in denied.output


async def test_decisions_that_do_not_fit_the_run_are_refused_before_anything_is_queued(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, a_node(store):
        cluster = Cluster(store)
        result = await pause(cluster, "pay-bad")
        call_id = result.pending[0].id
        with pytest.raises(ValueError, match="has no pending call 'nope'"):
            await cluster.resume(result.run_id, {"nope": satsuma.Approve()})
        with pytest.raises(ValueError, match="no decision for pending call"):
            await cluster.resume(result.run_id, {})
        with pytest.raises(TypeError, match="must be Approve or Deny"):
            await cluster.resume(result.run_id, {call_id: "yes"})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="no run 'r-unknown'"):
            await cluster.resume("r-unknown", {call_id: satsuma.Approve()})
        [queued] = await cluster.runs("pay-bad")
        assert queued.status == "completed"  # still paused: nothing was queued
        assert (await store.get_run(result.run_id)).status == "awaiting_approval"  # type: ignore[union-attr]


async def test_of_two_resumes_one_wins_and_the_call_runs_once(postgres_dsn: str) -> None:
    paid.clear()
    async with PostgresStore(postgres_dsn) as store, a_node(store):
        cluster = Cluster(store)
        result = await pause(cluster, "pay-race")
        decision = {result.pending[0].id: satsuma.Approve()}
        outcomes: list[str] = []

        async def resume() -> None:
            try:
                await cluster.resume(result.run_id, decision)
                outcomes.append("won")
            except satsuma.RunNotAwaitingApproval:
                outcomes.append("refused")

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(resume)
        assert sorted(outcomes) == ["refused", "refused", "refused", "won"]
        with trio.fail_after(20):
            resumed = await cluster.result(result.run_id)
        assert resumed.status == "completed"
        assert paid == [("bob", 10)]
        with pytest.raises(satsuma.RunNotAwaitingApproval, match="it is completed"):
            await cluster.resume(result.run_id, decision)


async def test_an_edit_the_tool_refuses_leaves_the_run_paused_with_the_reason(
    postgres_dsn: str,
) -> None:
    paid.clear()
    async with PostgresStore(postgres_dsn) as store, a_node(store):
        cluster = Cluster(store)
        result = await pause(cluster, "pay-refused")
        call_id = result.pending[0].id
        await cluster.resume(
            result.run_id, {call_id: satsuma.Approve({"to": "bob", "amount": "ten"})}
        )
        with trio.fail_after(20):
            refused = await cluster.result(result.run_id)
        assert refused.status == "awaiting_approval"
        assert refused.error is not None and "decisions refused" in refused.error
        assert [call.id for call in refused.pending] == [call_id]
        assert paid == []
        # Still paused: a good decision now goes through.
        await cluster.resume(result.run_id, {call_id: satsuma.Approve()})
        with trio.fail_after(20):
            resumed = await cluster.result(result.run_id)
        assert resumed.status == "completed"
        assert paid == [("bob", 10)]


async def test_the_events_of_a_resumed_run_follow_its_pause(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store, a_node(store):
        cluster = Cluster(store)
        result = await pause(cluster, "pay-events")
        before = [type(event).__name__ async for event in cluster.events(result.run_id)]
        assert before[0] == "RunStart" and before[-1] == "RunEnd"
        assert "ApprovalRequested" in before
        await cluster.resume(result.run_id, {result.pending[0].id: satsuma.Approve()})
        with trio.fail_after(20):
            await cluster.result(result.run_id)
            after = [type(event).__name__ async for event in cluster.events(result.run_id)]
        # One stream from the start: the pause's events, then the resumed part's.
        assert "ApprovalDecided" in after and "ToolCallEnd" in after
        assert after[-1] == "RunEnd"
        assert "RunResumed" not in after
