"""Events: order and completeness, progress from threads, and the delivery policy for
slow consumers (coalesced progress, lifecycle events never dropped)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import trio

import satsuma
from satsuma import ToolCallEnd, ToolCallStart, ToolProgress, ToolRunner, ToolUpdate
from satsuma.testing import EventRecorder, run_tool, tool_call


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
