"""A node asks the model for a run's answers whole when nobody streams the run, and
streams them when someone does: a run submitted by ``Cluster.stream`` or
``submit(watched=True)``, or one whose events a stream opened while it was in flight
(from the node's next model call on). The model here is an ``AnthropicModel`` on the
real SDK client against the loopback Messages API server, whose requests say whether
they asked for a stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma.agents import RunEnd, TextDelta
from satsuma.cluster import Cluster, ClusterEvent, EventLog, EventStream, Node, _recording
from satsuma.models import AnthropicModel
from satsuma.serve._cluster_runs import ClusterRuns
from satsuma.store import PostgresStore, channel_for, read_events, watch_run
from satsuma.testing import MessagesServer, Reply, ScriptedModel
from satsuma.tools import ToolCall

ANSWER = "The parcel left the depot this morning and arrives on Friday."

# The tool waits on _release, so that the run stays in flight in its tool call; it sets
# _entered once it runs. Fresh for each test (``fresh_hold``).
_release = trio.Event()
_entered = trio.Event()


@pytest.fixture(autouse=True)
def fresh_hold() -> None:
    global _release, _entered
    _release, _entered = trio.Event(), trio.Event()


@satsuma.tool
async def hold() -> str:
    """Wait until the test lets the run go on."""
    _entered.set()
    await _release.wait()
    return "held"


class Parcel(satsuma.Agent):
    name = "parcel"
    tools = [hold]


def streamed(server: MessagesServer) -> list[bool]:
    """For each model request the server answered, whether it asked for a stream."""
    return [bool(body.get("stream", False)) for body in server.requests]


def deltas(events: list[ClusterEvent]) -> list[str]:
    return [event.text for event in events if isinstance(event, TextDelta)]


async def collect(stream: EventStream) -> list[ClusterEvent]:
    async with stream:
        return [event async for event in stream]


def hold_then_answer(body: dict[str, Any]) -> Reply | str:
    """A call of ``hold`` for a new prompt, the answer once its result is in."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return ANSWER
    return Reply(text="Let me check.", tool_calls=[ToolCall("toolu_1", "hold", {})])


_DEFAULT_LOG = EventLog()


@asynccontextmanager
async def cluster_of(
    postgres_dsn: str,
    script: list[Reply | str],
    *,
    serving: bool = True,
    then: Callable[[dict[str, Any]], Reply | str] | None = None,
    agent: type[satsuma.Agent] = Parcel,
    event_log: EventLog | None = _DEFAULT_LOG,
) -> AsyncIterator[tuple[Cluster, MessagesServer, Node, trio.Nursery]]:
    async with (
        MessagesServer(script, then=then) as server,
        PostgresStore(postgres_dsn) as store,
        trio.open_nursery() as nursery,
    ):
        node = Node(
            store,
            agents=[agent],
            name="n1",
            model=AnthropicModel(server.client(), jitter=False),
            poll_interval=0.5,
            event_log=event_log,
        )
        if serving:
            await nursery.start(node.serve)
        yield Cluster(store, poll_interval=0.5), server, node, nursery
        nursery.cancel_scope.cancel()


async def test_a_run_nobody_streams_asks_for_whole_answers_and_records_each_in_one_piece(
    postgres_dsn: str,
) -> None:
    async with cluster_of(postgres_dsn, [ANSWER]) as (cluster, server, _, _):
        with trio.fail_after(20):
            result = await cluster.run(Parcel, "order-1", "Where is my parcel?")
            assert result.output == ANSWER
            found = await cluster.lookup(result.run_id)
            # Streamed after its end: a replay, which does not mark it watched.
            replay = await collect(cluster.events(result.run_id))
            again = await cluster.lookup(result.run_id)
    assert streamed(server) == [False]
    assert found is not None and again is not None
    assert not found[0].watched and not again[0].watched
    assert deltas(replay) == [ANSWER]  # the whole text, one event
    assert isinstance(replay[-1], RunEnd)


