"""Tools declared with a raw JSON Schema (``input_schema = {...}``), as MCP servers publish
them: checked against the meta-schema at declaration, validated at call time with
satsuma's own error texts and paths."""

from __future__ import annotations

from typing import Any

import pytest

import satsuma
from satsuma.testing import run_tool

PREFIX = "Error: Invalid arguments: "


async def _echo(self: satsuma.Tool, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
    return ("ok", repr(args))


def _raw_tool(schema: Any, name: str = "raw") -> type[satsuma.Tool]:
    return type(
        "Raw",
        (satsuma.Tool,),
        {
            "name": name,
            "description": "A tool with a raw schema",
            "input_schema": schema,
            "run": _echo,
        },
    )


EXPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "description": "How many"},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "enabled": {"type": "boolean"},
        "config": {
            "type": "object",
            "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
            "required": ["host"],
        },
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "format": {"type": "string", "enum": ["json", "csv"]},
        "title": {"type": "string", "minLength": 2, "maxLength": 5},
        "note": {"type": "string"},
        "nullable": {"type": ["string", "null"]},
    },
    "required": ["count"],
}


class Export(satsuma.Tool):
    name = "export"
    description = "Export data"
    input_schema = EXPORT_SCHEMA

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return ("ok", repr(args))


async def _errors(args: Any) -> str:
    outcome = await run_tool(Export, args)
    assert outcome.error_kind == "invalid_args", outcome.content
    assert outcome.is_error is True
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith(PREFIX)
    return outcome.content[len(PREFIX) :]


# --- Declaration --------------------------------------------------------------------------------


def test_schema_is_published_as_given() -> None:
    assert Export.schema() == {
        "name": "export",
        "description": "Export data",
        "input_schema": EXPORT_SCHEMA,
    }
    assert Export().schema() == Export.schema()


def test_openai_schema_of_a_raw_schema() -> None:
    assert Export.openai_schema() == {
        "type": "function",
        "function": {"name": "export", "description": "Export data", "parameters": EXPORT_SCHEMA},
    }


def test_invalid_schema_raises_at_class_creation() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: .*input_schema"):

        class Bad(satsuma.Tool):
            name = "bad"
            description = "Bad schema"
            input_schema = {"type": "object", "properties": {"a": {"type": "nope"}}}

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "nope"}}},
        {"type": "object", "required": "a"},
        {"type": "object", "properties": {"a": {"minimum": "1"}}},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}},
        {"type": "object", "properties": {"a": {"enum": "json"}}},
        {"type": "object", "properties": []},
    ],
)
def test_schemas_failing_the_meta_schema_raise(schema: dict[str, Any]) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool raw: .*input_schema"):
        _raw_tool(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"type": "string"},
        {"properties": {"a": {"type": "string"}}},
        {"type": ["object", "null"]},
    ],
)
def test_non_object_top_level_type_raises(schema: dict[str, Any]) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool raw: .*object"):
        _raw_tool(schema)


@pytest.mark.parametrize("schema", [[], "object", 3])
def test_schema_that_is_not_a_mapping_raises(schema: object) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool raw: .*input_schema"):
        _raw_tool(schema)


def test_raw_schema_tool_still_needs_a_valid_name() -> None:
    with pytest.raises(satsuma.ToolDefinitionError):
        _raw_tool({"type": "object"}, name="bad name")


def test_minimal_object_schema_is_accepted() -> None:
    tool = _raw_tool({"type": "object"})
    assert tool.schema()["input_schema"] == {"type": "object"}


# --- Valid calls ---------------------------------------------------------------------------------


async def test_valid_arguments_reach_run() -> None:
    outcome = await run_tool(
        Export, {"count": 3, "config": {"host": "h", "port": 80}, "tags": ["a"], "format": "csv"}
    )
    assert outcome.error_kind is None, outcome.content
    assert outcome.content == repr(
        {"count": 3, "config": {"host": "h", "port": 80}, "tags": ["a"], "format": "csv"}
    )


