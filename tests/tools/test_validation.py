"""Argument validation, seen from outside: what the model reads when its arguments are
wrong, and what ``run`` receives when they are right (DESIGN.md, "Validation of
arguments").

Every tool here answers ``("ok", json.dumps(args, sort_keys=True))``, so a successful
outcome's content is exactly the arguments ``run`` was given.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import satsuma
import satsuma.tools._params
import satsuma.tools._tool
from satsuma import Tool, ToolCall, ToolContext, ToolOutcome, ToolRunner
from satsuma.testing import run_tool

PREFIX = "Error: Invalid arguments: "


def make_tool(parameters: Any, tool_name: str = "probe") -> type[Tool]:
    """A tool whose result is the JSON of the arguments ``run`` received."""

    async def run(self: Tool, args: dict[str, Any], ctx: ToolContext) -> Any:
        return ("ok", json.dumps(args, sort_keys=True))

    return type(
        "Probe",
        (Tool,),
        {
            "name": tool_name,
            "description": "Echo the validated arguments",
            "parameters": parameters,
            "run": run,
        },
    )


async def received(tool: type[Tool], args: Any) -> Any:
    """Run ``tool`` with ``args``; it must succeed; return what ``run`` received."""
    outcome = await run_tool(tool, args)
    assert outcome.is_error is False, outcome.content
    assert outcome.error_kind is None
    assert isinstance(outcome.content, str)
    return json.loads(outcome.content)


async def rejected(tool: type[Tool], args: Any) -> str:
    """Run ``tool`` with ``args``; it must be refused as invalid; return the content."""
    outcome = await run_tool(tool, args)
    assert outcome.is_error is True, outcome.content
    assert outcome.error_kind == "invalid_args"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith(PREFIX)
    return outcome.content


def invalid(*errors: str) -> str:
    return PREFIX + "; ".join(errors)


# ---------------------------------------------------------------------------
# Required parameters


CONFIG = make_tool(
    {
        "config": {
            "type": "object",
            "required": True,
            "properties": {
                "host": {"type": "string", "required": True},
                "port": {"type": "integer", "default": 22},
            },
        },
    }
)


async def test_missing_nested_required_parameter_is_named_by_its_path() -> None:
    content = await rejected(CONFIG, {"config": {"port": 1}})
    assert content == "Error: Invalid arguments: missing required parameter: config.host"


async def test_missing_top_level_required_parameter() -> None:
    assert await rejected(CONFIG, {}) == invalid("missing required parameter: config")


async def test_invalid_arguments_outcome_fields() -> None:
    outcome = await run_tool(CONFIG, {})
    assert isinstance(outcome, ToolOutcome)
    assert outcome.tool_name == "probe"
    assert outcome.is_error is True
    assert outcome.error_kind == "invalid_args"
    assert outcome.content == invalid("missing required parameter: config")


async def test_run_is_not_called_when_the_arguments_are_invalid() -> None:
    calls: list[Any] = []

    class Recorder(Tool):
        name = "recorder"
        description = "Record calls"
        parameters = {"n": {"type": "integer", "required": True}}

        async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
            calls.append(args)
            return ("ok", "ran")

    outcome = await run_tool(Recorder, {"n": "1"})
    assert outcome.error_kind == "invalid_args"
    assert calls == []
    outcome = await run_tool(Recorder, {"n": 1})
    assert outcome.content == "ran"
    assert calls == [{"n": 1}]


# ---------------------------------------------------------------------------
# Types: no coercion


COUNT = make_tool({"count": {"type": "integer"}})
FLAG = make_tool({"flag": {"type": "boolean"}})
RATIO = make_tool({"ratio": {"type": "number"}})
NAME = make_tool({"name": {"type": "string"}})


async def test_float_is_not_an_integer_even_when_whole() -> None:
    assert await rejected(COUNT, {"count": 3.0}) == (
        "Error: Invalid arguments: expected count to be an integer, got: number"
    )


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (True, "boolean"),
        (False, "boolean"),
        ("3", "string"),
        (2.5, "number"),
        ([3], "array"),
        ({"n": 3}, "object"),
    ],
)
async def test_integer_rejects_other_types(value: object, got: str) -> None:
    assert await rejected(COUNT, {"count": value}) == invalid(
        f"expected count to be an integer, got: {got}"
    )


@pytest.mark.parametrize("value", [0, -7, 3, 10**30])
async def test_integer_accepts_ints(value: int) -> None:
    assert await received(COUNT, {"count": value}) == {"count": value}


@pytest.mark.parametrize(
    ("value", "got"),
    [("true", "string"), ("false", "string"), (1, "integer"), (0, "integer"), (1.0, "number")],
)
async def test_boolean_rejects_lookalikes(value: object, got: str) -> None:
    assert await rejected(FLAG, {"flag": value}) == invalid(
        f"expected flag to be a boolean, got: {got}"
    )


@pytest.mark.parametrize("value", [True, False])
async def test_boolean_accepts_booleans(value: bool) -> None:
    assert await received(FLAG, {"flag": value}) == {"flag": value}


@pytest.mark.parametrize("value", [3, 0, -2, 2.5, -0.125])
async def test_number_accepts_integers_and_floats(value: float) -> None:
    got = await received(RATIO, {"ratio": value})
    assert got == {"ratio": value}
    assert type(got["ratio"]) is type(value)


@pytest.mark.parametrize(
    ("value", "got"), [(True, "boolean"), ("1.5", "string"), ([], "array"), ({}, "object")]
)
async def test_number_rejects_other_types(value: object, got: str) -> None:
    assert await rejected(RATIO, {"ratio": value}) == invalid(
        f"expected ratio to be a number, got: {got}"
    )


@pytest.mark.parametrize(
    ("value", "got"),
    [(5, "integer"), (5.5, "number"), (True, "boolean"), (["a"], "array"), ({}, "object")],
)
async def test_string_rejects_other_types(value: object, got: str) -> None:
    assert await rejected(NAME, {"name": value}) == invalid(
        f"expected name to be a string, got: {got}"
    )


async def test_string_accepts_strings_including_empty_and_json_lookalikes() -> None:
    for value in ["", "5", "true", "null", "héllo"]:
        assert await received(NAME, {"name": value}) == {"name": value}


# ---------------------------------------------------------------------------
# Arrays


TAGS = make_tool({"tags": {"type": "array", "items": {"type": "string"}}})


async def test_array_item_of_the_wrong_type_is_named_by_its_index() -> None:
    assert await rejected(TAGS, {"tags": ["a", 1, "c"]}) == (
        "Error: Invalid arguments: expected tags[1] to be a string, got: integer"
    )


async def test_every_bad_item_is_reported_in_index_order() -> None:
    assert await rejected(TAGS, {"tags": [1, "a", True, None, "b", []]}) == invalid(
        "expected tags[0] to be a string, got: integer",
        "expected tags[2] to be a string, got: boolean",
        "expected tags[3] to be a string, got: null",
        "expected tags[5] to be a string, got: array",
    )


@pytest.mark.parametrize(
    ("value", "got"), [("a", "string"), ({"0": "a"}, "object"), (1, "integer")]
)
async def test_array_rejects_non_arrays(value: object, got: str) -> None:
    assert await rejected(TAGS, {"tags": value}) == invalid(
        f"expected tags to be an array, got: {got}"
    )


async def test_array_without_items_spec_accepts_any_items() -> None:
    tool = make_tool({"stuff": {"type": "array"}})
    value = [1, "a", None, [2.5], {"k": None}]
    assert await received(tool, {"stuff": value}) == {"stuff": value}


ITEMS = make_tool(
    {
        "items": {
            "type": "array",
            "required": True,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "required": True},
                    "qty": {"type": "integer", "minimum": 1},
                },
            },
        }
    }
)


async def test_array_of_objects_paths() -> None:
    content = await rejected(
        ITEMS,
        {"items": [{"name": "a"}, {"name": "b", "qty": 2}, {"qty": 1}, {"name": 7, "qty": 0}]},
    )
    assert content == invalid(
        "missing required parameter: items[2].name",
        "expected items[3].name to be a string, got: integer",
        "items[3].qty must be >= 1, got: 0",
    )


async def test_array_of_objects_item_that_is_not_an_object() -> None:
    assert await rejected(ITEMS, {"items": [{"name": "a"}, "b", None]}) == invalid(
        "expected items[1] to be an object, got: string",
        "expected items[2] to be an object, got: null",
    )


async def test_array_of_objects_cleaned_items() -> None:
    got = await received(
        ITEMS,
        {"items": [{"name": "a", "extra": 1}, {"name": "b", "qty": None}, {"name": "c", "qty": 3}]},
    )
    assert got == {"items": [{"name": "a"}, {"name": "b"}, {"name": "c", "qty": 3}]}


async def test_array_of_arrays_paths() -> None:
    tool = make_tool(
        {"grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}}
    )
    assert await rejected(tool, {"grid": [[1, 2], [3, "x"], 4]}) == invalid(
        "expected grid[1][1] to be an integer, got: string",
        "expected grid[2] to be an array, got: integer",
    )


# ---------------------------------------------------------------------------
# Nested objects


NESTED = make_tool(
    {
        "outer": {
            "type": "object",
            "properties": {
                "inner": {
                    "type": "object",
                    "required": True,
                    "properties": {
                        "leaf": {"type": "integer", "required": True},
                        "note": {"type": "string"},
                    },
                },
                "label": {"type": "string"},
            },
        }
    }
)


async def test_nested_object_paths() -> None:
    assert await rejected(NESTED, {"outer": {"inner": {"leaf": "1"}}}) == invalid(
        "expected outer.inner.leaf to be an integer, got: string"
    )
    assert await rejected(NESTED, {"outer": {"inner": {}}}) == invalid(
        "missing required parameter: outer.inner.leaf"
    )
    assert await rejected(NESTED, {"outer": {"inner": [1]}}) == invalid(
        "expected outer.inner to be an object, got: array"
    )
    assert await rejected(NESTED, {"outer": {"label": "x"}}) == invalid(
        "missing required parameter: outer.inner"
    )
    assert await rejected(NESTED, {"outer": "x"}) == invalid(
        "expected outer to be an object, got: string"
    )


async def test_nested_object_valid() -> None:
    got = await received(NESTED, {"outer": {"inner": {"leaf": 1, "note": "n"}, "label": "l"}})
    assert got == {"outer": {"inner": {"leaf": 1, "note": "n"}, "label": "l"}}


async def test_optional_object_absent_is_fine_even_with_required_members() -> None:
    assert await received(NESTED, {}) == {}
    assert await received(NESTED, {"outer": None}) == {}


# ---------------------------------------------------------------------------
# enum, bounds, lengths


FORMAT = make_tool({"format": {"type": "string", "enum": ["json", "csv"]}})


async def test_enum_error() -> None:
    assert await rejected(FORMAT, {"format": "xml"}) == (
        'Error: Invalid arguments: format must be one of ["json", "csv"], got: "xml"'
    )


async def test_enum_error_renders_the_value_as_json() -> None:
    assert await rejected(FORMAT, {"format": 'x"é'}) == invalid(
        'format must be one of ["json", "csv"], got: "x\\"é"'
    )


async def test_enum_is_case_sensitive() -> None:
    assert await rejected(FORMAT, {"format": "JSON"}) == invalid(
        'format must be one of ["json", "csv"], got: "JSON"'
    )


async def test_enum_with_wrong_type_reports_only_the_type() -> None:
    assert await rejected(FORMAT, {"format": 1}) == invalid(
        "expected format to be a string, got: integer"
    )


@pytest.mark.parametrize("value", ["json", "csv"])
async def test_enum_accepts_its_values(value: str) -> None:
    assert await received(FORMAT, {"format": value}) == {"format": value}


BOUNDED = make_tool({"count": {"type": "integer", "minimum": 1, "maximum": 10}})


async def test_minimum_error() -> None:
    assert await rejected(BOUNDED, {"count": 0}) == (
        "Error: Invalid arguments: count must be >= 1, got: 0"
    )


async def test_maximum_error() -> None:
    assert await rejected(BOUNDED, {"count": 11}) == invalid("count must be <= 10, got: 11")


@pytest.mark.parametrize("value", [1, 5, 10])
async def test_bounds_are_inclusive(value: int) -> None:
    assert await received(BOUNDED, {"count": value}) == {"count": value}


async def test_bounds_do_not_excuse_the_type() -> None:
    assert await rejected(BOUNDED, {"count": 5.0}) == invalid(
        "expected count to be an integer, got: number"
    )


async def test_number_bounds_with_floats() -> None:
    tool = make_tool({"ratio": {"type": "number", "minimum": 0.5, "maximum": 2}})
    assert await rejected(tool, {"ratio": 0.25}) == invalid("ratio must be >= 0.5, got: 0.25")
    assert await rejected(tool, {"ratio": 3}) == invalid("ratio must be <= 2, got: 3")
    assert await rejected(tool, {"ratio": -1.5}) == invalid("ratio must be >= 0.5, got: -1.5")
    assert await received(tool, {"ratio": 0.5}) == {"ratio": 0.5}
    assert await received(tool, {"ratio": 2}) == {"ratio": 2}
    assert await received(tool, {"ratio": 1}) == {"ratio": 1}


STRLEN = make_tool({"name": {"type": "string", "min_length": 3, "max_length": 5}})


async def test_string_min_length_error() -> None:
    assert await rejected(STRLEN, {"name": "ab"}) == (
        "Error: Invalid arguments: name must be at least 3 characters, got: 2"
    )


async def test_string_max_length_error() -> None:
    assert await rejected(STRLEN, {"name": "abcdef"}) == invalid(
        "name must be at most 5 characters, got: 6"
    )


async def test_string_length_counts_characters_not_bytes() -> None:
    assert await received(STRLEN, {"name": "éééé"}) == {"name": "éééé"}
    assert await rejected(STRLEN, {"name": "日本"}) == invalid(
        "name must be at least 3 characters, got: 2"
    )


@pytest.mark.parametrize("value", ["abc", "abcd", "abcde"])
async def test_string_lengths_are_inclusive(value: str) -> None:
    assert await received(STRLEN, {"name": value}) == {"name": value}


async def test_string_length_singular() -> None:
    tool = make_tool(
        {
            "short": {"type": "string", "max_length": 1},
            "code": {"type": "string", "min_length": 1},
        }
    )
    assert await rejected(tool, {"code": ""}) == invalid(
        "code must be at least 1 character, got: 0"
    )
    assert await rejected(tool, {"short": "ab"}) == invalid(
        "short must be at most 1 character, got: 2"
    )


ARRLEN = make_tool(
    {"items": {"type": "array", "items": {"type": "integer"}, "min_length": 2, "max_length": 3}}
)


async def test_array_min_length_error() -> None:
    assert await rejected(ARRLEN, {"items": [1]}) == invalid(
        "items must have at least 2 items, got: 1"
    )


async def test_array_max_length_error() -> None:
    assert await rejected(ARRLEN, {"items": [1, 2, 3, 4]}) == invalid(
        "items must have at most 3 items, got: 4"
    )


@pytest.mark.parametrize("value", [[1, 2], [1, 2, 3]])
async def test_array_lengths_are_inclusive(value: list[int]) -> None:
    assert await received(ARRLEN, {"items": value}) == {"items": value}


async def test_array_length_singular() -> None:
    tool = make_tool(
        {"one": {"type": "array", "max_length": 1}, "some": {"type": "array", "min_length": 1}}
    )
    assert await rejected(tool, {"some": []}) == invalid("some must have at least 1 item, got: 0")
    assert await rejected(tool, {"one": [1, 2]}) == invalid("one must have at most 1 item, got: 2")


async def test_array_length_and_item_errors_are_all_reported() -> None:
    content = await rejected(ARRLEN, {"items": [1, "2", 3, 4.0]})
    errors = content.removeprefix(PREFIX).split("; ")
    assert sorted(errors) == sorted(
        [
            "items must have at most 3 items, got: 4",
            "expected items[1] to be an integer, got: string",
            "expected items[3] to be an integer, got: number",
        ]
    )
    # Item errors keep their index order.
    assert errors.index("expected items[1] to be an integer, got: string") < errors.index(
        "expected items[3] to be an integer, got: number"
    )


async def test_one_value_breaking_several_constraints_reports_each() -> None:
    tool = make_tool({"code": {"type": "string", "enum": ["alpha", "beta"], "min_length": 4}})
    content = await rejected(tool, {"code": "ab"})
    errors = content.removeprefix(PREFIX).split("; ")
    assert sorted(errors) == sorted(
        [
            'code must be one of ["alpha", "beta"], got: "ab"',
            "code must be at least 4 characters, got: 2",
        ]
    )


# ---------------------------------------------------------------------------
# Arguments that are not an object


ANY = make_tool({"host": {"type": "string"}})


@pytest.mark.parametrize(
    ("args", "got"),
    [
        ('"x"', "string"),  # JSON text of a string
        (["a"], "array"),
        ([], "array"),
        ("[1, 2]", "array"),  # JSON text of an array
        ("null", "null"),  # JSON text of null
        ("5", "integer"),
        ("2.5", "number"),
        ("true", "boolean"),
        (7, "integer"),
        (False, "boolean"),
    ],
)
async def test_arguments_not_an_object(args: object, got: str) -> None:
    assert await rejected(ANY, args) == (
        f"Error: Invalid arguments: expected arguments to be an object, got: {got}"
    )


async def test_arguments_none_is_null() -> None:
    # run_tool turns None into {} (no arguments), so go through the runner itself.
    runner = ToolRunner([ANY])
    (outcome,) = await runner.execute([ToolCall("toolu_1", "probe", None)])
    assert outcome.tool_use_id == "toolu_1"
    assert outcome.error_kind == "invalid_args"
    assert outcome.is_error is True
    assert outcome.content == invalid("expected arguments to be an object, got: null")


async def test_arguments_none_in_a_dict_call_is_null() -> None:
    runner = ToolRunner([ANY])
    (outcome,) = await runner.execute([{"id": "toolu_2", "name": "probe", "input": None}])
    assert outcome.content == invalid("expected arguments to be an object, got: null")


def json_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} parses")


@pytest.mark.parametrize("text", ["not json", "", "{", '{"host": "a",}', "{'host': 'a'}"])
async def test_unparseable_json_text(text: str) -> None:
    assert await rejected(ANY, text) == (
        "Error: Invalid arguments: expected arguments to be an object, "
        f"got: invalid JSON ({json_error(text)})"
    )


async def test_json_text_of_an_object_is_accepted_and_cleaned() -> None:
    assert await received(ANY, '{"host": "a", "extra": [1, 2]}') == {"host": "a"}
    assert await received(ANY, "{}") == {}
    assert await received(ANY, ' {"host": null} ') == {}


async def test_json_text_of_an_object_is_validated() -> None:
    assert await rejected(COUNT, '{"count": 3.0}') == invalid(
        "expected count to be an integer, got: number"
    )
    assert await rejected(CONFIG, '{"config": {}}') == invalid(
        "missing required parameter: config.host"
    )


# ---------------------------------------------------------------------------
# Several errors: joined, in a stable order


DESIGN_EXAMPLE = make_tool(
    {
        "config": {
            "type": "object",
            "required": True,
            "properties": {"host": {"type": "string", "required": True}},
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "format": {"type": "string", "enum": ["json", "csv"]},
    }
)

DESIGN_TEXT = (
    "Error: Invalid arguments: missing required parameter: config.host; "
    'expected tags[1] to be a string, got: integer; format must be one of ["json", "csv"], '
    'got: "xml"'
)


async def test_design_example_of_several_errors() -> None:
    content = await rejected(DESIGN_EXAMPLE, {"config": {}, "tags": ["a", 1], "format": "xml"})
    assert content == DESIGN_TEXT


async def test_error_order_follows_the_declaration_not_the_arguments() -> None:
    # The same arguments, keys given in reverse order, several times over.
    for _ in range(3):
        for args in (
            {"config": {}, "tags": ["a", 1], "format": "xml"},
            {"format": "xml", "tags": ["a", 1], "config": {}},
        ):
            assert await rejected(DESIGN_EXAMPLE, args) == DESIGN_TEXT
    assert (
        await rejected(DESIGN_EXAMPLE, '{"format": "xml", "tags": ["a", 1], "config": {}}')
        == DESIGN_TEXT
    )


async def test_errors_of_nested_objects_sit_at_their_declared_place() -> None:
    tool = make_tool(
        {
            "first": {"type": "integer", "required": True},
            "obj": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "required": True},
                    "y": {"type": "array", "items": {"type": "boolean"}},
                    "z": {"type": "string", "required": True},
                },
            },
            "last": {"type": "boolean", "required": True},
        }
    )
    args = {"last": "no", "obj": {"z": 1, "y": [True, 0, "f"]}}
    expected = invalid(
        "missing required parameter: first",
        "missing required parameter: obj.x",
        "expected obj.y[1] to be a boolean, got: integer",
        "expected obj.y[2] to be a boolean, got: string",
        "expected obj.z to be a string, got: integer",
        "expected last to be a boolean, got: string",
    )
    assert await rejected(tool, args) == expected
    reordered = {"obj": {"y": [True, 0, "f"], "z": 1}, "last": "no"}
    assert await rejected(tool, reordered) == expected


# ---------------------------------------------------------------------------
# null counts as absent


NULLS = make_tool(
    {
        "host": {"type": "string", "required": True},
        "note": {"type": "string"},
        "retries": {"type": "integer", "default": 3},
        "opts": {
            "type": "object",
            "properties": {
                "port": {"type": "integer", "default": 22},
                "user": {"type": "string", "required": True},
                "mode": {"type": "string"},
            },
        },
    }
)


async def test_null_for_a_required_parameter_is_missing() -> None:
    assert await rejected(NULLS, {"host": None}) == invalid("missing required parameter: host")
    assert await rejected(NULLS, {"host": "h", "opts": {"user": None}}) == invalid(
        "missing required parameter: opts.user"
    )


async def test_null_for_an_optional_parameter_drops_the_key() -> None:
    assert await received(NULLS, {"host": "h", "note": None}) == {"host": "h", "retries": 3}
    assert await received(NULLS, {"host": "h", "opts": None}) == {"host": "h", "retries": 3}
    assert await received(NULLS, {"host": "h", "opts": {"user": "u", "mode": None}}) == {
        "host": "h",
        "retries": 3,
        "opts": {"user": "u", "port": 22},
    }


async def test_null_lets_the_default_apply() -> None:
    assert await received(NULLS, {"host": "h", "retries": None}) == {"host": "h", "retries": 3}
    assert await received(NULLS, {"host": "h", "opts": {"user": "u", "port": None}}) == {
        "host": "h",
        "retries": 3,
        "opts": {"user": "u", "port": 22},
    }


async def test_null_inside_an_array_is_a_value_not_an_absence() -> None:
    assert await rejected(TAGS, {"tags": [None]}) == invalid(
        "expected tags[0] to be a string, got: null"
    )


# ---------------------------------------------------------------------------
# Undeclared keys are dropped


async def test_undeclared_keys_dropped_at_top_level() -> None:
    assert await received(ANY, {"host": "a", "rm": "-rf", "x": None}) == {"host": "a"}
    assert await received(ANY, {"other": 1}) == {}


async def test_undeclared_keys_are_not_validated() -> None:
    # Whatever an undeclared key holds, it is dropped, never an error.
    assert await received(COUNT, {"count": 1, "bad": {"count": "x"}, "n": [None]}) == {"count": 1}


async def test_undeclared_keys_dropped_in_nested_objects() -> None:
    got = await received(
        NESTED,
        {
            "outer": {"inner": {"leaf": 1, "deep_extra": True}, "mid_extra": "x"},
            "top_extra": 0,
        },
    )
    assert got == {"outer": {"inner": {"leaf": 1}}}


async def test_tool_without_parameters_drops_every_key() -> None:
    tool = make_tool(None)
    assert await received(tool, {"a": 1, "b": None}) == {}
    assert await received(tool, {}) == {}


# ---------------------------------------------------------------------------
# Defaults


async def test_defaults_filled_in() -> None:
    tool = make_tool(
        {
            "count": {"type": "integer", "default": 3},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "b"},
            "verbose": {"type": "boolean", "default": False},
            "ratio": {"type": "number", "default": 0.5},
            "tags": {"type": "array", "items": {"type": "string"}, "default": ["x"]},
            "opts": {"type": "object", "default": {"k": 1}},
        }
    )
    assert await received(tool, {}) == {
        "count": 3,
        "mode": "b",
        "verbose": False,
        "ratio": 0.5,
        "tags": ["x"],
        "opts": {"k": 1},
    }
    assert await received(tool, {"count": 7, "verbose": True, "tags": []}) == {
        "count": 7,
        "mode": "b",
        "verbose": True,
        "ratio": 0.5,
        "tags": [],
        "opts": {"k": 1},
    }


async def test_a_given_value_is_validated_not_replaced_by_the_default() -> None:
    tool = make_tool({"count": {"type": "integer", "default": 3, "minimum": 1}})
    assert await rejected(tool, {"count": 0}) == invalid("count must be >= 1, got: 0")
    assert await rejected(tool, {"count": "3"}) == invalid(
        "expected count to be an integer, got: string"
    )


async def test_mutable_defaults_are_not_shared_between_calls() -> None:
    seen: list[Any] = []

    class Mutator(Tool):
        name = "mutator"
        description = "Mutate its arguments"
        parameters = {
            "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]},
            "opts": {
                "type": "object",
                "properties": {"inner": {"type": "array"}},
                "default": {"inner": [1]},
            },
            "meta": {"type": "object", "default": {"nested": {"list": [1]}}},
        }

        async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
            seen.append(json.loads(json.dumps(args)))
            args["tags"].append("mutated")
            args["opts"]["inner"].append(2)
            args["opts"]["new"] = True
            args["meta"]["nested"]["list"].clear()
            return ("ok", "done")

    for _ in range(3):
        outcome = await run_tool(Mutator, {})
        assert outcome.content == "done"
    expected = {"tags": ["a"], "opts": {"inner": [1]}, "meta": {"nested": {"list": [1]}}}
    assert seen == [expected] * 3
    # The declaration itself is untouched too.
    assert Mutator.parameters["tags"]["default"] == ["a"]
    assert Mutator.parameters["opts"]["default"] == {"inner": [1]}
    assert Mutator.parameters["meta"]["default"] == {"nested": {"list": [1]}}


async def test_mutable_defaults_not_shared_between_calls_of_one_runner() -> None:
    seen: list[Any] = []

    class Appender(Tool):
        name = "appender"
        description = "Append to its list"
        parameters = {"log": {"type": "array", "default": []}}

        async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
            seen.append(list(args["log"]))
            args["log"].append(len(seen))
            return ("ok", "done")

    runner = ToolRunner([Appender], strategy="sequential")
    calls = [ToolCall(f"toolu_{i}", "appender", {}) for i in range(3)]
    outcomes = await runner.execute(calls)
    assert [outcome.content for outcome in outcomes] == ["done"] * 3
    outcomes = await runner.execute([ToolCall("toolu_9", "appender", {"log": None})])
    assert outcomes[0].content == "done"
    assert seen == [[], [], [], []]


async def test_an_object_default_reaches_run_as_the_same_value_given_would() -> None:
    # DESIGN.md: keys the spec does not declare are dropped before run sees the
    # arguments, and null counts as absent (its default applies). A default stands for
    # the value not given, so it is cleaned the same way.
    tool = make_tool(
        {
            "cfg": {
                "type": "object",
                "properties": {
                    "a": {"type": "string"},
                    "n": {"type": "integer", "default": 5},
                },
                "default": {"x": 1, "a": None},
            }
        }
    )
    given = await received(tool, {"cfg": {"x": 1, "a": None}})
    assert given == {"cfg": {"n": 5}}
    assert await received(tool, {}) == given


# ---------------------------------------------------------------------------
# Objects without declared properties


async def test_object_without_properties_passes_any_keys_through() -> None:
    tool = make_tool({"meta": {"type": "object"}, "name": {"type": "string"}})
    value: dict[str, Any] = {
        "anything": [1, {"x": None}],
        "k": None,
        "n": 1.5,
        "nested": {"deep": {}},
    }
    assert await received(tool, {"meta": value, "junk": 1}) == {"meta": value}
    assert await received(tool, {"meta": {}}) == {"meta": {}}


async def test_object_without_properties_still_must_be_an_object() -> None:
    tool = make_tool({"meta": {"type": "object"}})
    assert await rejected(tool, {"meta": []}) == invalid(
        "expected meta to be an object, got: array"
    )
    assert await rejected(tool, {"meta": "{}"}) == invalid(
        "expected meta to be an object, got: string"
    )


# ---------------------------------------------------------------------------
# The validator is compiled once, when the tool is declared


async def test_validator_is_compiled_once_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = make_tool(
        {
            "count": {"type": "integer", "minimum": 1, "required": True},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        }
    )

    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError("parameters compiled again at call time")

    monkeypatch.setattr(satsuma.tools._params, "compile_parameters", refuse)
    monkeypatch.setattr(satsuma.tools._tool, "compile_parameters", refuse)
    monkeypatch.setattr(satsuma.tools._params, "_compile_properties", refuse)
    monkeypatch.setattr(satsuma.tools._params, "_compile_spec", refuse)

    runner = ToolRunner([tool])
    for index in range(5):
        assert await received(tool, {"count": index + 1}) == {"count": index + 1, "tags": []}
        assert await rejected(tool, {"count": 0}) == invalid("count must be >= 1, got: 0")
        (outcome,) = await runner.execute([ToolCall(f"toolu_{index}", "probe", {"count": 2})])
        assert outcome.is_error is False
    assert tool.schema()["input_schema"]["properties"]["count"]["type"] == "integer"


async def test_parameters_are_compiled_once_at_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = getattr(satsuma.tools._tool, "compile_parameters")  # noqa: B009
    compiled: list[str] = []

    def counting(tool: str, parameters: object) -> Any:
        compiled.append(tool)
        return original(tool, parameters)

    monkeypatch.setattr(satsuma.tools._tool, "compile_parameters", counting)
    tool = make_tool({"n": {"type": "integer"}}, tool_name="counted")
    assert compiled == ["counted"]
    for index in range(5):
        assert await received(tool, {"n": index}) == {"n": index}
    assert await rejected(tool, {"n": "x"}) == invalid("expected n to be an integer, got: string")
    assert compiled == ["counted"]
