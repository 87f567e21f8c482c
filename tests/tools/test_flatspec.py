"""A flat spec's arguments are checked in one loop (tools/_flatspec.py): what it gives
(the cleaned arguments, the errors) is exactly what ``check_arguments`` gives, on random
arguments, and a spec with anything more than types keeps the full check."""

from __future__ import annotations

from collections import UserDict
from functools import partial
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import satsuma
from satsuma.tools._flatspec import spec_checker
from satsuma.tools._params import compile_parameters
from satsuma.tools._spec import check_arguments

FLAT = compile_parameters(
    "flat",
    {
        "n": {"type": "integer"},
        "s": {"type": "string", "description": "Some text."},
        "b": {"type": "boolean", "required": False},
    },
)

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["n", "s", "b", "x"]), values),
    st.fixed_dictionaries({"n": st.integers(), "s": st.text(max_size=3), "b": st.booleans()}),
    values,
)


@given(arguments)
def test_the_quick_check_gives_what_the_full_check_gives(given_arguments: Any) -> None:
    quick = spec_checker(FLAT)
    assert not isinstance(quick, partial)  # the spec is flat: the quick check is used
    assert quick(given_arguments) == check_arguments(FLAT, given_arguments)


def test_valid_arguments_are_copied_in_spec_order_without_extra_keys() -> None:
    given_arguments = {"x": 1, "b": True, "s": "hi", "n": 3}
    cleaned, errors = spec_checker(FLAT)(given_arguments)
    assert errors == []
    assert list(cleaned.items()) == [("n", 3), ("s", "hi"), ("b", True)]
    assert cleaned is not given_arguments


def test_what_is_not_an_exact_value_of_its_type_gets_the_full_checks_words() -> None:
    check = spec_checker(FLAT)
    assert check({"n": True, "s": "a", "b": False}) == (
        {"n": True, "s": "a", "b": False},
        ["expected n to be an integer, got: boolean"],
    )
    for odd in ({"s": "a", "b": None}, UserDict({"n": 1, "s": "a"}), [1], "text"):
        assert check(odd) == check_arguments(FLAT, odd)


def test_a_spec_with_more_than_types_keeps_the_full_check() -> None:
    for parameters in (
        {"n": {"type": "integer", "minimum": 0}},
        {"s": {"type": "string", "enum": ["a", "b"]}},
        {"s": {"type": "string", "max_length": 3}},
        {"n": {"type": "number"}},
        {"items": {"type": "array", "items": {"type": "integer"}}},
    ):
        assert isinstance(spec_checker(compile_parameters("t", parameters)), partial)


def test_a_tool_of_plain_parameters_still_refuses_what_is_wrong() -> None:
    @satsuma.tool
    async def add(a: int, b: int) -> str:
        """Add.

        Args:
            a: A number.
            b: Another.
        """
        return str(a + b)

    definition = add.definition
    assert definition.check({"a": 1, "b": 2}) == ({"a": 1, "b": 2}, [])
    assert definition.check({"a": 1, "b": "2"})[1] == ["expected b to be an integer, got: string"]