async def test_an_integer_is_a_number() -> None:
    outcome = await run_tool(Export, {"count": 1, "ratio": 0.5})
    assert outcome.error_kind is None, outcome.content
    schema_tool = _raw_tool({"type": "object", "properties": {"x": {"type": "number"}}})
    outcome = await run_tool(schema_tool, {"x": 2})
    assert outcome.error_kind is None, outcome.content
    assert outcome.content == "{'x': 2}"


async def test_json_text_arguments_are_decoded() -> None:
    outcome = await run_tool(Export, '{"count": 2}')
    assert outcome.error_kind is None, outcome.content
    assert outcome.content == "{'count': 2}"


# --- Required -------------------------------------------------------------------------------------


async def test_missing_required_parameter() -> None:
    assert await _errors({}) == "missing required parameter: count"


async def test_missing_required_nested_parameter() -> None:
    assert await _errors({"count": 1, "config": {"port": 80}}) == (
        "missing required parameter: config.host"
    )


async def test_several_missing_required_parameters_each_reported() -> None:
    tool = _raw_tool(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "required": ["a", "b"],
        }
    )
    outcome = await run_tool(tool, {})
    assert outcome.content == (
        PREFIX + "missing required parameter: a; missing required parameter: b"
    )


async def test_null_for_a_required_parameter_is_missing() -> None:
    assert await _errors({"count": None}) == "missing required parameter: count"


# --- Null as absent ---------------------------------------------------------------------------------


async def test_top_level_null_for_an_optional_property_counts_as_absent() -> None:
    outcome = await run_tool(Export, {"count": 1, "note": None, "format": None})
    assert outcome.error_kind is None, outcome.content
    assert outcome.content == "{'count': 1}"


async def test_null_is_kept_where_the_property_accepts_null() -> None:
    outcome = await run_tool(Export, {"count": 1, "nullable": None})
    assert outcome.error_kind is None, outcome.content
    assert outcome.content == "{'count': 1, 'nullable': None}"


# --- Types ------------------------------------------------------------------------------------------


async def test_wrong_type_in_an_array_item() -> None:
    assert await _errors({"count": 1, "tags": ["a", 1]}) == (
        "expected tags[1] to be a string, got: integer"
    )


async def test_wrong_type_in_a_nested_property() -> None:
    assert await _errors({"count": 1, "config": {"host": 5}}) == (
        "expected config.host to be a string, got: integer"
    )


async def test_float_is_not_an_integer() -> None:
    assert await _errors({"count": 3.0}) == "expected count to be an integer, got: number"


async def test_nested_float_is_not_an_integer() -> None:
    assert await _errors({"count": 1, "config": {"host": "h", "port": 80.0}}) == (
        "expected config.port to be an integer, got: number"
    )


async def test_true_is_not_an_integer() -> None:
    assert await _errors({"count": True}) == "expected count to be an integer, got: boolean"


async def test_string_true_is_not_a_boolean() -> None:
    assert await _errors({"count": 1, "enabled": "true"}) == (
        "expected enabled to be a boolean, got: string"
    )


@pytest.mark.parametrize(
    ("value", "got"),
    [("1", "string"), ([1], "array"), ({"n": 1}, "object"), (1.5, "number"), (False, "boolean")],
)
async def test_got_uses_json_type_names(value: object, got: str) -> None:
    assert await _errors({"count": value}) == f"expected count to be an integer, got: {got}"


async def test_wrong_type_for_an_object_property() -> None:
    assert await _errors({"count": 1, "config": "h:80"}) == (
        "expected config to be an object, got: string"
    )


async def test_wrong_type_for_an_array_property() -> None:
    assert await _errors({"count": 1, "tags": "a,b"}) == (
        "expected tags to be an array, got: string"
    )


# --- enum, bounds, lengths ----------------------------------------------------------------------------


async def test_enum() -> None:
    assert await _errors({"count": 1, "format": "xml"}) == (
        'format must be one of ["json", "csv"], got: "xml"'
    )


async def test_minimum() -> None:
    assert await _errors({"count": 0}) == "count must be >= 1, got: 0"


async def test_maximum() -> None:
    assert await _errors({"count": 11}) == "count must be <= 10, got: 11"


async def test_bounds_are_inclusive() -> None:
    for count in (1, 10):
        outcome = await run_tool(Export, {"count": count})
        assert outcome.error_kind is None, outcome.content


