"""Tools declared from Python type hints: ``@satsuma.tool`` functions, ``parameters =``
an attrs class, and ``satsuma.Toolset`` methods.

The classes and decorated functions live at module level: their hints are resolved with
``typing.get_type_hints``, which needs the module's globals.
"""

from __future__ import annotations

import enum
import threading
from typing import Annotated, Any, Literal, Optional, Union

import attrs
import pytest
import trio

import satsuma
from satsuma.testing import run_tool

# --- Types used in hints --------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Plain:
    """Neither attrs nor an enum: not describable as JSON Schema."""


@attrs.define
class Address:
    """A postal address.

    Attributes:
        street: Street and
            house number.
        city: The city.
    """

    street: str
    city: str = "Paris"


@attrs.define
class Contact:
    name: str = attrs.field(metadata={"description": "Full name"})
    address: Address
    emails: list[str] = attrs.Factory(list)


# --- A function using every supported hint -----------------------------------------------------


@satsuma.tool
async def catalogue(
    title: str,
    count: int,
    ratio: float,
    enabled: bool,
    tags: list[str],
    meta: dict,  # type: ignore[type-arg]
    labels: dict[str, str],
    mode: Literal["fast", "slow"],
    level: Literal[1, 2, 3],
    color: Color,
    priority: Priority,
    address: Address,
    note: Annotated[str, "A free-form note"],
    maybe: Optional[int] = None,  # noqa: UP045  (Optional[X] is part of what is tested)
    other: str | None = None,
    limit: int = 10,
    shade: Color = Color.GREEN,
) -> str:
    """Describe everything at once.

    Args:
        title: The title, which
            spans two lines.
        count: How many.
        mode: How fast.

    Returns:
        A description.

    Raises:
        ValueError: never.
    """
    return repr(
        (
            title,
            count,
            ratio,
            enabled,
            tags,
            meta,
            labels,
            mode,
            level,
            color,
            priority,
            address,
            note,
            maybe,
            other,
            limit,
            shade,
        )
    )


ADDRESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A postal address.",
    "properties": {
        "street": {"type": "string", "description": "Street and house number."},
        "city": {"type": "string", "description": "The city.", "default": "Paris"},
    },
    "required": ["street"],
}

CATALOGUE_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "description": "The title, which spans two lines."},
        "count": {"type": "integer", "description": "How many."},
        "ratio": {"type": "number"},
        "enabled": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {"type": "object"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "mode": {"type": "string", "enum": ["fast", "slow"], "description": "How fast."},
        "level": {"type": "integer", "enum": [1, 2, 3]},
        "color": {"type": "string", "enum": ["red", "green"]},
        "priority": {"type": "integer", "enum": [1, 2]},
        "address": ADDRESS_SCHEMA,
        "note": {"type": "string", "description": "A free-form note"},
        "maybe": {"type": "integer"},
        "other": {"type": "string"},
        "limit": {"type": "integer", "default": 10},
        "shade": {"type": "string", "enum": ["red", "green"], "default": "green"},
    },
    "required": [
        "title",
        "count",
        "ratio",
        "enabled",
        "tags",
        "meta",
        "labels",
        "mode",
        "level",
        "color",
        "priority",
        "address",
        "note",
    ],
}

CATALOGUE_ARGS: dict[str, Any] = {
    "title": "t",
    "count": 2,
    "ratio": 1,
    "enabled": False,
    "tags": ["a", "b"],
    "meta": {"any": [1, {"x": None}]},
    "labels": {"k": "v"},
    "mode": "slow",
    "level": 3,
    "color": "red",
    "priority": 2,
    "address": {"street": "1 Rue"},
    "note": "n",
}


def test_schema_from_every_supported_hint() -> None:
    assert catalogue.schema() == {
        "name": "catalogue",
        "description": "Describe everything at once.",
        "input_schema": CATALOGUE_INPUT_SCHEMA,
    }


def test_openai_schema_from_hints() -> None:
    assert catalogue.openai_schema() == {
        "type": "function",
        "function": {
            "name": "catalogue",
            "description": "Describe everything at once.",
            "parameters": CATALOGUE_INPUT_SCHEMA,
        },
    }


