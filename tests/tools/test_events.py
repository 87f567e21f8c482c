"""Events: order and completeness, progress from threads, and the delivery policy for
slow and stuck consumers (coalesced progress, a bounded queue, a grace for the reader once
the calls are done, what a cancelled execute still sends)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import trio

import satsuma
from satsuma import NestedEvent, ToolCallEnd, ToolCallStart, ToolProgress, ToolRunner, ToolUpdate
from satsuma.testing import EventRecorder, run_tool, tool_call
from satsuma.tools._events import MAX_QUEUED_EVENTS, ChannelEmitter


class Reports(satsuma.Tool):
    name = "reports"
    description = "Report progress and a partial result"
    parameters = {"steps": {"type": "integer", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        for step in range(args["steps"]):
            ctx.progress(f"step {step}")
            await trio.sleep(0.1)
        ctx.update("half way", details={"percent": 50})
        return "reported"


async def test_each_call_gets_start_progress_update_end_in_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    recorder = EventRecorder()
    outcome = await run_tool(Reports, {"steps": 2}, events=recorder)
    kinds = [type(event).__name__ for event in recorder.events]
    assert kinds == ["ToolCallStart", "ToolProgress", "ToolProgress", "ToolUpdate", "ToolCallEnd"]
    assert [e.text for e in recorder.of_type(ToolProgress)] == ["step 0", "step 1"]
    (update,) = recorder.of_type(ToolUpdate)
    assert update.content == "half way"
    assert update.details == {"percent": 50}
    (end,) = recorder.of_type(ToolCallEnd)
    assert end.outcome == outcome
    assert {e.tool_use_id for e in recorder.events} == {outcome.tool_use_id}
    # Progress and updates never reach the model.
    assert outcome.content == "reported"


async def test_every_call_gets_exactly_one_start_and_one_end_whatever_happens(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = trio.Event()
    event.set()
    recorder = EventRecorder()
    runner = ToolRunner([Reports])
    calls = [
        tool_call("reports", {"steps": 1}, id="ok"),
        tool_call("nope", id="unknown"),
        tool_call("reports", {"steps": "x"}, id="invalid"),
    ]
    await runner.execute(calls, events=recorder)
    await runner.execute(
        [tool_call("reports", {"steps": 1}, id="skipped")], interrupt=event, events=recorder
    )
    starts = [e.tool_use_id for e in recorder.of_type(ToolCallStart)]
    ends = {e.tool_use_id: e.outcome.error_kind for e in recorder.of_type(ToolCallEnd)}
    assert sorted(starts) == ["invalid", "ok", "skipped", "unknown"]
    assert ends == {
        "ok": None,
        "unknown": "unknown_tool",
        "invalid": "invalid_args",
        "skipped": "skipped",
    }
    start_input = {e.tool_use_id: e.input for e in recorder.of_type(ToolCallStart)}
    assert start_input["invalid"] == {"steps": "x"}


async def test_a_runner_level_sink_is_used_unless_execute_overrides_it() -> None:
    default, override = EventRecorder(), EventRecorder()
    runner = ToolRunner([Reports], events=default)
    await runner.execute([tool_call("reports", {"steps": 0})])
    await runner.execute([tool_call("reports", {"steps": 0})], events=override)
    assert len(default.events) == 3
    assert len(override.events) == 3


async def test_progress_from_a_sync_tools_thread_is_delivered() -> None:
    @satsuma.tool
    def counts(ctx: satsuma.ToolContext) -> str:
        """Count in a worker thread."""
        assert threading.current_thread() is not threading.main_thread()
        for n in range(3):
            ctx.progress(f"{n}")
        ctx.update([{"type": "text", "text": "partial"}])
        return "counted"

    recorder = EventRecorder()
    outcome = await run_tool(counts, events=recorder)
    assert outcome.content == "counted"
    assert [e.text for e in recorder.of_type(ToolProgress)] == ["0", "1", "2"]
    assert recorder.of_type(ToolUpdate)[0].content == [{"type": "text", "text": "partial"}]


async def test_progress_from_an_abandoned_thread_after_the_end_is_dropped(
    autojump_clock: trio.abc.Clock,
) -> None:
    release, done = threading.Event(), threading.Event()

    class Late(satsuma.Tool):
        name = "late"
        description = "Report after its deadline"
        timeout = 1

        def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            release.wait(10)
            ctx.progress("too late")
            done.set()
            return "ignored"

    recorder = EventRecorder()
    outcome = await run_tool(Late, events=recorder)
    assert outcome.error_kind == "timeout"
    release.set()
    assert await trio.to_thread.run_sync(done.wait, 10)
    assert recorder.of_type(ToolProgress) == []
    assert isinstance(recorder.events[-1], ToolCallEnd)


async def test_bad_progress_and_update_arguments_are_the_tools_crash() -> None:
    @satsuma.tool
    async def bad(ctx: satsuma.ToolContext) -> str:
        """Misuse progress."""
        ctx.progress(42)  # type: ignore[arg-type]
        return "no"

    outcome = await run_tool(bad, events=EventRecorder())
    assert (
        outcome.content == "Error: Tool crashed: TypeError: progress text must be a str, got: int"
    )


async def test_a_sink_callback_that_raises_is_logged_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: Any) -> None:
        raise RuntimeError("sink broke")

    with caplog.at_level(logging.ERROR, logger="satsuma.tools"):
        outcome = await run_tool(Reports, {"steps": 1}, events=broken)
    assert outcome.content == "reported"
    assert "sink broke" in caplog.text


async def test_a_slow_channel_consumer_never_stalls_a_tool(autojump_clock: trio.abc.Clock) -> None:
    send, receive = trio.open_memory_channel[Any](0)
    received: list[Any] = []

    class Chatty(satsuma.Tool):
        name = "chatty"
        description = "Report 1,000 progress lines"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            for n in range(1000):
                ctx.progress(f"line {n}")
                ctx.update(f"partial {n}")
                await trio.sleep(0.001)
            return "chatted"

    async def consume() -> None:
        async for event in receive:
            received.append(event)
            await trio.sleep(0.5)  # a very slow consumer

    runner = ToolRunner([Chatty])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        outcomes = await runner.execute(
            [tool_call("chatty", id=f"c{n}") for n in range(3)], events=send
        )
        finished_at = trio.current_time()
        await send.aclose()

    assert [o.content for o in outcomes] == ["chatted"] * 3
    assert all(o.duration == pytest.approx(1.0) for o in outcomes)  # the tools kept their pace
    # Every lifecycle event arrived, and before execute returned.
    assert sorted(e.tool_use_id for e in received if isinstance(e, ToolCallStart)) == [
        "c0",
        "c1",
        "c2",
    ]
    assert sorted(e.tool_use_id for e in received if isinstance(e, ToolCallEnd)) == [
        "c0",
        "c1",
        "c2",
    ]
    assert finished_at >= 0.5 * (len(received) - 1)
    # Progress was coalesced: far fewer than 3,000 lines, the last one always the newest.
    progress = [e for e in received if isinstance(e, ToolProgress)]
    assert len(progress) < 100
    for call_id in ("c0", "c1", "c2"):
        mine = [e.text for e in progress if e.tool_use_id == call_id]
        assert mine[-1] == "line 999"
        assert mine == sorted(mine, key=lambda text: int(text.split()[1]))
    # Per call, the order start < progress < end holds.
    for call_id in ("c0", "c1", "c2"):
        kinds = [type(e).__name__ for e in received if e.tool_use_id == call_id]
        assert kinds[0] == "ToolCallStart"
        assert kinds[-1] == "ToolCallEnd"


async def test_a_fast_channel_consumer_gets_every_event() -> None:
    send, receive = trio.open_memory_channel[Any](1000)
    await run_tool(Reports, {"steps": 5}, events=send)
    send.close()
    events = [event async for event in receive]
    assert [type(e).__name__ for e in events] == (
        ["ToolCallStart"] + ["ToolProgress"] * 5 + ["ToolUpdate", "ToolCallEnd"]
    )


async def test_a_closed_channel_drops_events_without_harm() -> None:
    send, receive = trio.open_memory_channel[Any](0)
    receive.close()
    outcome = await run_tool(Reports, {"steps": 3}, events=send)
    assert outcome.content == "reported"


def dropped_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "satsuma.tools" and record.levelno == logging.WARNING
    ]


@satsuma.tool
async def pause() -> str:
    """Take a moment."""
    await trio.sleep(0.1)
    return "paused"


@pytest.mark.parametrize(
    ("buffer", "taken_first", "dropped"),
    [
        (0, 0, 6),  # a reader that never reads
        (0, 1, 5),  # a reader that took the first event, then stopped
        (2, 0, 4),  # a buffered channel that filled up
    ],
)
async def test_a_reader_that_stopped_reading_never_blocks_execute(
    autojump_clock: trio.abc.Clock,
    caplog: pytest.LogCaptureFixture,
    buffer: int,
    taken_first: int,
    dropped: int,
) -> None:
    send, receive = trio.open_memory_channel[Any](buffer)
    taken: list[Any] = []

    async def stop_reading() -> None:
        for _ in range(taken_first):
            taken.append(await receive.receive())
        await trio.sleep_forever()  # stuck: alive, but reading nothing more

    runner = ToolRunner([pause])
    calls = [tool_call("pause", id=f"c{n}") for n in range(3)]
    # On a stuck reader execute used to wait forever; the clock jumps to this deadline.
    with caplog.at_level(logging.WARNING, logger="satsuma.tools"), trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_reading)
            await trio.testing.wait_all_tasks_blocked()
            outcomes = await runner.execute(calls, events=send)
            nursery.cancel_scope.cancel()
    assert [o.content for o in outcomes] == ["paused"] * 3
    buffered = []
    while True:
        try:
            buffered.append(receive.receive_nowait())
        except trio.WouldBlock:
            break
    # The three starts come first (trio starts the calls in no set order); whatever the
    # reader did not get was counted.
    got = taken + buffered
    assert len(got) == taken_first + buffer
    assert all(isinstance(e, ToolCallStart) for e in got)
    assert len(taken) + len(buffered) + dropped == 6
    [warning] = dropped_warnings(caplog)
    assert f"dropped {dropped} tool events" in warning
    assert "took nothing for 1 s" in warning


async def test_a_slow_reader_that_keeps_taking_events_gets_every_one_in_order(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    class Forwards(satsuma.Tool):
        name = "forwards"
        description = "Report 50 nested events at once"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            for n in range(50):
                ctx.forward(n)
            return "forwarded"

    send, receive = trio.open_memory_channel[Any](0)
    received: list[Any] = []

    async def read_slowly() -> None:
        async for event in receive:
            received.append(event)
            await trio.sleep(0.5)  # slow, but within the grace for every event

    runner = ToolRunner([Forwards])
    with caplog.at_level(logging.WARNING, logger="satsuma.tools"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_slowly)
            outcomes = await runner.execute(
                [tool_call("forwards", id=f"c{n}") for n in range(4)], events=send
            )
            await send.aclose()
    assert [o.content for o in outcomes] == ["forwarded"] * 4
    assert len(received) == 4 * 52
    for call_id in ("c0", "c1", "c2", "c3"):
        mine = [e for e in received if e.tool_use_id == call_id]
        assert isinstance(mine[0], ToolCallStart)
        assert [e.event for e in mine[1:-1] if isinstance(e, NestedEvent)] == list(range(50))
        assert isinstance(mine[-1], ToolCallEnd)
    assert dropped_warnings(caplog) == []


async def test_past_the_queue_bound_only_progress_and_nested_events_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    over = 25
    done = trio.Event()

    class Floods(satsuma.Tool):
        name = "floods"
        description = "Report more nested events than the queue holds"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            ctx.progress("first")
            for n in range(MAX_QUEUED_EVENTS + over):
                ctx.forward(n)
                ctx.progress(f"line {n}")  # replaces the waiting one: never counted
            done.set()
            return "flooded"

    send, receive = trio.open_memory_channel[Any](0)
    received: list[Any] = []

    async def read_once_it_is_done() -> None:
        await done.wait()
        async for event in receive:
            received.append(event)

    with caplog.at_level(logging.WARNING, logger="satsuma.tools"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_once_it_is_done)
            (outcome,) = await ToolRunner([Floods]).execute(
                [tool_call("floods", id="f")], events=send
            )
            await send.aclose()
    assert outcome.content == "flooded"
    # Queued: the start, one progress slot, and nested events up to the bound; the end
    # was queued past it.
    assert isinstance(received[0], ToolCallStart)
    assert (
        isinstance(received[1], ToolProgress)
        and received[1].text == f"line {MAX_QUEUED_EVENTS + over - 1}"
    )
    nested = [e.event for e in received if isinstance(e, NestedEvent)]
    assert nested == list(range(MAX_QUEUED_EVENTS - 2))
    assert isinstance(received[-1], ToolCallEnd)
    assert len(received) == MAX_QUEUED_EVENTS + 1
    [warning] = dropped_warnings(caplog)
    assert f"dropped {over + 2} tool events" in warning
    assert f"{MAX_QUEUED_EVENTS} were already waiting" in warning


def start(n: int, name: str = "t") -> ToolCallStart:
    return ToolCallStart(tool_use_id=f"c{n}", tool_name=name, input={})


def end(n: int) -> ToolCallEnd:
    outcome = satsuma.ToolOutcome(
        tool_use_id=f"c{n}", tool_name="t", content="ok", is_error=False, error_kind=None
    )
    return ToolCallEnd(tool_use_id=f"c{n}", tool_name="t", outcome=outcome)


async def test_a_cancelled_pump_still_sends_what_fits_then_drops_the_rest_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    send, receive = trio.open_memory_channel[Any](4)
    emitter = ChannelEmitter(send)
    taken: list[Any] = []
    with caplog.at_level(logging.WARNING, logger="satsuma.tools"), trio.CancelScope() as scope:
        # What execute does: the pump in a nursery, close() in a finally.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(emitter.pump)
            try:
                for n in range(6):
                    emitter.emit(start(n))  # four fill the channel, two wait
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
                await trio.sleep_forever()
            finally:
                # While the cancellation unwinds, the reader makes room and the calls
                # report their ends.
                taken += [receive.receive_nowait() for _ in range(4)]
                for n in range(6):
                    emitter.emit(end(n))
                emitter.close()
    while True:
        try:
            taken.append(receive.receive_nowait())
        except trio.WouldBlock:
            break
    assert taken == [start(n) for n in range(6)] + [end(0), end(1)]
    [warning] = dropped_warnings(caplog)
    assert "dropped 4 tool events" in warning and "cancelled" in warning
    # The emitter is spent: later events are dropped silently, even with room.
    emitter.emit(end(9))
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()
    assert len(dropped_warnings(caplog)) == 1


async def test_ends_reported_after_a_cancelled_pump_exited_still_go_in_when_there_is_room() -> None:
    send, receive = trio.open_memory_channel[Any](1)
    emitter = ChannelEmitter(send)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(emitter.pump)
            try:
                emitter.emit(start(0))
                emitter.emit(start(1))  # waits: the channel holds one
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
                await trio.sleep_forever()
            finally:
                await trio.lowlevel.cancel_shielded_checkpoint()  # the pump exits first
                assert receive.receive_nowait() == start(0)
                emitter.emit(end(0))
                emitter.emit(end(1))
                emitter.close()
    assert receive.receive_nowait() == start(1)
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()
