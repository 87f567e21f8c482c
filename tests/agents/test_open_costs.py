"""What opening an agent, running it and closing it cost: trio scheduler batches, and
garbage left for the collector; and that the shortcuts taken for it keep the actor's
guarantees: the actor's task is not waited for when nothing can fail its start, a
waiting request is taken without a receive's schedule point, and a full mailbox still
holds its senders back."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

import satsuma
from satsuma.agents._actor import Actor
from satsuma.agents._conversation import Conversation
from satsuma.store import MemoryStore
from satsuma.testing import Reply, ScriptedModel


class Plain(satsuma.Agent):
    name = "plain"


class _Batches(trio.abc.Instrument):
    """Counts the scheduler's batches (one I/O wait each) and the task steps."""

    def __init__(self) -> None:
        self.batches = 0
        self.steps = 0

    def before_io_wait(self, timeout: float) -> None:
        self.batches += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def _counted_conversation(model: ScriptedModel) -> tuple[int, int, int]:
    """The batches of open_agent's entry, of one run, and of the block's exit."""
    counter = _Batches()
    trio.lowlevel.add_instrument(counter)
    try:
        manager = satsuma.open_agent(Plain, model=model)
        agent = await manager.__aenter__()
        opened = counter.batches
        result = await agent.run("hello")
        ran = counter.batches - opened
        await manager.__aexit__(None, None, None)
        closed = counter.batches - opened - ran
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert result.status == "completed"
    assert result.output == "hi"
    return opened, ran, closed


async def test_a_plain_agent_opens_without_a_batch_and_closes_in_one() -> None:
    # The scripted model answers after one checkpoint (trio.sleep(0)): one batch. The
    # run adds one hop to the actor and one back; the close, only the nursery's own
    # schedule point: the run's task ended as it answered, and the idle agent has no
    # task to wake. Nothing is waited for on the way in.
    opened, ran, closed = await _counted_conversation(ScriptedModel(["hi"]))
    assert (opened, ran, closed) == (0, 3, 1)


async def test_an_agent_with_a_store_is_waited_for_before_the_block() -> None:
    # Its start loads the conversation, which may fail: the block runs only after it.
    entered: list[int] = []

    class Failing(MemoryStore):  # type: ignore[misc]
        async def acquire_lease(self, *args: Any, **kwargs: Any) -> Any:
            raise satsuma.StoreError("memory", "cannot take the lease")

    with pytest.raises(satsuma.StoreError, match="cannot take the lease"):
        async with satsuma.open_agent(
            Plain, model=ScriptedModel(["hi"]), store=Failing(), agent_id="a"
        ):
            entered.append(1)
    assert entered == []


async def test_a_block_that_raises_before_the_actor_ran_leaves_no_task() -> None:
    before = len(trio.lowlevel.current_task().child_nurseries)
    with pytest.raises(KeyError):
        async with satsuma.open_agent(Plain, model=ScriptedModel([])):
            raise KeyError("at once")
    assert len(trio.lowlevel.current_task().child_nurseries) == before


async def test_runs_queued_before_the_actor_first_ran_are_served() -> None:
    # Both runs are in the mailbox before the actor's task has taken a step.
    results: list[str] = []
    async with satsuma.open_agent(Plain, model=ScriptedModel(["first", "second"])) as agent:

        async def one(prompt: str) -> None:
            results.append((await agent.run(prompt)).output)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "a")
            nursery.start_soon(one, "b")
        assert [m.role for m in agent.history] == ["user", "assistant", "user", "assistant"]
    assert results == ["first", "second"]


async def test_a_cancelled_caller_submits_nothing() -> None:
    model = ScriptedModel(["hi"])
    async with satsuma.open_agent(Plain, model=model) as agent:
        with trio.CancelScope() as scope:
            scope.cancel()
            await agent.run("never sent")
        assert scope.cancelled_caught
        assert agent.history == ()
        assert (await agent.run("sent")).output == "hi"
    assert model.request_count == 1


class Tiny(satsuma.Agent):
    name = "tiny"
    mailbox_size = 1


async def test_a_full_mailbox_holds_its_senders_back_and_serves_them_in_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(["one", "two", "three"], delay=1)
    order: list[str] = []
    async with satsuma.open_agent(Tiny, model=model) as agent:

        async def one(prompt: str) -> None:
            order.append((await agent.run(prompt)).output)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "1")
            await trio.testing.wait_all_tasks_blocked()  # served: the mailbox is empty
            nursery.start_soon(one, "2")
            await trio.testing.wait_all_tasks_blocked()  # waits in the mailbox (size 1)
            nursery.start_soon(one, "3")
            await trio.testing.wait_all_tasks_blocked()  # waits for room
            assert model.request_count == 1  # the first run holds the actor
        assert order == ["one", "two", "three"]
        assert [m.text for m in agent.history if m.role == "user"] == ["1", "2", "3"]