async def test_a_run_submitted_by_stream_is_watched_and_its_answers_stream(
    postgres_dsn: str,
) -> None:
    async with cluster_of(postgres_dsn, [ANSWER]) as (cluster, server, _, _):
        stream = cluster.stream(Parcel, "order-2", "Where is my parcel?")
        with trio.fail_after(20):
            events = await collect(stream)
            found = await cluster.lookup(stream.run_id)
    assert streamed(server) == [True]
    assert found is not None and found[0].watched
    assert "".join(deltas(events)) == ANSWER
    assert isinstance(events[-1], RunEnd) and events[-1].result.output == ANSWER


async def test_submit_watched_streams_from_the_first_answer(postgres_dsn: str) -> None:
    async with cluster_of(postgres_dsn, [ANSWER]) as (cluster, server, _, _):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-3", "Where?", watched=True)
            result = await cluster.result(run_id)
    assert result.output == ANSWER
    assert streamed(server) == [True]


async def test_a_stream_opened_mid_run_streams_the_answers_from_the_next_model_call(
    postgres_dsn: str,
) -> None:
    script: list[Reply | str] = [
        Reply(text="Let me check.", tool_calls=[ToolCall("toolu_1", "hold", {})]),
        ANSWER,
    ]
    async with cluster_of(postgres_dsn, script) as (cluster, server, node, nursery):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-4", "Where is my parcel?")
            await _entered.wait()  # the first answer came, whole; its tool call runs
            got: list[ClusterEvent] = []

            async def watch() -> None:
                got.extend(await collect(cluster.events(run_id)))

            nursery.start_soon(watch)
            # The stream marks the run watched, and the node hears it on its channel.
            while not node._in_flight[run_id].watched:  # noqa: ASYNC110  (the node's state)
                await trio.sleep(0.01)
            found = await cluster.lookup(run_id)
            _release.set()
            result = await cluster.result(run_id)
            while not got:  # noqa: ASYNC110  (the watcher's list, filled at its end)
                await trio.sleep(0.01)
    assert found is not None and found[0].watched
    assert result.output == ANSWER
    assert streamed(server) == [False, True]
    # The first answer's text in one piece, the second as it was written.
    assert deltas(got)[0] == "Let me check."
    assert "".join(deltas(got)[1:]) == ANSWER


async def test_a_run_marked_watched_while_queued_streams_from_its_first_answer(
    postgres_dsn: str,
) -> None:
    async with cluster_of(postgres_dsn, [ANSWER], serving=False) as (
        cluster,
        server,
        node,
        nursery,
    ):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-5", "Where?")
            await watch_run(cluster.store, run_id)  # what a stream opened now does first
            found = await cluster.lookup(run_id)
            await nursery.start(node.serve)
            result = await cluster.result(run_id)
    assert found is not None and found[0].watched and found[0].status == "queued"
    assert result.output == ANSWER
    assert streamed(server) == [True]


async def test_a_watch_heard_before_the_claim_came_back_is_kept(postgres_dsn: str) -> None:
    # A watcher's UPDATE waits on the claim's row lock, then NOTIFYs: the node may hear
    # it before its claim's answer has made the run one of its own.
    async with cluster_of(postgres_dsn, [ANSWER], serving=False) as (
        cluster,
        server,
        node,
        nursery,
    ):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-6", "Where?")
            node._watch(run_id)  # heard while the run is not in flight here
            await nursery.start(node.serve)
            result = await cluster.result(run_id)
    assert result.output == ANSWER
    assert streamed(server) == [True]
    assert run_id not in node._heard_watched  # taken by the claim, not kept for ever


