"""A whole response's blocks are copied and judged in one walk (models/_plaincopy.py):
``plain_block`` gives the codec's copy (``without_none``) when that copy is plain JSON as
the gate judges it, and None otherwise (then also for an int past its quick bound, which
the full check judges), on random blocks."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from satsuma._jsonvalue import is_plain
from satsuma.models._plaincopy import plain_block, without_none

edges = st.sampled_from(
    [10**18 - 1, 10**18, -(10**18), math.nan, math.inf, -math.inf, "\ud800", "a\udc00", "é"]
)
scalars = st.one_of(
    edges, st.none(), st.booleans(), st.integers(-9, 9), st.floats(), st.text(max_size=3)
)
keys = st.one_of(st.sampled_from(["type", "id", "input", "\udfff"]), st.text(max_size=2))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=12,
)


def _big_int(value: Any) -> bool:
    if type(value) is int:
        return abs(value) >= 10**18
    if isinstance(value, dict):
        return any(_big_int(member) for member in value.values())
    if isinstance(value, list):
        return any(_big_int(member) for member in value)
    return False


@given(st.dictionaries(keys, values, max_size=4))
def test_a_block_is_copied_plain_exactly_when_its_copy_is_plain(block: dict[str, Any]) -> None:
    copied = plain_block(block)
    expected = without_none(block)
    if copied is None:
        assert not is_plain(expected) or _big_int(expected)
    else:
        assert is_plain(copied)
        # NaN is never equal to itself: compared as JSON text (which a plain copy has).
        assert json.dumps(copied) == json.dumps(expected)
        assert copied is not block


def test_what_is_not_a_dict_or_is_nested_deep_takes_the_long_way() -> None:
    assert plain_block(["type", "text"]) is None
    assert plain_block("text") is None
    deep: Any = {"type": "tool_use", "input": {}}
    inner = deep["input"]
    for _ in range(60):
        inner["x"] = {}
        inner = inner["x"]
    assert plain_block(deep) is None
    assert without_none(deep) == deep


def test_null_fields_are_left_out_and_list_members_kept() -> None:
    block = {"type": "text", "text": "hi", "citations": None, "list": [None, 1.5, True]}
    assert plain_block(block) == {"type": "text", "text": "hi", "list": [None, 1.5, True]}
