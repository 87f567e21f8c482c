"""An agent's calls pass the JSON gate once (issue 36, item 1): the response's check gates
them and the runner takes them as CheckedCalls, which only ``checked_calls`` makes and
only from calls that ``gated`` returned. Every other caller of ``execute`` is gated, even
with calls that passed the gate once and were changed since."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest

import satsuma
import satsuma._toolcall as toolcall_module
from satsuma import ToolCall
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools import CheckedCalls, checked_calls, gated

ran: list[Any] = []


@satsuma.tool
async def keep(note: Any = None) -> str:
    """Keep a note.

    Args:
        note: Anything.
    """
    ran.append(note)
    return "kept"


def test_checked_calls_keeps_the_calls_gated_returned_and_gates_the_rest() -> None:
    passed = gated(ToolCall("a", "keep", {"note": 1}))
    renamed = attrs.evolve(passed, id="b", input={"note": math.nan})
    raw = ToolCall("c", "keep", {"note": math.inf})
    checked = checked_calls([passed, renamed, raw])
    assert type(checked) is CheckedCalls
    assert checked[0] is passed
    # attrs.evolve makes a call the gate has not seen: walked, and refused here.
    assert checked[1].input == {} and checked[1].refused is not None
    assert "finite number" in checked[1].refused
    assert checked[2].input == {} and checked[2].refused is not None
    # A gated call equals the same call ungated: the mark is no part of its value.
    assert passed == ToolCall("a", "keep", {"note": 1})
    assert "gate" not in repr(passed)


def test_checked_calls_cannot_be_made_but_by_the_checker() -> None:
    with pytest.raises(TypeError, match=r"made by checked_calls\(\) alone"):
        CheckedCalls([ToolCall("a", "keep", {"note": math.nan})])
    with pytest.raises(TypeError, match=r"made by checked_calls\(\) alone"):
        CheckedCalls([ToolCall("a", "keep", {})], object())
    with pytest.raises(TypeError):
        ToolCall("a", "keep", {}, gate=object())  # type: ignore[call-arg]


async def test_execute_gates_a_call_that_passed_once_and_was_changed_since() -> None:
    ran.clear()
    call = gated(ToolCall("a", "keep", {"note": 1}))
    call.input["note"] = math.nan  # the caller's own dict, changed after the gate
    [outcome] = await satsuma.ToolRunner([keep]).execute([call])
    assert outcome.error_kind == "invalid_args"
    assert "expected note to be a finite number, got: NaN" in outcome.text
    assert ran == []


async def test_execute_runs_checked_calls_and_refuses_what_checked_calls_refused() -> None:
    ran.clear()
    calls = checked_calls(
        [gated(ToolCall("a", "keep", {"note": 1})), ToolCall("b", "keep", {"note": math.nan})]
    )
    outcomes = await satsuma.ToolRunner([keep]).execute(calls)
    assert outcomes[0].content == "kept"
    assert outcomes[1].error_kind == "invalid_args"
    assert "expected note to be a finite number, got: NaN" in outcomes[1].text
    assert ran == [1]


class Keeper(satsuma.Agent):
    name = "keeper"
    tools = [keep]
    system = "Keep notes."


async def test_an_agent_walks_each_call_of_its_response_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran.clear()
    walked: list[Any] = []
    real = toolcall_module.plain_or_problem

    def counting(value: Any, root: str) -> Any:
        walked.append(value)
        return real(value, root)

    monkeypatch.setattr(toolcall_module, "plain_or_problem", counting)
    model = ScriptedModel(
        [Reply(tool_calls=[("keep", {"note": "one"}), ("keep", {"note": "two"})]), "done"]
    )
    async with satsuma.open_agent(Keeper, model=model) as agent:
        result = await agent.run("keep two notes")
    assert result.output == "done"
    assert sorted(ran) == ["one", "two"]
    # Once each, as the response was checked; the runner did not walk them again.
    assert walked == [{"note": "one"}, {"note": "two"}]