async def test_a_full_mailbox_sender_that_is_cancelled_sends_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(["one", "two"], delay=1)
    async with satsuma.open_agent(Tiny, model=model) as agent:
        async with trio.open_nursery() as nursery:
            results: list[str] = []

            async def one(prompt: str) -> None:
                results.append((await agent.run(prompt)).output)

            nursery.start_soon(one, "1")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(one, "2")
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.5) as scope:
                await agent.run("3: gives up while the mailbox is full")
            assert scope.cancelled_caught
        assert results == ["one", "two"]
        assert [m.text for m in agent.history if m.role == "user"] == ["1", "2"]
    assert model.remaining == 0


@satsuma.tool
async def noop(n: int) -> str:
    """Do nothing.

    Args:
        n: A number.
    """
    return "ok"


class WithTools(satsuma.Agent):
    name = "with_tools"
    tools = [noop]


async def test_a_conversation_leaves_no_cycle_for_the_garbage_collector() -> None:
    # The actor and its handle refer to each other while the agent runs; once the block
    # ends, nothing of the agent is left for the collector: every conversation would
    # otherwise pile up its whole actor until the next collection.
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        model = ScriptedModel([Reply(tool_calls=[("noop", {"n": 1})] * 3), "done", "again"])
        async with satsuma.open_agent(WithTools, model=model) as agent:
            assert (await agent.run("go")).status == "completed"
            assert (await agent.run("again")).status == "completed"
        del agent
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (Actor, satsuma.AgentHandle, Conversation))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


async def _raised_cancels(block: Any) -> int:
    """How many times trio delivered a cancellation to a task while ``block`` ran."""
    raised = 0

    def profile(frame: Any, event: str, arg: object) -> None:
        nonlocal raised
        if event == "call" and frame.f_code.co_name == "raise_cancel":
            raised += 1

    sys.setprofile(profile)
    try:
        await block()
    finally:
        sys.setprofile(None)
    return raised


async def test_an_idle_agent_ends_without_a_cancellation_and_refuses_later_runs() -> None:
    handles: list[satsuma.AgentHandle[Any]] = []

    async def conversation() -> None:
        async with satsuma.open_agent(Plain, model=ScriptedModel(["hi"])) as agent:
            handles.append(agent)
            assert (await agent.run("hello")).output == "hi"

    # Its task waited for a request: its mailbox is closed, and it returns.
    assert await _raised_cancels(conversation) == 0
    with pytest.raises(satsuma.AgentUnavailable, match="it has stopped"):
        await handles[0].run("too late")


async def test_leaving_with_a_run_in_flight_and_one_queued_cancels_both(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(["never", "never either"], delay=100)
    results: dict[str, satsuma.RunResult[Any]] = {}
    async with trio.open_nursery() as outer:
        handles: list[satsuma.AgentHandle[Any]] = []

        async def owner(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with satsuma.open_agent(Plain, model=model) as agent:
                handles.append(agent)
                task_status.started()
                await trio.sleep(10)

        async def client(prompt: str) -> None:
            results[prompt] = await handles[0].run(prompt)

        await outer.start(owner)
        outer.start_soon(client, "first")
        await trio.testing.wait_all_tasks_blocked()
        outer.start_soon(client, "second")
    assert results["first"].status == "cancelled"
    assert results["second"].status == "cancelled"
    assert results["second"].error == "the agent stopped"
    assert model.request_count == 1


async def _late_run() -> list[str]:
    """A run sent from another task in the batch where the block ends."""
    outcomes: list[str] = []
    ready = trio.Event()
    holder: list[satsuma.AgentHandle[Any]] = []

    async def owner() -> None:
        async with satsuma.open_agent(Plain, model=ScriptedModel(["hi"])) as agent:
            holder.append(agent)
            ready.set()
            await trio.lowlevel.checkpoint()

    async def client() -> None:
        await ready.wait()
        try:
            outcomes.append((await holder[0].run("late")).status)
        except satsuma.AgentUnavailable:
            outcomes.append("unavailable")

    async with trio.open_nursery() as outer:
        outer.start_soon(owner)
        outer.start_soon(client)
    return outcomes


async def test_a_run_sent_as_the_block_ends_is_answered() -> None:
    # Refused (the mailbox is closed) or served, never left waiting: trio runs a
    # batch's tasks in either order, so both are tried.
    seen: set[str] = set()
    for _ in range(30):
        outcomes = await _late_run()
        assert len(outcomes) == 1
        seen.update(outcomes)
    assert seen <= {"completed", "cancelled", "unavailable"}
