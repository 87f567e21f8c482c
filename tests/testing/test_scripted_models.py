"""The scripted models behave like the real path (issue 29, item 6): an input the JSON
gate refuses is that call's ``Invalid arguments``, never a crash in the helper; their
ids are unique across processes; and what they keep of past requests is bounded."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import satsuma
from satsuma import ModelRequest, ModelResponse, ToolCall
from satsuma.store import SQLiteStore
from satsuma.testing import (
    FunctionModel,
    MessagesServer,
    Reply,
    ScriptedModel,
    check_conversation,
    tool_call,
)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


HOSTILE: dict[str, Any] = {
    "nested-5000": {"note": nested(5_000)},
    "digits-5000": {"note": 10**5_000},
    "nan": {"note": float("nan")},
    "object": {"note": object()},
}


@satsuma.tool
async def note(note: Any = None) -> str:
    """Keep a note.

    Args:
        note: Anything.
    """
    return "noted"


class Noter(satsuma.Agent):
    name = "noter"
    tools = [note]


@attrs.define
class Plain:
    """A Model of the user's own, the path every Model takes: the reference outcome."""

    given: Any
    turns: int = 0

    async def respond(self, request: ModelRequest, listener: Any) -> ModelResponse:
        self.turns += 1
        if self.turns > 1:
            return ModelResponse(content=({"type": "text", "text": "Done."},))
        call = ToolCall("call_1", "note", self.given)
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": self.given}
        return ModelResponse(content=(block,), calls=(call,), stop_reason="tool_use")


def scripted(given: Any) -> Any:
    return ScriptedModel([Reply(tool_calls=[("note", given)]), "Done.", "Still here."])


def function(given: Any) -> Any:
    def reply(request: ModelRequest) -> Reply | str:
        return Reply(tool_calls=[("note", given)]) if len(request.messages) == 1 else "Done."

    return FunctionModel(reply)


async def refused_text(model: Any, tmp_path: Path, events: list[Any] | None = None) -> str:
    async with (
        SQLiteStore(tmp_path / f"{type(model).__name__}.db") as store,
        satsuma.open_agent(Noter, model=model, store=store, agent_id="n") as agent,
    ):
        if events is None:
            result = await agent.run("note it")
        else:
            async for event in agent.stream("note it"):
                events.append(event)
            result = await agent.result(events[-1].run_id)
        again = await agent.run("again")  # the agent still serves
        history = agent.history
    assert (result.status, again.status) == ("completed", "completed")
    check_conversation(history)
    (answer,) = history[2].tool_results
    assert answer["is_error"]
    return str(answer["content"])


@pytest.mark.parametrize("make", [scripted, function], ids=["ScriptedModel", "FunctionModel"])
@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "stream"])
async def test_a_hostile_input_is_refused_as_the_real_path_refuses_it(
    tmp_path: Path, make: Any, kind: str, streamed: bool
) -> None:
    reference = await refused_text(Plain(HOSTILE[kind]), tmp_path / "plain")
    assert reference.startswith("Error: Invalid arguments: ")
    # Streamed: the helper hands each input to the listener as JSON text too.
    text = await refused_text(make(HOSTILE[kind]), tmp_path, [] if streamed else None)
    assert text == reference


def test_a_loopback_server_refuses_an_input_it_cannot_send_when_scripted() -> None:
    with pytest.raises(ValueError, match=r"script\[0\]: the input of call .* nested more"):
        MessagesServer([Reply(tool_calls=[("note", nested(5_000))])])
    with pytest.raises(ValueError, match="at most 4300 digits"):
        MessagesServer([Reply(tool_calls=[("note", {"n": 10**5_000})])])
    # Raw JSON text is sent as it is, whatever it holds.
    MessagesServer([Reply(tool_calls=[("note", "[" * 5_000 + "]" * 5_000)])])


# --- Ids across processes ----------------------------------------------------------------

_PRINT_IDS = "from satsuma.testing import tool_call; print(tool_call('a').id, tool_call('b').id)"


async def _python(code: str, cwd: Path | None = None) -> str:
    result = await trio.run_process(
        [sys.executable, "-c", code], capture_stdout=True, cwd=cwd, env=dict(os.environ)
    )
    return result.stdout.decode().strip()


