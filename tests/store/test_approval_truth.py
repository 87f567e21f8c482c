"""The store is the truth about which runs of an agent await approval and what they
wait on: the agent keeps no list of its own that a decision taken elsewhere, a restart,
a prune or a reset could leave stale (the store tests' ``store`` fixture: memory, a
SQLite file, PostgreSQL)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

import satsuma
from satsuma import Approve
from satsuma.store import ApprovalDecision, Store, StoreUnavailable
from satsuma.testing import Reply, ScriptedModel, check_conversation
from satsuma.tools import INTERRUPTED_TEXT

done: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    done.clear()


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much.
    """
    done.append(f"transfer {amount} to {to}")
    return f"sent {amount} to {to}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [transfer]


def model(*answers: str) -> ScriptedModel:
    return ScriptedModel([Reply(tool_calls=[("transfer", {"to": "bob", "amount": 10})]), *answers])


def read_results(model: ScriptedModel) -> list[Any]:
    """The tool_result contents of the first message of the last request's run."""
    return [
        block["content"]
        for message in model.requests[-1].messages
        if message.role == "user"
        for block in message.content
        if block.get("type") == "tool_result"
    ]


APPROVED = ApprovalDecision(verdict="approved", decided_by="ops", decided_at=time.time())
DENIED = ApprovalDecision(
    verdict="denied", reason="not this month", decided_by="ops", decided_at=time.time()
)


@pytest.mark.parametrize(
    ("decision", "text"),
    [
        (APPROVED, "Error: Not run: this call was approved by ops, but the agent never"),
        (DENIED, "Error: Denied: not this month"),
    ],
)
async def test_a_run_decided_through_the_store_without_the_lease_is_closed_truthfully(
    store: Store, decision: ApprovalDecision, text: str
) -> None:
    """claim_paused_run is public: called without the agent's lease it records the
    decision and marks the run running, but nothing runs it. The agent, which reads the
    store when the next run goes past, closes that run instead of leaving it running for
    ever, and the model reads what happened to the call, not that a process stopped
    while it ran."""
    scripted = model("Paid?", "Next.")
    async with satsuma.open_agent(Banker, model=scripted, store=store, agent_id="a1") as agent:
        first = await agent.run("Pay Bob 10")
        assert first.status == "awaiting_approval"
        (call,) = first.pending
        assert await store.claim_paused_run(first.run_id, decisions={call.id: decision})
        assert (await store.get_run(first.run_id)).status == "running"  # type: ignore[union-attr]

        second = await agent.run("Next thing")
        assert second.status == "completed", second.error
        check_conversation(agent.history)
        (answer,) = read_results(scripted)
        assert answer.startswith(text), answer
        assert answer != INTERRUPTED_TEXT
    assert done == []  # the transfer never ran
    record = await store.get_run(first.run_id)
    assert record is not None and record.status == "cancelled"
    assert record.error is not None and "claim_paused_run" in record.error
    assert [r.status for r in await store.runs("a1")] == ["cancelled", "completed"]
    (asked,) = await store.approvals(first.run_id)
    assert asked.decision == decision  # what was decided stays on record


async def test_a_reset_closes_a_run_decided_through_the_store(store: Store) -> None:
    async with satsuma.open_agent(Banker, model=model(), store=store, agent_id="a2") as agent:
        first = await agent.run("Pay Bob 10")
        (call,) = first.pending
        assert await store.claim_paused_run(first.run_id, decisions={call.id: APPROVED})
        await agent.reset()
        assert not agent.history
    record = await store.get_run(first.run_id)
    assert record is not None and record.status == "cancelled"
    assert record.error is not None and "before the conversation was reset" in record.error
    assert done == []