def test_schema_keeps_the_signature_order() -> None:
    assert list(catalogue.schema()["input_schema"]["properties"]) == [
        "title",
        "count",
        "ratio",
        "enabled",
        "tags",
        "meta",
        "labels",
        "mode",
        "level",
        "color",
        "priority",
        "address",
        "note",
        "maybe",
        "other",
        "limit",
        "shade",
    ]


async def test_catalogue_runs_with_structured_arguments_and_defaults() -> None:
    outcome = await run_tool(catalogue, CATALOGUE_ARGS)
    assert outcome.is_error is False, outcome.content
    assert outcome.content == repr(
        (
            "t",
            2,
            1,
            False,
            ["a", "b"],
            {"any": [1, {"x": None}]},
            {"k": "v"},
            "slow",
            3,
            Color.RED,
            Priority.HIGH,
            Address(street="1 Rue", city="Paris"),
            "n",
            None,
            None,
            10,
            Color.GREEN,
        )
    )


async def test_hint_validation_uses_satsuma_texts_and_paths() -> None:
    args = {
        **CATALOGUE_ARGS,
        "count": 3.0,
        "enabled": "true",
        "tags": ["a", 1],
        "mode": "medium",
        "level": 4,
        "color": "blue",
        "address": {"city": "Lyon"},
    }
    outcome = await run_tool(catalogue, args)
    assert outcome.error_kind == "invalid_args"
    assert outcome.is_error is True
    assert outcome.content == (
        "Error: Invalid arguments: "
        "expected count to be an integer, got: number; "
        "expected enabled to be a boolean, got: string; "
        "expected tags[1] to be a string, got: integer; "
        'mode must be one of ["fast", "slow"], got: "medium"; '
        "level must be one of [1, 2, 3], got: 4; "
        'color must be one of ["red", "green"], got: "blue"; '
        "missing required parameter: address.street"
    )


async def test_optional_parameter_accepts_null_as_absent() -> None:
    outcome = await run_tool(catalogue, {**CATALOGUE_ARGS, "maybe": None, "limit": None})
    assert outcome.is_error is False, outcome.content
    result = outcome.content
    assert isinstance(result, str)
    assert result.endswith("None, None, 10, <Color.GREEN: 'green'>)")


async def test_optional_parameter_given_a_value() -> None:
    outcome = await run_tool(
        catalogue, {**CATALOGUE_ARGS, "maybe": 7, "other": "o", "shade": "red"}
    )
    assert outcome.is_error is False, outcome.content
    assert isinstance(outcome.content, str)
    assert outcome.content.endswith("7, 'o', 10, <Color.RED: 'red'>)")


def test_decorated_object_is_a_function_tool() -> None:
    assert isinstance(catalogue, satsuma.FunctionTool)
    assert isinstance(catalogue, satsuma.Tool)
    assert catalogue.__name__ == "catalogue"


# --- Docstrings -----------------------------------------------------------------------------


@satsuma.tool
def documented(path: str, recursive: bool = False, depth: int = 1) -> str:
    """List a directory.

    Args:
        path (str): The directory to list,
            relative to the working
            directory.
        recursive (bool, optional): Whether to descend.
        depth: How deep to go.

    Returns:
        The listing.
    """
    return path


def test_description_is_the_docstring_summary() -> None:
    assert documented.schema()["description"] == "List a directory."


def test_args_section_gives_parameter_descriptions_with_continuations() -> None:
    assert documented.schema()["input_schema"] == {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "The directory to list, relative to the working directory.",
            },
            "recursive": {
                "type": "boolean",
                "description": "Whether to descend.",
                "default": False,
            },
            "depth": {"type": "integer", "description": "How deep to go.", "default": 1},
        },
        "required": ["path"],
    }


@satsuma.tool
def one_liner(x: int) -> str:
    """Return x as text."""
    return str(x)


def test_one_line_docstring_without_args_section() -> None:
    assert one_liner.schema() == {
        "name": "one_liner",
        "description": "Return x as text.",
        "input_schema": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
        },
    }


# --- Decorator options ------------------------------------------------------------------------


