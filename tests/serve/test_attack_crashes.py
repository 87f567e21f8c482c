"""Crashing agents on purpose: no client can take the server down by crashing
conversations, because each conversation's agent has a supervisor of its own (a
temporary child of the server's). A conversation in a crash loop stops only itself, and
its next run opens it anew."""

from __future__ import annotations

import trio

import satsuma
from satsuma.models import ModelRequest
from satsuma.serve._open_runs import open_local_runs
from satsuma.testing import FunctionModel


class Fragile(satsuma.Agent):
    name = "fragile"


def crashing_on_request(request: ModelRequest) -> str:
    prompt = request.messages[-1].text
    if "CRASH" in prompt:
        raise RuntimeError("a bug in the model adapter")  # not a ModelError: a crash
    return f"ok: {prompt}"


async def test_crashes_in_many_conversations_leave_the_server_serving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Beyond the default 3 restarts within 5 s of one shared supervisor, many times over.
    async with open_local_runs([Fragile], model=FunctionModel(crashing_on_request)) as runs:
        for number in range(12):
            started = await runs.start("fragile", f"c-{number}", "CRASH now")
            ended = await runs.wait(started.run_id)
            assert ended.status == "failed", ended
        fresh = await runs.wait((await runs.start("fragile", "new", "hello")).run_id)
        assert (fresh.status, fresh.output) == ("completed", "ok: hello")
        again = await runs.wait((await runs.start("fragile", "c-3", "hello again")).run_id)
        assert (again.status, again.output) == ("completed", "ok: hello again")


async def test_a_conversation_in_a_crash_loop_stops_only_itself_then_opens_anew(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_local_runs([Fragile], model=FunctionModel(crashing_on_request)) as runs:
        other = await runs.wait((await runs.start("fragile", "calm", "first")).run_id)
        assert other.status == "completed"
        statuses = []
        for _ in range(6):  # past its own 3 restarts within 5 s: its supervisor gives up
            ended = await runs.wait((await runs.start("fragile", "loop", "CRASH")).run_id)
            statuses.append(ended.status)
        assert set(statuses) == {"failed"}
        back = await runs.wait((await runs.start("fragile", "loop", "better now")).run_id)
        assert (back.status, back.output) == ("completed", "ok: better now")
        calm = await runs.wait((await runs.start("fragile", "calm", "second")).run_id)
        assert (calm.status, calm.output) == ("completed", "ok: second")
        history = [m["role"] for m in await runs.messages("fragile", "calm")]
        assert history == ["user", "assistant", "user", "assistant"]
