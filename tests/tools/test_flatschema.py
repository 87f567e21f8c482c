"""The fast check of flat raw schemas gives exactly jsonschema's errors, as RawSchema
renders them: the same texts, in the same order, on random schemas and arguments."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma.tools._flatschema import flat_schema
from satsuma.tools._rawschema import RawSchema, compile_input_schema

NAMES = ["a", "b", ""]

# Few distinct values, so that a value often meets a bound exactly or an enum's member.
numbers = st.one_of(
    st.sampled_from([-1, 0, 1, 1.0, 0.5, 2**70]), st.integers(), st.floats(allow_nan=False)
)
strings = st.one_of(st.sampled_from(["", "a", "ab", "\u00e9\u00e9\u00e9"]), st.text(max_size=4))


def _keyword() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("type"), st.sampled_from(["string", "integer", "number", "boolean"])),
        st.tuples(st.just("enum"), st.lists(strings, max_size=3)),
        st.tuples(
            st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
            numbers,
        ),
        st.tuples(st.sampled_from(["minLength", "maxLength"]), st.integers(0, 4)),
        st.tuples(st.sampled_from(["description", "title", "format"]), st.just("x")),
    )


# A property's keywords in a random order: jsonschema applies them in the schema's order.
property_schemas = st.lists(_keyword(), max_size=5, unique_by=lambda pair: pair[0]).map(dict)


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    properties = draw(st.dictionaries(st.sampled_from(NAMES), property_schemas, max_size=4))
    top: list[tuple[str, Any]] = [("type", "object"), ("properties", properties)]
    if draw(st.booleans()):
        top.append(("required", draw(st.lists(st.sampled_from(NAMES), unique=True))))
    if draw(st.booleans()):
        top.append(("additionalProperties", True))
    if draw(st.booleans()):
        top.append(("$schema", "https://json-schema.org/draft/2020-12/schema"))
    return dict(draw(st.permutations(top)))


values: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.floats(),  # NaN and infinities too: refused before either check
    strings,
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(strings, st.integers(0, 3), max_size=2),
)
arguments = st.dictionaries(st.sampled_from([*NAMES, "extra"]), values, max_size=6)


def _slow(raw: RawSchema) -> RawSchema:
    return attrs.evolve(raw, fast=None)


@settings(max_examples=1000, deadline=None)
@given(schemas(), st.lists(arguments, min_size=1, max_size=8))
def test_the_fast_check_gives_jsonschemas_errors(
    schema: dict[str, Any], calls: list[dict[str, Any]]
) -> None:
    raw = compile_input_schema("t", schema)
    assert flat_schema(schema) is not None
    slow = _slow(raw)
    for args in calls:
        assert raw.check(args) == slow.check(args)


@pytest.mark.parametrize(
    ("given", "errors"),
    [
        ({"text": "x", "count": 3}, []),
        (
            {"count": -1, "tags": 2, "mode": "z"},
            [
                "count must be >= 0, got: -1",
                'mode must be one of ["fast", "slow"], got: "z"',
                "missing required parameter: text",
            ],
        ),
        (
            {"text": "", "count": 3.0},
            [
                "text must be at least 1 character, got: 0",
                "expected count to be an integer, got: number",
            ],
        ),
    ],
)
def test_known_texts(given: dict[str, Any], errors: list[str]) -> None:
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "count": {"type": "integer", "minimum": 0},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
        },
        "required": ["text", "count"],
    }
    raw = compile_input_schema("t", schema)
    assert raw.check(given)[1] == errors
    assert _slow(raw).check(given)[1] == errors


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
        {"type": "object", "properties": {"a": {"enum": [1, "x"]}}},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}},
        {"type": "object", "additionalProperties": False},
        {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2.0}}},
        {"type": "object", "minProperties": 1},
        {"type": "object", "properties": {"a": True}},
    ],
)
def test_anything_else_keeps_jsonschema(schema: dict[str, Any]) -> None:
    assert flat_schema(schema) is None
    raw = compile_input_schema("t", schema)
    assert raw == _slow(raw)  # no fast check was made