@satsuma.tool(name="add_numbers", description="Add two integers.", timeout=5)
def add(a: int, b: int = 2) -> int:
    """This docstring is overridden by description=."""
    return a + b


@satsuma.tool(description="Fetch a page.")
async def fetch(url: str) -> str:
    return f"fetched {url}"


@satsuma.tool(name="shout")
async def loud(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


def test_name_and_description_options() -> None:
    assert add.schema() == {
        "name": "add_numbers",
        "description": "Add two integers.",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
            "required": ["a"],
        },
    }
    assert loud.schema()["name"] == "shout"
    assert loud.schema()["description"] == "Upper-case the text."


def test_description_option_without_docstring() -> None:
    assert fetch.schema()["description"] == "Fetch a page."


def test_timeout_option_reaches_the_definition() -> None:
    (definition,) = satsuma.ToolRunner([add]).definitions
    assert definition.timeout == 5.0
    (definition,) = satsuma.ToolRunner([fetch]).definitions
    assert definition.timeout is None


@satsuma.tool(timeout=2)
async def sleepy() -> str:
    """Sleep far longer than the timeout."""
    await trio.sleep(1000)
    return "woke"


async def test_timeout_option_is_enforced(autojump_clock: trio.testing.MockClock) -> None:
    outcome = await run_tool(sleepy, timeout=None)
    assert outcome.error_kind == "timeout"
    assert outcome.content == "Error: Tool timed out after 2s"


def test_decorated_sync_function_can_still_be_called() -> None:
    assert add(2, 3) == 5
    assert add(a=1) == 3
    assert documented("here") == "here"


async def test_decorated_async_function_can_still_be_awaited() -> None:
    assert await fetch("https://example.org") == "fetched https://example.org"
    assert await loud(text="hi") == "HI"


async def test_run_sync_tool_through_run_tool() -> None:
    outcome = await run_tool(one_liner, {"x": 42})
    assert outcome.content == "42"
    assert outcome.is_error is False
    assert outcome.error_kind is None
    assert outcome.tool_name == "one_liner"


async def test_run_async_tool_through_run_tool() -> None:
    outcome = await run_tool(loud, {"text": "abc"})
    assert outcome.content == "ABC"
    assert outcome.is_error is False
    assert outcome.tool_name == "shout"


_THREADS: list[int] = []


@satsuma.tool
def where_am_i() -> str:
    """Record which thread runs the tool."""
    _THREADS.append(threading.get_ident())
    return "here"


async def test_sync_function_tool_runs_in_a_worker_thread() -> None:
    _THREADS.clear()
    outcome = await run_tool(where_am_i)
    assert outcome.content == "here"
    assert len(_THREADS) == 1
    assert _THREADS[0] != threading.get_ident()


# --- ToolContext injection ----------------------------------------------------------------------


@satsuma.tool
async def whoami(prefix: str, ctx: satsuma.ToolContext) -> str:
    """Report the call's id and tool name.

    Args:
        prefix: Put before the report.
    """
    return f"{prefix}:{ctx.tool_use_id}:{ctx.tool_name}:{ctx.extra.get('user')}"


@satsuma.tool
def whoami_sync(context: satsuma.ToolContext, suffix: str = "!") -> str:
    """Report the tool name, from a worker thread."""
    return f"{context.tool_name}{suffix}"


def test_context_parameter_is_absent_from_the_schema() -> None:
    assert whoami.schema()["input_schema"] == {
        "type": "object",
        "properties": {"prefix": {"type": "string", "description": "Put before the report."}},
        "required": ["prefix"],
    }
    assert whoami_sync.schema()["input_schema"] == {
        "type": "object",
        "properties": {"suffix": {"type": "string", "default": "!"}},
    }


async def test_context_is_injected_async() -> None:
    outcome = await run_tool(whoami, {"prefix": "p"}, {"user": "ann"})
    assert outcome.content == f"p:{outcome.tool_use_id}:whoami:ann"


async def test_context_is_injected_sync() -> None:
    outcome = await run_tool(whoami_sync, {})
    assert outcome.content == "whoami_sync!"


