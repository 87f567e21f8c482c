"""Supervisor: OTP strategies and restart types, intensity and escalation, backoff,
dynamic children, names across restarts, calls during a restart and at a crash,
ordering, shutdown timeouts. All on trio's virtual clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

import satsuma
from satsuma import (
    Backoff,
    ChildCrashed,
    ChildRestarted,
    ChildSpec,
    ChildStarted,
    Supervisor,
    SupervisorFailed,
    SupervisorGaveUp,
)
from satsuma.testing import FunctionModel, Reply, check_conversation

journal: list[str] = []


class Worker:
    """A service child that records its life, and can be told to crash or return."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.starts = 0
        self.crash = trio.Event()
        self.finish = trio.Event()
        self.stop_slowly: float = 0.0

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.starts += 1
        self.crash = trio.Event()
        self.finish = trio.Event()
        journal.append(f"start {self.tag}")
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:

                async def wait_finish() -> None:
                    await self.finish.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(wait_finish)
                await self.crash.wait()
                raise RuntimeError(f"{self.tag} crashed")
        finally:
            journal.append(f"stop {self.tag}")
            if self.stop_slowly:
                with trio.CancelScope(shield=True):
                    await trio.sleep(self.stop_slowly)
                journal.append(f"stopped {self.tag}")


@pytest.fixture(autouse=True)
def _clear() -> None:
    journal.clear()


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_children_start_in_order_and_stop_in_reverse(autojump_clock: trio.abc.Clock) -> None:
    a, b, c = Worker("a"), Worker("b"), Worker("c")
    async with Supervisor(
        children=[ChildSpec(a, id="a"), ChildSpec(b, id="b"), ChildSpec(c, id="c")]
    ):
        assert journal == ["start a", "start b", "start c"]
    assert journal[3:] == ["stop c", "stop b", "stop a"]


@pytest.mark.parametrize(
    ("strategy", "restarted"),
    [("one_for_one", ["b"]), ("one_for_all", ["a", "b", "c"]), ("rest_for_one", ["b", "c"])],
)
async def test_strategies_restart_the_right_children(
    autojump_clock: trio.abc.Clock, strategy: Any, restarted: list[str]
) -> None:
    workers = {tag: Worker(tag) for tag in "abc"}
    specs = [ChildSpec(w, id=tag) for tag, w in workers.items()]
    async with Supervisor(strategy, children=specs):
        journal.clear()
        workers["b"].crash.set()
        await settle()
        assert {tag: w.starts for tag, w in workers.items()} == {
            tag: 2 if tag in restarted else 1 for tag in "abc"
        }
        stops = [e for e in journal if e.startswith("stop")]
        starts = [e for e in journal if e.startswith("start")]
        assert starts == [f"start {tag}" for tag in restarted]  # in start order
        others = [f"stop {tag}" for tag in reversed(restarted) if tag != "b"]
        assert stops == ["stop b", *others]  # the crashed one first, the others in reverse


@pytest.mark.parametrize(
    ("restart", "crash_restarts", "normal_restarts"),
    [("permanent", True, True), ("transient", True, False), ("temporary", False, False)],
)
async def test_restart_types(
    autojump_clock: trio.abc.Clock, restart: Any, crash_restarts: bool, normal_restarts: bool
) -> None:
    crasher, quitter = Worker("crasher"), Worker("quitter")
    async with Supervisor(
        children=[ChildSpec(crasher, restart=restart), ChildSpec(quitter, id="q", restart=restart)]
    ) as sup:
        crasher.crash.set()
        quitter.finish.set()
        await settle()
        assert crasher.starts == (2 if crash_restarts else 1)
        assert quitter.starts == (2 if normal_restarts else 1)
        ids = [info.id for info in sup.which_children()]
        if restart == "temporary":
            assert ids == []  # temporary children are forgotten once they end
        else:
            assert ids == ["Worker", "q"]


