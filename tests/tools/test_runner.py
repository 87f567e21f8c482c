"""The ToolRunner: order, isolation, deadlines (async and blocking sync tools),
cancellation of the whole execute, what is never captured, calls and context."""

from __future__ import annotations

import threading
from typing import Any

import anthropic.types
import pytest
import trio

import satsuma
from satsuma import ToolCall, ToolRunner
from satsuma.testing import tool_call


class Sleep(satsuma.Tool):
    name = "sleep"
    description = "Sleep, then say how long"
    parameters = {"seconds": {"type": "number", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(args["seconds"])
        return f"slept {args['seconds']}"


class Crash(satsuma.Tool):
    name = "crash"
    description = "Raise"

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(0.5)
        raise RuntimeError("boom")


class Garbage(satsuma.Tool):
    name = "garbage"
    description = "Return something that is not a result"

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return object()


class Hang(satsuma.Tool):
    name = "hang"
    description = "Never return"
    timeout = 3

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep_forever()


async def test_outcomes_come_in_call_order_whatever_order_calls_end(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner = ToolRunner([Sleep])
    calls = [tool_call("sleep", {"seconds": s}, id=f"c{s}") for s in (3, 1, 2, 0)]
    outcomes = await runner.execute(calls)
    assert [o.tool_use_id for o in outcomes] == ["c3", "c1", "c2", "c0"]
    assert [o.content for o in outcomes] == ["slept 3", "slept 1", "slept 2", "slept 0"]
    assert trio.current_time() == 3  # in parallel: the longest, not the sum


async def test_a_crash_a_timeout_and_garbage_never_touch_their_siblings(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner = ToolRunner([Sleep, Crash, Garbage, Hang])
    outcomes = await runner.execute(
        [
            tool_call("sleep", {"seconds": 1}),
            tool_call("crash"),
            tool_call("hang"),
            tool_call("garbage"),
            tool_call("sleep", {"seconds": 5}),
        ]
    )
    assert [o.error_kind for o in outcomes] == [None, "crashed", "timeout", "invalid_result", None]
    assert outcomes[0].content == "slept 1"
    assert outcomes[4].content == "slept 5"
    assert outcomes[4].duration == 5


async def test_the_tools_own_timeout_wins_over_the_runners(autojump_clock: trio.abc.Clock) -> None:
    runner = ToolRunner([Hang, Sleep], timeout=10)
    hang, sleep = await runner.execute([tool_call("hang"), tool_call("sleep", {"seconds": 60})])
    assert hang.content == "Error: Tool timed out after 3s"
    assert sleep.content == "Error: Tool timed out after 10s"
    assert sleep.duration == 10


async def test_no_runner_timeout_means_no_deadline(autojump_clock: trio.abc.Clock) -> None:
    runner = ToolRunner([Sleep], timeout=None)
    (outcome,) = await runner.execute([tool_call("sleep", {"seconds": 10_000})])
    assert outcome.content == "slept 10000"


async def test_a_tool_that_swallows_its_cancellation_is_still_timed_out(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Stubborn(satsuma.Tool):
        name = "stubborn"
        description = "Catches Cancelled (a bug) and returns"
        timeout = 2

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                return "I finished anyway"

    (outcome,) = await ToolRunner([Stubborn]).execute([tool_call("stubborn")])
    assert outcome.error_kind == "timeout"


class BlockingSync(satsuma.Tool):
    """A sync tool that blocks its thread until released (or, if polite, until cancelled)."""

    name = "blocking"
    description = "Block a worker thread"
    timeout = 2
    release = threading.Event()
    exited = threading.Event()
    polite = False

    def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        try:
            while not self.release.wait(0.01):
                if self.polite and ctx.cancelled:
                    return "stopped early"
            return "released"
        finally:
            self.exited.set()


async def test_a_blocking_sync_tool_times_out_at_its_deadline_and_is_abandoned(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Blocking(BlockingSync):
        release = threading.Event()
        exited = threading.Event()

    (outcome,) = await ToolRunner([Blocking]).execute([tool_call("blocking")])
    # The runner did not wait for the thread: it is still blocked now.
    assert outcome.content == "Error: Tool timed out after 2s"
    assert outcome.duration == 2
    assert not Blocking.exited.is_set()
    Blocking.release.set()
    assert await trio.to_thread.run_sync(Blocking.exited.wait, 10)


async def test_a_sync_tool_can_poll_ctx_cancelled_to_stop_after_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Polite(BlockingSync):
        release = threading.Event()
        exited = threading.Event()
        polite = True

    (outcome,) = await ToolRunner([Polite]).execute([tool_call("blocking")])
    assert outcome.error_kind == "timeout"
    # Without anyone releasing it, the thread sees ctx.cancelled and returns by itself.
    assert await trio.to_thread.run_sync(Polite.exited.wait, 10)


async def test_sync_tools_run_in_worker_threads_in_parallel() -> None:
    # Real clock: the autojump clock would see threads as idle and jump to the deadline.
    seen: set[int] = set()
    barrier = threading.Barrier(3, timeout=10)

    @satsuma.tool
    def meet(who: str) -> str:
        """Wait for the two others."""
        seen.add(threading.get_ident())
        barrier.wait()
        return f"{who} met"

    outcomes = await ToolRunner([meet]).execute([tool_call("meet", {"who": w}) for w in "abc"])
    assert [o.content for o in outcomes] == ["a met", "b met", "c met"]
    assert threading.get_ident() not in seen
    assert len(seen) == 3


async def test_cancelling_execute_cancels_every_call_and_leaves_no_task(
    autojump_clock: trio.abc.Clock,
) -> None:
    started: list[str] = []
    ended: list[str] = []

    @satsuma.tool
    async def slow(tag: str) -> str:
        """Take a long time."""
        started.append(tag)
        try:
            await trio.sleep(100)
        finally:
            ended.append(tag)
        return tag

    runner = ToolRunner([slow])
    before = trio.lowlevel.current_statistics().tasks_living
    result: list[Any] | None = None
    with trio.move_on_after(5) as scope:
        result = await runner.execute([tool_call("slow", {"tag": t}) for t in "abcd"])
    assert scope.cancelled_caught
    assert result is None  # no partial list
    assert sorted(started) == sorted(ended) == ["a", "b", "c", "d"]
    assert trio.lowlevel.current_statistics().tasks_living == before
    assert trio.current_time() == 5


async def test_cancelling_execute_is_not_turned_into_outcomes_even_for_sequential(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner = ToolRunner([Sleep], strategy="sequential")
    with trio.move_on_after(1.5) as scope:
        await runner.execute([tool_call("sleep", {"seconds": 1}) for _ in range(3)])
        pytest.fail("execute returned after its caller was cancelled")
    assert scope.cancelled_caught


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
async def test_keyboard_interrupt_and_system_exit_propagate(exc_type: type[BaseException]) -> None:
    class Exits(satsuma.Tool):
        name = "exits"
        description = "Raise a BaseException"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            raise exc_type()

    with pytest.raises(exc_type):
        await ToolRunner([Exits]).execute([tool_call("exits")])

    # Among siblings (a nursery), it still propagates rather than becoming an outcome.
    with pytest.raises(BaseException) as info:
        await ToolRunner([Exits, Sleep]).execute(
            [tool_call("exits"), tool_call("sleep", {"seconds": 0})]
        )
    if isinstance(info.value, BaseExceptionGroup):
        assert info.value.subgroup(exc_type) is not None
    else:
        assert isinstance(info.value, exc_type)


async def test_calls_may_be_toolcalls_dicts_or_sdk_tool_use_blocks() -> None:
    block = anthropic.types.ToolUseBlock(
        id="toolu_sdk", name="sleep", input={"seconds": 0}, type="tool_use"
    )
    outcomes = await ToolRunner([Sleep]).execute(
        [
            ToolCall("toolu_a", "sleep", {"seconds": 0}),
            {"id": "toolu_b", "name": "sleep", "input": {"seconds": 0}},
            block,
        ]
    )
    assert [o.tool_use_id for o in outcomes] == ["toolu_a", "toolu_b", "toolu_sdk"]
    assert all(o.content == "slept 0" for o in outcomes)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (42, r"calls\[0\] must be a ToolCall"),
        ({"name": "sleep"}, r"calls\[0\] must be a ToolCall"),
        ({"id": "", "name": "sleep"}, r"calls\[0\] has no tool_use id"),
    ],
)
async def test_malformed_calls_are_rejected_before_anything_runs(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        await ToolRunner([Sleep]).execute([call])


async def test_an_empty_turn_returns_an_empty_list() -> None:
    assert await ToolRunner([Sleep]).execute([]) == []


async def test_context_fills_working_dir_capabilities_and_extra(tmp_path: Any) -> None:
    seen: dict[str, Any] = {}

    @satsuma.tool
    async def look(ctx: satsuma.ToolContext) -> str:
        """Look at the context."""
        seen.update(
            working_dir=ctx.working_dir,
            capabilities=ctx.capabilities,
            extra=dict(ctx.extra),
            id=ctx.tool_use_id,
            name=ctx.tool_name,
            agent=ctx.agent,
        )
        return "looked"

    await ToolRunner([look]).execute(
        [tool_call("look", id="c1")],
        {"working_dir": str(tmp_path), "capabilities": ["read", "shell"], "user": "ada"},
        agent="the-agent",
    )
    assert seen == {
        "working_dir": tmp_path,
        "capabilities": frozenset({"read", "shell"}),
        "extra": {"user": "ada"},
        "id": "c1",
        "name": "look",
        "agent": "the-agent",
    }


async def test_default_working_dir_is_the_current_directory(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    seen: list[Any] = []

    @satsuma.tool
    async def where(ctx: satsuma.ToolContext) -> str:
        """Where am I."""
        seen.append(ctx.working_dir)
        return "here"

    await ToolRunner([where]).execute([tool_call("where")])
    assert seen == [tmp_path]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ("dir", "context must be a mapping"),
        ({"working_dir": 3}, r"context\['working_dir'\] must be a path"),
        ({"capabilities": "read"}, r"context\['capabilities'\] must be a set or list"),
        ({"capabilities": [1]}, r"context\['capabilities'\] must hold strings"),
    ],
)
async def test_bad_context_is_a_clear_type_error(context: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        await ToolRunner([Sleep]).execute([tool_call("sleep", {"seconds": 0})], context)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number or None"),
        ({"timeout": "5"}, "timeout must be a positive number or None"),
        ({"max_concurrency": 0}, "max_concurrency must be an integer >= 1"),
        ({"strategy": "random"}, "unknown strategy 'random'"),
        ({"strategy": 3}, "strategy must be 'parallel', 'sequential' or Batched"),
        ({"hook_timeout": None}, "hook_timeout must be a positive number"),
        ({"max_result_chars": 10}, "max_result_chars must be an integer >= 100"),
        ({"max_threads": 0}, "max_threads must be an integer >= 1"),
    ],
)
def test_bad_runner_options_are_clear_value_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ToolRunner([Sleep], **options)


def test_bad_event_sink_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"events must be a trio\.MemorySendChannel or a callable"):
        ToolRunner([Sleep], events=42)  # type: ignore[arg-type]


def test_runner_exposes_definitions_and_schemas() -> None:
    runner = ToolRunner([Sleep, Crash])
    assert [d.name for d in runner.definitions] == ["sleep", "crash"]
    assert runner.schemas() == [Sleep.schema(), Crash.schema()]


async def test_ctx_cancelled_is_readable_from_a_worker_thread_before_the_deadline() -> None:
    # Real clock: the sync tool polls several times while the call is still live.
    readings: list[bool] = []

    @satsuma.tool
    def poll(ctx: satsuma.ToolContext) -> str:
        """Poll the cancellation flag from a worker thread."""
        for _ in range(3):
            readings.append(ctx.cancelled)
        return "polled"

    (outcome,) = await ToolRunner([poll]).execute([tool_call("poll")])
    assert outcome.content == "polled"
    assert readings == [False, False, False]


async def test_ctx_cancelled_on_the_trio_thread_follows_the_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[bool] = []

    class Watch(satsuma.Tool):
        name = "watch"
        description = "Look at ctx.cancelled before and after the deadline"
        timeout = 1

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            seen.append(ctx.cancelled)
            try:
                await trio.sleep(5)
            finally:
                seen.append(ctx.cancelled)

    (outcome,) = await ToolRunner([Watch]).execute([tool_call("watch")])
    assert outcome.error_kind == "timeout"
    assert seen == [False, True]
