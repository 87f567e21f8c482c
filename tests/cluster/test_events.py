"""The events of a queued run reach the process that submitted it, through the database:
in order, the same as a local run's, ending with the run however it ends, bounded by the
node's cap (with a marker where events are missing), replayed after the end, and across
a takeover by another node."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import psycopg
import pytest
import trio
import trio.testing

import satsuma
from satsuma import RunResult
from satsuma.agents import RunEnd, RunStart, TextDelta, TurnEnd
from satsuma.cluster import (
    Cluster,
    ClusterEvent,
    EventLog,
    EventsDropped,
    EventStream,
    Node,
    RunResumed,
)
from satsuma.cluster._events import decode_event, encode_event
from satsuma.cluster._recording import RunRecorder, _writers
from satsuma.cluster._results import encode_result
from satsuma.store import PostgresStore
from satsuma.store import _queue as queue
from satsuma.store._run_events import append_events, purge_ended, read_events
from satsuma.testing import FunctionModel, Reply, ScriptedModel
from satsuma.tools import ToolCall, ToolCallEnd, ToolCallStart, ToolProgress


@satsuma.tool
async def lookup(ctx: satsuma.ToolContext, order: str) -> str:
    """Look an order up."""
    ctx.progress(f"looking {order} up")
    return f"order {order} ships tomorrow"


class Shop(satsuma.Agent):
    name = "shop"
    tools = [lookup]


def shop_script() -> list[Reply | str]:
    return [
        Reply(
            text="Let me look that order up.",
            tool_calls=[ToolCall("toolu_1", "lookup", {"order": "A7"})],
        ),
        "Your order A7 ships tomorrow.",
    ]


def shape(events: Sequence[object]) -> list[str]:
    """The events' class names, consecutive text deltas counted once (a node stores them
    merged)."""
    names: list[str] = []
    for event in events:
        name = type(event).__name__
        if not (name == "TextDelta" and names and names[-1] == "TextDelta"):
            names.append(name)
    return names


def text_of(events: Sequence[object]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def collect(stream: EventStream) -> list[ClusterEvent]:
    async with stream:
        return [event async for event in stream]


def shop_node(store: PostgresStore, model: satsuma.Model, **options: object) -> Node:
    return Node(store, agents=[Shop], name="n1", model=model, poll_interval=0.5, **options)  # type: ignore[arg-type]


async def test_a_remote_runs_events_arrive_in_order_as_a_local_run_yields_them(
    postgres_dsn: str,
) -> None:
    async with satsuma.open_agent(Shop, model=ScriptedModel(shop_script())) as agent:
        local = [event async for event in agent.stream("Where is A7?")]

    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        await nursery.start(shop_node(store, ScriptedModel(shop_script())).serve)
        cluster = Cluster(store)
        stream = cluster.stream(Shop, "ticket-1", "Where is A7?")
        with trio.fail_after(20):
            remote = await collect(stream)
        nursery.cancel_scope.cancel()

    assert shape(remote) == shape(local)
    assert shape(remote) == [
        "RunStart",
        "TextDelta",
        "TurnEnd",
        "ToolCallStart",
        "ToolProgress",
        "ToolCallEnd",
        "TextDelta",
        "TurnEnd",
        "RunEnd",
    ]
    assert {e.run_id for e in remote} == {stream.run_id}
    # The same content, decoded back into the same classes.
    assert text_of(remote) == text_of(local)
    for kind in (RunStart, ToolCallStart, ToolProgress, TurnEnd):
        mine = [e for e in remote if isinstance(e, kind)]
        theirs = [e for e in local if isinstance(e, kind)]
        assert [_without_ids(e) for e in mine] == [_without_ids(e) for e in theirs]
    [end_remote] = [e for e in remote if isinstance(e, ToolCallEnd)]
    [end_local] = [e for e in local if isinstance(e, ToolCallEnd)]
    assert end_remote.outcome.content == end_local.outcome.content == "order A7 ships tomorrow"
    last = remote[-1]
    assert isinstance(last, RunEnd) and isinstance(local[-1], RunEnd)
    assert last.result.status == local[-1].result.status == "completed"
    assert last.result.output == "Your order A7 ships tomorrow."
    assert last.iteration == local[-1].iteration == 2
    # The stream ended at the end of what the node recorded.
    # Its position is past every event the node recorded (all but RunEnd, the queue's).
    assert stream.position == len(remote) - 1


def _without_ids(event: Any) -> object:
    return attrs.evolve(event, run_id="", agent="")


# --- how a run ends ------------------------------------------------------------------------------


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
    return Reply(tool_calls=[ToolCall(f"toolu_w{len(request.messages)}", "wait_forever", {})])


async def next_of(stream: EventStream, kind: type[Any]) -> list[ClusterEvent]:
    """The stream's events up to the first of ``kind``, that one included."""
    seen: list[ClusterEvent] = []
    async for event in stream:
        seen.append(event)
        if isinstance(event, kind):
            return seen
    raise AssertionError(f"the stream ended without a {kind.__name__}: {shape(seen)}")