async def test_too_many_restarts_stops_everything_and_fails_naming_the_child(
    autojump_clock: trio.abc.Clock,
) -> None:
    steady, flaky = Worker("steady"), Worker("flaky")
    events: list[Any] = []
    with pytest.raises(SupervisorFailed) as info:
        async with Supervisor(
            max_restarts=2,
            within=10,
            name="root",
            events=events.append,
            children=[ChildSpec(steady, id="steady"), ChildSpec(flaky, id="flaky")],
        ):
            for _ in range(3):
                flaky.crash.set()
                await settle()
            await trio.sleep_forever()  # the supervisor's failure cancels the body
    assert (
        str(info.value)
        == "Supervisor root gave up (too many restarts): child flaky: RuntimeError: flaky crashed"
    )
    assert info.value.child == "flaky"
    assert isinstance(info.value.cause, RuntimeError)
    assert journal[-2:] == ["stop flaky", "stop steady"] or journal[-1] == "stop steady"
    assert any(isinstance(e, SupervisorGaveUp) and e.child_id == "flaky" for e in events)
    crashes = [e for e in events if isinstance(e, ChildCrashed)]
    assert len(crashes) == 3
    assert "RuntimeError: flaky crashed" in crashes[0].traceback


async def test_restarts_spread_over_time_stay_within_the_intensity(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Worker("flaky")
    async with Supervisor(max_restarts=2, within=5, children=[flaky]):
        for _ in range(6):
            flaky.crash.set()
            await settle()
            await trio.sleep(3)  # never more than 2 restarts within 5 s
        assert flaky.starts == 7


async def test_a_nested_supervisor_that_gives_up_escalates_to_its_parent(
    autojump_clock: trio.abc.Clock,
) -> None:
    leaf, sibling = Worker("leaf"), Worker("sibling")
    inner = Supervisor(max_restarts=1, within=10, name="inner", children=[leaf])
    events: list[Any] = []
    async with Supervisor(
        "one_for_one", name="outer", events=events.append, children=[inner, sibling]
    ) as outer:
        leaf.crash.set()
        await settle()
        leaf.crash.set()  # the inner supervisor's second restart within 10 s: it gives up
        await settle()
        crashed = [e for e in events if isinstance(e, ChildCrashed)]
        assert [e.child_id for e in crashed] == ["inner"]
        assert "Supervisor inner gave up" in crashed[0].error
        # The outer supervisor restarted the inner one, which started its leaf afresh.
        assert leaf.starts == 3
        assert sibling.starts == 1
        assert [info.state for info in outer.which_children()] == ["running", "running"]
        assert outer.count_children() == {"specs": 2, "active": 2, "supervisors": 1, "workers": 1}


async def test_backoff_delays_restarts_exponentially_up_to_a_cap(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Worker("flaky")
    events: list[Any] = []
    async with Supervisor(
        max_restarts=10,
        within=1000,
        backoff=Backoff(base=1, cap=3),
        events=events.append,
        children=[flaky],
    ):
        for _ in range(4):
            flaky.crash.set()
            await trio.sleep(10)  # past the backoff: restarted
    delays = [e.delay for e in events if isinstance(e, ChildRestarted)]
    assert delays == [1, 2, 3, 3]
    assert Backoff(0.5, 10).delay(5) == 8


async def test_dynamic_children(autojump_clock: trio.abc.Clock) -> None:
    async with Supervisor() as sup:
        worker = Worker("w")
        handle = await sup.start_child(worker, id="w", name="the-worker", restart="transient")
        assert handle is worker
        assert sup.lookup("the-worker") is worker
        assert [(i.id, i.state, i.restart) for i in sup.which_children()] == [
            ("w", "running", "transient")
        ]
        await sup.terminate_child("w")
        assert journal == ["start w", "stop w"]
        assert sup.which_children()[0].state == "stopped"
        assert sup.count_children()["active"] == 0
        await sup.restart_child("w")
        assert worker.starts == 2
        await sup.delete_child("w")
        assert sup.which_children() == []
        with pytest.raises(KeyError, match="no child with id 'w'"):
            await sup.terminate_child("w")
        with pytest.raises(KeyError, match="no child named 'nobody'"):
            sup.lookup("nobody")
        await sup.start_child(Worker("x"), id="x")
        with pytest.raises(ValueError, match="already has a child with id 'x'"):
            await sup.start_child(Worker("x2"), id="x")


async def test_bad_children_and_options_are_refused(autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(ValueError, match="strategy must be one of"):
        Supervisor("one_for_none")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_restarts must be an integer >= 0"):
        Supervisor(max_restarts=-1)
    with pytest.raises(ValueError, match="restart must be one of"):
        ChildSpec(Worker("w"), restart="sometimes")  # type: ignore[arg-type]
    async with Supervisor() as sup:
        with pytest.raises(TypeError, match="a child must be an Agent subclass"):
            await sup.start_child(42)
        with pytest.raises(TypeError, match="options apply to agents only"):
            await sup.start_child(Worker("w"), model=None)
    with pytest.raises(RuntimeError, match="is not running"):
        await Supervisor().start_child(Worker("w"))


async def test_a_child_that_fails_to_start_fails_the_supervisor(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Broken:
        async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            raise OSError("port in use")

    with pytest.raises(
        SupervisorFailed, match=r"could not start\): child Broken: OSError: port in use"
    ):
        async with Supervisor(children=[Worker("ok"), Broken()]):
            pytest.fail("the body must not run")
    assert journal == ["start ok", "stop ok"]
    async with Supervisor() as sup:
        with pytest.raises(SupervisorFailed, match="could not start"):
            await sup.start_child(Broken())
        assert sup.which_children() == []


async def test_a_child_that_ignores_cancellation_for_a_while_is_still_stopped(
    autojump_clock: trio.abc.Clock,
) -> None:
    slow, fast = Worker("slow"), Worker("fast")
    slow.stop_slowly = 30
    async with Supervisor(
        children=[ChildSpec(fast, id="fast"), ChildSpec(slow, id="slow", shutdown_timeout=2)]
    ):
        pass
    # The slow child got its 2 s; then the next child was stopped; the slow one finished
    # its cleanup later, and the supervisor waited for it before returning.
    assert journal == ["start fast", "start slow", "stop slow", "stop fast", "stopped slow"]
    assert trio.current_time() == 30


async def test_leaving_the_block_early_with_an_error_stops_children_and_keeps_the_error(
    autojump_clock: trio.abc.Clock,
) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with Supervisor(children=[Worker("a")]):
            raise KeyError("mine")
    assert journal == ["start a", "stop a"]


# --- supervised agents -----------------------------------------------------------------


@satsuma.tool
async def slow(seconds: float) -> str:
    """Take a while."""
    await trio.sleep(seconds)
    return "done"


class Assistant(satsuma.Agent):
    name = "assistant"
    tools = [slow]


def crashing_model() -> FunctionModel:
    """Answers "crash" by raising (a bug in the model code), "slow" with a long tool call,
    anything else with an echo."""

    def reply(request: satsuma.ModelRequest) -> Reply | str:
        last = request.messages[-1]
        # The newest block only: an unanswered prompt of a crashed run stays in the
        # history, and the next prompt joins it in the same user message.
        text = last.content[-1].get("text", "")
        if last.tool_results:
            return "tool finished"
        if "crash" in text:
            raise RuntimeError("model bug")
        if "slow" in text:
            return Reply(tool_calls=[("slow", {"seconds": 10})])
        return f"echo: {text}"

    return FunctionModel(reply)


async def test_an_agent_handle_survives_restarts_and_keeps_the_conversation(
    autojump_clock: trio.abc.Clock,
) -> None:
    events: list[Any] = []
    async with Supervisor(events=events.append) as sup:
        agent = await sup.start_child(Assistant, name="helper", model=crashing_model())
        assert sup.lookup("helper") is agent
        assert (await agent.run("hello")).output == "echo: hello"
        with pytest.raises(satsuma.AgentCrashed) as crashed:
            await agent.run("please crash")
        assert isinstance(crashed.value.cause, RuntimeError)
        await settle()
        # Same handle, new incarnation, conversation intact and valid.
        assert (await agent.run("again")).output == "echo: again"
        history = agent.history
    check_conversation(history)
    assert next(m.text for m in history if m.role == "user") == "hello"
    assert [e.incarnation for e in events if isinstance(e, ChildStarted)] == [1, 2]


async def _crash_on(request: satsuma.ModelRequest) -> str:
    text = request.messages[-1].content[-1].get("text", "")
    await trio.sleep(1)
    if "crash" in text:
        raise RuntimeError("model bug")
    return f"echo: {text}"


async def test_a_call_in_flight_at_a_crash_fails_with_agent_crashed_never_hangs(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with Supervisor() as sup:
        agent = await sup.start_child(Assistant, model=FunctionModel(_crash_on))
        results: dict[str, Any] = {}

        async def call(name: str, prompt: str) -> None:
            try:
                results[name] = (await agent.run(prompt)).output
            except satsuma.AgentCrashed as exc:
                results[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first", "crash now")
            await trio.sleep(0.5)  # the first call is with the model
            nursery.start_soon(call, "queued", "then this")
        assert isinstance(results["first"], satsuma.AgentCrashed)
        assert str(results["first"]) == "Agent assistant crashed: RuntimeError: model bug"
        # Only the run in flight fails: the one queued behind it is served by the
        # restarted agent.
        assert results["queued"] == "echo: then this"
        assert (await agent.run("after")).output == "echo: after"


async def test_a_call_made_while_the_agent_restarts_waits_for_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with Supervisor(backoff=Backoff(base=2, cap=2)) as sup:
        agent = await sup.start_child(Assistant, model=crashing_model())
        with pytest.raises(satsuma.AgentCrashed):
            await agent.run("crash")
        started = trio.current_time()
        assert (await agent.run("are you back?")).output == "echo: are you back?"
        assert trio.current_time() - started == 2  # it waited out the backoff


async def test_a_call_to_an_agent_that_does_not_come_back_in_time_is_unavailable(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with Supervisor(backoff=Backoff(base=60, cap=60), call_timeout=5) as sup:
        agent = await sup.start_child(Assistant, model=crashing_model())
        with pytest.raises(satsuma.AgentCrashed):
            await agent.run("crash")
        with pytest.raises(
            satsuma.AgentUnavailable, match="did not come back from a restart within 5s"
        ):
            await agent.run("hello?")
        await sup.terminate_child("assistant")
        with pytest.raises(satsuma.AgentUnavailable, match="it is stopped"):
            await agent.run("hello?")


async def test_shutdown_ends_runs_in_flight_as_cancelled_with_a_valid_history(
    autojump_clock: trio.abc.Clock,
) -> None:
    results: list[satsuma.RunResult] = []
    handles: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def service(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            async with Supervisor() as sup:
                handles.append(await sup.start_child(Assistant, model=crashing_model()))
                task_status.started()
                await trio.sleep(3)

        await nursery.start(service)

        async def client() -> None:
            results.append(await handles[0].run("slow please"))

        nursery.start_soon(client)
    assert results[0].status == "cancelled"
    check_conversation(handles[0].history)


async def test_serve_until_signalled_shuts_down_gracefully_on_sigterm(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    import os
    import signal

    caplog.set_level(logging.INFO, logger="satsuma.supervisor")
    a, b = Worker("a"), Worker("b")
    sup = Supervisor(children=[ChildSpec(a, id="a"), ChildSpec(b, id="b")])
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve_until_signalled)
        os.kill(os.getpid(), signal.SIGTERM)
    assert journal == ["start a", "start b", "stop b", "stop a"]
    assert caplog.messages == ["the root supervisor: SIGTERM received, shutting down"]


async def test_messages_name_supervisors_and_signals_as_a_person_would(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # Left with the default name, a supervisor is named by its place, never
    # "supervisor supervisor"; a named one by its name.
    caplog.set_level(logging.WARNING, logger="satsuma.supervisor")
    leaf, flaky, named = Worker("leaf"), Worker("flaky"), Worker("named")
    inner = Supervisor(children=[ChildSpec(leaf, id="leaf")])
    team = Supervisor(name="team", children=[ChildSpec(named, id="named")])
    with pytest.raises(SupervisorFailed) as info:
        async with Supervisor(
            max_restarts=2, within=10, children=[inner, team, ChildSpec(flaky, id="flaky")]
        ) as sup:
            with pytest.raises(ValueError, match=r"^the root supervisor already has a child"):
                await sup.start_child(Worker("again"), id="flaky")
            for worker in (leaf, named, flaky):
                worker.crash.set()
                await settle()
            for _ in range(2):  # the third restart of the root's within 10 s: it gives up
                flaky.crash.set()
                await settle()
            await trio.sleep_forever()
    assert caplog.messages[:3] == [
        "a supervisor under the root supervisor: child leaf crashed: RuntimeError: leaf crashed",
        "supervisor team: child named crashed: RuntimeError: named crashed",
        "the root supervisor: child flaky crashed: RuntimeError: flaky crashed",
    ]
    assert str(info.value) == (
        "The root supervisor gave up (too many restarts): child flaky: RuntimeError: flaky crashed"
    )
    assert info.value.supervisor == "supervisor"  # the data stays the name
    with pytest.raises(RuntimeError, match=r"^the supervisor is not running$"):
        await Supervisor().start_child(Worker("late"))


class NeverStarted:
    """A service whose serve never calls task_status.started()."""

    def __init__(self, *, ignore_cancel: bool = False) -> None:
        self.ignore_cancel = ignore_cancel
        self.cancelled = False

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled = True
            if self.ignore_cancel:
                with trio.CancelScope(shield=True):
                    await trio.sleep(1000)


@pytest.mark.parametrize("ignore_cancel", [False, True])
async def test_a_child_that_never_reports_started_fails_its_start_after_start_timeout(
    autojump_clock: trio.abc.Clock, ignore_cancel: bool
) -> None:
    crashes: list[Any] = []
    async with Supervisor(events=crashes.append) as sup:
        await sup.start_child(Worker("first"))
        silent = NeverStarted(ignore_cancel=ignore_cancel)
        began = trio.current_time()
        with pytest.raises(
            SupervisorFailed,
            match=r"could not start child NeverStarted \(it runs on\): TimeoutError: it did not report "
            r"started within 7s \(its serve never called task_status.started\(\)\)",
        ):
            await sup.start_child(silent, start_timeout=7, shutdown_timeout=2)
        # Bounded: the start timeout, then at most the shutdown timeout.
        assert trio.current_time() - began <= 9
        assert silent.cancelled
        # The supervisor stays up, and its other children too.
        assert [c.id for c in sup.which_children()] == ["Worker"]
        second = await sup.start_child(Worker("second"))
        assert second.tag == "second"
    assert any(isinstance(e, ChildCrashed) and e.child_id == "NeverStarted" for e in crashes)


async def test_a_child_spec_refuses_a_bad_start_timeout() -> None:
    with pytest.raises(ValueError, match="start_timeout must be a positive number"):
        ChildSpec(Worker("w"), start_timeout=0)


async def test_children_without_ids_get_unique_ones_and_an_explicit_duplicate_is_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with Supervisor() as sup:
        one = await sup.start_child(Assistant, model=FunctionModel(lambda request: "one"))
        two = await sup.start_child(Assistant, model=FunctionModel(lambda request: "two"))
        three = await sup.start_child(Worker("w"))
        four = await sup.start_child(Worker("w2"))
        assert [c.id for c in sup.which_children()] == [
            "assistant",
            "assistant-2",
            "Worker",
            "Worker-2",
        ]
        assert one.agent_id != two.agent_id
        assert (await one.run("hi")).output == "one"
        assert (await two.run("hi")).output == "two"
        assert three is not four
        with pytest.raises(ValueError, match="already has a child with id 'assistant-2'"):
            await sup.start_child(Assistant, id="assistant-2")


async def test_a_reset_queued_behind_a_crash_happens_in_the_next_incarnation(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with Supervisor() as sup:
        agent = await sup.start_child(Assistant, model=FunctionModel(_crash_on))
        assert (await agent.run("remember me")).output == "echo: remember me"
        outcome: list[Any] = []

        async def crash() -> None:
            with pytest.raises(satsuma.AgentCrashed):
                await agent.run("crash now")

        async def reset() -> None:
            await agent.reset()
            outcome.append("reset")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(crash)
            await trio.sleep(0.5)
            nursery.start_soon(reset)
        assert outcome == ["reset"]
        assert agent.history == ()


async def test_runs_queued_when_the_supervisor_gives_up_fail_saying_why(
    autojump_clock: trio.abc.Clock,
) -> None:
    failures: list[BaseException] = []
    with pytest.raises(SupervisorFailed, match="too many restarts"):
        async with Supervisor(max_restarts=0) as sup:
            agent = await sup.start_child(Assistant, model=FunctionModel(_crash_on))

            async def call(prompt: str) -> None:
                try:
                    await agent.run(prompt)
                except (satsuma.AgentCrashed, satsuma.AgentUnavailable) as exc:
                    failures.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "crash now")
                await trio.sleep(0.5)
                nursery.start_soon(call, "queued")
            await trio.sleep_forever()
    crashed, queued = failures
    assert isinstance(crashed, satsuma.AgentCrashed)
    assert isinstance(queued, satsuma.AgentUnavailable)
    assert "its supervisor gave up" in str(queued) and "too many restarts" in str(queued)


async def test_a_reset_queued_behind_a_crash_without_a_supervisor_raises(
    autojump_clock: trio.abc.Clock,
) -> None:
    raised: list[BaseException] = []
    with pytest.raises(satsuma.AgentCrashed):  # the crash leaves open_agent, as documented
        async with satsuma.open_agent(Assistant, model=FunctionModel(_crash_on)) as agent:

            async def crash() -> None:
                with pytest.raises(satsuma.AgentCrashed):
                    await agent.run("crash now")

            async def reset() -> None:
                try:
                    await agent.reset()
                except satsuma.AgentCrashed as exc:
                    raised.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(crash)
                await trio.sleep(0.5)
                nursery.start_soon(reset)
    assert len(raised) == 1 and "model bug" in str(raised[0])


async def test_a_late_old_incarnation_never_touches_the_new_one(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    from satsuma.store import MemoryStore

    @satsuma.tool
    async def stubborn(task: str) -> str:
        """Ignore cancellation for a long time.

        Args:
            task: Anything.
        """
        with trio.CancelScope(shield=True):
            await trio.sleep(100)
        return "done, late"

    class Stubborn(satsuma.Agent):
        name = "stubborn"
        tools = [stubborn]

    def reply(request: satsuma.ModelRequest) -> Any:
        text = request.messages[-1].content[-1].get("text", "")
        if text == "start the long job":
            return Reply(tool_calls=[("stubborn", {"task": "x"})])
        return f"echo: {text}"

    store = MemoryStore()
    worker = Worker("w")
    async with Supervisor("one_for_all") as sup:
        agent = await sup.start_child(
            Stubborn,
            model=FunctionModel(reply),
            store=store,
            agent_id="s",
            shutdown_timeout=1,
        )
        await sup.start_child(worker)
        async with trio.open_nursery() as nursery:

            async def long_job() -> None:
                # Its incarnation was replaced: once the stubborn tool lets go, its next
                # write is refused and the run ends saying so.
                result = await agent.run("start the long job")
                assert result.status == "failed"
                assert result.error is not None and "replaced by a newer one" in result.error

            nursery.start_soon(long_job)
            await trio.sleep(1)
            worker.crash.set()  # one_for_all: the agent is stopped and restarted
            await trio.sleep(5)
            # The new incarnation serves while the old one is still stuck in its tool.
            assert (await agent.run("hello")).output == "echo: hello"
            await trio.sleep(200)  # the old one finishes its tool now, long after
        assert (await agent.run("still you?")).output == "echo: still you?"
        history = agent.history
    check_conversation(history)
    assert [m.text for m in history if m.role == "assistant"][-2:] == [
        "echo: hello",
        "echo: still you?",
    ]
    check_conversation(await store.load_messages("s"))
    assert "replaced by a newer one" not in str(history)
    assert any("refused a write" in record.getMessage() for record in caplog.records)


async def test_public_methods_and_restarts_take_turns_in_the_control_loop(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A crash (restart after a backoff) and a terminate_child arriving during it: the
    # terminate waits its turn, after the restart, so the child ends stopped and is
    # never restarted behind the caller's back once terminate_child has returned.
    worker = Worker("w")
    async with Supervisor(backoff=Backoff(base=2.0, cap=2.0)) as sup:
        await sup.start_child(worker)
        worker.crash.set()
        await trio.sleep(0.5)  # the control loop is in the backoff before the restart
        await sup.terminate_child("Worker")
        await trio.sleep(10)
        assert [(c.id, c.state) for c in sup.which_children()] == [("Worker", "stopped")]
        assert worker.starts == 2
        assert journal[-1] == "stop w"
        # And a restart asked for by hand goes through the same loop.
        await sup.restart_child("Worker")
        assert worker.starts == 3
    with pytest.raises(RuntimeError, match="is not running"):
        await sup.restart_child("Worker")
