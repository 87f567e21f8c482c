"""An agent opened by ``open_agent`` without a store or tool servers is served in bursts
(``Actor.serve_in``): a request sent to it idle starts a task, which ends once the
mailbox is empty. These tests hold it to what a task serving throughout guaranteed: the
runs are the agent's tasks' (a crash is the agent's, a close cancels them), a cancelled
caller's run ends and the next is served, nothing outlives the block; and to what it is
for: an idle agent holds no task, and closing it wakes none."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

import satsuma
from satsuma.testing import FunctionModel, ScriptedModel


class Plain(satsuma.Agent):
    name = "plain"


class Tiny(satsuma.Agent):
    name = "tiny"
    mailbox_size = 1


def _tasks_under_me() -> list[trio.lowlevel.Task]:
    """The tasks of the nurseries the current task holds open (open_agent's among them)."""
    me = trio.lowlevel.current_task()
    return [task for nursery in me.child_nurseries for task in nursery.child_tasks]


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.batches = 0
        self.tasks: list[str] = []

    def before_io_wait(self, timeout: float) -> None:
        self.batches += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.tasks.append(task.name)


async def test_an_idle_agent_holds_no_task_before_or_after_a_run() -> None:
    async with satsuma.open_agent(Plain, model=ScriptedModel(["hi"])) as agent:
        assert _tasks_under_me() == []
        result = await agent.run("hello")
        # The task that served the run ended as it answered, in the same step.
        assert _tasks_under_me() == []
    assert result.output == "hi"


async def test_closing_an_agent_that_never_ran_wakes_no_task_of_its_own() -> None:
    counter = _Steps()
    manager = satsuma.open_agent(Plain, model=ScriptedModel([]))
    await manager.__aenter__()
    trio.lowlevel.add_instrument(counter)
    try:
        await manager.__aexit__(None, None, None)
    finally:
        trio.lowlevel.remove_instrument(counter)
    # One batch: the nursery's own schedule point, in which only the caller steps.
    me = trio.lowlevel.current_task().name
    assert (counter.batches, counter.tasks) == (1, [me])


async def test_a_cancelled_callers_run_ends_and_the_next_run_is_served(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(["never read", "second"], delay=10)
    async with satsuma.open_agent(Plain, model=model) as agent:
        with trio.move_on_after(1) as scope:
            await agent.run("first")
        assert scope.cancelled_caught
        # The run was wound down before run() returned; its task has ended.
        assert _tasks_under_me() == []
        assert agent.history == ()
        again = await agent.run("again")
        assert _tasks_under_me() == []
    assert again.status == "completed"
    assert again.output == "second"
    assert model.request_count == 2


async def test_a_crash_fails_the_run_queued_behind_it_and_ends_the_block(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def broken(request: satsuma.ModelRequest) -> str:
        await trio.sleep(1)
        raise RuntimeError("bug in my model")

    outcomes: dict[str, str] = {}
    with pytest.raises(satsuma.AgentCrashed) as info:
        async with satsuma.open_agent(Plain, model=FunctionModel(broken)) as agent:

            async def one(prompt: str) -> None:
                try:
                    await agent.run(prompt)
                except satsuma.AgentCrashed as exc:
                    outcomes[prompt] = type(exc.cause).__name__
                    raise

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, "first")
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(one, "queued")
                await trio.testing.wait_all_tasks_blocked()
    assert isinstance(info.value.__cause__, RuntimeError)
    # The queued run was failed with the crash, never served.
    assert outcomes == {"first": "RuntimeError", "queued": "RuntimeError"}
    with pytest.raises(satsuma.AgentUnavailable, match="it has stopped"):
        await agent.run("after the crash")


async def test_a_sender_held_back_by_a_full_mailbox_is_refused_when_the_block_ends(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(["never", "never either"], delay=100)
    outcomes: dict[str, Any] = {}
    async with trio.open_nursery() as outer:
        handles: list[satsuma.AgentHandle[Any]] = []

        async def owner(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with satsuma.open_agent(Tiny, model=model) as agent:
                handles.append(agent)
                task_status.started()
                await trio.sleep(10)

        async def client(prompt: str) -> None:
            try:
                outcomes[prompt] = (await handles[0].run(prompt)).status
            except satsuma.AgentUnavailable as exc:
                outcomes[prompt] = str(exc)

        await outer.start(owner)
        for prompt in ("in flight", "queued", "held back"):
            outer.start_soon(client, prompt)
            await trio.testing.wait_all_tasks_blocked()
    assert outcomes["in flight"] == "cancelled"
    assert outcomes["queued"] == "cancelled"
    assert "it has stopped" in outcomes["held back"]
    assert model.request_count == 1


async def test_the_blocks_own_exception_leaves_it_as_raised() -> None:
    # open_agent's context manager is written out (no contextlib generator): the body's
    # exception still comes out as the very object raised, not in a group.
    error = LookupError("mine")
    with pytest.raises(LookupError) as info:
        async with satsuma.open_agent(Plain, model=ScriptedModel(["hi"])) as agent:
            assert (await agent.run("hello")).output == "hi"
            raise error
    assert info.value is error
    assert info.value.__context__ is None
    assert _tasks_under_me() == []


async def test_an_open_agent_block_is_entered_once() -> None:
    manager = satsuma.open_agent(Plain, model=ScriptedModel([]))
    async with manager:
        with pytest.raises(RuntimeError, match="entered only once"):
            await manager.__aenter__()
