"""What an agent reads as it opens (``satsuma.store.load_agent``): its conversation and its
runs, the running ones marked interrupted, under the lease it has just taken; in one
transaction on each of satsuma's stores, and through the store's own calls on any other.
The first run after an open that found no run waiting does not ask the store again."""

from __future__ import annotations

from typing import Any

import pytest

import satsuma
from satsuma import Message, Usage
from satsuma.store import (
    LeaseLost,
    Owner,
    PendingApproval,
    RunRecord,
    Store,
    load_agent,
)
from satsuma.testing import ScriptedModel


class Plain(satsuma.Agent):
    name = "plain"


def _record(run_id: str, agent_id: str, started_at: float) -> RunRecord:
    return RunRecord(
        run_id=run_id, agent_id=agent_id, status="running", prompt=run_id, started_at=started_at
    )


async def _two_runs(store: Store, agent_id: str) -> None:
    """A completed run, then one left running (as a crash leaves it)."""
    await store.start_run(
        _record(f"{agent_id}-done", agent_id, 1.0), start=0, messages=[Message.user("a")]
    )
    await store.write_tail(
        agent_id, 1, [Message(role="assistant", content=[{"type": "text", "text": "b"}])]
    )
    await store.end_run(
        f"{agent_id}-done", status="completed", ended_at=2.0, usage=Usage(), error=None
    )
    await store.start_run(
        _record(f"{agent_id}-left", agent_id, 3.0), start=2, messages=[Message.user("c")]
    )


async def test_it_reads_the_conversation_and_the_runs_marking_the_running_interrupted(
    store: Store,
) -> None:
    await _two_runs(store, "a1")
    lease = await store.acquire_lease("a1", Owner.new(), seconds=30)
    loaded = await load_agent(store, "a1", lease=lease)
    assert [m.text for m in loaded.messages] == ["a", "b", "c"]
    assert [(r.run_id, r.status) for r in loaded.runs] == [
        ("a1-done", "completed"),
        ("a1-left", "interrupted"),
    ]
    # What the store keeps, and what its single calls read, are the same.
    assert list(loaded.messages) == await store.load_messages("a1")
    assert list(loaded.runs) == await store.runs("a1")
    await store.release_lease(lease)


async def test_under_a_lease_no_longer_held_it_marks_nothing(store: Store) -> None:
    await _two_runs(store, "a2")
    owner = Owner.new()
    stale = await store.acquire_lease("a2", owner, seconds=30)
    current = await store.acquire_lease("a2", owner, seconds=30)  # a newer epoch
    with pytest.raises(LeaseLost):
        await load_agent(store, "a2", lease=stale)
    record = await store.get_run("a2-left")
    assert record is not None and record.status == "running"
    await store.release_lease(current)


class _Watcher:
    """A store that is not one of satsuma's (it wraps one): it is read one call at a
    time, and each read is noted."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def load_messages(self, agent_id: str) -> list[Message]:
        self.reads.append("load_messages")
        return await self.inner.load_messages(agent_id)

    async def mark_interrupted(self, agent_id: str, **kw: Any) -> list[RunRecord]:
        self.reads.append("mark_interrupted")
        return await self.inner.mark_interrupted(agent_id, **kw)

    async def runs(self, agent_id: str) -> list[RunRecord]:
        self.reads.append("runs")
        return await self.inner.runs(agent_id)

    async def runs_awaiting_approval(self, agent_id: str) -> list[RunRecord]:
        self.reads.append("runs_awaiting_approval")
        return await self.inner.runs_awaiting_approval(agent_id)


async def test_a_store_that_is_not_satsumas_is_read_through_its_own_calls(store: Store) -> None:
    await _two_runs(store, "a3")
    watcher: Any = _Watcher(store)
    model = ScriptedModel(["one", "two"])
    async with satsuma.open_agent(Plain, model=model, store=watcher, agent_id="a3") as agent:
        assert watcher.reads == ["load_messages", "mark_interrupted", "runs"]
        assert (await agent.run("first")).status == "completed"
        # Nothing waited at the open, so nothing can wait now: no read again.
        assert watcher.reads == ["load_messages", "mark_interrupted", "runs"]
        assert (await agent.run("second")).status == "completed"
        assert watcher.reads[3:] == ["runs_awaiting_approval"]  # later runs ask the store
    left = await store.get_run("a3-left")
    assert left is not None and left.status == "cancelled"  # gone past by the first run
    assert [m.text for m in await store.load_messages("a3")] == [
        "a",
        "b",
        "first",
        "one",
        "second",
        "two",
    ]


async def test_a_run_waiting_at_the_open_is_read_again_and_gone_past(store: Store) -> None:
    await store.start_run(_record("a4-paused", "a4", 1.0), start=0, messages=[Message.user("a")])
    await store.pause_run(
        "a4-paused",
        [
            PendingApproval(
                run_id="a4-paused", tool_use_id="c1", tool_name="pay", input={}, reason="asks"
            )
        ],
        usage=Usage(),
    )
    watcher: Any = _Watcher(store)
    model = ScriptedModel(["one"])
    async with satsuma.open_agent(Plain, model=model, store=watcher, agent_id="a4") as agent:
        assert (await agent.run("next")).status == "completed"
    assert watcher.reads[3:] == ["runs_awaiting_approval"]
    paused = await store.get_run("a4-paused")
    assert paused is not None and paused.status == "cancelled"
