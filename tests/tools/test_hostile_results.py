"""The results gate against hostile objects (issue 29, item 4).

A result may be built of the tool's own classes: subclasses of str, bytes, dict, list,
tuple, int and float whose methods raise, lie (a wrong type, a huge length, an endless
iterator, an ``==`` that says yes to everything) or whose ``__class__`` pretends to be
something else, at any place in the result (the result itself, the ``("ok", ...)`` tuple,
its tag, its content, a block, a value nested deep inside a block, a ToolResult's
details). Whatever it is, the call ends as one outcome, the sibling that ran beside it
keeps its own, and what the outcome holds is made of built-in values only: nothing after
the gate (truncation, events, the journal, the codec) can run the tool's code again.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import trio
from hypothesis import given, reject, settings
from hypothesis import strategies as st

import satsuma
from satsuma import ToolOutcome, ToolResult, ToolRunner
from satsuma.testing import tool_call
from satsuma.tools import ToolCallEnd


class Hostile(RuntimeError):
    """What the hostile methods raise."""


def _raises(*args: Any, **kwargs: Any) -> Any:
    raise Hostile("hostile")


def _wrong_type(*args: Any, **kwargs: Any) -> Any:
    return object()


def _endless(*args: Any, **kwargs: Any) -> Any:
    return itertools.count()


def _huge(*args: Any, **kwargs: Any) -> Any:
    return 2**62


def _always(*args: Any, **kwargs: Any) -> Any:
    return True


def _liar_str(*args: Any, **kwargs: Any) -> Any:
    return _LiarStr("text")


class _LiarStr(str):
    """A str whose every reading lies or raises: returned by the methods above."""

    __len__ = _raises
    __eq__ = _always
    __hash__ = _raises
    __format__ = _raises
    __str__ = _raises
    __iter__ = _endless


BEHAVIOURS: dict[str, Callable[..., Any]] = {
    "raises": _raises,
    "wrong type": _wrong_type,
    "endless": _endless,
    "huge": _huge,
    "always equal": _always,
    "a lying str": _liar_str,
}

METHODS = [
    "__len__",
    "__str__",
    "__repr__",
    "__format__",
    "__iter__",
    "__eq__",
    "__ne__",
    "__hash__",
    "__bool__",
    "__getitem__",
    "__contains__",
    "__int__",
    "__index__",
    "__float__",
    "encode",
    "keys",
    "items",
    "values",
    "get",
    "copy",
    "__class__",
]

# A valid-looking value of each built-in, which the hostile subclass wraps.
BASES: dict[type, Any] = {
    str: "text",
    bytes: b"text",
    dict: {"type": "text", "text": "hi"},
    list: [{"type": "text", "text": "hi"}],
    tuple: ("ok", "hi"),
    int: 7,
    float: 1.5,
}


def hostile(base: type, method: str, behaviour: str, value: Any = None) -> Any:
    """An instance of a subclass of ``base`` whose ``method`` behaves as ``behaviour``."""
    impl = BEHAVIOURS[behaviour]
    namespace: dict[str, Any] = {}
    if method == "__class__":
        # isinstance() reads __class__: a property can claim another class, or raise.
        namespace[method] = property(impl if behaviour == "raises" else (lambda self: str))
    else:
        namespace[method] = impl
    cls = type(f"Hostile{base.__name__.title()}", (base,), namespace)
    return cls(BASES[base] if value is None else value)


def _block(text: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, **extra}


def _nested(leaf: Any, depth: int = 10) -> Any:
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


# Where the hostile object goes: each takes a factory (base, value) -> hostile instance.
Place = Callable[[Callable[[type, Any], Any]], Any]
PLACES: dict[str, Place] = {
    "the result": lambda h: h(str, "text"),
    "the ok tuple": lambda h: h(tuple, ("ok", "hi")),
    "the ok tuple with is_error": lambda h: h(tuple, ("ok", "hi", False)),
    "the error tuple": lambda h: h(tuple, ("error", "bad")),
    "the tag": lambda h: (h(str, "ok"), "hi"),
    "the error reason": lambda h: ("error", h(str, "bad")),
    "is_error": lambda h: ("ok", "hi", h(int, 1)),
    "the content": lambda h: ("ok", h(str, "hi")),
    "bytes content": lambda h: ("ok", h(bytes, b"hi")),
    "the block list": lambda h: ("ok", h(list, [_block()])),
    "the block list as a tuple": lambda h: ("ok", h(tuple, (_block(),))),
    "a block": lambda h: ("ok", [h(dict, _block())]),
    "a block's type": lambda h: ("ok", [{"type": h(str, "text"), "text": "hi"}]),
    "a block's text": lambda h: ("ok", [_block(h(str, "hi"))]),
    "a block's key": lambda h: ("ok", [{h(str, "type"): "text", "text": "hi"}]),
    "an image source": lambda h: (
        "ok",
        [
            {
                "type": "image",
                "source": h(dict, {"type": "base64", "media_type": "image/png", "data": "AA=="}),
            }
        ],
    ),
    "an image media type": lambda h: (
        "ok",
        [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": h(str, "image/png"), "data": "AA=="},
            }
        ],
    ),
    "a number deep in a block": lambda h: ("ok", [_block(extra=_nested(h(int, 7)))]),
    "a float deep in a block": lambda h: ("ok", [_block(extra=_nested(h(float, 1.5)))]),
    "a list deep in a block": lambda h: ("ok", [_block(extra=_nested(h(list, [1, 2])))]),
    "a dict deep in a block": lambda h: ("ok", [_block(extra=_nested(h(dict, {"a": 1})))]),
    "a tuple deep in a block": lambda h: ("ok", [_block(extra=_nested(h(tuple, (1, 2))))]),
    "a ToolResult's content": lambda h: ToolResult(h(str, "hi")),
    "a ToolResult's blocks": lambda h: ToolResult(h(list, [_block()])),
    "a ToolResult's details": lambda h: ToolResult("hi", details=h(dict, {"k": "v"})),
    "a ToolResult's details key": lambda h: ToolResult("hi", details={h(str, "k"): 1}),
}


class Returns(satsuma.Tool):
    name = "returns"
    description = "Return the value the test set"
    value: Any = None

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return type(self).value


class Sibling(satsuma.Tool):
    name = "sibling"
    description = "Answer after its hostile sibling has returned"

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(0.01)
        return ("ok", [{"type": "text", "text": "sibling done"}])


def assert_plain(value: Any, where: str = "content") -> None:
    """Every part of ``value`` is an exact built-in JSON value."""
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return
    if kind is list:
        for index, item in enumerate(value):
            assert_plain(item, f"{where}[{index}]")
        return
    assert kind is dict, f"{where} is a {kind.__name__}"
    for key, item in value.items():
        assert type(key) is str, f"{where} has a key of type {type(key).__name__}"
        assert_plain(item, f"{where}.{key}")


def run_beside_a_sibling(result: Any) -> tuple[ToolOutcome, ToolOutcome, list[ToolOutcome]]:
    class These(Returns):
        value = result

    ended: list[ToolOutcome] = []

    def on_event(event: object) -> None:
        if isinstance(event, ToolCallEnd):
            ended.append(event.outcome)

    # max_result_chars small enough that truncation reads every outcome's text.
    runner = ToolRunner([These, Sibling], max_result_chars=100, events=on_event)

    async def main() -> list[ToolOutcome]:
        return await runner.execute([tool_call("returns", {}), tool_call("sibling", {})])

    outcomes = trio.run(main)
    return outcomes[0], outcomes[1], ended


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(sorted(PLACES)),
    st.sampled_from(METHODS),
    st.sampled_from(sorted(BEHAVIOURS)),
)
def test_a_hostile_result_is_that_calls_outcome_and_the_sibling_keeps_its_own(
    place: str, method: str, behaviour: str
) -> None:
    try:
        result = PLACES[place](lambda base, value: hostile(base, method, behaviour, value))
    except Exception:  # a key whose __hash__ raises cannot be put in a dict at all
        reject()
    outcome, sibling, ended = run_beside_a_sibling(result)
    assert sibling.content == [{"type": "text", "text": "sibling done"}]
    assert sibling.error_kind is None
    assert outcome.error_kind in (None, "failed", "invalid_result", "crashed"), outcome
    assert type(outcome.is_error) is bool
    assert type(outcome.tool_use_id) is str
    assert_plain(outcome.content)
    if outcome.details is not None:
        assert type(outcome.details) is dict
        assert all(type(key) is str for key in outcome.details)
    # Events saw the same plain outcomes, and both go to the API as strict JSON.
    assert sorted(ended, key=lambda o: o.tool_name) == [outcome, sibling]
    json.dumps(satsuma.format_results([outcome, sibling]), allow_nan=False)


def test_the_issue_repro_a_str_whose_len_raises_is_read_from_its_storage() -> None:
    class S(str):
        def __len__(self) -> int:
            raise ZeroDivisionError

    outcome, sibling, _ = run_beside_a_sibling(S("answer"))
    assert sibling.error_kind is None
    assert outcome.content == "answer"
    assert type(outcome.content) is str


def test_a_lying_tag_cannot_pass_a_result_off_as_ok() -> None:
    class Yes(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    outcome, _, _ = run_beside_a_sibling((Yes("nope"), "hi"))
    assert outcome.error_kind == "invalid_result"


def test_a_list_that_claims_a_huge_length_is_copied_as_it_is() -> None:
    class Huge(list[Any]):
        def __len__(self) -> int:
            return 2**62

        def __iter__(self) -> Any:
            return itertools.count()

    outcome, _, _ = run_beside_a_sibling(("ok", Huge([_block("a"), _block("b")])))
    assert outcome.content == [_block("a"), _block("b")]


def test_an_after_call_hook_outcome_passes_the_same_gate() -> None:
    class S(str):
        def __len__(self) -> int:
            raise ZeroDivisionError

    class Replaces(satsuma.ToolHook):
        async def after_call(self, call: satsuma.ToolCall, outcome: ToolOutcome) -> ToolOutcome:
            return ToolOutcome(
                tool_use_id=call.id, tool_name=call.name, content=S("swapped"), is_error=False
            )

    class Forges(satsuma.ToolHook):
        async def after_call(self, call: satsuma.ToolCall, outcome: ToolOutcome) -> ToolOutcome:
            return ToolOutcome(
                tool_use_id=call.id,
                tool_name=call.name,
                content=[{"type": "text", "text": "x", "n": object()}],
                is_error=False,
            )

    async def main(hook: satsuma.ToolHook) -> list[ToolOutcome]:
        runner = ToolRunner([Returns, Sibling], hooks=hook, max_result_chars=100)
        return await runner.execute([tool_call("returns", {}), tool_call("sibling", {})])

    Returns.value = "original"
    replaced = trio.run(main, Replaces())
    assert [o.content for o in replaced] == ["swapped", "swapped"]
    assert all(type(o.content) is str for o in replaced)
    forged = trio.run(main, Forges())
    assert all(o.error_kind == "denied" for o in forged)
    assert "content[0].n is an object" in forged[0].text


def test_progress_and_updates_reach_events_as_plain_values() -> None:
    class S(str):
        def __len__(self) -> int:
            raise ZeroDivisionError

        def __format__(self, spec: str) -> str:
            raise ZeroDivisionError

    class Reports(satsuma.Tool):
        name = "reports"
        description = "Report progress and a partial result"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            ctx.progress(S("halfway"))
            ctx.update(hostile(list, "__iter__", "endless", [_block(S("part"))]))
            return "done"

    seen: list[Any] = []
    runner = ToolRunner([Reports], events=seen.append)

    async def main() -> list[ToolOutcome]:
        return await runner.execute([tool_call("reports", {})])

    (outcome,) = trio.run(main)
    assert outcome.content == "done"
    (progress,) = [e for e in seen if isinstance(e, satsuma.ToolProgress)]
    (update,) = [e for e in seen if isinstance(e, satsuma.ToolUpdate)]
    assert type(progress.text) is str and progress.text == "halfway"
    assert update.content == [_block("part")]
    assert_plain(update.content)
