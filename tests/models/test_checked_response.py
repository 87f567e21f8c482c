"""A whole response's check (models/_responses.py) without its per-call and per-response
overheads: its calls pass the JSON gate in one loop (``gated_all``), which gives what
``gated`` gives each call, and the checked response is built field by field, carrying
every field of the response it checked."""

from __future__ import annotations

import math
import sys
from types import FrameType
from typing import Any

import attrs
from hypothesis import example, given
from hypothesis import strategies as st

from satsuma import ModelResponse, ToolCall
from satsuma._messages import Usage
from satsuma._toolcall import checked_calls, gated, gated_all
from satsuma.models._responses import checked_plain_response, checked_response


class Named(str):
    """A custom Model's str subclass, which the gate makes a plain str."""


ids = st.sampled_from(["a", "toolu_1", "é", "\ud800", Named("n")])
inputs = st.sampled_from(
    [{}, {"n": 1}, {"x": math.nan}, '{"n": 2}', b"{}", [1], {"deep": [[[]]]}, "not json"]
)


@given(st.lists(st.tuples(ids, ids, inputs, st.booleans(), st.booleans()), max_size=5))
@example([("\ud800", "a", {}, False, True), ("a", "\ud800", {}, False, True)])
@example(
    [
        ("a", "b", {}, True, True),
        (Named("n"), "m", {}, False, True),
        ("o", Named("p"), {}, False, True),
    ]
)
def test_the_one_loop_gates_each_call_as_gated_does(
    specs: list[tuple[str, str, Any, bool, bool]],
) -> None:
    # Two sets of equal calls over the same inputs: the gate marks the calls it passes.
    inputs = [dict(i) if isinstance(i, dict) else i for _, _, i, _, _ in specs]
    plain = {
        id(arguments)
        for arguments, (_, _, _, _, found_plain) in zip(inputs, specs, strict=True)
        if found_plain
        and type(arguments) is dict
        and not any(isinstance(v, float) and math.isnan(v) for v in arguments.values())
    }

    def made() -> list[ToolCall]:
        return [
            ToolCall(call_id, name, arguments, refused="no" if refused else None)
            for arguments, (call_id, name, _, refused, _) in zip(inputs, specs, strict=True)
        ]

    together = gated_all(made(), plain)
    alone = [gated(call, plain_input=id(call.input) in plain) for call in made()]
    assert together == tuple(alone)
    for one, other in zip(together, alone, strict=True):
        assert type(one.id) is type(other.id) and type(one.name) is type(other.name)
        # Marked as passed exactly when gated marks it (checked_calls keeps those as
        # they are, and gates the others).
        assert one._gate is other._gate


def _response(calls: int) -> ModelResponse:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "calling"},
        {"type": "text", "text": ""},
    ]
    made = []
    for index in range(calls):
        arguments = {"n": index}
        blocks.append({"type": "tool_use", "id": f"t{index}", "name": "echo", "input": arguments})
        made.append(ToolCall(f"t{index}", "echo", arguments))
    return ModelResponse(
        content=tuple(blocks),
        calls=tuple(made),
        stop_reason="tool_use",
        usage=Usage(input_tokens=11, output_tokens=7),
        model="claude-test",
        id="msg_1",
    )


def test_a_checked_response_carries_every_field() -> None:
    # A field added to ModelResponse must be carried by _rebuilt too: this list fails
    # until it is.
    assert [field.name for field in attrs.fields(ModelResponse)] == [
        "content",
        "calls",
        "stop_reason",
        "usage",
        "model",
        "id",
    ]
    response = _response(2)
    for checked in (checked_plain_response(response), checked_response(response, fresh=True)):
        assert type(checked) is ModelResponse
        assert (checked.stop_reason, checked.usage, checked.model, checked.id) == (
            "tool_use",
            Usage(input_tokens=11, output_tokens=7),
            "claude-test",
            "msg_1",
        )
        assert [block.get("text") for block in checked.content] == ["calling", None, None]
        assert checked.calls == response.calls
        assert checked_response(checked) is checked  # recorded as checked


@attrs.frozen
class Tagged(ModelResponse):
    tag: str = ""


def test_a_subclass_of_model_response_keeps_its_class_and_fields() -> None:
    base = _response(1)
    response = Tagged(content=base.content, calls=base.calls, id="msg_2", tag="mine")
    checked = checked_plain_response(response)
    assert type(checked) is Tagged
    assert (checked.tag, checked.id) == ("mine", "msg_2")


def test_the_calls_of_a_plain_response_are_gated_without_a_call_each() -> None:
    response = _response(3)
    entered = [0]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is gated.__code__:
            entered[0] += 1

    sys.setprofile(profile)
    try:
        checked = checked_plain_response(response)
    finally:
        sys.setprofile(None)
    assert entered == [0]
    assert all(checked_calls([call])[0] is call for call in checked.calls)