async def test_a_ctx_key_sent_by_the_model_is_dropped_not_injected() -> None:
    outcome = await run_tool(whoami, {"prefix": "p", "ctx": "forged"})
    assert outcome.is_error is False
    assert outcome.content == f"p:{outcome.tool_use_id}:whoami:None"


# --- Optional without a default ---------------------------------------------------------------


@satsuma.tool
async def greet(name: str, title: str | None) -> str:
    """Greet someone.

    Args:
        name: Who.
        title: An optional title.
    """
    return f"{title} {name}" if title is not None else name


async def test_optional_parameter_without_default_is_consistent() -> None:
    # The schema and the call must agree: either the parameter is optional and the
    # function receives None when it is absent, or it is required and its absence is
    # an invalid-arguments error. A crash of the tool is neither.
    required = "title" in greet.schema()["input_schema"].get("required", [])
    outcome = await run_tool(greet, {"name": "Ann"})
    if required:
        assert outcome.content == "Error: Invalid arguments: missing required parameter: title"
    else:
        assert outcome.error_kind is None, outcome.content
        assert outcome.content == "Ann"


async def test_optional_parameter_without_default_given_null() -> None:
    required = "title" in greet.schema()["input_schema"].get("required", [])
    outcome = await run_tool(greet, {"name": "Ann", "title": None})
    if required:
        assert outcome.content == "Error: Invalid arguments: missing required parameter: title"
    else:
        assert outcome.error_kind is None, outcome.content
        assert outcome.content == "Ann"


async def test_optional_parameter_without_default_given_a_value() -> None:
    outcome = await run_tool(greet, {"name": "Ann", "title": "Dr"})
    assert outcome.content == "Dr Ann"


# --- Lists and nesting of structured types ---------------------------------------------------


@satsuma.tool
async def address_book(contacts: list[Contact], colors: list[Color] | None = None) -> str:
    """Store contacts."""
    assert all(isinstance(contact, Contact) for contact in contacts)
    assert all(isinstance(contact.address, Address) for contact in contacts)
    assert colors is None or all(isinstance(color, Color) for color in colors)
    return repr((contacts, colors))


def test_nested_attrs_classes_in_a_list_schema() -> None:
    assert address_book.schema()["input_schema"] == {
        "type": "object",
        "properties": {
            "contacts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "Full name"},
                        "address": ADDRESS_SCHEMA,
                        "emails": {"type": "array", "items": {"type": "string"}, "default": []},
                    },
                    "required": ["name", "address"],
                },
            },
            "colors": {"type": "array", "items": {"type": "string", "enum": ["red", "green"]}},
        },
        "required": ["contacts"],
    }


async def test_nested_attrs_instances_and_enums_arrive_structured() -> None:
    outcome = await run_tool(
        address_book,
        {
            "contacts": [
                {"name": "Ann", "address": {"street": "1 Main St", "city": "Oslo"}},
                {"name": "Bo", "address": {"street": "2 Side St"}, "emails": ["b@x"]},
            ],
            "colors": ["green", "red"],
        },
    )
    assert outcome.error_kind is None, outcome.content
    assert outcome.content == repr(
        (
            [
                Contact(name="Ann", address=Address("1 Main St", "Oslo")),
                Contact(name="Bo", address=Address("2 Side St", "Paris"), emails=["b@x"]),
            ],
            [Color.GREEN, Color.RED],
        )
    )


async def test_nested_attrs_errors_have_full_paths() -> None:
    outcome = await run_tool(
        address_book,
        {"contacts": [{"name": "Ann", "address": {"street": 5}}, {"address": {}}]},
    )
    assert outcome.content == (
        "Error: Invalid arguments: "
        "expected contacts[0].address.street to be a string, got: integer; "
        "missing required parameter: contacts[1].name; "
        "missing required parameter: contacts[1].address.street"
    )


# --- Declaration errors at decoration -----------------------------------------------------------


def test_unsupported_hint_set() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x .*unsupported.*set\[int\]"
    ):

        @satsuma.tool
        def bad(x: set[int]) -> str:
            """Bad."""
            return ""


def test_unsupported_hint_plain_class() -> None:
    with pytest.raises(
        satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x .*unsupported.*Plain"
    ):

        @satsuma.tool
        def bad(x: Plain) -> str:
            """Bad."""
            return ""


