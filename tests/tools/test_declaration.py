"""Declaring tools as ``satsuma.Tool`` subclasses with spec-dict ``parameters``.

Every declaration mistake must raise ToolDefinitionError when the class statement runs
(never at the first call), with a message naming the tool and the parameter path; the
declared schema must come out as the exact Anthropic and OpenAI tool definitions.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import satsuma
from satsuma.testing import run_tool

VALID_TYPES = "Valid types: string, integer, number, boolean, array, object"

_ABSENT = object()


async def _ok_run(self: satsuma.Tool, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
    return ("ok", "done")


def _declare(**overrides: Any) -> type[satsuma.Tool]:
    """Create a Tool subclass (the class statement's equivalent) named "ping" unless
    overridden; an override of ``_ABSENT`` leaves that attribute out entirely."""
    namespace: dict[str, Any] = {
        "name": "ping",
        "description": "Check if a host is reachable",
        "run": _ok_run,
    }
    namespace.update(overrides)
    namespace = {key: value for key, value in namespace.items() if value is not _ABSENT}
    return type("Declared", (satsuma.Tool,), namespace)


def _declare_params(parameters: Any) -> type[satsuma.Tool]:
    return _declare(parameters=parameters)


# --- A valid declaration -----------------------------------------------------------------


class Ping(satsuma.Tool):
    name = "ping"
    description = "Check if a host is reachable"
    parameters = {
        "host": {"type": "string", "required": True, "description": "Hostname or IP"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
    }
    timeout = 5.0

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return ("ok", f"pinged {args['host']} x{args.get('count', 1)}")


async def test_valid_declaration_runs() -> None:
    outcome = await run_tool(Ping, {"host": "example.org", "count": 3})
    assert outcome.content == "pinged example.org x3"
    assert outcome.is_error is False
    assert outcome.error_kind is None
    assert outcome.tool_name == "ping"


def test_valid_declaration_timeout_is_kept_as_float() -> None:
    runner = satsuma.ToolRunner([Ping])
    (definition,) = runner.definitions
    assert definition.name == "ping"
    assert definition.timeout == 5.0


def test_integer_timeout_is_accepted() -> None:
    tool = _declare(timeout=5)
    (definition,) = satsuma.ToolRunner([tool]).definitions
    assert definition.timeout == 5.0
    assert isinstance(definition.timeout, float)


def test_no_timeout_means_none() -> None:
    tool = _declare()
    (definition,) = satsuma.ToolRunner([tool]).definitions
    assert definition.timeout is None


@pytest.mark.parametrize(
    "name", ["a", "a" * 64, "read_file", "read-file", "Tool_2-b", "0123456789", "_-_"]
)
def test_names_matching_the_api_pattern_are_accepted(name: str) -> None:
    tool = _declare(name=name)
    assert tool.schema()["name"] == name


def test_sync_run_is_allowed() -> None:
    def run(self: satsuma.Tool, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return "ok"

    tool = _declare(run=run)
    (definition,) = satsuma.ToolRunner([tool]).definitions
    assert definition.is_async is False


def test_no_parameters_gives_an_empty_object_schema() -> None:
    tool = _declare()
    assert tool.schema() == {
        "name": "ping",
        "description": "Check if a host is reachable",
        "input_schema": {"type": "object", "properties": {}},
    }


# --- Name and description ----------------------------------------------------------------


def test_empty_name_raises_at_class_creation() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match="empty name"):

        class Nameless(satsuma.Tool):
            name = ""
            description = "Something"

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"


def test_missing_name_raises_at_class_creation() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match="name") as info:

        class NoName(satsuma.Tool):
            description = "Something"

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"

    # With no name to report, the message names the class.
    assert "NoName" in str(info.value)


def test_empty_description_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*description"):

        class Ping2(satsuma.Tool):
            name = "ping"
            description = ""

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"


def test_blank_description_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*description"):
        _declare(description="   \n  ")


def test_missing_description_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*description"):
        _declare(description=_ABSENT)


def test_class_docstring_is_not_a_description() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*description"):

        class Documented(satsuma.Tool):
            """Check if a host is reachable."""

            name = "ping"

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"


@pytest.mark.parametrize(
    "name",
    [
        "has space",
        "a" * 65,
        "dot.name",
        "slash/name",
        "colon:name",
        "ünïcode",
        "tab\tname",
        "trailing\n",
    ],
)
def test_name_outside_the_api_pattern_raises(name: str) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=re.escape("^[a-zA-Z0-9_-]{1,64}$")):
        _declare(name=name)


def test_bad_name_message_names_the_tool() -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare(name="dot.name")
    assert str(info.value).startswith("Tool dot.name: ")


# --- Timeout -----------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5, "5", True, False, [5]])
def test_bad_timeout_raises(timeout: object) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*timeout") as info:
        _declare(timeout=timeout)
    assert repr(timeout) in str(info.value)


# --- run method, parameters vs input_schema -------------------------------------------------


def test_no_run_method_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*run"):

        class NoRun(satsuma.Tool):
            name = "ping"
            description = "Check if a host is reachable"
            parameters = {"host": {"type": "string"}}


def test_both_parameters_and_input_schema_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: .*parameters.*input_schema"
    ):

        class Both(satsuma.Tool):
            name = "ping"
            description = "Check if a host is reachable"
            parameters = {"host": {"type": "string"}}
            input_schema = {"type": "object", "properties": {"host": {"type": "string"}}}

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"


@pytest.mark.parametrize("parameters", [["host"], "host", 42])
def test_parameters_of_the_wrong_kind_raise(parameters: object) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: .*parameters"):
        _declare_params(parameters)


# --- Parameter specs: type ---------------------------------------------------------------


def test_missing_type_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter host .*'type'"
    ) as info:
        _declare_params({"host": {"required": True}})
    assert VALID_TYPES in str(info.value)


def test_unknown_type_message_is_exact() -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare_params({"count": {"type": "int"}})
    assert str(info.value) == f"Tool ping: parameter count has invalid type 'int'. {VALID_TYPES}"


def test_unknown_nested_type_message_is_exact_and_at_class_creation() -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:

        class Ping3(satsuma.Tool):
            name = "ping"
            description = "Check if a host is reachable"
            parameters = {
                "config": {
                    "type": "object",
                    "properties": {
                        "host": {"type": "string"},
                        "port": {"type": "int"},
                    },
                }
            }

            async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
                return "ok"

    assert str(info.value) == (
        "Tool ping: parameter config.port has invalid type 'int'. "
        "Valid types: string, integer, number, boolean, array, object"
    )
    assert info.value.tool == "ping"
    assert info.value.path == "config.port"


def test_python_type_object_as_type_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare_params({"count": {"type": int}})
    assert str(info.value) == f"Tool ping: parameter count has invalid type 'int'. {VALID_TYPES}"


def test_unknown_type_in_array_items_names_the_items_path() -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare_params({"tags": {"type": "array", "items": {"type": "str"}}})
    assert str(info.value) == f"Tool ping: parameter tags[] has invalid type 'str'. {VALID_TYPES}"


def test_deeply_nested_path_in_message() -> None:
    spec = {
        "config": {
            "type": "object",
            "properties": {
                "servers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"port": {"type": "float"}},
                    },
                }
            },
        }
    }
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare_params(spec)
    assert str(info.value) == (
        f"Tool ping: parameter config.servers[].port has invalid type 'float'. {VALID_TYPES}"
    )


# --- Parameter specs: options --------------------------------------------------------------


def test_unknown_option_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter host .*'pattern'"
    ):
        _declare_params({"host": {"type": "string", "pattern": "^a"}})


def test_unknown_option_in_nested_spec_names_the_path() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter config\.port .*'min'"
    ):
        _declare_params(
            {
                "config": {
                    "type": "object",
                    "properties": {"port": {"type": "integer", "min": 1}},
                }
            }
        )


def test_json_schema_spelling_of_options_is_unknown() -> None:
    # The spec dict uses min_length/max_length; minLength is JSON Schema's spelling.
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter name .*'minLength'"
    ):
        _declare_params({"name": {"type": "string", "minLength": 1}})


@pytest.mark.parametrize(
    ("spec", "option"),
    [
        ({"type": "string", "items": {"type": "string"}}, "items"),
        ({"type": "integer", "enum": ["a", "b"]}, "enum"),
        ({"type": "number", "enum": ["a"]}, "enum"),
        ({"type": "boolean", "minimum": 0}, "minimum"),
        ({"type": "boolean", "maximum": 1}, "maximum"),
        ({"type": "string", "minimum": 1}, "minimum"),
        ({"type": "array", "properties": {"a": {"type": "string"}}}, "properties"),
        ({"type": "string", "properties": {"a": {"type": "string"}}}, "properties"),
        ({"type": "integer", "min_length": 1}, "min_length"),
        ({"type": "number", "max_length": 4}, "max_length"),
        ({"type": "object", "items": {"type": "string"}}, "items"),
        ({"type": "boolean", "enum": ["true"]}, "enum"),
    ],
)
def test_option_on_the_wrong_type_raises(spec: dict[str, Any], option: str) -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare_params({"p": spec})
    message = str(info.value)
    assert message.startswith("Tool ping: parameter p ")
    assert repr(option) in message
    assert spec["type"] in message


def test_option_on_the_wrong_type_inside_array_items() -> None:
    with pytest.raises(satsuma.ToolDefinitionError) as info:
        _declare_params({"tags": {"type": "array", "items": {"type": "integer", "enum": ["a"]}}})
    assert str(info.value).startswith("Tool ping: parameter tags[] ")
    assert "'enum'" in str(info.value)


@pytest.mark.parametrize("enum", [[], ()])
def test_empty_enum_raises(enum: object) -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter format .*empty enum"
    ):
        _declare_params({"format": {"type": "string", "enum": enum}})


def test_enum_of_non_strings_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: parameter format .*enum"):
        _declare_params({"format": {"type": "string", "enum": ["json", 3]}})


def test_minimum_greater_than_maximum_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter count .*minimum.*maximum"
    ):
        _declare_params({"count": {"type": "integer", "minimum": 10, "maximum": 1}})


def test_minimum_greater_than_maximum_for_numbers_in_nested_object() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError,
        match=r"^Tool ping: parameter config\.ratio .*minimum.*maximum",
    ):
        _declare_params(
            {
                "config": {
                    "type": "object",
                    "properties": {"ratio": {"type": "number", "minimum": 0.5, "maximum": 0.25}},
                }
            }
        )


def test_minimum_equal_to_maximum_is_fine() -> None:
    tool = _declare_params({"count": {"type": "integer", "minimum": 3, "maximum": 3}})
    assert tool.schema()["input_schema"]["properties"]["count"] == {
        "type": "integer",
        "minimum": 3,
        "maximum": 3,
    }


def test_min_length_greater_than_max_length_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter host .*min_length.*max_length"
    ):
        _declare_params({"host": {"type": "string", "min_length": 5, "max_length": 2}})


def test_min_length_greater_than_max_length_on_array_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter tags .*min_length.*max_length"
    ):
        _declare_params({"tags": {"type": "array", "min_length": 3, "max_length": 1}})


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "integer", "minimum": "1"},
        {"type": "number", "maximum": True},
        {"type": "string", "min_length": -1},
        {"type": "string", "max_length": 2.5},
        {"type": "array", "min_length": "1"},
    ],
)
def test_option_values_of_the_wrong_kind_raise(spec: dict[str, Any]) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: parameter p "):
        _declare_params({"p": spec})


@pytest.mark.parametrize("required", ["yes", 1, None])
def test_required_must_be_a_bool(required: object) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: parameter p .*required"):
        _declare_params({"p": {"type": "string", "required": required}})


def test_spec_that_is_not_a_dict_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: parameter host "):
        _declare_params({"host": "string"})


# --- Defaults ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "string", "default": 3},
        {"type": "integer", "default": 2.5},
        {"type": "integer", "default": True},
        {"type": "integer", "minimum": 1, "default": 0},
        {"type": "number", "maximum": 1.0, "default": 2},
        {"type": "string", "enum": ["json", "csv"], "default": "xml"},
        {"type": "string", "min_length": 3, "default": "ab"},
        {"type": "array", "items": {"type": "string"}, "default": ["a", 1]},
        {"type": "array", "max_length": 1, "default": ["a", "b"]},
        {"type": "boolean", "default": "true"},
        {"type": "object", "default": []},
    ],
)
def test_default_failing_its_own_spec_raises(spec: dict[str, Any]) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool ping: parameter p .*default"):
        _declare_params({"p": spec})


def test_nested_default_failing_its_own_spec_names_the_path() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter config\.port .*default"
    ):
        _declare_params(
            {
                "config": {
                    "type": "object",
                    "properties": {"port": {"type": "integer", "maximum": 65535, "default": 70000}},
                }
            }
        )


def test_required_with_default_raises() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool ping: parameter host .*(required|default)"
    ):
        _declare_params({"host": {"type": "string", "required": True, "default": "localhost"}})


def test_valid_defaults_apply_when_absent() -> None:
    tool = _declare_params(
        {
            "count": {"type": "integer", "minimum": 1, "default": 4},
            "format": {"type": "string", "enum": ["json", "csv"], "default": "csv"},
        }
    )
    schema = tool.schema()["input_schema"]
    assert schema["properties"]["count"]["default"] == 4
    assert schema["properties"]["format"]["default"] == "csv"


class Defaults(satsuma.Tool):
    name = "defaults"
    description = "Echo the arguments"
    parameters = {
        "count": {"type": "integer", "default": 4},
        "tags": {"type": "array", "items": {"type": "string"}, "default": ["x"]},
        "config": {
            "type": "object",
            "properties": {"port": {"type": "integer", "default": 443}},
        },
    }

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        tags = args["tags"]
        tags.append("mutated")  # must not leak into the next call's default
        return ("ok", repr(sorted(args.items())))


async def test_defaults_are_filled_in_and_fresh_per_call() -> None:
    first = await run_tool(Defaults, {"config": {}})
    second = await run_tool(Defaults, {"config": {}})
    expected = repr(sorted({"count": 4, "tags": ["x", "mutated"], "config": {"port": 443}}.items()))
    assert first.content == expected
    assert second.content == expected


# --- Errors are raised at creation, never at first call -----------------------------------


def test_a_bad_tool_never_reaches_a_runner() -> None:
    created: list[type[satsuma.Tool]] = []
    with pytest.raises(satsuma.ToolDefinitionError):
        created.append(_declare_params({"p": {"type": "integer", "enum": ["a"]}}))
    assert created == []


# --- Abstract bases -----------------------------------------------------------------------


class HostTool(satsuma.Tool, abstract=True):
    """A shared base: no name, no description yet."""

    parameters = {"host": {"type": "string", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return ("ok", f"{self.name}: {args['host']}")


class Resolve(HostTool):
    name = "resolve"
    description = "Resolve a host name"


class Trace(HostTool):
    name = "trace"
    description = "Trace the route to a host"
    timeout = 2


def test_abstract_base_without_name_is_allowed() -> None:
    class Bare(satsuma.Tool, abstract=True):
        pass

    class AlsoBare(Bare, abstract=True):
        description = "still abstract"


def test_concrete_subclass_of_abstract_base_has_its_own_schema() -> None:
    assert Resolve.schema() == {
        "name": "resolve",
        "description": "Resolve a host name",
        "input_schema": {
            "type": "object",
            "properties": {"host": {"type": "string"}},
            "required": ["host"],
        },
    }
    assert Trace.schema()["name"] == "trace"


async def test_concrete_subclasses_of_abstract_base_run() -> None:
    resolved = await run_tool(Resolve, {"host": "a.example"})
    traced = await run_tool(Trace, {"host": "b.example"})
    assert resolved.content == "resolve: a.example"
    assert traced.content == "trace: b.example"


def test_two_subclasses_of_one_base_share_a_runner() -> None:
    runner = satsuma.ToolRunner([Resolve, Trace])
    assert [definition.name for definition in runner.definitions] == ["resolve", "trace"]


def test_concrete_subclass_of_abstract_base_is_still_checked() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool lookup: .*description"):

        class Lookup(HostTool):
            name = "lookup"


def test_abstract_base_in_a_runner_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError):
        satsuma.ToolRunner([HostTool])


# --- schema() and openai_schema() ------------------------------------------------------------


class Deploy(satsuma.Tool):
    name = "deploy"
    description = "Deploy a service"
    parameters = {
        "service": {
            "type": "string",
            "required": True,
            "description": "Service name",
            "min_length": 1,
            "max_length": 40,
        },
        "env": {"type": "string", "enum": ["staging", "prod"], "default": "staging"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1.5},
        "dry_run": {"type": "boolean", "default": False},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b"]},
            "min_length": 1,
            "max_length": 3,
        },
        "config": {
            "type": "object",
            "required": True,
            "description": "Connection",
            "properties": {
                "host": {"type": "string", "required": True},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 443},
                "limits": {"type": "object", "properties": {"cpu": {"type": "number"}}},
            },
        },
        "extra": {"type": "object"},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "anything": {"type": "array"},
    }
    timeout = 30

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return ("ok", "deployed")


DEPLOY_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "service": {
            "type": "string",
            "description": "Service name",
            "minLength": 1,
            "maxLength": 40,
        },
        "env": {"type": "string", "enum": ["staging", "prod"], "default": "staging"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1.5},
        "dry_run": {"type": "boolean", "default": False},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b"]},
            "minItems": 1,
            "maxItems": 3,
        },
        "config": {
            "type": "object",
            "description": "Connection",
            "properties": {
                "host": {"type": "string"},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 443},
                "limits": {"type": "object", "properties": {"cpu": {"type": "number"}}},
            },
            "required": ["host"],
        },
        "extra": {"type": "object"},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "anything": {"type": "array"},
    },
    "required": ["service", "config"],
}


def test_schema_is_the_exact_anthropic_definition() -> None:
    assert Deploy.schema() == {
        "name": "deploy",
        "description": "Deploy a service",
        "input_schema": DEPLOY_INPUT_SCHEMA,
    }


def test_schema_keeps_declaration_order() -> None:
    schema = Deploy.schema()
    assert list(schema) == ["name", "description", "input_schema"]
    assert list(schema["input_schema"]["properties"]) == list(Deploy.parameters)


def test_openai_schema_is_the_exact_function_descriptor() -> None:
    assert Deploy.openai_schema() == {
        "type": "function",
        "function": {
            "name": "deploy",
            "description": "Deploy a service",
            "parameters": DEPLOY_INPUT_SCHEMA,
        },
    }


def test_schema_works_on_an_instance_too() -> None:
    instance = Deploy()
    assert instance.schema() == Deploy.schema()
    assert instance.openai_schema() == Deploy.openai_schema()


def test_schema_has_no_required_key_when_nothing_is_required() -> None:
    tool = _declare_params({"count": {"type": "integer"}})
    assert tool.schema()["input_schema"] == {
        "type": "object",
        "properties": {"count": {"type": "integer"}},
    }


def test_description_is_dedented() -> None:
    tool = _declare(
        description="""
        Check if a host is reachable.

        Sends ICMP echo requests.
        """
    )
    assert tool.schema()["description"] == (
        "Check if a host is reachable.\n\nSends ICMP echo requests."
    )


def test_runner_schemas_match_the_tools() -> None:
    runner = satsuma.ToolRunner([Ping, Deploy])
    assert runner.schemas() == [Ping.schema(), Deploy.schema()]


def test_mutating_a_returned_schema_does_not_change_the_tool() -> None:
    tool = _declare_params(
        {"tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]}}
    )
    before = tool.schema()
    mutated = tool.schema()
    mutated["input_schema"]["properties"]["tags"]["default"].append("zzz")
    mutated["input_schema"]["properties"]["tags"]["description"] = "changed"
    assert tool.schema() == before
    assert tool.schema()["input_schema"]["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "default": ["a"],
    }


async def test_mutating_a_returned_schema_does_not_change_the_default_applied() -> None:
    tool = _declare(
        parameters={"tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]}},
        run=_echo_run,
    )
    tool.schema()["input_schema"]["properties"]["tags"]["default"].append("zzz")
    outcome = await run_tool(tool, {})
    assert outcome.content == "{'tags': ['a']}"


async def _echo_run(self: satsuma.Tool, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
    return ("ok", repr(args))


# --- ToolRunner's checks of what it is given ------------------------------------------------


def test_duplicate_tool_names_in_one_runner_raise() -> None:
    class Other(satsuma.Tool):
        name = "ping"
        description = "Another ping"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return "ok"

    with pytest.raises(satsuma.ToolDefinitionError, match=r"ping"):
        satsuma.ToolRunner([Ping, Other])


def test_same_tool_twice_in_one_runner_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"ping"):
        satsuma.ToolRunner([Ping, Ping])


def test_duplicate_name_between_a_class_and_a_function_tool_raises() -> None:
    @satsuma.tool(name="ping", description="A function ping")
    def ping() -> str:
        return "pong"

    with pytest.raises(satsuma.ToolDefinitionError, match=r"ping"):
        satsuma.ToolRunner([Ping, ping])


@pytest.mark.parametrize("item", [42, "ping", object(), None, {"name": "ping"}])
def test_runner_given_a_non_tool_raises(item: object) -> None:
    with pytest.raises(satsuma.ToolDefinitionError):
        satsuma.ToolRunner([Ping, item])


def test_runner_given_a_plain_function_raises() -> None:
    def not_decorated(host: str) -> str:
        return host

    with pytest.raises(satsuma.ToolDefinitionError):
        satsuma.ToolRunner([not_decorated])


def test_runner_given_a_plain_class_raises() -> None:
    class NotATool:
        name = "nope"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return "ok"

    with pytest.raises(satsuma.ToolDefinitionError):
        satsuma.ToolRunner([NotATool])


class Database(satsuma.Tool):
    name = "query"
    description = "Run a query"
    parameters = {"sql": {"type": "string", "required": True}}

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return ("ok", f"{self.dsn}: {args['sql']}")


def test_class_whose_init_needs_arguments_raises_in_a_runner() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool query: .*instance"):
        satsuma.ToolRunner([Database])


async def test_instance_of_class_whose_init_needs_arguments_works() -> None:
    runner = satsuma.ToolRunner([Database("sqlite://")])
    assert [definition.name for definition in runner.definitions] == ["query"]
    outcome = await run_tool(Database("sqlite://"), {"sql": "select 1"})
    assert outcome.content == "sqlite://: select 1"
    assert outcome.is_error is False


def test_class_whose_init_needs_arguments_still_has_a_schema() -> None:
    assert Database.schema() == {
        "name": "query",
        "description": "Run a query",
        "input_schema": {
            "type": "object",
            "properties": {"sql": {"type": "string"}},
            "required": ["sql"],
        },
    }
