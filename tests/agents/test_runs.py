"""Runs of an agent on scripted models: the loop, statuses, the conversation it leaves,
steering, cancellation, queueing, verifiers, the loop guard, events."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio
import trio.lowlevel

import satsuma
from satsuma import ModelError, RunEnd, RunStart, TextDelta, ToolCallEnd, ToolCallStart, TurnEnd
from satsuma.testing import FunctionModel, Reply, ScriptedModel, check_conversation, tool_call

log: list[str] = []


@satsuma.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    log.append(f"lookup {key}")
    await trio.sleep(1)
    return f"{key}=42"


@satsuma.tool
async def slow(seconds: float) -> str:
    """Sleep."""
    log.append(f"slow {seconds}")
    await trio.sleep(seconds)
    return "slept"


class Helper(satsuma.Agent):
    name = "helper"
    tools = [lookup, slow]
    system = "You help."


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    log.clear()


async def run_once(model: Any, prompt: str = "go", agent: type[satsuma.Agent] = Helper) -> Any:
    async with satsuma.open_agent(agent, model=model) as handle:
        result = await handle.run(prompt)
        return result, handle.history


async def test_a_multi_turn_run_with_parallel_tool_calls(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel(
        [
            Reply(
                text="Looking both up.",
                tool_calls=[("lookup", {"key": "a"}), ("lookup", {"key": "b"})],
            ),
            Reply(tool_calls=[("lookup", {"key": "c"})]),
            "a, b and c are all 42.",
        ]
    )
    result, history = await run_once(model, "what are a, b, c?")
    assert result.status == "completed"
    assert result.output == "a, b and c are all 42."
    assert result.iterations == 3
    assert result.error is None
    assert trio.current_time() == 2  # two tool turns of 1 s each: a and b ran in parallel
    check_conversation(history)
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    results = history[2].tool_results
    assert [r["content"] for r in results] == ["a=42", "b=42"]
    assert result.messages == history
    # The model saw the system prompt, the tools and the growing conversation.
    first, _, third = model.requests
    assert first.system == "You help."
    assert [t["name"] for t in first.tools] == ["lookup", "slow"]
    assert first.model == "claude-sonnet-5-5"
    assert len(first.messages) == 1
    assert len(third.messages) == 5


async def test_usage_is_summed_over_the_run() -> None:
    usage = satsuma.Usage(input_tokens=10, output_tokens=5, cache_read_input_tokens=3)
    model = ScriptedModel(
        [Reply(tool_calls=[("slow", {"seconds": 0})], usage=usage), Reply(text="done", usage=usage)]
    )
    turns: list[satsuma.Usage] = []
    async with satsuma.open_agent(Helper, model=model) as agent:
        result = await agent.run(
            "go", events=lambda e: turns.append(e.usage) if isinstance(e, TurnEnd) else None
        )
    assert result.usage == satsuma.Usage(
        input_tokens=20, output_tokens=10, cache_read_input_tokens=6
    )
    assert turns == [usage, usage]


async def test_max_iterations(autojump_clock: trio.abc.Clock) -> None:
    class Short(Helper):
        name = "short"
        max_iterations = 2

    model = ScriptedModel([Reply(tool_calls=[("lookup", {"key": str(n)})]) for n in range(5)])
    result, history = await run_once(model, agent=Short)
    assert result.status == "max_iterations"
    assert result.iterations == 2
    assert result.error == "max_iterations (2) reached"
    assert log == ["lookup 0", "lookup 1"]
    check_conversation(history)


async def test_deadline_exceeded_mid_tool_leaves_a_valid_history(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Timed(Helper):
        name = "timed"
        max_duration = 5

    model = ScriptedModel(
        [Reply(tool_calls=[("slow", {"seconds": 60}), ("lookup", {"key": "k"})]), "never"]
    )
    result, history = await run_once(model, agent=Timed)
    assert result.status == "deadline_exceeded"
    assert result.error == "max_duration of 5s exceeded"
    assert trio.current_time() == 5
    check_conversation(history)
    slow, lookup = history[-1].tool_results
    # Only the call still running is cancelled; the one that finished keeps its result.
    assert slow["is_error"]
    assert slow["content"] == (
        "Error: Cancelled: the run passed its max_duration before this tool finished."
    )
    assert lookup == {
        "type": "tool_result",
        "tool_use_id": lookup["tool_use_id"],
        "content": "k=42",
        "is_error": False,
    }


async def test_a_model_error_fails_the_run_and_the_agent_goes_on() -> None:
    model = ScriptedModel(
        [ModelError("prompt is too long: 250000 tokens > 200000 maximum", status=400), "recovered"]
    )
    async with satsuma.open_agent(Helper, model=model) as agent:
        failed = await agent.run("first")
        assert failed.status == "failed"
        assert failed.error == "400: prompt is too long: 250000 tokens > 200000 maximum"
        # The prompt that failed is not kept: it would make every later request too long.
        assert agent.history == ()
        again = await agent.run("second")
        assert model.requests[-1].messages[-1].text == "second"
    assert again.status == "completed"
    assert again.output == "recovered"


async def test_a_bug_in_the_model_crashes_the_agent_and_its_caller_gets_agent_crashed(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def broken(request: satsuma.ModelRequest) -> str:
        await trio.sleep(1)  # the caller is waiting for its answer by then
        raise RuntimeError("bug in my model")

    crashes: list[satsuma.AgentCrashed] = []
    ends: list[Any] = []
    handles: list[satsuma.AgentHandle] = []
    with pytest.raises(satsuma.AgentCrashed) as info:
        async with satsuma.open_agent(Helper, model=FunctionModel(broken)) as agent:
            handles.append(agent)
            try:
                await agent.run(
                    "go", events=lambda e: ends.append(e) if isinstance(e, RunEnd) else None
                )
            except satsuma.AgentCrashed as exc:
                crashes.append(exc)
                raise
    # Without a supervisor, a crash ends the open_agent block, as a crash in a nursery does,
    # and leaves it as one AgentCrashed (not in a group) whose cause is the crash.
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "bug in my model"
    (crash,) = crashes
    assert re.fullmatch(
        r"Agent helper \(helper-\d+\) crashed: RuntimeError: bug in my model", str(crash)
    )
    assert isinstance(crash.cause, RuntimeError)
    # The run still ended, with a valid history, before the agent went down.
    assert ends[0].result.status == "failed"
    assert ends[0].result.error == "the agent crashed: RuntimeError: bug in my model"
    check_conversation(handles[0].history)
    with pytest.raises(satsuma.AgentUnavailable):
        await handles[0].run("again")


async def test_an_unparseable_tool_input_fails_only_that_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    tool_call("lookup", '{"key": "a"', id="bad"),
                    tool_call("lookup", {"key": "b"}, id="good"),
                ]
            ),
            "ok",
        ]
    )
    result, history = await run_once(model)
    assert result.status == "completed"
    check_conversation(history)
    assert history[1].tool_uses[0]["input"] == {}
    results = {r["tool_use_id"]: r for r in history[2].tool_results}
    assert results["bad"]["content"].startswith(
        "Error: Invalid arguments: expected arguments to be an object, got: invalid JSON"
    )
    assert results["good"]["content"] == "b=42"


async def test_the_conversation_carries_over_between_runs() -> None:
    model = FunctionModel(lambda request: f"I have seen {len(request.messages)} messages")
    async with satsuma.open_agent(Helper, model=model) as agent:
        first = await agent.run("one")
        second = await agent.run("two")
        assert first.output == "I have seen 1 messages"
        assert second.output == "I have seen 3 messages"
        assert len(agent.history) == 4
        await agent.reset()
        assert agent.history == ()
        third = await agent.run("three")
    assert third.output == "I have seen 1 messages"


async def test_cancel_mid_model_call(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel(["too slow", "second run"], delay=10)
    async with satsuma.open_agent(Helper, model=model) as agent:
        async with trio.open_nursery() as nursery:
            results: list[satsuma.RunResult] = []

            async def run() -> None:
                results.append(await agent.run("go"))

            nursery.start_soon(run)
            await trio.sleep(3)
            await agent.cancel()
        assert results[0].status == "cancelled"
        assert results[0].iterations == 1
        # The model never answered: the prompt is taken back out of the conversation.
        assert agent.history == ()
        assert results[0].messages == ()
        assert (await agent.run("again")).output == "second run"
        check_conversation(agent.history)


async def test_cancel_mid_tool_answers_every_pending_call(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel(
        [Reply(tool_calls=[("slow", {"seconds": 100}), ("slow", {"seconds": 200})]), "after"]
    )
    before = trio.lowlevel.current_statistics().tasks_living
    async with satsuma.open_agent(Helper, model=model) as agent:
        async with trio.open_nursery() as nursery:
            results: list[satsuma.RunResult] = []

            async def run() -> None:
                results.append(await agent.run("go"))

            nursery.start_soon(run)
            await trio.sleep(50)
            await agent.cancel()
        (result,) = results
        assert result.status == "cancelled"
        check_conversation(agent.history)
        for block in agent.history[-1].tool_results:
            assert (
                block["content"]
                == "Error: Cancelled: the run was cancelled before this tool finished."
            )
        assert (await agent.run("next")).output == "after"
    assert trio.current_time() == 50
    assert trio.lowlevel.current_statistics().tasks_living == before


async def test_a_cancelled_caller_cancels_its_run(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel([Reply(tool_calls=[("slow", {"seconds": 100})]), "after"])
    async with satsuma.open_agent(Helper, model=model) as agent:
        with trio.move_on_after(10):
            await agent.run("go")
        await trio.lowlevel.checkpoint()
        check_conversation(agent.history)
        assert agent.history[-1].tool_results[0]["is_error"]
        assert (await agent.run("next")).status == "completed"


async def test_leaving_open_agent_ends_the_run_in_flight_as_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel([Reply(tool_calls=[("slow", {"seconds": 100})])])
    results: list[satsuma.RunResult] = []
    handles: list[satsuma.AgentHandle] = []
    async with trio.open_nursery() as outer:

        async def owner(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with satsuma.open_agent(Helper, model=model) as agent:
                handles.append(agent)
                task_status.started()
                await trio.sleep(10)

        async def client() -> None:
            results.append(await handles[0].run("go"))

        await outer.start(owner)
        outer.start_soon(client)
    (result,) = results
    assert result.status == "cancelled"
    check_conversation(handles[0].history)
    with pytest.raises(
        satsuma.AgentUnavailable, match="Agent helper is unavailable: it has stopped"
    ):
        await handles[0].run("too late")


async def test_runs_sent_together_queue_in_order(autojump_clock: trio.abc.Clock) -> None:
    model = FunctionModel(lambda request: f"answer to {request.messages[-1].text}")
    outputs: dict[str, str] = {}
    async with satsuma.open_agent(Helper, model=model) as agent:
        async with trio.open_nursery() as nursery:
            for n in range(5):

                async def run(n: int = n) -> None:
                    outputs[f"q{n}"] = (await agent.run(f"q{n}")).output

                nursery.start_soon(run)
                await trio.sleep(0.1)
        prompts = [m.text for m in agent.history if m.role == "user"]
    assert prompts == ["q0", "q1", "q2", "q3", "q4"]
    assert outputs == {f"q{n}": f"answer to q{n}" for n in range(5)}


async def test_steering_skips_the_calls_not_started_and_reaches_the_next_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Sequential(Helper):
        name = "sequential"
        strategy = "sequential"

    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ("lookup", {"key": "a"}),
                    ("lookup", {"key": "b"}),
                    ("lookup", {"key": "c"}),
                ]
            ),
            "ok, stopping",
        ]
    )
    async with satsuma.open_agent(Sequential, model=model) as agent:
        async with trio.open_nursery() as nursery:
            results: list[satsuma.RunResult] = []

            async def run() -> None:
                results.append(await agent.run("look up a, b, c"))

            nursery.start_soon(run)
            await trio.sleep(0.5)  # during lookup a
            await agent.steer("stop, I only need a")
        assert results[0].status == "completed"
        history = agent.history
    check_conversation(history)
    assert log == ["lookup a"]
    answer = history[2]
    contents = [r["content"] for r in answer.tool_results]
    assert contents == [
        "a=42",
        "Error: Skipped due to queued user message.",
        "Error: Skipped due to queued user message.",
    ]
    assert answer.content[-1] == {"type": "text", "text": "stop, I only need a"}
    assert model.requests[1].messages[-1] == answer


async def test_steering_while_idle_goes_with_the_next_prompt() -> None:
    model = FunctionModel(lambda request: "ok")
    async with satsuma.open_agent(Helper, model=model) as agent:
        await agent.steer("also, be brief")
        await agent.run("hello")
        first = agent.history[0]
    assert [b["text"] for b in first.content] == ["hello", "also, be brief"]


async def test_steering_during_a_final_answer_starts_another_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(["first answer", "second answer, with the correction"], delay=1)
    async with satsuma.open_agent(Helper, model=model) as agent:
        async with trio.open_nursery() as nursery:
            results: list[satsuma.RunResult] = []

            async def run() -> None:
                results.append(await agent.run("question"))

            nursery.start_soon(run)
            await trio.sleep(0.5)
            await agent.steer("correction")
        assert results[0].output == "second answer, with the correction"
        assert results[0].iterations == 2
        check_conversation(agent.history)


class CountsTurns(satsuma.Verifier):
    async def verify(self, ctx: satsuma.VerifyContext) -> satsuma.Verdict:
        if "fixed" in ctx.output:
            return satsuma.Verdict.ok()
        return satsuma.Verdict.retry("the tests still fail")


async def test_verifiers_ok_and_retry() -> None:
    class Verified(Helper):
        name = "verified"
        verifiers = [CountsTurns]

    model = ScriptedModel(["first try", "fixed it"])
    result, history = await run_once(model, agent=Verified)
    assert result.status == "completed"
    assert result.output == "fixed it"
    assert result.iterations == 2
    assert (
        history[2].text
        == "Verification failed: the tests still fail\n\nPlease fix the issues and try again."
    )
    check_conversation(history)


async def test_a_verifier_that_raises_is_a_retry_and_retries_stop_at_max_iterations() -> None:
    def broken(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
        raise ValueError("no test runner")

    class Verified(Helper):
        name = "verified"
        verifiers = [broken]
        max_iterations = 3

    result, history = await run_once(ScriptedModel(["a", "b", "c"]), agent=Verified)
    assert result.status == "max_iterations"
    assert history[2].text == (
        "Verification failed: Verifier crashed: ValueError: no test runner\n\nPlease fix the issues and try again."
    )
    check_conversation(history)


async def test_loop_guard_refuses_once_with_an_explanation_then_fails(
    autojump_clock: trio.abc.Clock,
) -> None:
    same = ("lookup", {"key": "same"})
    model = ScriptedModel([Reply(tool_calls=[same]) for _ in range(5)])
    result, history = await run_once(model)
    assert result.status == "failed"
    assert result.error == "Loop guard: the same request (lookup) came 5 turns in a row"
    assert log == ["lookup same"] * 3
    assert [history[i].tool_results[0]["content"] for i in (2, 4, 6)] == ["same=42"] * 3
    # The fourth turn is not run; the model reads why, and may change course.
    fourth = history[8].tool_results[0]
    assert fourth["is_error"]
    assert fourth["content"].startswith(
        "Error: Loop guard: this same request (lookup) came 4 turns in a row, so it was not run."
    )
    fifth = history[10].tool_results[0]
    assert fifth["content"] == (
        "Error: Loop guard: the same request (lookup) came 5 turns in a row; the run is stopped."
    )
    check_conversation(history)


async def test_the_model_that_changes_course_after_the_loop_guard_goes_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    same = ("lookup", {"key": "same"})
    model = ScriptedModel(
        [
            *(Reply(tool_calls=[same]) for _ in range(4)),
            Reply(tool_calls=[("lookup", {"key": "x"})]),
            "done",
        ]
    )
    result, history = await run_once(model)
    assert result.status == "completed"
    assert log == ["lookup same"] * 3 + ["lookup x"]
    check_conversation(history)


@pytest.mark.parametrize("count", [5, 20])
async def test_identical_calls_in_one_turn_are_not_a_loop(
    autojump_clock: trio.abc.Clock, count: int
) -> None:
    roll = ("lookup", {"key": "d6"})
    model = ScriptedModel([Reply(tool_calls=[roll] * count), "rolled"])
    result, history = await run_once(model)
    assert result.status == "completed"
    assert log == ["lookup d6"] * count
    assert [r["content"] for r in history[2].tool_results] == ["d6=42"] * count


async def test_the_same_parallel_turn_repeated_is_a_loop(autojump_clock: trio.abc.Clock) -> None:
    turn = [("lookup", {"key": "a"}), ("lookup", {"key": "b"})]
    model = ScriptedModel([Reply(tool_calls=turn) for _ in range(5)])
    result, _ = await run_once(model)
    assert result.status == "failed"
    assert sorted(log) == ["lookup a"] * 3 + ["lookup b"] * 3


async def test_loop_guard_resets_when_arguments_change(autojump_clock: trio.abc.Clock) -> None:
    calls = [("lookup", {"key": k}) for k in "aabbaabb"]
    model = ScriptedModel([*(Reply(tool_calls=[c]) for c in calls), "done"])
    result, _ = await run_once(model)
    assert result.status == "completed"


async def test_events_of_a_whole_run_in_order_and_as_json(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel(
        [Reply(text="Checking.", tool_calls=[("lookup", {"key": "a"})]), "All good."]
    )
    events: list[Any] = []
    async with satsuma.open_agent(Helper, model=model) as agent:
        result = await agent.run("check", events=events.append)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "RunStart",
        "TextDelta",
        "TurnEnd",
        "ToolCallStart",
        "ToolCallEnd",
        "TextDelta",
        "TextDelta",
        "TurnEnd",
        "RunEnd",
    ]
    assert {e.agent for e in events} == {"helper"}
    assert {e.run_id for e in events} == {result.run_id}
    assert [e.iteration for e in events] == [0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert isinstance(events[0], RunStart) and events[0].prompt == "check"
    assert (
        "".join(e.text for e in events if isinstance(e, TextDelta) and e.iteration == 2)
        == "All good."
    )
    assert isinstance(events[-1], RunEnd) and events[-1].result == result
    for event in events:
        encoded = json.dumps(satsuma.event_to_json(event))
        assert json.loads(encoded)["type"] == type(event).__name__
    end = satsuma.event_to_json(events[4])
    assert isinstance(events[4], ToolCallEnd)
    assert end["outcome"]["content"] == "a=42"


async def test_stream_yields_events_ending_with_run_end(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel([Reply(tool_calls=[("lookup", {"key": "a"})]), "done"])
    async with satsuma.open_agent(Helper, model=model) as agent:
        events = [event async for event in agent.stream("go")]
    assert isinstance(events[0], RunStart)
    assert isinstance(events[-1], RunEnd)
    assert events[-1].result.status == "completed"
    assert any(isinstance(e, ToolCallStart) for e in events)


async def test_leaving_a_stream_early_cancels_the_run(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel([Reply(tool_calls=[("slow", {"seconds": 100})]), "after"])
    async with satsuma.open_agent(Helper, model=model) as agent:
        async with trio.open_nursery():
            stream = agent.stream("go")
            async for event in stream:
                if isinstance(event, ToolCallStart):
                    break
            await stream.aclose()  # type: ignore[attr-defined]
        await trio.sleep(1)
        check_conversation(agent.history)
        assert (await agent.run("next")).output == "after"
    assert trio.current_time() < 100


async def test_a_prompt_must_be_text() -> None:
    async with satsuma.open_agent(Helper, model=ScriptedModel([])) as agent:
        with pytest.raises(ValueError, match="a prompt must be a non-empty str"):
            await agent.run("  ")


async def test_a_scripted_model_that_runs_out_fails_the_run_clearly() -> None:
    result, _ = await run_once(ScriptedModel([]))
    assert result.status == "failed"
    assert result.error == "ScriptedModel script exhausted after 0 replies"
