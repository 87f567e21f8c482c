"""Embedding satsuma in a service: the patterns the docs show work as written, and the
errors a user is meant to catch reach them as themselves, not inside exception groups."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import trio

import satsuma
from satsuma import AgentCrashed, AgentUnavailable, Supervisor, SupervisorFailed
from satsuma.testing import ScriptedModel


class Service:
    """A child that records its start and stop."""

    def __init__(self, name: str, journal: list[str]) -> None:
        self.name = name
        self.journal = journal

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.journal.append(f"start {self.name}")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.journal.append(f"stop {self.name}")


class Crashing:
    """A child that starts, then crashes after a second, every time."""

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep(1)
        raise OSError("the disk is gone")


class Broken:
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        raise OSError("port in use")


def _sigterm_soon(nursery: trio.Nursery, after: float = 1.0) -> None:
    async def send() -> None:
        await trio.sleep(after)
        os.kill(os.getpid(), signal.SIGTERM)

    nursery.start_soon(send)


async def test_serve_until_signalled_inside_async_with(autojump_clock: trio.abc.Clock) -> None:
    journal: list[str] = []
    async with trio.open_nursery() as outer:
        _sigterm_soon(outer)
        async with Supervisor(name="root") as sup:
            await sup.start_child(Service("a", journal))
            await sup.start_child(Service("b", journal))
            await sup.serve_until_signalled()
            journal.append("signalled")
    assert journal == ["start a", "start b", "signalled", "stop b", "stop a"]


async def test_serve_until_signalled_on_its_own(autojump_clock: trio.abc.Clock) -> None:
    journal: list[str] = []
    sup = Supervisor(children=[Service("a", journal)])
    async with trio.open_nursery() as outer:
        _sigterm_soon(outer)
        await sup.serve_until_signalled()
    assert journal == ["start a", "stop a"]


async def test_serve_until_signalled_raises_supervisor_failed_itself(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A child that cannot start, and one that crashes too often: SupervisorFailed as
    # itself, catchable with a plain except.
    with pytest.raises(SupervisorFailed, match="could not start"):
        await Supervisor(children=[Broken()]).serve_until_signalled()
    with pytest.raises(SupervisorFailed, match="too many restarts") as caught:
        await Supervisor(children=[Crashing()], max_restarts=3, within=5).serve_until_signalled()
    assert isinstance(caught.value.cause, OSError)


async def test_a_supervisor_giving_up_while_waiting_for_a_signal_ends_the_block(
    autojump_clock: trio.abc.Clock,
) -> None:
    with pytest.raises(SupervisorFailed, match="too many restarts"):
        async with Supervisor(max_restarts=1, within=10) as sup:
            await sup.start_child(Crashing())
            await sup.serve_until_signalled()
            pytest.fail("the wait must be cancelled")


# --- open_agent without a supervisor --------------------------------------------------


class Chat(satsuma.Agent):
    name = "chat"
    model = "sonnet"


class Exploding:
    """A model with a bug: the agent crashes (it is not a ModelError)."""

    def __init__(self) -> None:
        self.asked = trio.Event()

    async def respond(self, request: Any, listener: Any) -> Any:
        self.asked.set()
        raise KeyError("boom")


async def test_the_block_s_own_error_leaves_open_agent_as_itself() -> None:
    cause = LookupError("why")
    with pytest.raises(ValueError, match="mine") as caught:
        async with satsuma.open_agent(Chat, model=ScriptedModel(["x"])):
            raise ValueError("mine") from cause
    assert caught.value.__cause__ is cause


async def test_a_crash_leaves_open_agent_as_agent_crashed() -> None:
    with pytest.raises(AgentCrashed) as caught:
        async with satsuma.open_agent(Chat, model=Exploding(), agent_id="c1") as agent:
            with pytest.raises(AgentCrashed):
                await agent.run("hi")
            with pytest.raises(AgentUnavailable, match="stopped"):
                await agent.run("again")
    assert str(caught.value) == "Agent chat (c1) crashed: KeyError: 'boom'"
    assert isinstance(caught.value.__cause__, KeyError)


async def test_a_crash_cancels_the_block_as_a_failing_task_would() -> None:
    model = Exploding()
    reached: list[str] = []
    with pytest.raises(AgentCrashed, match="KeyError"):
        async with satsuma.open_agent(Chat, model=model) as agent, trio.open_nursery() as nursery:
            nursery.start_soon(agent.run, "hi")
            await model.asked.wait()
            await trio.sleep_forever()  # cancelled by the crash
            reached.append("after")
    assert reached == []


async def test_a_crash_and_another_error_of_the_block_are_both_reported() -> None:
    with pytest.raises(ExceptionGroup) as caught:
        async with satsuma.open_agent(Chat, model=Exploding()) as agent:
            try:
                await agent.run("hi")
            finally:
                raise RuntimeError("cleanup failed")
    kinds = sorted(type(leaf).__name__ for leaf in caught.value.exceptions)
    assert kinds == ["KeyError", "RuntimeError"]
