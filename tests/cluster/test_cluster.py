"""The cluster's core on a real PostgreSQL server: a client and nodes in one process
(trio tasks), and a node in another process killed mid-tool (test_failover.py)."""

from __future__ import annotations

import uuid
from collections import Counter

import attrs
import pytest
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply, check_conversation
from satsuma.tools import ToolCall


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


async def test_a_submitted_run_is_run_by_a_node_and_its_result_reaches_the_client(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Echo], name="n1", model=FunctionModel(echo), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(10):
            result = await cluster.run(Echo, "ticket-42", "Where is my order?")
        assert result.status == "completed"
        assert result.output == "echo: Where is my order?"
        [queued] = await cluster.runs("ticket-42")
        assert queued.run_id == result.run_id
        assert queued.status == "completed"
        assert queued.attempts == 1
        # The agent's own records know the run by the same id.
        [record] = await store.runs("ticket-42")
        assert record.run_id == result.run_id
        assert record.status == "completed"
        nursery.cancel_scope.cancel()


# --- two nodes, one conversation at a time ---------------------------------------------------


@attrs.define
class Tracker:
    """What the ``work`` tool saw: each call's (agent_id, prompt, node), and how many
    calls of one agent_id ran at once at most."""

    running: Counter[str] = attrs.Factory(Counter)
    most: int = 0
    calls: list[tuple[str, str, str]] = attrs.Factory(list)


tracker = Tracker()


@satsuma.tool
async def work(ctx: satsuma.ToolContext, prompt: str) -> str:
    """Do the work a prompt asks for (slowly)."""
    assert isinstance(ctx.agent, satsuma.AgentHandle)
    agent_id = ctx.agent.agent_id
    tracker.running[agent_id] += 1
    tracker.most = max(tracker.most, tracker.running[agent_id])
    tracker.calls.append((agent_id, prompt, ctx.extra["node"]))
    try:
        await trio.sleep(0.05)
    finally:
        tracker.running[agent_id] -= 1
    return f"did {prompt}"


class Worker(satsuma.Agent):
    name = "worker"
    tools = [work]


def worker_reply(request: satsuma.ModelRequest) -> Reply | str:
    last = request.messages[-1]
    if any(block.get("type") == "tool_result" for block in last.content):
        return "done"
    return Reply(
        tool_calls=[ToolCall(f"toolu_{uuid.uuid4().hex[:8]}", "work", {"prompt": last.text})]
    )


async def test_two_nodes_never_run_one_conversation_at_once_and_keep_its_order(
    postgres_dsn: str,
) -> None:
    global tracker
    tracker = Tracker()
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        for name in ("n1", "n2"):
            node = Node(
                store,
                agents=[Worker],
                name=name,
                model=FunctionModel(worker_reply),
                context={"node": name},
                poll_interval=0.5,
            )
            await nursery.start(node.serve)
        cluster = Cluster(store)
        submitted = [
            (agent_id, await cluster.submit(Worker, agent_id, f"{agent_id}-{n}"))
            for n in range(4)
            for agent_id in ("a", "b", "c")
        ]
        with trio.fail_after(20):
            results = [await cluster.result(run_id) for _, run_id in submitted]
        nursery.cancel_scope.cancel()
    assert [r.status for r in results] == ["completed"] * len(submitted)
    assert tracker.most == 1
    for agent_id in ("a", "b", "c"):
        done = [prompt for (a, prompt, _) in tracker.calls if a == agent_id]
        assert done == [f"{agent_id}-{n}" for n in range(4)]
    assert {node for (_, _, node) in tracker.calls} == {"n1", "n2"}


# --- cancelling --------------------------------------------------------------------------------


