"""Property test of the runner's promise against generated tool behaviours.

Each example is a turn of calls, each to a tool that does one generated thing: return any
Python value (JSON values with NaN and infinities, bytes, objects, tuples of anything,
array-likes, deep nesting), raise any exception type (Exception subclasses, exception
groups, BaseException subclasses, asyncio's CancelledError, GeneratorExit, a stale
trio.Cancelled, KeyboardInterrupt, SystemExit), hang past its deadline, or swallow its
cancellation. Beside them runs a sibling that always answers "fine".

For every example: either a KeyboardInterrupt or SystemExit was chosen and it (alone)
went on, or ``execute`` returned one outcome per call, in call order, each one strict
JSON (finite numbers only) once formatted, and the sibling answered "fine".

Hypothesis drives a sync test function that calls ``trio.run`` itself, on the virtual
clock, so hanging tools cost no time.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import satsuma
from satsuma import ToolRunner
from satsuma.testing import tool_call


class _Opaque:
    pass


class _ArrayLike:
    def __eq__(self, other: object) -> Any:
        return _ArrayLike()

    def __bool__(self) -> bool:
        raise ValueError("ambiguous truth value")

    __hash__ = object.__hash__


class _Custom(BaseException):
    pass


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities included
    | st.text(max_size=5)
    | st.binary(max_size=4)
    | st.builds(_Opaque)
    | st.builds(_ArrayLike)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)
text_blocks = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)})
contents = (
    st.text(max_size=5)
    | st.lists(text_blocks | st.dictionaries(st.text(max_size=4), values, max_size=3), max_size=3)
    | values
)
returns = (
    values
    | st.tuples(st.just("ok"), contents)
    | st.tuples(st.just("ok"), contents, st.booleans() | values)
    | st.tuples(st.just("error"), st.text(max_size=5) | values)
    | st.builds(satsuma.ToolResult, contents)
    | st.integers(min_value=70, max_value=3000).map(lambda depth: ("ok", _deep(depth)))
)
raised_types = st.sampled_from(
    [
        ValueError,
        RuntimeError,
        satsuma.ToolError,
        _Unprintable,
        _Custom,
        GeneratorExit,
        asyncio.CancelledError,
        RecursionError,
        MemoryError,
    ]
)

Behaviour = tuple[str, Any]
behaviours: st.SearchStrategy[Behaviour] = st.one_of(
    returns.map(lambda value: ("return", value)),
    raised_types.map(lambda kind: ("raise", kind)),
    st.lists(raised_types, min_size=1, max_size=3).map(lambda kinds: ("group", kinds)),
    st.just(("stale_cancelled", None)),
    st.just(("hang", None)),
    st.just(("swallow_cancel", None)),
    st.sampled_from([KeyboardInterrupt, SystemExit]).map(lambda kind: ("stop", kind)),
)


class Behave(satsuma.Tool):
    name = "behave"
    description = "Do what the call's index says"
    parameters = {"index": {"type": "integer", "required": True}}
    timeout = 5
    script: list[Behaviour] = []

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        kind, value = type(self).script[args["index"]]
        await trio.sleep(0.1)  # so that siblings overlap
        if kind == "return":
            return value
        if kind == "raise":
            raise value("raised") if value is not satsuma.ToolError else value("failed")
        if kind == "group":
            raise BaseExceptionGroup("group", [k("in a group") for k in value])
        if kind == "stale_cancelled":
            kept: list[BaseException] = []
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    await trio.sleep(1)
                except trio.Cancelled as exc:
                    kept.append(exc)
            raise kept[0]
        if kind == "hang":
            await trio.sleep_forever()
        if kind == "swallow_cancel":
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                return "ignored my deadline"
        if kind == "stop":
            raise value
        raise AssertionError(kind)


class Sibling(satsuma.Tool):
    name = "sibling"
    description = "Always fine"

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(0.2)
        return "fine"


def _stops_in(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_stops_in(leaf) for leaf in error.exceptions)
    return isinstance(error, (KeyboardInterrupt, SystemExit))


@settings(max_examples=150, deadline=None)
@given(st.lists(behaviours, min_size=1, max_size=5))
def test_every_call_gets_one_sendable_outcome_whatever_its_tool_does(
    script: list[Behaviour],
) -> None:
    Behave.script = script
    calls = [tool_call("behave", {"index": index}, id=f"b{index}") for index in range(len(script))]
    calls.insert(len(calls) // 2, tool_call("sibling", {}, id="sib"))
    runner = ToolRunner([Behave, Sibling])
    stopping = any(kind == "stop" for kind, _ in script)

    async def main() -> list[satsuma.ToolOutcome]:
        return await runner.execute(calls)

    try:
        outcomes = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    except BaseException as error:
        assert stopping and _stops_in(error), repr(error)
        return
    assert not stopping
    assert [outcome.tool_use_id for outcome in outcomes] == [call.id for call in calls]
    by_id = {outcome.tool_use_id: outcome for outcome in outcomes}
    assert by_id["sib"].content == "fine" and not by_id["sib"].is_error
    text = json.dumps(satsuma.format_results(outcomes), allow_nan=False)
    assert json.loads(text)  # strict JSON, finite numbers only
    for index, (kind, _) in enumerate(script):
        outcome = by_id[f"b{index}"]
        if kind in ("raise", "group", "stale_cancelled"):
            assert outcome.error_kind in ("crashed", "failed"), outcome
        elif kind in ("hang", "swallow_cancel"):
            assert outcome.error_kind == "timeout", outcome
    assert all(math.isfinite(outcome.duration) for outcome in outcomes)
