"""Every input a model sends passes the JSON gate before anything records, shows or
serialises it, and a typed answer passes the same gate (issue 29, item 5).

A custom Model can hand the loop any Python value: a dict nested 5,000 deep, an int of
5,000 digits, NaN, subclasses of dict and str. With a SQLite store, the journal's
``json.dumps`` of such an input used to crash the agent (RecursionError as the call was
recorded as started), and a ``dict[str, Any]`` answer nested 5,000 deep was accepted,
stored, and broke the caller's own ``repr`` of ``result.output``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import satsuma
from satsuma import ModelRequest, ModelResponse, ToolCall
from satsuma.store import SQLiteStore
from satsuma.testing import check_conversation


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


class Tagged(dict[str, Any]):
    """A dict subclass whose own methods would lie or raise if anything called them."""

    def items(self) -> Any:
        raise RuntimeError("items() called after the gate")

    def __iter__(self) -> Any:
        raise RuntimeError("__iter__ called after the gate")


HOSTILE: dict[str, Callable[[], Any]] = {
    "nested-5000": lambda: {"note": nested(5_000)},
    "nested-65": lambda: {"note": nested(65)},
    "digits-5000": lambda: {"note": 10**5_000},
    "nan": lambda: {"note": math.nan},
    "object": lambda: {"note": object()},
    "bytes": lambda: {"note": b"x"},
    "not-an-object": lambda: object(),
}

EXPECTED = {
    "nested-5000": "is nested more than 64 levels deep",
    "nested-65": "is nested more than 64 levels deep",
    "digits-5000": "expected note to be a number of at most 4300 digits",
    "nan": "expected note to be a finite number, got: NaN",
    "object": "note is an object, which JSON cannot hold",
    "bytes": "note is bytes, which JSON cannot hold",
    "not-an-object": "expected arguments to be an object, got: object",
}


@attrs.define
class Custom:
    """A Model of the user's own: each response is made from the script's next step, a
    list of (tool name, input) pairs, or a text."""

    script: list[Sequence[tuple[str, Any]] | str]
    seen: int = 0

    async def respond(self, request: ModelRequest, listener: Any) -> ModelResponse:
        step = self.script[self.seen]
        self.seen += 1
        if isinstance(step, str):
            return ModelResponse(content=({"type": "text", "text": step},), stop_reason="end_turn")
        calls = tuple(
            ToolCall(f"call_{self.seen}_{index}", name, given)
            for index, (name, given) in enumerate(step)
        )
        content = tuple(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
            for call in calls
        )
        return ModelResponse(content=content, calls=calls, stop_reason="tool_use")


ran: list[str] = []


@satsuma.tool
async def note(note: Any = None) -> str:
    """Keep a note.

    Args:
        note: Anything.
    """
    ran.append(json.dumps(note))
    return "noted"


class Noter(satsuma.Agent):
    name = "noter"
    tools = [note]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_a_hostile_input_from_a_custom_model_is_refused_before_the_journal(
    tmp_path: Path, kind: str
) -> None:
    ran.clear()
    model = Custom(
        [[("note", HOSTILE[kind]()), ("note", Tagged(note="fine"))], "Done.", "Still here."]
    )
    events: list[Any] = []
    async with (
        SQLiteStore(tmp_path / "a.db") as store,
        satsuma.open_agent(Noter, model=model, store=store, agent_id="n") as agent,
    ):
        async for event in agent.stream("note it"):
            events.append(event)
        second = await agent.run("again?")
        history = agent.history
        first_run = next(event.run_id for event in events if hasattr(event, "run_id"))
        journal = await store.calls(first_run)
    assert second.status == "completed"
    refused, fine = history[2].tool_results
    assert refused["is_error"]
    assert refused["content"].startswith("Error: Invalid arguments: ")
    assert EXPECTED[kind] in refused["content"]
    assert fine["content"] == "noted"
    assert ran == ['"fine"']
    check_conversation(history)
    # The journal, the events and the history hold plain values only: {} for the
    # refused input, the dict subclass copied into a plain dict.
    assert [entry.input for entry in journal] == [{}, {"note": "fine"}]
    starts = [event for event in events if isinstance(event, satsuma.ToolCallStart)]
    # (The two calls run at once: their starts come in either order.)
    assert sorted((start.input for start in starts), key=len) == [{}, {"note": "fine"}]
    assert all(type(start.input) is dict for start in starts)
    json.dumps([m.content for m in history], allow_nan=False)


@attrs.define
class Twofaced:
    """A Model whose tool_use blocks hold a plain input while its calls hold another
    object: only an input found plain with its block passes the gate unwalked."""

    given: Callable[[], Any]
    seen: int = 0

    async def respond(self, request: ModelRequest, listener: Any) -> ModelResponse:
        self.seen += 1
        if self.seen > 1:
            return ModelResponse(content=({"type": "text", "text": "Done."},))
        shared = {"note": "shared"}  # the block's and the call's very input
        calls = (ToolCall("c1", "note", self.given()), ToolCall("c2", "note", shared))
        content = (
            {"type": "tool_use", "id": "c1", "name": "note", "input": {"note": "plain"}},
            {"type": "tool_use", "id": "c2", "name": "note", "input": shared},
        )
        return ModelResponse(content=content, calls=calls, stop_reason="tool_use")


@pytest.mark.parametrize("kind", ["nan", "nested-65", "object"])
async def test_a_call_is_gated_even_when_its_block_holds_a_plain_input(kind: str) -> None:
    ran.clear()
    async with satsuma.open_agent(Noter, model=Twofaced(HOSTILE[kind])) as agent:
        result = await agent.run("note it")
        history = agent.history
    assert result.status == "completed"
    refused, shared = history[2].tool_results
    assert refused["content"].startswith("Error: Invalid arguments: ")
    assert EXPECTED[kind] in refused["content"]
    assert shared["content"] == "noted"
    assert ran == ['"shared"']
    check_conversation(history)


async def test_the_runner_gates_inputs_before_its_events_and_the_approver() -> None:
    seen: list[Any] = []

    def on_event(event: object) -> None:
        if isinstance(event, satsuma.ToolCallStart):
            seen.append(event.input)

    asked: list[Any] = []

    async def approver(pending: satsuma.PendingCall) -> satsuma.Approve:
        asked.append(pending.input)
        return satsuma.Approve()

    @satsuma.tool(requires_approval=True)
    async def keep(note: Any = None) -> str:
        """Keep a note.

        Args:
            note: Anything.
        """
        return "kept"

    runner = satsuma.ToolRunner([keep], events=on_event)
    outcomes = await runner.execute(
        [
            ToolCall("a", "keep", {"note": nested(5_000)}),
            ToolCall("b", "keep", Tagged(note=Tagged(x=1))),
        ],
        approver=approver,
    )
    assert outcomes[0].error_kind == "invalid_args"
    assert "nested more than 64 levels deep" in outcomes[0].text
    assert outcomes[1].content == "kept"
    assert sorted(seen, key=len) == [{}, {"note": {"x": 1}}]
    assert asked == [{"note": {"x": 1}}]
    assert type(asked[0]) is dict and type(asked[0]["note"]) is dict


class Answerer(satsuma.Agent):
    name = "answerer"
    output_type = dict[str, Any]
    output_retries = 1


def _answer(value: Any) -> list[tuple[str, Any]]:
    return [("final_answer", value)]


ANSWERS: dict[str, tuple[Any, str]] = {
    "nested-5000": (nested(5_000), "is nested more than 64 levels deep"),
    "nested-64": (nested(64), "is nested more than 64 levels deep"),  # 65 with "value"
    "digits-5000": (10**5_000, "expected value to be a number of at most 4300 digits"),
    "nan": (math.nan, "expected value to be a finite number, got: NaN"),
    "object": (object(), "value is an object, which JSON cannot hold"),
}


@pytest.mark.parametrize("kind", sorted(ANSWERS))
async def test_a_typed_answer_passes_the_same_gate_and_is_retried(
    tmp_path: Path, kind: str
) -> None:
    bad, expected = ANSWERS[kind]
    # dict[str, Any] is not an object type of its own: the answer is the input's value.
    model = Custom([_answer({"value": bad}), _answer({"value": Tagged(ok=True)})])
    async with (
        SQLiteStore(tmp_path / "a.db") as store,
        satsuma.open_agent(Answerer, model=model, store=store, agent_id="q") as agent,
    ):
        result = await agent.run("answer")
        history = agent.history
        stored = await agent.result(result.run_id)
    assert result.status == "completed", result.error
    assert result.output == {"ok": True}
    assert type(result.output) is dict
    assert stored.output == {"ok": True}
    refused = history[2].tool_results[0]
    assert refused["is_error"]
    assert refused["content"].startswith("Error: Invalid answer: ")
    assert expected in refused["content"]
    check_conversation(history)


async def test_a_refused_answer_with_no_retries_left_fails_the_run_cleanly(
    tmp_path: Path,
) -> None:
    model = Custom([_answer({"value": nested(5_000)}), _answer({"value": nested(5_000)})])
    async with (
        SQLiteStore(tmp_path / "a.db") as store,
        satsuma.open_agent(Answerer, model=model, store=store, agent_id="q") as agent,
    ):
        result = await agent.run("answer")
    assert result.status == "failed"
    assert "no valid answer after 1 retries" in (result.error or "")
    assert "nested more than 64 levels deep" in (result.error or "")
    # The answer JSON could not carry is not shown as the {} it became.
    assert "the last answer is invalid: " in (result.error or ""), result.error
    repr(result)  # the caller's own repr of the result never meets the deep value
