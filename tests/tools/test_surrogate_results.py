"""The results gate with a lone surrogate at every place of a result (issue 29, item 4's
class): the outcome holds U+FFFD there, and what is sent and shown is valid UTF-8."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import satsuma
from satsuma import ToolOutcome, ToolResult, ToolRunner
from satsuma.testing import tool_call

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


# Where a text can sit in what a tool returns.
PLACES: dict[str, Callable[[str], Any]] = {
    "a str": lambda t: t,
    "ok content": lambda t: ("ok", t),
    "ok with is_error": lambda t: ("ok", t, True),
    "an error reason": lambda t: ("error", t),
    "a text block": lambda t: ("ok", [{"type": "text", "text": t}]),
    "a block's extra key": lambda t: ("ok", [{"type": "text", "text": "x", t: 1}]),
    "a block's nested value": lambda t: (
        "ok",
        [{"type": "text", "text": "x", "meta": {"deep": [t]}}],
    ),
    "a ToolResult": lambda t: ToolResult(t),
    "a ToolResult's details key": lambda t: ToolResult("x", details={t: 1}),
    "a str subclass": lambda t: type("S", (str,), {})(t),
}


class _Returns(satsuma.Tool):
    name = "returns"
    description = "Returns the value under test."
    parameters: dict[str, Any] = {}
    value: Any = None

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return type(self).value


def _valid_everywhere(value: Any) -> None:
    json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(PLACES)), st.text(max_size=20), SURROGATES, st.text(max_size=20))
def test_a_lone_surrogate_anywhere_in_a_result_is_replaced(
    place: str, before: str, bad: str, after: str
) -> None:
    class These(_Returns):
        value = PLACES[place](before + bad + after)

    async def main() -> list[ToolOutcome]:
        return await ToolRunner([These]).execute([tool_call("returns", {})])

    (outcome,) = trio.run(main)
    assert outcome.error_kind in (None, "failed"), outcome
    _valid_everywhere(satsuma.format_results([outcome]))
    _valid_everywhere(dict(outcome.details or {}))
    assert "\ufffd" in json.dumps(outcome.content, ensure_ascii=False) or place.endswith(
        "details key"
    )
