"""A cluster run's fewer steps (issue 36): a run's agent's lease let go with the run's end
(the run is started with the claim that takes it: test_claim_take.py), the result
carried in the end's NOTIFY, so that the caller does not read it back (one too long for
a NOTIFY is read), and the run's events written with its agent's steps."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma import StoreError
from satsuma.agents import internal
from satsuma.cluster import Cluster, Node
from satsuma.cluster import _recording as recording
from satsuma.cluster._results import decode_result, encode_result
from satsuma.store import Owner, PostgresStore
from satsuma.store import _queue as queue
from satsuma.store._claim_take import claim_and_take
from satsuma.store._end_notice import end_notice
from satsuma.store._run_events import append_events
from satsuma.testing import FunctionModel, Reply, ScriptedModel
from satsuma.tools import ToolCall


async def _register(store: PostgresStore, node_id: str) -> None:
    await queue.register_node(
        store, node_id, name=node_id, host="test", pid=1, agents=["shop"], lease_seconds=600
    )


async def _status(store: PostgresStore, agent_id: str) -> str:
    [listed] = await queue.listing(store, agent_id, (), 10)
    return listed.status


# --- the lease let go with the run's end -------------------------------------------------


async def test_a_runs_end_lets_its_agents_lease_go_in_the_same_transaction(
    postgres_dsn: str,
) -> None:
    result = encode_result(satsuma.RunResult(run_id="run_l1", output="ok", status="completed"))
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        await queue.enqueue(store, "run_l1", "shop", "lease-1", "hi")
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        owner = Owner.new()
        lease = await store.acquire_lease("lease-1", owner, seconds=600)
        # Not the node's run: nothing is written, the lease stays.
        assert not await queue.finish(
            store, run, "node-2", status="completed", result=result, error=None, release=lease
        )
        with pytest.raises(StoreError, match="already open"):
            await store.acquire_lease("lease-1", Owner.new(), seconds=30)
        assert await queue.finish(
            store, run, "node-1", status="completed", result=result, error=None, release=lease
        )
        # Free at once for the next run's agent, whose lease the first agent's own
        # release (as it closes) leaves alone.
        after = await store.acquire_lease("lease-1", Owner.new(), seconds=30)
        assert after.epoch == lease.epoch + 1
        await store.release_lease(lease)
        await store.renew_lease(after, seconds=30)  # still the agent's current lease


# --- the result in the end's NOTIFY ------------------------------------------------------


def test_an_end_notice_carries_a_result_it_can_hold_and_says_its_version() -> None:
    notice = end_notice("run_n1", '{"output": "ok"}')
    assert notice == 'run_n1 1 {"output": "ok"}'
    assert queue.read_end_notice(notice) == ("run_n1", '{"output": "ok"}')
    assert end_notice("run_n1", "é" * 4000) is None  # 8000 bytes and more
    assert end_notice("run_n1", "é" * 3990) is not None
    for other in ("run_n1 2 {}", "run_n1", "run_n1 1", "run_n1 1 ", ""):
        assert queue.read_end_notice(other) is None


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    text = request.messages[-1].text
    return "x" * 9000 if text == "long" else f"echo: {text}"


async def _notified(
    dsn: str,
    channels: list[str],
    until: list[str],
    heard: list[tuple[str, str]],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Add to ``heard`` what ``channels`` hear, up to a notification on one of ``until``
    (in a thread); started once it LISTENs."""

    def listen() -> None:
        with psycopg.connect(dsn, autocommit=True) as db:
            for channel in channels:
                db.execute(f"LISTEN {channel}")
            trio.from_thread.run_sync(task_status.started)
            for note in db.notifies(timeout=10):
                heard.append((note.channel, note.payload))
                if note.channel in until:
                    break

    await trio.to_thread.run_sync(listen)