@pytest.mark.parametrize("use_pipe", [False, True])
def test_unsupported_hint_union_of_two_types(use_pipe: bool) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x .*unsupported"):
        if use_pipe:

            @satsuma.tool
            def bad(x: int | str) -> str:
                """Bad."""
                return ""
        else:

            @satsuma.tool
            def bad(x: Union[int, str]) -> str:  # noqa: UP007
                """Bad."""
                return ""


def test_unsupported_hint_inside_a_list_names_the_items_path() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x\[\] "):

        @satsuma.tool
        def bad(x: list[set[int]]) -> str:
            """Bad."""
            return ""


def test_unsupported_hint_in_an_attrs_field_names_the_field() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter holder\.thing "):

        @satsuma.tool
        def bad(holder: HoldsPlain) -> str:
            """Bad."""
            return ""


@attrs.define
class HoldsPlain:
    thing: Plain


@pytest.mark.parametrize(
    "hint", ["dict[int, str]", "tuple[int, str]", "Literal['a', 1]", "frozenset[str]", "bytes"]
)
def test_other_unsupported_hints(hint: str) -> None:
    namespace: dict[str, Any] = {}
    exec(
        f"def bad(x: {hint}) -> str:\n    '''Bad.'''\n    return ''\n",
        globals(),
        namespace,
    )
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x "):
        satsuma.tool(namespace["bad"])


def test_missing_hint() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x .*hint"):

        @satsuma.tool
        def bad(x, y: int) -> str:  # type: ignore[no-untyped-def]
            """Bad."""
            return ""


def test_star_args() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter args "):

        @satsuma.tool
        def bad(*args: int) -> str:
            """Bad."""
            return ""


def test_star_star_kwargs() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter options "):

        @satsuma.tool
        def bad(x: int, **options: str) -> str:
            """Bad."""
            return ""


def test_positional_only_parameter() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x "):

        @satsuma.tool
        def bad(x: int, /) -> str:
            """Bad."""
            return ""


def test_no_docstring_and_no_description() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: .*description"):

        @satsuma.tool
        def bad(x: int) -> str:
            return ""


def test_docstring_with_only_sections_has_no_description() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: .*description"):

        @satsuma.tool
        def bad(x: int) -> str:
            """Args:
            x: A number.
            """
            return ""


def test_bad_name_option() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"\^\[a-zA-Z0-9_-\]\{1,64\}\$"):

        @satsuma.tool(name="not allowed")
        def fine(x: int) -> str:
            """Fine."""
            return ""


@pytest.mark.parametrize("timeout", [0, -2, "5", True])
def test_bad_timeout_option(timeout: Any) -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool fine: .*timeout"):

        @satsuma.tool(timeout=timeout)
        def fine(x: int) -> str:
            """Fine."""
            return ""


def test_default_failing_its_hint() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter mode .*default"):

        @satsuma.tool
        def bad(mode: Literal["a", "b"] = "c") -> str:  # type: ignore[assignment]
            """Bad."""
            return ""


def test_enum_with_mixed_value_types() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: parameter x "):

        @satsuma.tool
        def bad(x: Mixed) -> str:
            """Bad."""
            return ""


class Mixed(enum.Enum):
    A = "a"
    ONE = 1


def test_unresolvable_hint() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool bad: "):

        @satsuma.tool
        def bad(x: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
            """Bad."""
            return ""


def test_generator_function() -> None:
    with pytest.raises(satsuma.ToolDefinitionError):

        @satsuma.tool
        def bad(x: int) -> Any:
            """Bad."""
            yield x


# --- parameters = an attrs class -------------------------------------------------------------------


@attrs.define
class SearchArgs:
    """Search arguments (this class description is not the tool's).

    Attributes:
        query: What to look for.
        fields: Which fields to search,
            all if empty.
    """

    query: str
    limit: int = attrs.field(
        default=10,
        metadata={"description": "At most this many hits"},
        validator=attrs.validators.le(50),
    )
    color: Color | None = None
    fields: list[str] = attrs.Factory(list)
    where: Address | None = None


_RECEIVED: list[Any] = []


class Search(satsuma.Tool):
    name = "search"
    description = "Search the index"
    parameters = SearchArgs

    async def run(self, args: SearchArgs, ctx: satsuma.ToolContext) -> Any:
        _RECEIVED.append(args)
        return ("ok", repr(args))


def test_attrs_parameters_schema() -> None:
    assert Search.schema() == {
        "name": "search",
        "description": "Search the index",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {
                    "type": "integer",
                    "description": "At most this many hits",
                    "default": 10,
                },
                "color": {"type": "string", "enum": ["red", "green"]},
                "fields": {
                    "type": "array",
                    "description": "Which fields to search, all if empty.",
                    "items": {"type": "string"},
                    "default": [],
                },
                "where": ADDRESS_SCHEMA,
            },
            "required": ["query"],
        },
    }