@satsuma.tool
async def wait_forever() -> str:
    """Wait until cancelled."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


class Waiter(satsuma.Agent):
    name = "waiter"
    tools = [wait_forever]


def waiter_reply(request: satsuma.ModelRequest) -> Reply | str:
    last = request.messages[-1]
    if any(block.get("type") == "tool_result" for block in last.content):
        return "finished"
    return Reply(tool_calls=[ToolCall(f"toolu_{uuid.uuid4().hex[:8]}", "wait_forever", {})])


async def test_cancel_ends_a_queued_run_at_once_and_asks_a_node_to_end_a_running_one(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        cluster = Cluster(store)
        queued = await cluster.submit(Waiter, "w1", "wait")
        assert await cluster.cancel(queued) == "cancelled"
        result = await cluster.result(queued, timeout=5)
        assert (result.status, result.error) == ("cancelled", "cancelled before a node started it")
        with pytest.raises(ValueError, match="no run 'nope'"):
            await cluster.cancel("nope")

        node = Node(
            store,
            agents=[Waiter],
            model=FunctionModel(waiter_reply),
            poll_interval=0.5,
            drain_timeout=0.1,  # its last run waits for ever: handed back when the test ends
        )
        await nursery.start(node.serve)
        running = await cluster.submit(Waiter, "w1", "wait")
        with trio.fail_after(10):
            while not (await cluster.runs("w1", status="running")):  # noqa: ASYNC110  (the state is in the database)
                await trio.sleep(0.05)
            await trio.sleep(0.2)  # into the tool
            assert await cluster.cancel(running) == "running"
            result = await cluster.result(running)
        assert result.status == "cancelled"
        [run] = await cluster.runs("w1", status="cancelled", limit=1)
        assert run.run_id == running
        with pytest.raises(TimeoutError, match=r"had not ended after 0\.1s"):
            await cluster.result(await cluster.submit(Waiter, "w2", "wait"), timeout=0.1)
        nursery.cancel_scope.cancel()


# --- draining --------------------------------------------------------------------------------


@pytest.mark.parametrize("stopped_in", ["tool", "model"])
async def test_a_stopped_node_hands_its_run_back_and_another_node_completes_it(
    postgres_dsn: str, stopped_in: str
) -> None:
    entered = trio.Event()

    async def first_node_reply(request: satsuma.ModelRequest) -> Reply | str:
        if stopped_in == "model":
            entered.set()
            await trio.sleep_forever()
        return waiter_reply(request)

    @satsuma.tool(name="wait_forever")
    async def signalling_wait() -> str:
        """Wait until cancelled."""
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @satsuma.tool(name="wait_forever")
    async def quick_wait() -> str:
        """Wait (not long, on the second node)."""
        return "waited"

    class FirstWaiter(satsuma.Agent):
        name = "waiter"
        tools = [signalling_wait]

    class SecondWaiter(satsuma.Agent):
        name = "waiter"
        tools = [quick_wait]

    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        cluster = Cluster(store)
        run_id = await cluster.submit(Waiter, "w1", "wait")
        first = Node(
            store,
            agents=[FirstWaiter],
            name="first",
            model=FunctionModel(first_node_reply),
            drain_timeout=0.3,
            poll_interval=0.5,
        )
        with trio.fail_after(15):
            with trio.CancelScope() as first_scope:
                async with trio.open_nursery() as inner:
                    await inner.start(first.serve)
                    await entered.wait()
                    first_scope.cancel()  # the node drains: 0.3 s, then hands the run back
            [handed] = await cluster.runs("w1")
            assert (handed.status, handed.node_id, handed.attempts) == ("queued", None, 1)

            second = Node(
                store, agents=[SecondWaiter], name="second", model=FunctionModel(waiter_reply)
            )
            await nursery.start(second.serve)
            result = await cluster.result(run_id)
        assert result.status == "completed"
        assert result.output == "finished"
        [run] = await cluster.runs("w1")
        assert (run.status, run.attempts) == ("completed", 2)
        history = await store.load_messages("w1")
        check_conversation(history)
        # One prompt: the second node resumed the run (stopped in a tool: the call
        # answered "cancelled", and not run again) or started it afresh (stopped before
        # any answer, the prompt taken back out).
        prompts = [m for m in history if m.role == "user" and m.text == "wait"]
        assert len(prompts) == 1
        results = [
            block["content"]
            for m in history
            for block in m.content
            if block.get("type") == "tool_result"
        ]
        if stopped_in == "tool":
            assert len(results) == 1 and "cancel" in str(results[0]).lower()
        else:
            assert results == ["waited"]
        [record] = await store.runs("w1")
        assert (record.run_id, record.status) == (run_id, "completed")
        nursery.cancel_scope.cancel()