async def test_the_runs_heard_watched_are_bounded(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        node = Node(store, agents=[Parcel], name="n1", model=ScriptedModel([]))
        for number in range(5000):
            node._watch(f"run_{number}")
        assert len(node._heard_watched) <= 1024
        assert "run_4999" in node._heard_watched and "run_0" not in node._heard_watched


async def test_watching_an_ended_or_unknown_run_changes_nothing(postgres_dsn: str) -> None:
    async with cluster_of(postgres_dsn, [ANSWER]) as (cluster, _, _, _):
        with trio.fail_after(20):
            result = await cluster.run(Parcel, "order-7", "Where?")
            await watch_run(cluster.store, result.run_id)
            await watch_run(cluster.store, "run_nobody_knows")
            found = await cluster.lookup(result.run_id)
            assert await cluster.lookup("run_nobody_knows") is None
    assert found is not None and not found[0].watched and found[0].status == "completed"


async def test_a_served_run_on_a_cluster_is_watched(postgres_dsn: str) -> None:
    # Served runs are streamed by whoever asks (an SSE client, the console): their
    # answers stream from the first, as before.
    async with PostgresStore(postgres_dsn) as store:
        runs = ClusterRuns([Parcel], store)
        with trio.fail_after(20):
            view = await runs.start("parcel", "order-8", "Where?")
            found = await runs.cluster.lookup(view.run_id)
    assert found is not None and found[0].watched


async def test_a_runs_event_batches_notify_its_channel_only_while_it_is_watched(
    postgres_dsn: str,
) -> None:
    # Nobody waits on the channel of a run nobody streams: a NOTIFY there would only
    # wake every listening connection of the database for nothing.
    _release.set()  # each run's call of hold returns at once
    heard: dict[str, int] = {}
    async with cluster_of(postgres_dsn, [], serving=False, then=hold_then_answer) as (
        cluster,
        _,
        node,
        nursery,
    ):
        alone = await cluster.submit(Parcel, "order-9", "Where?")
        watched = await cluster.submit(Parcel, "order-10", "Where?", watched=True)
        with psycopg.connect(postgres_dsn, autocommit=True) as listener:
            for run_id in (alone, watched):
                listener.execute(f"LISTEN {channel_for(run_id)}")
            with trio.fail_after(20):
                await nursery.start(node.serve)
                for run_id in (alone, watched):
                    await cluster.result(run_id)
            notes = await trio.to_thread.run_sync(lambda: list(listener.notifies(timeout=0.5)))
        for run_id in (alone, watched):
            heard[run_id] = sum(note.channel == channel_for(run_id) for note in notes)
    assert heard[alone] == 0
    assert heard[watched] >= 1


async def recorded(store: PostgresStore, run_id: str) -> list[str]:
    """The class names of the events the run's node has written so far, read from the
    table (not through a stream, which would mark the run watched)."""
    page = await read_events(store, run_id, 0, 1000)
    assert page is not None
    return [json.loads(text)["type"] for _, text in page.events]


async def test_a_run_nobody_watches_writes_its_events_with_its_end(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its second (the time its events may wait) made long: what this test checks is
    # that no boundary and no step writes them, whatever the machine's speed.
    monkeypatch.setattr(_recording, "_UNWATCHED_SECONDS", 60.0)
    async with cluster_of(postgres_dsn, [], then=hold_then_answer) as (cluster, _, _, _):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-11", "Where?")
            await _entered.wait()
            await trio.sleep(0.3)  # three flush_intervals: a watched run's would be written
            during = await recorded(cluster.store, run_id)
            _release.set()
            await cluster.result(run_id)
            after = await recorded(cluster.store, run_id)
    assert during == []
    assert after[0] == "RunStart" and after[-1] == "TurnEnd"
    assert "ToolCallStart" in after and "ToolCallEnd" in after


async def test_a_long_run_nobody_watches_writes_its_events_every_second(
    postgres_dsn: str,
) -> None:
    async with cluster_of(postgres_dsn, [], then=hold_then_answer) as (cluster, _, _, _):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-12", "Where?")
            await _entered.wait()
            with trio.fail_after(3):
                while not await recorded(cluster.store, run_id):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            _release.set()
            await cluster.result(run_id)


async def test_a_stream_opened_mid_run_gets_what_was_recorded_at_once(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unwatched run's events made to wait a minute: the first event can come within
    # the test's deadline only if the node writes what waits when it hears of the stream.
    monkeypatch.setattr(_recording, "_UNWATCHED_SECONDS", 60.0)
    async with cluster_of(postgres_dsn, [], then=hold_then_answer) as (cluster, _, _, _):
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-13", "Where?")
            await _entered.wait()
            async with cluster.events(run_id) as stream:
                first = await stream.__anext__()
                _release.set()
                rest = [event async for event in stream]
    assert type(first).__name__ == "RunStart"
    assert isinstance(rest[-1], RunEnd) and rest[-1].result.output == ANSWER


async def test_a_stream_the_database_will_not_let_mark_the_run_watched_still_streams_it(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A watcher whose role may only read (here: a trigger refuses the change): the
    # stream goes on, at the pace of a run nobody watches, and says why once.
    async with cluster_of(postgres_dsn, [], then=hold_then_answer) as (cluster, server, _, _):
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                "CREATE FUNCTION refuse_watch() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'permission denied for table run_queue'; END $$"
            )
            admin.execute(
                "CREATE TRIGGER refuse_watch BEFORE UPDATE ON run_queue FOR EACH ROW "
                "WHEN (NEW.watched IS DISTINCT FROM OLD.watched) EXECUTE FUNCTION refuse_watch()"
            )
        with trio.fail_after(20):
            run_id = await cluster.submit(Parcel, "order-14", "Where?")
            await _entered.wait()
            async with cluster.events(run_id) as stream:
                # The first read tries to mark the run, in flight until the tool returns.
                events = [await stream.__anext__()]
                _release.set()
                events += [event async for event in stream]
            found = await cluster.lookup(run_id)
    assert isinstance(events[-1], RunEnd) and events[-1].result.output == ANSWER
    assert type(events[0]).__name__ == "RunStart"
    assert "".join(deltas(events)) == "Let me check." + ANSWER
    assert streamed(server) == [False, False]
    assert found is not None and not found[0].watched
    refusals = [r for r in caplog.records if "could not mark it watched" in r.getMessage()]
    assert len(refusals) == 1 and "permission denied" in refusals[0].getMessage()


@satsuma.tool
async def chatter(ctx: satsuma.ToolContext) -> str:
    """Report progress, many times over."""
    for number in range(120):
        ctx.progress(f"line {number}")
        await trio.sleep(0.005)
    return "done"


class Chatty(satsuma.Agent):
    name = "chatty"
    tools = [chatter]


def chatter_then_answer(body: dict[str, Any]) -> Reply | str:
    content = body["messages"][-1]["content"]
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return ANSWER
    return Reply(tool_calls=[ToolCall("toolu_1", "chatter", {})])


async def test_a_flood_of_events_is_written_before_it_fills_the_cap_in_memory(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # 120 progress lines in some 0.6 s, against a cap of 40 events: written
    # as they come (a quarter of the cap at a time), so that the table's trim, which
    # drops progress lines first, decides what is kept; waiting for the second of a run
    # nobody watches, the oldest half of what waited in memory would have gone, the
    # run's start among it.
    async with cluster_of(
        postgres_dsn,
        [],
        then=chatter_then_answer,
        agent=Chatty,
        event_log=EventLog(max_events=40),
    ) as (cluster, _, _, _):
        with trio.fail_after(20):
            result = await cluster.run(Chatty, "order-15", "Tell me everything.")
            kept = await recorded(cluster.store, result.run_id)
    assert result.output == ANSWER
    assert kept[0] == "RunStart"
    assert "ToolCallStart" in kept and "ToolCallEnd" in kept and kept[-1] == "TurnEnd"
    assert kept.count("ToolProgress") < 40  # the table's trim took progress lines first
    assert not [r for r in caplog.records if "were dropped" in r.getMessage()]