async def test_attrs_parameters_run_receives_an_instance() -> None:
    _RECEIVED.clear()
    outcome = await run_tool(
        Search, {"query": "q", "color": "green", "where": {"street": "s"}, "junk": 1}
    )
    assert outcome.error_kind is None, outcome.content
    (received,) = _RECEIVED
    assert received == SearchArgs(
        query="q", limit=10, color=Color.GREEN, fields=[], where=Address("s", "Paris")
    )
    assert isinstance(received.color, Color)
    assert isinstance(received.where, Address)


async def test_attrs_parameters_defaults_apply() -> None:
    _RECEIVED.clear()
    outcome = await run_tool(Search, {"query": "q"})
    assert outcome.error_kind is None, outcome.content
    (received,) = _RECEIVED
    assert received == SearchArgs(query="q", limit=10, color=None, fields=[], where=None)


async def test_attrs_parameters_type_errors_use_satsuma_texts() -> None:
    _RECEIVED.clear()
    outcome = await run_tool(Search, {"query": 3, "color": "blue", "where": {"city": "x"}})
    assert outcome.content == (
        "Error: Invalid arguments: "
        "expected query to be a string, got: integer; "
        'color must be one of ["red", "green"], got: "blue"; '
        "missing required parameter: where.street"
    )
    assert _RECEIVED == []


async def test_attrs_validator_rejection_is_invalid_args_not_a_crash() -> None:
    _RECEIVED.clear()
    outcome = await run_tool(Search, {"query": "q", "limit": 99})
    assert outcome.error_kind == "invalid_args"
    assert outcome.is_error is True
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Invalid arguments: ")
    assert _RECEIVED == []


async def test_attrs_validator_rejection_names_the_field() -> None:
    outcome = await run_tool(Search, {"query": "q", "limit": 99})
    assert isinstance(outcome.content, str)
    assert "limit" in outcome.content, outcome.content


def test_attrs_parameters_field_without_hint_or_with_bad_hint_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"^Tool holder: parameter thing "):

        class Holder(satsuma.Tool):
            name = "holder"
            description = "Hold a thing"
            parameters = HoldsPlain

            async def run(self, args: Any, ctx: satsuma.ToolContext) -> Any:
                return "ok"


@attrs.define
class NoteArgs:
    text: str
    tag: str | None = attrs.field(kw_only=True)


class Note(satsuma.Tool):
    name = "note"
    description = "Take a note"
    parameters = NoteArgs

    async def run(self, args: NoteArgs, ctx: satsuma.ToolContext) -> Any:
        return ("ok", f"{args.text}/{args.tag}")


async def test_attrs_optional_field_without_default_is_consistent() -> None:
    required = "tag" in Note.schema()["input_schema"].get("required", [])
    outcome = await run_tool(Note, {"text": "t"})
    if required:
        assert outcome.content == "Error: Invalid arguments: missing required parameter: tag"
    else:
        assert outcome.error_kind is None, outcome.content
        assert outcome.content == "t/None"


# --- attrs classes as function parameters, with validators ------------------------------------


@attrs.define
class Range:
    low: int
    high: int = attrs.field(validator=attrs.validators.ge(0))


@satsuma.tool
def span(r: Range) -> str:
    """Compute a span."""
    assert isinstance(r, Range)
    return str(r.high - r.low)