async def test_ids_differ_between_processes_and_count_up_within_one() -> None:
    first, second = await _python(_PRINT_IDS), await _python(_PRINT_IDS)
    assert first != second
    for line in (first, second):
        one, two = line.split()
        assert one.startswith("toolu_test_") and one.endswith("_1")
        assert two == one[:-1] + "2"
        assert len(one) == len("toolu_test_") + 12 + 2


def test_ids_under_pytest_start_again_at_one_in_each_test() -> None:
    # What tests rely on (expected output that does not depend on test order).
    assert [tool_call("a").id, tool_call("b").id] == ["toolu_test_1", "toolu_test_2"]


async def test_a_conversation_continued_in_another_process_keeps_unique_ids(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("hi")
    for _ in range(3):
        result = await trio.run_process(
            [
                sys.executable,
                "-m",
                "satsuma.cli",
                "run",
                "--tools",
                "read_file",
                "--allow",
                "read",
                "--model",
                "fake",
                "--store",
                "s.db",
                'read_file {"path": "a.txt"}',
            ],
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")},
        )
        assert result.returncode == 0, result.stderr.decode()
    async with SQLiteStore(tmp_path / "s.db") as store:
        messages = await store.load_messages("assistant")
    ids = [
        block["id"]
        for message in messages
        for block in message.content
        if block["type"] == "tool_use"
    ]
    assert len(ids) == len(set(ids)) == 3
    check_conversation(messages)
    # And this test process continuing that store (its ids are toolu_test_N) does too.
    async with (
        SQLiteStore(tmp_path / "s.db") as store,
        satsuma.open_agent(
            Noter,
            model=ScriptedModel([Reply(tool_calls=[("note", {"note": 1})]), "ok"]),
            store=store,
            agent_id="assistant",
        ) as agent,
    ):
        assert (await agent.run("once more")).status == "completed"
        check_conversation(agent.history)


# --- What is kept of past requests -------------------------------------------------------


class _Listener:
    wants_deltas = False

    def text(self, delta: str) -> None: ...

    def thinking(self, delta: str) -> None: ...

    def retry(self, attempt: int, delay: float, reason: str) -> None: ...


def _request(index: int) -> ModelRequest:
    return ModelRequest(model="m", system=None, messages=(satsuma.Message.user(f"q{index}"),))


@pytest.mark.parametrize("make", ["scripted", "function"])
async def test_the_models_keep_the_last_requests_and_count_all(make: str) -> None:
    count = 105
    model: Any = (
        ScriptedModel(["x"] * count) if make == "scripted" else FunctionModel(lambda r: "x")
    )
    for index in range(count):
        await model.respond(_request(index), _Listener())
    assert model.request_count == count
    assert len(model.requests) == 100  # the default bound
    assert [r.messages[0].text for r in model.requests[-2:]] == ["q103", "q104"]
    few: Any = (
        ScriptedModel(["x"] * 5, keep_requests=2)
        if make == "scripted"
        else FunctionModel(lambda r: "x", keep_requests=2)
    )
    for index in range(5):
        await few.respond(_request(index), _Listener())
    assert (few.request_count, [r.messages[0].text for r in few.requests]) == (5, ["q3", "q4"])
    everything: Any = (
        ScriptedModel(["x"] * 3, keep_requests=None)
        if make == "scripted"
        else FunctionModel(lambda r: "x", keep_requests=None)
    )
    for index in range(3):
        await everything.respond(_request(index), _Listener())
    assert len(everything.requests) == 3


async def test_the_server_keeps_the_last_requests_and_counts_all() -> None:
    async with (
        MessagesServer(then=lambda body: "ok", keep_requests=2) as server,
        server.client() as client,
    ):
        for index in range(5):
            await client.messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": f"q{index}"}]
            )
    assert server.request_count == 5
    assert [body["messages"][0]["content"] for body in server.requests] == ["q3", "q4"]
    assert [r.body["messages"][0]["content"] for r in server.received] == ["q3", "q4"]


def test_the_server_and_the_models_keep_a_bounded_number_by_default() -> None:
    for helper in (MessagesServer, ScriptedModel, FunctionModel):
        assert inspect.signature(helper).parameters["keep_requests"].default == 100