async def test_exclusive_bounds() -> None:
    assert await _errors({"count": 1, "ratio": 0}) == "ratio must be > 0, got: 0"
    assert await _errors({"count": 1, "ratio": 1}) == "ratio must be < 1, got: 1"


async def test_min_length() -> None:
    assert await _errors({"count": 1, "title": "a"}) == (
        "title must be at least 2 characters, got: 1"
    )


async def test_max_length() -> None:
    assert await _errors({"count": 1, "title": "abcdef"}) == (
        "title must be at most 5 characters, got: 6"
    )


async def test_min_items() -> None:
    assert await _errors({"count": 1, "tags": []}) == "tags must have at least 1 item, got: 0"


async def test_max_items() -> None:
    assert await _errors({"count": 1, "tags": ["a", "b", "c", "d"]}) == (
        "tags must have at most 3 items, got: 4"
    )


# --- Arguments that are not an object -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "got"),
    [([1, 2], "array"), ('"text"', "string"), ("[1]", "array"), ("null", "null"), ("3", "integer")],
)
async def test_non_object_arguments(arguments: object, got: str) -> None:
    outcome = await run_tool(Export, arguments)
    assert outcome.error_kind == "invalid_args"
    assert outcome.content == f"{PREFIX}expected arguments to be an object, got: {got}"


async def test_null_arguments_through_the_runner() -> None:
    runner = satsuma.ToolRunner([Export])
    (outcome,) = await runner.execute([satsuma.ToolCall("toolu_1", "export", None)])
    assert outcome.error_kind == "invalid_args"
    assert outcome.content == f"{PREFIX}expected arguments to be an object, got: null"


async def test_unparseable_json_arguments() -> None:
    outcome = await run_tool(Export, "{not json")
    assert outcome.error_kind == "invalid_args"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith(f"{PREFIX}expected arguments to be an object, got: ")


# --- Several errors ---------------------------------------------------------------------------------------


async def test_all_errors_are_joined_with_semicolons() -> None:
    text = await _errors({"config": {}, "tags": ["a", 1], "format": "xml"})
    parts = text.split("; ")
    assert sorted(parts) == sorted(
        [
            "missing required parameter: count",
            "missing required parameter: config.host",
            "expected tags[1] to be a string, got: integer",
            'format must be one of ["json", "csv"], got: "xml"',
        ]
    )


async def test_errors_of_several_kinds_in_one_property_tree() -> None:
    text = await _errors({"count": 0, "title": "a", "tags": [], "config": {"host": 1, "port": 2.5}})
    assert sorted(text.split("; ")) == sorted(
        [
            "count must be >= 1, got: 0",
            "title must be at least 2 characters, got: 1",
            "tags must have at least 1 item, got: 0",
            "expected config.host to be a string, got: integer",
            "expected config.port to be an integer, got: number",
        ]
    )


# --- Schemas with references and nesting, as MCP servers publish them ------------------------------------


REF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            "required": ["sku"],
        }
    },
    "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
    "required": ["items"],
}


async def test_refs_are_resolved_and_paths_go_through_them() -> None:
    tool = _raw_tool(REF_SCHEMA)
    ok = await run_tool(tool, {"items": [{"sku": "a", "qty": 2}]})
    assert ok.error_kind is None, ok.content
    bad = await run_tool(tool, {"items": [{"sku": "a", "qty": 1.0}, {"qty": 0}]})
    assert isinstance(bad.content, str)
    assert bad.content.startswith(PREFIX)
    assert sorted(bad.content[len(PREFIX) :].split("; ")) == sorted(
        [
            "expected items[0].qty to be an integer, got: number",
            "missing required parameter: items[1].sku",
            "items[1].qty must be >= 1, got: 0",
        ]
    )


async def test_unmapped_keyword_errors_are_still_invalid_args() -> None:
    tool = _raw_tool(
        {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "additionalProperties": False,
        }
    )
    outcome = await run_tool(tool, {"code": "abc"})
    assert outcome.error_kind == "invalid_args"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith(PREFIX + "code")
    outcome = await run_tool(tool, {"code": "ABC", "other": 1})
    assert outcome.error_kind == "invalid_args"