async def test_the_caller_has_its_result_from_the_end_notice_and_reads_a_long_one(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    outcome = queue.outcome

    async def counted(store: PostgresStore, run_id: str) -> Any:
        reads.append(run_id)
        return await outcome(store, run_id)

    monkeypatch.setattr(queue, "outcome", counted)
    channels = [queue.RESULT_CHANNEL, queue.DONE_CHANNEL]
    async with (
        PostgresStore(postgres_dsn) as node_store,
        PostgresStore(postgres_dsn) as store,
        trio.open_nursery() as nursery,
    ):
        node = Node(node_store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        for prompt in ("hi", "long"):
            heard: list[tuple[str, str]] = []
            with trio.fail_after(10):
                async with trio.open_nursery() as listening:
                    await listening.start(_notified, postgres_dsn, channels, channels, heard)
                    result = await cluster.run(Echo, f"notice-{prompt}", prompt)
            assert result.status == "completed"
            _, text = await outcome(store, result.run_id) or (None, None)
            assert text is not None and decode_result(text) == result
            if prompt == "hi":
                assert result.output == "echo: hi"
                # One NOTIFY for the end: the result's.
                assert heard == [(queue.RESULT_CHANNEL, f"{result.run_id} 1 {text}")]
                assert reads == []  # the notice had it
            else:
                assert result.output == "x" * 9000
                assert heard == [(queue.DONE_CHANNEL, result.run_id)]  # too long to carry
                assert reads == [result.run_id]  # read from the queue
        nursery.cancel_scope.cancel()


async def test_an_event_stream_ends_on_the_end_notice_that_carries_the_result(
    postgres_dsn: str,
) -> None:
    """An end sends one NOTIFY (the result's): a stream hears it and ends without
    waiting for its poll (a minute here), whether its last events came with the end
    or before."""
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store, poll_interval=60.0)
        for prompt in ("hi", "long"):
            with trio.fail_after(20):
                async with cluster.stream(Echo, f"ends-{prompt}", prompt) as stream:
                    names = [type(event).__name__ async for event in stream]
            assert names[0] == "RunStart" and names[-1] == "RunEnd"
        nursery.cancel_scope.cancel()


async def test_runs_of_one_conversation_find_its_agent_free_one_after_the_other(
    postgres_dsn: str,
) -> None:
    """The lease goes with each run's end: the next run, claimable from that commit on,
    is never handed back because its agent was still held."""
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        for name in ("n1", "n2"):
            node = Node(
                store, agents=[Echo], name=name, model=FunctionModel(echo), poll_interval=0.5
            )
            await nursery.start(node.serve)
        cluster = Cluster(store)
        run_ids = [await cluster.submit(Echo, "one-after", f"n{index}") for index in range(8)]
        with trio.fail_after(20):
            results = [await cluster.result(run_id) for run_id in run_ids]
        assert [r.output for r in results] == [f"echo: n{index}" for index in range(8)]
        runs = await cluster.runs("one-after")
        assert [run.attempts for run in runs] == [1] * 8
        nursery.cancel_scope.cancel()


async def test_an_agents_release_after_its_runs_end_let_the_lease_go_sends_nothing(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = encode_result(satsuma.RunResult(run_id="run_g1", output="ok", status="completed"))
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        await queue.enqueue(store, "run_g1", "echo", "gone-1", "hi")
        got = await claim_and_take(store, "node-1", ["echo"], Owner.new(), seconds=600)
        run, taken = got.run, got.taken
        assert run is not None and taken is not None
        calls: list[object] = []
        call = store._call

        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[0])
            return await call(*args, **kwargs)

        async with internal.open_taken(Echo, taken, store=store, model=FunctionModel(echo)):
            assert await queue.finish(
                store,
                run,
                "node-1",
                status="completed",
                result=result,
                error=None,
                release=taken.lease,
            )
            taken.released = True
            monkeypatch.setattr(store, "_call", counted)
        assert calls == []  # the agent closed without a release of its own
        monkeypatch.undo()
        # Let go all the same: another owner takes the agent at the next epoch, and a
        # lease of the agent taken otherwise is released as ever.
        other = await store.acquire_lease("gone-1", Owner.new(), seconds=600)
        assert other.epoch == taken.lease.epoch + 1
        monkeypatch.setattr(store, "_call", counted)
        await store.release_lease(other)
        assert len(calls) == 1


# --- the events carried by the agent's steps ------------------------------------------


@satsuma.tool
async def pack(item: str) -> str:
    """Pack an item."""
    return f"packed {item}"


class Packer(satsuma.Agent):
    name = "packer"
    tools = [pack]


async def test_a_runs_events_ride_in_its_agents_steps_whole_and_in_order(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A two-call turn's events are written with the agent's steps (the calls' start,
    their outcomes), never in a transaction of their own; the stream has them all, in
    the order a local run yields them."""
    script: list[Reply | str] = [
        Reply(
            tool_calls=[
                ToolCall("toolu_a", "pack", {"item": "kettle"}),
                ToolCall("toolu_b", "pack", {"item": "mug"}),
            ]
        ),
        "Packed both.",
    ]
    own: list[str] = []
    append = append_events

    async def counted(store: PostgresStore, run_id: str, *args: Any, **kwargs: Any) -> bool:
        own.append(run_id)
        return await append(store, run_id, *args, **kwargs)

    monkeypatch.setattr(recording, "append_events", counted)
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        # The same run in one process, on the same store (whose writes order the calls).
        async with satsuma.open_agent(
            Packer, model=ScriptedModel(list(script)), store=store, agent_id="ride-local"
        ) as agent:
            local = [type(e).__name__ async for e in agent.stream("pack them")]
        node = Node(store, agents=[Packer], model=ScriptedModel(list(script)), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(20):
            async with cluster.stream(Packer, "ride-1", "pack them") as stream:
                remote = [type(e).__name__ async for e in stream]
        nursery.cancel_scope.cancel()
    assert own == []
    # Consecutive text deltas arrive merged (docs/cluster.md), the rest as they were.
    assert remote == [
        name for i, name in enumerate(local) if local[i - 1 : i] != [name] or name != "TextDelta"
    ]
    assert remote.count("ToolCallStart") == remote.count("ToolCallEnd") == 2