async def test_a_run_decided_through_the_store_while_the_agent_is_stopped(store: Store) -> None:
    """Decided while no process serves the agent: the next start finds the run running
    and marks it interrupted, which the store cannot tell apart from a run the agent
    took up and was killed in; the run that goes past it answers its call with the
    decision and that it may not have started, not the plain "the process stopped
    while this tool was running"."""
    async with satsuma.open_agent(Banker, model=model(), store=store, agent_id="a3") as agent:
        first = await agent.run("Pay Bob 10")
        (call,) = first.pending
    assert await store.claim_paused_run(first.run_id, decisions={call.id: APPROVED})
    scripted = ScriptedModel(["Next."])
    async with satsuma.open_agent(Banker, model=scripted, store=store, agent_id="a3") as agent:
        assert (await agent.run("Next thing")).status == "completed"
        check_conversation(agent.history)
    (answer,) = read_results(scripted)
    assert answer.startswith("Error: Interrupted: this call was approved by ops"), answer
    assert "(it may not have started)" in answer and answer != INTERRUPTED_TEXT
    assert done == []
    assert [r.status for r in await store.runs("a3")] == ["cancelled", "completed"]


async def test_a_run_ended_through_the_store_is_not_ended_again(store: Store) -> None:
    """An operator ends a paused run through the store: the agent, reading the store,
    neither resumes it nor overwrites the operator's reason when a new run goes past."""
    async with satsuma.open_agent(
        Banker, model=model("Next."), store=store, agent_id="a4"
    ) as agent:
        first = await agent.run("Pay Bob 10")
        await store.end_run(
            first.run_id,
            status="cancelled",
            ended_at=time.time(),
            usage=first.usage,
            error="cancelled by ops",
        )
        assert await store.runs_awaiting_approval("a4") == []
        with pytest.raises(satsuma.RunNotAwaitingApproval):
            await agent.resume(first.run_id, decisions={first.pending[0].id: Approve()})
        assert (await agent.run("Next thing")).status == "completed"
        check_conversation(agent.history)
    record = await store.get_run(first.run_id)
    assert record is not None and (record.status, record.error) == ("cancelled", "cancelled by ops")
    assert done == []


async def test_what_waits_is_read_from_the_store_across_agents_and_restarts(store: Store) -> None:
    """The per-agent query is what the agent reads: two agents on one store each see
    their own paused run, before and after a restart, and a prune of every ended run
    leaves both waiting and resumable."""
    runs = {}
    for agent_id in ("a5", "a6"):
        async with satsuma.open_agent(
            Banker, model=model("Paid."), store=store, agent_id=agent_id
        ) as agent:
            runs[agent_id] = await agent.run("Pay Bob 10")
    for agent_id, paused in runs.items():
        assert [r.run_id for r in await store.runs_awaiting_approval(agent_id)] == [paused.run_id]
    await store.prune(older_than=0, conversations=True)
    for agent_id, paused in runs.items():
        (pending,) = await store.pending_calls(paused.run_id)
        assert pending.tool_use_id == paused.pending[0].id
        async with satsuma.open_agent(
            Banker, model=ScriptedModel(["Paid."]), store=store, agent_id=agent_id
        ) as agent:
            result = await agent.resume(paused.run_id, decisions={pending.tool_use_id: Approve()})
            assert (result.status, result.output) == ("completed", "Paid."), result.error
            check_conversation(agent.history)
        assert await store.runs_awaiting_approval(agent_id) == []
    assert done == ["transfer 10 to bob", "transfer 10 to bob"]


async def test_a_second_owner_cannot_decide_while_the_agent_is_served(store: Store) -> None:
    """A decision through another handle (another process, a CLI) needs the agent's
    lease: it is refused while the agent is served, and the run still waits."""
    async with satsuma.open_agent(Banker, model=model(), store=store, agent_id="a7") as agent:
        first = await agent.run("Pay Bob 10")
        with pytest.raises(satsuma.StoreError, match="already open"):
            async with satsuma.open_agent(
                Banker, model=ScriptedModel(["x"]), store=store, agent_id="a7"
            ):
                pass  # pragma: no cover
        await trio.lowlevel.checkpoint()
        assert [r.run_id for r in await store.runs_awaiting_approval("a7")] == [first.run_id]
    assert done == []