async def test_function_attrs_parameter_validator_is_invalid_args() -> None:
    outcome = await run_tool(span, {"r": {"low": 1, "high": -1}})
    assert outcome.error_kind == "invalid_args"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Invalid arguments: ")


async def test_function_attrs_parameter_arrives_as_instance() -> None:
    outcome = await run_tool(span, {"r": {"low": 1, "high": 5}})
    assert outcome.content == "4"


# --- Toolset --------------------------------------------------------------------------------------


class Notebook(satsuma.Toolset):
    """Tools sharing one list of notes."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @satsuma.tool
    async def add_note(self, text: str) -> str:
        """Add a note.

        Args:
            text: The note's text.
        """
        self.notes.append(text)
        return f"{len(self.notes)} notes"

    @satsuma.tool
    def count_notes(self) -> str:
        """Count the notes."""
        return str(len(self.notes))

    @satsuma.tool(name="clear_notes", description="Forget every note.")
    async def clear(self, ctx: satsuma.ToolContext) -> str:
        self.notes.clear()
        return f"cleared by {ctx.tool_name}"

    def helper(self) -> int:
        return len(self.notes)


def test_toolset_tools_are_bound_and_in_declaration_order() -> None:
    book = Notebook()
    tools = book.tools()
    assert [tool.schema()["name"] for tool in tools] == ["add_note", "count_notes", "clear_notes"]
    assert all(isinstance(tool, satsuma.FunctionTool) for tool in tools)


def test_toolset_method_schema_has_no_self() -> None:
    book = Notebook()
    assert book.add_note.schema() == {
        "name": "add_note",
        "description": "Add a note.",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The note's text."}},
            "required": ["text"],
        },
    }
    assert Notebook.add_note.schema() == book.add_note.schema()
    assert book.clear.schema()["input_schema"] == {"type": "object", "properties": {}}


async def test_toolset_tools_share_state_through_a_runner() -> None:
    book = Notebook()
    runner = satsuma.ToolRunner([book])
    assert [definition.name for definition in runner.definitions] == [
        "add_note",
        "count_notes",
        "clear_notes",
    ]
    outcomes = await runner.execute(
        [
            {"id": "1", "name": "add_note", "input": {"text": "a"}},
        ]
    )
    outcomes += await runner.execute([{"id": "2", "name": "add_note", "input": {"text": "b"}}])
    outcomes += await runner.execute([{"id": "3", "name": "count_notes", "input": {}}])
    assert [outcome.content for outcome in outcomes] == ["1 notes", "2 notes", "2"]
    assert book.notes == ["a", "b"]
    (cleared,) = await runner.execute([{"id": "4", "name": "clear_notes", "input": {}}])
    assert cleared.content == "cleared by clear_notes"
    assert book.notes == []


async def test_two_toolset_instances_keep_separate_state() -> None:
    first, second = Notebook(), Notebook()
    await run_tool(first.add_note, {"text": "only in first"})
    assert first.notes == ["only in first"]
    assert second.notes == []
    outcome = await run_tool(second.count_notes)
    assert outcome.content == "0"


async def test_bound_toolset_method_can_be_called_directly() -> None:
    book = Notebook()
    assert await book.add_note("direct") == "1 notes"
    assert book.count_notes() == "1"
    assert book.notes == ["direct"]


def test_unbound_toolset_method_in_a_runner_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"add_note"):
        satsuma.ToolRunner([Notebook.add_note])


async def test_unbound_toolset_method_in_run_tool_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError):
        await run_tool(Notebook.count_notes)


def test_toolset_class_instead_of_instance_in_a_runner_raises() -> None:
    with pytest.raises(satsuma.ToolDefinitionError):
        satsuma.ToolRunner([Notebook])


def test_toolset_tools_next_to_other_tools() -> None:
    runner = satsuma.ToolRunner([Notebook(), loud, Search])
    assert [definition.name for definition in runner.definitions] == [
        "add_note",
        "count_notes",
        "clear_notes",
        "shout",
        "search",
    ]


def test_two_instances_of_one_toolset_in_one_runner_clash() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"add_note"):
        satsuma.ToolRunner([Notebook(), Notebook()])
