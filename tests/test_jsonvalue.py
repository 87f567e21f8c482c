"""json_problem's quick check agrees with plain_json, the full one, on every value."""

from __future__ import annotations

import math
from collections.abc import Mapping
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


def test_an_int_python_cannot_write_is_refused_and_one_it_can_passes() -> None:
    assert json_problem({"n": 10**5000}, "") == "expected n to be a number of at most 4300 digits"
    assert json_problem({"n": -(10**4299)}, "") is None
    assert json_problem({"n": 10**4300 - 1}, "") is None
    assert json_problem({"n": 10**4300}, "") is not None


def test_the_copy_holds_only_exact_built_ins() -> None:
    class S(str):
        pass

    class I(int):  # noqa: E742  # the name says what it is, as S does
        pass

    class L(list[Any]):
        def __iter__(self) -> Any:
            raise RuntimeError("never called")

    copied = plain_json({S("k"): L([S("v"), I(3), (1.5,)])}, "value")
    assert copied == {"k": ["v", 3, [1.5]]}
    assert type(next(iter(copied))) is str
    assert [type(item) for item in copied["k"]] == [str, int, list]


def test_a_mapping_whose_items_raise_is_a_problem_not_an_exception() -> None:
    class Hostile(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise KeyError(key)

        def __iter__(self) -> Any:
            raise RuntimeError("no")

        def __len__(self) -> int:
            return 1

    assert json_problem({"m": Hostile()}, "") == "m could not be read: RuntimeError"
