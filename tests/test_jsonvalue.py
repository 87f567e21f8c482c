"""json_problem's quick check agrees with plain_json, the full one, on every value."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma._jsonvalue import MAX_DEPTH, JsonProblem, json_problem, plain_json

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.binary(max_size=3),  # not JSON
)
keys = st.one_of(st.text(max_size=3), st.integers(0, 3))  # an int key is not JSON

values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(MappingProxyType),
    ),
    max_leaves=30,
)


def full_problem(value: object) -> str | None:
    try:
        plain_json(value, "content")
    except JsonProblem as problem:
        return str(problem)
    return None


@settings(max_examples=500)
@given(values)
def test_the_quick_check_agrees_with_the_full_one(value: object) -> None:
    assert json_problem(value, "content") == full_problem(value)


def nested(depth: int, leaf: object = 1) -> object:
    value: object = leaf
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


def test_depth_and_non_finite_numbers_are_found_at_any_place() -> None:
    assert json_problem(nested(MAX_DEPTH), "content") is None
    assert json_problem(nested(MAX_DEPTH + 1), "content") == full_problem(nested(MAX_DEPTH + 1))
    assert "nested more than" in (json_problem(nested(MAX_DEPTH + 1), "content") or "")
    deep_nan = nested(MAX_DEPTH, math.nan)
    assert json_problem(deep_nan, "content") == full_problem(deep_nan) is not None
    assert json_problem({"n": 1, "m": [1.5, "x", None, True]}, "") is None
