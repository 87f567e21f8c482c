"""satsuma.aio on a real asyncio loop: runs, streams, supervision, errors and
cancellation crossing between asyncio and trio, and misuse as clear errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

import satsuma
from satsuma import AgentCrashed, AgentUnavailable, RunEnd, ToolCallStart
from satsuma.aio import Runtime, RuntimeClosed
from satsuma.store import SQLiteStore
from satsuma.testing import FunctionModel, Reply, ScriptedModel, check_conversation

# Every wait of a test is bounded by this: a hang fails the test.
BOUND = 30


@satsuma.tool
async def wait_forever() -> str:
    """Wait until cancelled."""
    await trio.sleep_forever()
    return "never"


@satsuma.tool
async def quick(n: int) -> str:
    """Answer at once."""
    await trio.lowlevel.checkpoint()
    return f"done {n}"


class Helper(satsuma.Agent):
    name = "helper"
    tools = [wait_forever, quick]
    system = "You help."


def run_async(main: Callable[[], Awaitable[Any]]) -> Any:
    """``main`` on a fresh asyncio loop, bounded; nothing of it left running after."""

    async def bounded() -> Any:
        async with asyncio.timeout(BOUND):
            result = await main()
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return result

    return asyncio.run(bounded())


def stuck_then(*after: Any) -> ScriptedModel:
    """A model that calls wait_forever, then says each of ``after``."""
    return ScriptedModel([Reply(tool_calls=[("wait_forever", {})]), *after])


def test_runs_and_history() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            model = ScriptedModel(
                [Reply(tool_calls=[("quick", {"n": 1}), ("quick", {"n": 2})]), "Both done.", "Hi."]
            )
            agent = await rt.open_agent(Helper, model=model)
            result = await agent.run("go")
            assert (result.status, result.output) == ("completed", "Both done.")
            second = await agent.run("again")
            assert second.output == "Hi."
            check_conversation(agent.history)
            assert len(agent.history) == 6

    run_async(main)


def test_run_any_trio_function() -> None:
    async def add(a: int, b: int) -> int:
        await trio.lowlevel.checkpoint()
        return a + b

    async def main() -> None:
        async with Runtime() as rt:
            assert await rt.run(add, 2, 3) == 5
            results = await asyncio.gather(*(rt.run(add, i, i) for i in range(50)))
            assert results == [2 * i for i in range(50)]

    run_async(main)


def test_exceptions_cross_as_the_same_objects() -> None:
    raised: list[BaseException] = []

    async def fail() -> None:
        error = ValueError("bad value")
        raised.append(error)
        raise error

    async def two_failures() -> None:
        async def boom(text: str) -> None:
            raise KeyError(text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom, "a")
            nursery.start_soon(boom, "b")

    async def main() -> None:
        async with Runtime() as rt:
            with pytest.raises(ValueError) as caught:
                await rt.run(fail)
            assert caught.value is raised[0]
            with pytest.raises(ExceptionGroup) as group:
                await rt.run(two_failures)
            assert sorted(str(e) for e in group.value.exceptions) == ["'a'", "'b'"]
            assert await rt.run(trio.sleep, 0) is None  # the runtime is still fine

    run_async(main)


def test_an_agent_crash_reaches_asyncio_as_agent_crashed() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(Helper, model=ScriptedModel([RuntimeError("broken")]))
            with pytest.raises(AgentCrashed) as crashed:
                await agent.run("go")
            assert isinstance(crashed.value.cause, RuntimeError)
            with pytest.raises(AgentUnavailable):
                await agent.run("again")
            # A failed run (the API's error) is a result, as under trio.
            other = await rt.open_agent(Helper, model=ScriptedModel([satsuma.ModelError("429")]))
            failed = await other.run("go")
            assert failed.status == "failed"

    run_async(main)


def test_cancelling_the_caller_cancels_the_run_and_waits_for_its_end(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(
                Helper, model=stuck_then("Back."), store=store, agent_id="a1"
            )
            started = asyncio.Event()

            def on_event(event: object) -> None:
                if isinstance(event, ToolCallStart):
                    started.set()

            task = asyncio.create_task(agent.run("go", events=on_event))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The CancelledError came once the run had recorded its end.
            runs = await rt.run(store.runs, "a1")  # the store is trio's: reached through it
            assert [r.status for r in runs] == ["cancelled"]
            check_conversation(agent.history)
            result = await agent.run("and now?")
            assert result.output == "Back."

    run_async(main)


def test_asyncio_timeout_cancels_the_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(
                Helper, model=stuck_then("Back."), store=store, agent_id="t"
            )
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await agent.run("go")
            runs = await rt.run(store.runs, "t")
            assert [r.status for r in runs] == ["cancelled"]
            assert (await agent.run("again")).output == "Back."

    run_async(main)


def test_a_caller_cancelled_twice_still_waits_for_the_run_to_end(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(
                Helper, model=stuck_then("Back."), store=store, agent_id="c"
            )
            started = asyncio.Event()
            task = asyncio.create_task(
                agent.run("go", events=lambda e: isinstance(e, ToolCallStart) and started.set())
            )
            await started.wait()
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            runs = await rt.run(store.runs, "c")
            assert [r.status for r in runs] == ["cancelled"]
            assert (await agent.run("again")).output == "Back."

    run_async(main)


def test_a_trio_side_cancellation_reaches_asyncio_as_a_cancellation() -> None:
    async def main() -> None:
        rt = Runtime()
        async with rt:
            task = asyncio.create_task(rt.run(trio.sleep_forever))
            await asyncio.sleep(0.01)
            assert not task.done()
        # Closing the runtime cancelled the call in trio.
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    run_async(main)


def test_cancel_from_asyncio_ends_the_run_as_cancelled() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(Helper, model=stuck_then())
            started = asyncio.Event()
            task = asyncio.create_task(
                agent.run("go", events=lambda e: isinstance(e, ToolCallStart) and started.set())
            )
            await started.wait()
            await agent.cancel()
            result = await task
            assert result.status == "cancelled"

    run_async(main)


def test_stream_yields_the_events_ending_with_run_end() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            model = ScriptedModel([Reply(tool_calls=[("quick", {"n": 1})]), "Done."])
            agent = await rt.open_agent(Helper, model=model)
            events = [event async for event in agent.stream("go")]
            assert isinstance(events[-1], RunEnd)
            assert events[-1].result.output == "Done."
            assert any(isinstance(e, ToolCallStart) for e in events)

    run_async(main)


def test_leaving_a_stream_early_cancels_the_run_and_waits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(
                Helper, model=stuck_then("Back."), store=store, agent_id="s"
            )
            stream = agent.stream("go")
            async for event in stream:
                if isinstance(event, ToolCallStart):
                    break
            await stream.aclose()  # what asyncio does for a generator dropped mid-way
            runs = await rt.run(store.runs, "s")
            assert [r.status for r in runs] == ["cancelled"]
            assert (await agent.run("again")).output == "Back."

    run_async(main)


def test_a_stream_consumer_cancelled_mid_stream_cancels_the_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(
                Helper, model=stuck_then("Back."), store=store, agent_id="m"
            )

            async def consume() -> None:
                async for _ in agent.stream("go"):
                    pass

            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await consume()
            runs = await rt.run(store.runs, "m")
            assert [r.status for r in runs] == ["cancelled"]

    run_async(main)


def test_a_stream_error_crosses() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(Helper, model=ScriptedModel([RuntimeError("broken")]))
            with pytest.raises(AgentCrashed):
                async for _ in agent.stream("go"):
                    pass

    run_async(main)


def test_supervised_agents_restart_and_keep_their_conversation(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    calls = 0

    def respond(request: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("crash once")
        return Reply(text=f"answer {calls}")

    async def main() -> None:
        async with Runtime(max_restarts=5) as rt:
            agent = await rt.start_child(
                Helper, model=FunctionModel(respond), store=store, agent_id="sup"
            )
            assert (await agent.run("one")).output == "answer 1"
            with pytest.raises(AgentCrashed):
                await agent.run("two")
            third = await agent.run("three")
            assert third.output == "answer 3"
            [child] = rt.supervisor.which_children()
            assert child.state == "running"
            assert rt.supervisor.count_children()["active"] == 1
            check_conversation(agent.history)

    run_async(main)


def test_misuse_is_a_clear_error() -> None:
    async def main() -> None:
        rt = Runtime()
        with pytest.raises(RuntimeClosed, match="has not been entered"):
            _ = rt.loop
        async with rt:
            with pytest.raises(RuntimeError, match=r"already runs a satsuma\.aio Runtime"):
                async with Runtime():
                    pass
            agent = await rt.open_agent(Helper, model=ScriptedModel(["Hi."]))
            with pytest.raises(RuntimeError, match="own loop thread"):
                rt.call_from_thread(rt.run, trio.sleep, 0)
            # From another thread: a clear error, and the thread-safe way works.
            with pytest.raises(RuntimeError, match="another thread or loop"):
                await asyncio.to_thread(asyncio.run, agent.run("x"))
            result = await asyncio.to_thread(rt.call_from_thread, agent.run, "hi")
            assert result.output == "Hi."
        with pytest.raises(RuntimeClosed, match="has closed"):
            await agent.run("after")
        with pytest.raises(RuntimeClosed, match="has closed"):
            _ = agent.history
        with pytest.raises(RuntimeError, match="entered once"):
            async with rt:
                pass
        # A new runtime on the same loop is fine once the first has closed.
        async with Runtime() as again:
            assert await again.run(trio.sleep, 0) is None

    run_async(main)


async def test_entering_without_an_asyncio_loop_is_a_clear_error() -> None:
    # This test runs under trio (pytest-trio): there is no asyncio loop.
    with pytest.raises(RuntimeError, match="needs a running asyncio loop"):
        async with Runtime():
            pass


def test_a_wrong_supervisor_option_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="strategy"):
        Runtime(strategy="all_at_once")  # type: ignore[arg-type]


def test_the_loop_ending_with_the_runtime_open_closes_it_cleanly(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    tasks: set[asyncio.Task[Any]] = set()

    async def hold(ready: asyncio.Event) -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(Helper, model=stuck_then(), store=store, agent_id="h")
            started = asyncio.Event()
            run = agent.run("go", events=lambda e: isinstance(e, ToolCallStart) and started.set())
            tasks.add(asyncio.create_task(run))
            await started.wait()
            ready.set()
            await asyncio.sleep(BOUND)

    async def main() -> None:
        # Left running: asyncio.run cancels it at the end, and the runtime then closes.
        ready = asyncio.Event()
        tasks.add(asyncio.create_task(hold(ready)))
        await ready.wait()

    asyncio.run(main())

    async def check() -> list[str]:
        return [r.status for r in await store.runs("h")]

    assert trio.run(check) == ["cancelled"]


def test_keyboard_interrupt_in_trio_stops_the_loop() -> None:
    async def interrupt() -> None:
        raise KeyboardInterrupt

    async def main() -> None:
        async with Runtime() as rt:
            await rt.run(interrupt)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())


def test_an_open_agent_can_be_stopped_before_the_runtime_closes() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(Helper, model=stuck_then())
            started = asyncio.Event()
            task = asyncio.create_task(
                agent.run("go", events=lambda e: isinstance(e, ToolCallStart) and started.set())
            )
            await started.wait()
            await agent.aclose()
            assert (await task).status == "cancelled"
            with pytest.raises(AgentUnavailable):
                await agent.run("again")
            await agent.aclose()  # harmless
            supervised = await rt.start_child(Helper, model=ScriptedModel([]))
            with pytest.raises(TypeError, match="terminate_child"):
                await supervised.aclose()

    run_async(main)


def test_a_stream_dropped_after_break_is_closed_by_asyncio(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            agent = await rt.open_agent(
                Helper, model=stuck_then("Back."), store=store, agent_id="b"
            )
            async for event in agent.stream("go"):
                if isinstance(event, ToolCallStart):
                    break
            # No aclose: the generator, dropped, is closed by asyncio's finalizer hook
            # in a task of its own; the run ends cancelled once that task has run.
            # Nothing to wait on but the store (bounded by run_async's timeout).
            while [r.status for r in await rt.run(store.runs, "b")] != ["cancelled"]:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            assert (await agent.run("again")).output == "Back."

    run_async(main)


def test_a_supervisor_that_gives_up_ends_the_runtime_with_its_failure() -> None:
    async def main() -> None:
        with pytest.raises(satsuma.SupervisorFailed):
            async with Runtime(max_restarts=0) as rt:
                agent = await rt.start_child(Helper, model=ScriptedModel([RuntimeError("bug")]))
                with pytest.raises(AgentCrashed):
                    await agent.run("go")
                # The supervisor gave up: the runtime ends, and says why.
                # The runtime's end has no event of its own (bounded by run_async's timeout).
                while rt.state != "closed":  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
                with pytest.raises(RuntimeClosed) as closed:
                    await rt.run(trio.lowlevel.checkpoint)
                assert isinstance(closed.value.__cause__, satsuma.SupervisorFailed)

    run_async(main)


def test_cancelled_while_entering_stops_what_started() -> None:
    async def enter() -> None:
        async with Runtime():
            await asyncio.sleep(BOUND)

    async def main() -> None:
        task = asyncio.create_task(enter())
        await asyncio.sleep(0)  # the task is now waiting for trio to be ready
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with Runtime() as rt:  # the loop is free for a runtime again
            assert rt.state == "running"
        assert rt.state == "closed"

    run_async(main)


class Transfer(satsuma.Tool):
    name = "transfer"
    description = "Move money."
    requires_approval = True

    async def run(self, ctx: satsuma.ToolContext, amount: int) -> str:
        return f"moved {amount}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [Transfer]


def test_steer_reset_result_and_resume_with_decisions(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def main() -> None:
        async with Runtime() as rt:
            model = ScriptedModel([Reply(tool_calls=[("transfer", {"amount": 10})]), "Paid."])
            agent = await rt.open_agent(Banker, model=model, store=store, agent_id="bank")
            paused = await agent.run("Pay Bob 10")
            assert paused.status == "awaiting_approval"
            [call] = paused.pending
            done = await agent.resume(paused.run_id, decisions={call.id: satsuma.Approve()})
            assert (done.status, done.output) == ("completed", "Paid.")
            assert (await agent.result(done.run_id)).output == "Paid."
            await agent.steer("By the way: hello.")  # goes with the next run's prompt
            await agent.reset()
            assert agent.history == ()

    run_async(main)