async def test_the_stream_ends_when_the_run_fails_or_is_cancelled_queued_or_running(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        cluster = Cluster(store)
        # Cancelled while queued: no node ever ran it, and its stream still ends.
        queued = await cluster.submit(Waiter, "w1", "wait")
        assert await cluster.cancel(queued) == "cancelled"
        [end] = await collect(cluster.events(queued))
        assert isinstance(end, RunEnd)
        assert (end.agent, end.run_id, end.result.status) == ("waiter", queued, "cancelled")

        await nursery.start(
            Node(
                store,
                agents=[Waiter, Shop],
                model=FunctionModel(_failing_or_waiting),
                poll_interval=0.5,
                drain_timeout=0.1,
            ).serve
        )
        with trio.fail_after(20):
            failed = await collect(cluster.stream(Shop, "s1", "fail please"))
            assert shape(failed) == ["RunStart", "RunEnd"]
            assert isinstance(failed[-1], RunEnd)
            assert failed[-1].result.status == "failed"
            assert "overloaded" in str(failed[-1].result.error)

            async with cluster.stream(Waiter, "w1", "wait") as running:
                # Entering the stream submitted the run, before any event was read.
                assert (await cluster.runs("w1"))[-1].run_id == running.run_id
                seen = await next_of(running, ToolCallStart)
                assert await cluster.cancel(running.run_id) in ("running", "cancelled")
                seen += [event async for event in running]
        assert shape(seen) == [
            "RunStart",
            "TurnEnd",
            "ToolCallStart",
            "ToolCallEnd",
            "TurnEnd",
            "RunEnd",
        ] or shape(seen) == ["RunStart", "TurnEnd", "ToolCallStart", "ToolCallEnd", "RunEnd"]
        [call_end] = [e for e in seen if isinstance(e, ToolCallEnd)]
        assert call_end.outcome.error_kind == "cancelled"
        assert isinstance(seen[-1], RunEnd) and seen[-1].result.status == "cancelled"
        with pytest.raises(ValueError, match="no run 'nope'"):
            await collect(cluster.events("nope"))
        nursery.cancel_scope.cancel()


def _failing_or_waiting(request: satsuma.ModelRequest) -> Reply | str:
    if request.messages[-1].text == "fail please":
        raise satsuma.ModelError("the model is overloaded")
    return waiter_reply(request)


async def test_a_stream_opened_after_the_end_replays_the_run_and_one_may_start_midway(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(shop_node(store, ScriptedModel(shop_script())).serve)
            with trio.fail_after(20):
                result = await cluster.run(Shop, "ticket-2", "Where is A7?")
            nursery.cancel_scope.cancel()
        # No node runs now: the database alone answers.
        whole = await collect(cluster.events(result.run_id))
        assert shape(whole)[0] == "RunStart" and isinstance(whole[-1], RunEnd)
        assert whole[-1].result == result
        # Positions count the recorded events (all but RunEnd), one each.
        tail = cluster.events(result.run_id, start=3)
        assert await collect(tail) == whole[3:]
        assert tail.position == len(whole) - 1
        with pytest.raises(ValueError, match="start must be 0 or more"):
            cluster.events(result.run_id, start=-1)
        # An event this satsuma cannot read (a newer one's) is a marker, not an error.
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("UPDATE run_events SET event = %s WHERE seq = 1", ('{"type": "Future"}',))
        odd = await collect(cluster.events(result.run_id))
        assert isinstance(odd[1], EventsDropped) and odd[1].count == 1
        assert "could not be read back" in odd[1].reason and "Future" in odd[1].reason
        assert odd[:1] + odd[2:] == whole[:1] + whole[2:]
        # Past the retention, the events go; the run's end stays in the queue.
        assert await purge_ended(store, older_than=0.0) == 1
        assert await collect(cluster.events(result.run_id)) == [whole[-1]]


# --- bounds --------------------------------------------------------------------------------------


@satsuma.tool
async def step(n: int) -> str:
    """Take a step."""
    # One after the other, not all in one instant: a burst of more events than the cap
    # while a batch is being written is shed by the node before the database's cap
    # prunes anything, which is not what the cap's test is about.
    await trio.sleep(0.05 * n)
    return f"step {n}"


class Walker(satsuma.Agent):
    name = "walker"
    tools = [step]


def walker_script(steps: int) -> list[Reply | str]:
    return [
        Reply(
            text="Here I go, step by step.",
            tool_calls=[ToolCall(f"toolu_{n}", "step", {"n": n}) for n in range(steps)],
        ),
        "Walked.",
    ]


async def test_a_run_past_its_cap_keeps_its_newest_events_and_the_stream_says_what_it_missed(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                Node(
                    store,
                    agents=[Walker],
                    model=ScriptedModel(walker_script(15)),
                    event_log=EventLog(max_events=20),
                    poll_interval=0.5,
                ).serve
            )
            with trio.fail_after(20):
                result = await cluster.run(Walker, "walk", "Walk")
            nursery.cancel_scope.cancel()
        assert result.status == "completed"
        stream = cluster.events(result.run_id)
        events = await collect(stream)

    # RunStart, a text delta, TurnEnd, 15 starts and 15 ends, a delta, TurnEnd: 35.
    recorded = 35
    assert stream.position == recorded
    dropped = [e for e in events if isinstance(e, EventsDropped)]
    kept = [e for e in events if not isinstance(e, (EventsDropped, RunEnd))]
    assert dropped and all("cap" in e.reason for e in dropped)
    assert sum(e.count for e in dropped) + len(kept) == recorded
    assert len(kept) <= 20
    # Text deltas went first, then the oldest of the rest: the newest are all there.
    # (The last turn's text came after the pruning, and may be kept.)
    assert [e.iteration for e in kept if isinstance(e, TextDelta)] in ([], [2])
    assert [name for name in shape(kept) if name != "TextDelta"][-3:] == [
        "ToolCallEnd",
        "ToolCallEnd",
        "TurnEnd",
    ]
    assert isinstance(events[-1], RunEnd) and events[-1].result == result
    assert isinstance(events[0], EventsDropped)  # RunStart was among the oldest


async def test_events_that_cannot_be_written_are_lost_and_the_run_is_not(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("ALTER TABLE run_events RENAME TO run_events_away")
        cluster = Cluster(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(shop_node(store, ScriptedModel(shop_script())).serve)
            with trio.fail_after(20):
                result = await cluster.run(Shop, "ticket-3", "Where is A7?")
            nursery.cancel_scope.cancel()
        assert (result.status, result.output) == ("completed", "Your order A7 ships tomorrow.")
        # The events left at the end are written with it: that write fails, and the end
        # is written without them (a batch written mid-run, if one was, failed too).
        assert "events could not be written; a stream of it goes without them" in caplog.text
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("ALTER TABLE run_events_away RENAME TO run_events")
        [end] = await collect(cluster.events(result.run_id))
        assert isinstance(end, RunEnd) and end.result == result


@satsuma.tool
async def dump() -> str:
    """Dump a large report."""
    return "x" * 10_000


class Dumper(satsuma.Agent):
    name = "dumper"
    tools = [dump]


def test_event_log_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        EventLog(max_bytes=0)
    with pytest.raises(ValueError, match="flush_interval must be positive"):
        EventLog(flush_interval=0)


async def test_an_event_larger_than_max_bytes_leaves_a_marker_in_its_place(
    postgres_dsn: str,
) -> None:
    script: list[Reply | str] = [Reply(tool_calls=[ToolCall("toolu_d", "dump", {})]), "Dumped."]
    async with PostgresStore(postgres_dsn) as store:
        cluster = Cluster(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                Node(
                    store,
                    agents=[Dumper],
                    model=ScriptedModel(script),
                    event_log=EventLog(max_bytes=5_000),
                    poll_interval=0.5,
                ).serve
            )
            with trio.fail_after(20):
                result = await cluster.run(Dumper, "d1", "Dump it")
            nursery.cancel_scope.cancel()
        events = await collect(cluster.events(result.run_id))
    assert shape(events) == [
        "RunStart", "TurnEnd", "ToolCallStart", "EventsDropped", "TextDelta", "TurnEnd",
        "RunEnd",
    ]  # fmt: skip
    [dropped] = [e for e in events if isinstance(e, EventsDropped)]
    assert dropped.count == 1
    # The run's result has it whole.
    assert "x" * 10_000 in str(events[-1])


# --- takeover ------------------------------------------------------------------------------------


async def test_events_go_on_in_the_same_stream_when_another_node_takes_the_run_over(
    postgres_dsn: str,
) -> None:
    @satsuma.tool(name="wait_forever")
    async def quick_wait() -> str:
        """Wait (not long, on the second node)."""
        return "waited"

    class SecondWaiter(satsuma.Agent):
        name = "waiter"
        tools = [quick_wait]

    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        cluster = Cluster(store)
        first = Node(
            store,
            agents=[Waiter],
            name="first",
            model=FunctionModel(waiter_reply),
            drain_timeout=0.1,
            poll_interval=0.5,
        )
        with trio.fail_after(20):
            async with cluster.stream(Waiter, "w1", "wait") as stream:
                with trio.CancelScope() as first_scope:
                    async with trio.open_nursery() as inner:
                        await inner.start(first.serve)
                        before = await next_of(stream, ToolCallStart)
                        first_scope.cancel()  # drains, then hands the run back
                second = Node(
                    store,
                    agents=[SecondWaiter],
                    name="second",
                    model=FunctionModel(waiter_reply),
                    poll_interval=0.5,
                )
                await nursery.start(second.serve)
                after = [event async for event in stream]
        nursery.cancel_scope.cancel()

    events = before + after
    [resumed] = [e for e in events if isinstance(e, RunResumed)]
    assert (resumed.node, resumed.attempt, resumed.run_id) == ("second", 2, stream.run_id)
    at = events.index(resumed)
    # The first attempt's events, up to its call cut short, then the second's, once.
    assert shape(events[:at]) == ["RunStart", "TurnEnd", "ToolCallStart", "ToolCallEnd"]
    assert shape(events[at + 1 :])[0] == "RunStart"
    assert shape(events).count("RunEnd") == 1
    assert isinstance(events[-1], RunEnd)
    assert (events[-1].result.status, events[-1].result.output) == ("completed", "finished")


def _load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_module("_satsuma_node_worker_events", Path(__file__).with_name("node_worker.py"))


async def test_events_go_on_in_the_same_stream_after_the_runs_node_is_killed(
    postgres_dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    async with PostgresStore(postgres_dsn) as store:
        await store.open()  # the schema, before the node process and the client race
        cluster = Cluster(store)
        doomed = await worker.NodeProcess.start(postgres_dsn, log, tmp_path)
        before: list[ClusterEvent] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(doomed.pump)
            try:
                with trio.fail_after(30):
                    await doomed.wait_for(lambda lines: any(x.startswith("READY") for x in lines))
                    stream = cluster.stream(worker.Payer, "customer-7", "pay 10 EUR")
                    async for event in stream:
                        before.append(event)
                        if isinstance(event, ToolCallStart) and event.tool_name == "charge":
                            break
                    await doomed.wait_for(lambda lines: "CHARGED toolu_charge" in lines)
            finally:
                await doomed.kill()
        survivor = Node(
            store,
            agents=[worker.Payer],
            name="survivor",
            model=FunctionModel(worker.reply),
            context={"log": str(log)},
            lease_seconds=1.5,
            poll_interval=0.2,
        )
        async with stream, trio.open_nursery() as nursery:
            await nursery.start(survivor.serve)
            with trio.fail_after(30):
                after = [event async for event in stream]
            nursery.cancel_scope.cancel()

    assert shape(before)[0] == "RunStart"
    [resumed] = [e for e in after if isinstance(e, RunResumed)]
    assert (resumed.node, resumed.attempt) == ("survivor", 2)
    # What the dead node had written before it died stays in the stream, once.
    assert not any(isinstance(e, RunResumed) for e in before)
    assert shape(before + after).count("RunEnd") == 1
    end = after[-1]
    assert isinstance(end, RunEnd)
    assert (end.result.status, end.result.output) == ("completed", "paid")


# --- the watcher's side --------------------------------------------------------------------------


def listening(dsn: str) -> int:
    """Connections to the test's database that wait on a LISTEN (the watcher's)."""
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN%%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_cancelled_watcher_leaves_no_task_connection_or_thread_and_the_run_goes_on(
    postgres_dsn: str,
) -> None:
    async with (
        PostgresStore(postgres_dsn) as store,
        PostgresStore(postgres_dsn) as client_store,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(
            Node(
                store, agents=[Waiter], model=FunctionModel(waiter_reply), poll_interval=0.5,
                drain_timeout=0.1,
            ).serve
        )  # fmt: skip
        cluster = Cluster(client_store)
        baseline = listening(postgres_dsn)  # the node's own
        run_id = await cluster.submit(Waiter, "w1", "wait")
        with trio.fail_after(20):
            async with cluster.events(run_id) as probe:
                await next_of(probe, ToolCallStart)  # the run waits in its tool now
                assert listening(postgres_dsn) == baseline + 1
            while listening(postgres_dsn) > baseline:  # noqa: ASYNC110  (the server's view)
                await trio.sleep(0.05)
            tasks = trio.lowlevel.current_statistics().tasks_living

            reading = trio.Event()
            with trio.CancelScope() as watcher:
                stream = cluster.events(run_id)  # no async with: the cancel alone cleans up
                async for event in stream:
                    if isinstance(event, ToolCallStart):
                        reading.set()
                        watcher.cancel()  # cancels the next wait, inside the stream
            assert reading.is_set() and watcher.cancelled_caught
            assert trio.lowlevel.current_statistics().tasks_living == tasks
            assert client_store._limiter.borrowed_tokens == 0  # no store thread at work
            while listening(postgres_dsn) > baseline:  # noqa: ASYNC110  (the server's view)
                await trio.sleep(0.05)
            [run] = await cluster.runs("w1")
            assert run.status == "running"  # the run did not notice
            await cluster.cancel(run_id)
            assert (await cluster.result(run_id)).status == "cancelled"
        nursery.cancel_scope.cancel()


# --- the node's recorder -------------------------------------------------------------------------


async def _register(store: PostgresStore, node_id: str) -> None:
    await queue.register_node(
        store, node_id, name=node_id, host="test", pid=1, agents=["shop"], lease_seconds=600
    )


async def test_a_batch_cut_short_before_it_went_out_is_written_with_the_runs_end(
    postgres_dsn: str,
) -> None:
    # A pool of 4: the node writes one batch at a time.
    async with PostgresStore(postgres_dsn, pool_size=4) as store:
        await queue.enqueue(store, "run_cut", "shop", "cut", "hi")
        await _register(store, "node-1")  # a node claims only while it has its row
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        recorder = RunRecorder(store, run, "node-1", "n1", EventLog())
        writers = _writers(store)
        leave = trio.Event()

        async def record() -> None:
            async with recorder.recording():
                recorder(RunStart(agent="shop", run_id="run_cut", iteration=0, prompt="hi"))
                recorder(TextDelta(agent="shop", run_id="run_cut", iteration=1, text="Hel"))
                recorder(TextDelta(agent="shop", run_id="run_cut", iteration=1, text="lo"))
                await leave.wait()

        assert writers.total_tokens == 1
        await writers.acquire()  # every batch waits for this now
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(record)
                while writers.statistics().tasks_waiting == 0:  # noqa: ASYNC110  (the flusher, with its batch)
                    await trio.sleep(0.01)
                leave.set()  # the run ends: the flusher is cancelled while it waits
                await trio.testing.wait_all_tasks_blocked()
                writers.release()
        # The batch was put back; it waits for the run's end, written with it.
        before = await read_events(store, "run_cut", 0, 10)
        assert before is not None and before.events == ()
        last = recorder.last_events()
        assert last is not None and recorder.last_events() is None  # taken once
        result = encode_result(RunResult(run_id="run_cut", output="Hello", status="completed"))
        assert await queue.finish(
            store, run, "node-1", status="completed", result=result, error=None, events=last
        )
        page = await read_events(store, "run_cut", 0, 10)
    assert page is not None and page.ended
    assert [decode_event(text) for _, text in page.events] == [
        RunStart(agent="shop", run_id="run_cut", iteration=0, prompt="hi"),
        TextDelta(agent="shop", run_id="run_cut", iteration=1, text="Hello"),
    ]


async def test_only_the_node_that_holds_a_run_may_write_its_events(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await queue.enqueue(store, "run_f", "shop", "fenced", "hi")
        await _register(store, "node-1")  # a node claims only while it has its row
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        event = encode_event(RunStart(agent="shop", run_id="run_f", iteration=0, prompt="hi"))
        limits = {"max_events": 10, "max_bytes": 10_000}
        assert not await append_events(store, "run_f", "node-2", [(2, event)], **limits)
        assert await append_events(store, "run_f", "node-1", [(2, event)], **limits)
        # Handed back (as when node-1 was counted dead): node-1 writes nothing more.
        assert await queue.hand_back(store, run, "node-1", agent_record="keep")
        assert not await append_events(store, "run_f", "node-1", [3, (2, event)], **limits)
        page = await read_events(store, "run_f", 0, 10)
    assert page is not None
    assert (page.events, page.next_seq) == (((0, event),), 1)


# --- the database restarting under a stream ------------------------------------------------------

servers = _load_module(
    "_satsuma_store_servers_events", Path(__file__).parent.parent / "store" / "conftest.py"
)


@pytest.fixture
def own_server() -> Iterator[Any]:
    """A PostgreSQL server for this test alone (it is stopped and started again)."""
    server = servers.PostgresServer.embedded()
    try:
        yield server
    finally:
        server.close()


async def test_a_stream_waits_through_a_database_restart_and_goes_on(
    own_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = own_server.dsn(await trio.to_thread.run_sync(own_server.create_database))
    limits = {"max_events": 100, "max_bytes": 100_000}
    start = RunStart(agent="shop", run_id="run_r", iteration=0, prompt="hi")
    turn = TurnEnd(
        agent="shop", run_id="run_r", iteration=1, usage=satsuma.Usage(), stop_reason="end_turn"
    )
    got: list[ClusterEvent] = []
    async with PostgresStore(dsn) as store:
        cluster = Cluster(store, poll_interval=0.2)
        await queue.enqueue(store, "run_r", "shop", "r1", "hi")
        await _register(store, "node-1")  # a node claims only while it has its row
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        assert await append_events(store, "run_r", "node-1", [(2, encode_event(start))], **limits)
        with trio.fail_after(60):
            async with cluster.events("run_r") as stream, trio.open_nursery() as nursery:
                assert await anext(stream) == start

                async def read_on() -> None:
                    got.extend([event async for event in stream])

                nursery.start_soon(read_on)
                await trio.to_thread.run_sync(own_server.stop)
                while "lost the database while streaming run run_r" not in caplog.text:  # noqa: ASYNC110  (a log)
                    await trio.sleep(0.05)
                await trio.to_thread.run_sync(own_server.start)
                # The node goes on, and the run ends.
                assert await append_events(
                    store, "run_r", "node-1", [(2, encode_event(turn))], **limits
                )
                result = RunResult(run_id="run_r", output="done", status="completed")
                assert await queue.finish(
                    store,
                    run,
                    "node-1",
                    status="completed",
                    result=encode_result(result),
                    error=None,
                )
    assert got[0] == turn
    assert isinstance(got[1], RunEnd) and got[1].result.output == "done"
    assert len(got) == 2
    assert "the database is back: streaming run run_r again" in caplog.text


async def test_a_runs_start_and_a_turns_end_wait_for_the_next_boundary(postgres_dsn: str) -> None:
    # flush_interval of an hour: only a boundary writes.
    async with PostgresStore(postgres_dsn) as store:
        await queue.enqueue(store, "run_b", "shop", "boundary", "hi")
        await _register(store, "node-1")
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        recorder = RunRecorder(store, run, "node-1", "n1", EventLog(flush_interval=3600))
        start = RunStart(agent="shop", run_id="run_b", iteration=0, prompt="hi")
        turn = TurnEnd(
            agent="shop", run_id="run_b", iteration=1, usage=satsuma.Usage(), stop_reason="tool_use"
        )
        call = ToolCallStart(
            agent="shop",
            run_id="run_b",
            iteration=1,
            tool_use_id="t1",
            tool_name="lookup",
            input={},
        )
        with trio.fail_after(20):
            async with recorder.recording():
                recorder(start)
                recorder(turn)
                await trio.testing.wait_all_tasks_blocked()  # the flusher waits on
                page = await read_events(store, "run_b", 0, 10)
                assert page is not None and page.events == ()
                recorder(call)  # a boundary: written with what waited
                while not page.events:
                    await trio.sleep(0.01)
                    page = await read_events(store, "run_b", 0, 10)
                    assert page is not None
    assert [decode_event(text) for _, text in page.events] == [start, turn, call]