async def test_resuming_a_run_taken_up_through_the_store_says_what_it_is(store: Store) -> None:
    async with satsuma.open_agent(Banker, model=model(), store=store, agent_id="a8") as agent:
        first = await agent.run("Pay Bob 10")
        (call,) = first.pending
        assert await store.claim_paused_run(first.run_id, decisions={call.id: APPROVED})
        with pytest.raises(ValueError, match="this agent is not running it") as caught:
            await agent.resume(first.run_id)
        assert "Store.claim_paused_run" in str(caught.value)
        with pytest.raises(satsuma.RunNotAwaitingApproval):
            await agent.resume(first.run_id, decisions={call.id: Approve()})
    assert done == []


class PauseCommitsThenFails:
    """A store whose write of a pause commits and then reports a failure (a connection
    lost after the commit), and that cannot record the failed run's end at first: the
    store says awaiting_approval while the agent knows the run failed."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.ends_refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def pause_run(self, run_id: str, pending: Any, **kwargs: Any) -> None:
        await self.inner.pause_run(run_id, pending, **kwargs)
        raise StoreUnavailable("test", "the connection was lost; the commit may have landed")

    async def end_run(self, run_id: str, **kwargs: Any) -> None:
        if kwargs["status"] == "failed" and self.ends_refused == 0:
            self.ends_refused += 1
            raise StoreUnavailable("test", "the connection was lost")
        await self.inner.end_run(run_id, **kwargs)


async def test_a_run_whose_end_is_not_written_yet_is_not_taken_for_a_paused_one(
    store: Store,
) -> None:
    """The store can be behind the agent: a pause that committed but reported a failure
    fails the run, and if its end cannot be written at once the store still says
    awaiting_approval. The next run does not take it for a paused run to go past: the
    run's own end (failed, with the store's reason) is what gets written."""
    faulty: Any = PauseCommitsThenFails(store)
    async with satsuma.open_agent(
        Banker, model=model("Next."), store=faulty, agent_id="a9"
    ) as agent:
        first = await agent.run("Pay Bob 10")
        assert first.status == "failed" and "connection was lost" in (first.error or "")
        assert (await store.get_run(first.run_id)).status == "awaiting_approval"  # type: ignore[union-attr]
        assert (await agent.run("Next thing")).status == "completed"
        check_conversation(agent.history)
    assert faulty.ends_refused == 1
    record = await store.get_run(first.run_id)
    assert record is not None and record.status == "failed", record
    assert "connection was lost" in (record.error or "")
    assert done == []


@satsuma.tool(requires_approval=True, idempotent=True)
async def balance(account: str) -> str:
    """Read an account's balance.

    Args:
        account: Which account.
    """
    done.append(f"balance of {account}")
    return f"{account} holds 5"


class Teller(satsuma.Agent):
    name = "teller"
    tools = [balance]


async def test_an_approved_idempotent_call_in_doubt_runs_again_with_its_decision(
    store: Store,
) -> None:
    """A run decided in the store and found interrupted (the store cannot tell it from
    one whose process stopped mid-call): resumed, its approved call, in doubt and
    idempotent, runs again with its decision and edit, never denied for want of an
    approver (the decision is what the person said)."""
    scripted = ScriptedModel([Reply(tool_calls=[("balance", {"account": "a-1"})]), "Done."])
    async with satsuma.open_agent(Teller, model=scripted, store=store, agent_id="t1") as agent:
        first = await agent.run("Check a-1")
        (call,) = first.pending
    edited = ApprovalDecision(
        verdict="edited", input={"account": "a-2"}, decided_by="ops", decided_at=time.time()
    )
    assert await store.claim_paused_run(first.run_id, decisions={call.id: edited})
    async with satsuma.open_agent(Teller, model=scripted, store=store, agent_id="t1") as agent:
        resumed = await agent.resume(first.run_id)
        assert (resumed.status, resumed.output) == ("completed", "Done."), resumed.error
        check_conversation(agent.history)
    assert read_results(scripted) == ["a-2 holds 5"]
    assert done == ["balance of a-2"]
