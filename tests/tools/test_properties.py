"""Property tests of argument validation against an independent oracle.

Random parameter specs (DESIGN.md's spec dicts, nested up to three levels) and random
arguments (some built from the spec so that valid calls are common, some perturbed, some
arbitrary JSON) go through a real ToolRunner. The oracle is jsonschema on the tool's own
published ``input_schema``, with two adjustments for satsuma's documented rules: an
integer is never a float or a bool, and a null property counts as absent.

Hypothesis drives sync test functions that call ``trio.run`` themselves.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import jsonschema
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma import Tool, ToolCall, ToolContext, ToolOutcome, ToolRunner

PREFIX = "Error: Invalid arguments: "
MAX_DEPTH = 3
SETTINGS = settings(max_examples=200, deadline=None)

Spec = dict[str, Any]

# ---------------------------------------------------------------------------
# Random JSON values

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
# Values that sit next to the usual types: the classic coercion traps.
lookalikes: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, False, 0, 1, 3.0, -1.5, "", "1", "true", [], {}]
)

NAMES = st.text(alphabet="abxyz_", min_size=1, max_size=3)
bound_values = st.integers(-20, 20) | st.floats(-20, 20, allow_nan=False)

# ---------------------------------------------------------------------------
# Random parameter specs


@st.composite
def lengths(draw: st.DrawFn, spec: Spec) -> None:
    low = draw(st.none() | st.integers(0, 4))
    high = draw(st.none() | st.integers(low or 0, 6))
    if low is not None:
        spec["min_length"] = low
    if high is not None:
        spec["max_length"] = high


@st.composite
def bounds(draw: st.DrawFn, spec: Spec) -> None:
    low = draw(st.none() | bound_values)
    high = draw(st.none() | bound_values)
    if low is not None and high is not None:
        if low > high:
            low, high = high, low
        elif low == high:
            high = low  # not 0 and -0.0, which hypothesis takes as an empty range
    if low is not None:
        spec["minimum"] = low
    if high is not None:
        spec["maximum"] = high


@st.composite
def specs(draw: st.DrawFn, depth: int = 1) -> Spec:
    """One parameter spec (without ``required``/``default``, which belong to properties)."""
    kinds = ["string", "integer", "number", "boolean"]
    if depth < MAX_DEPTH:
        kinds += ["array", "object"]
    kind = draw(st.sampled_from(kinds))
    spec: Spec = {"type": kind}
    if draw(st.integers(0, 9)) == 0:
        spec["description"] = draw(st.text(max_size=8))
    if kind == "string":
        if draw(st.booleans()):
            spec["enum"] = draw(st.lists(st.text(max_size=4), min_size=1, max_size=4, unique=True))
        draw(lengths(spec))
    elif kind in ("integer", "number"):
        draw(bounds(spec))
    elif kind == "array":
        if draw(st.integers(0, 4)) > 0:
            spec["items"] = draw(specs(depth + 1))
        draw(lengths(spec))
    elif kind == "object" and draw(st.integers(0, 4)) > 0:
        spec["properties"] = draw(properties(depth + 1))
    return spec


@st.composite
def properties(draw: st.DrawFn, depth: int = 1) -> dict[str, Spec]:
    """A dict of property specs, each maybe required or with a default."""
    names = draw(st.lists(NAMES, max_size=4, unique=True))
    out: dict[str, Spec] = {}
    for name in names:
        spec = draw(specs(depth))
        choice = draw(st.sampled_from(["plain", "required", "default"]))
        if choice == "required":
            spec["required"] = True
        elif choice == "default" and satisfiable(spec):
            spec["default"] = draw(valid_values(spec))
        elif draw(st.booleans()):
            spec["required"] = False
        out[name] = spec
    return out


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer_range(spec: Spec) -> tuple[int | None, int | None]:
    low, high = spec.get("minimum"), spec.get("maximum")
    return (
        None if low is None else math.ceil(low),
        None if high is None else math.floor(high),
    )


def enum_choices(spec: Spec) -> list[str]:
    low, high = spec.get("min_length", 0), spec.get("max_length")
    return [
        value
        for value in spec["enum"]
        if len(value) >= low and (high is None or len(value) <= high)
    ]


def satisfiable(spec: Spec) -> bool:
    """Whether some value meets ``spec``."""
    kind = spec["type"]
    if kind == "string":
        return "enum" not in spec or bool(enum_choices(spec))
    if kind == "integer":
        low, high = integer_range(spec)
        return low is None or high is None or low <= high
    if kind == "array":
        return spec.get("min_length", 0) == 0 or "items" not in spec or satisfiable(spec["items"])
    if kind == "object":
        return all(
            satisfiable(prop)
            for prop in spec.get("properties", {}).values()
            if prop.get("required", False)
        )
    return True


# ---------------------------------------------------------------------------
# Values for a spec


def extra_keys(declared: dict[str, Spec]) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.text(max_size=4).filter(lambda key: key not in declared)
    return st.dictionaries(keys, json_values, max_size=2)


def merged(parts: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    declared, extra = parts
    return {**extra, **declared}


def valid_values(spec: Spec) -> st.SearchStrategy[Any]:
    """Values that meet ``spec`` (which must be satisfiable); for objects, with optional
    properties absent, null or set, and sometimes undeclared keys besides."""
    kind = spec["type"]
    if kind == "string":
        if "enum" in spec:
            return st.sampled_from(enum_choices(spec))
        low = spec.get("min_length", 0)
        return st.text(min_size=low, max_size=spec.get("max_length", low + 5))
    if kind == "integer":
        low, high = integer_range(spec)
        return st.integers(low, high)
    if kind == "number":
        low, high = spec.get("minimum"), spec.get("maximum")
        floats = st.floats(low, high, allow_nan=False, allow_infinity=False)
        ints_low, ints_high = integer_range(spec)
        if ints_low is not None and ints_high is not None and ints_low > ints_high:
            return floats
        return floats | st.integers(ints_low, ints_high)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        low = spec.get("min_length", 0)
        high = spec.get("max_length", low + 3)
        items = spec.get("items")
        if items is None:
            return st.lists(json_values, min_size=low, max_size=high)
        if not satisfiable(items):
            return st.just([])
        return st.lists(valid_values(items), min_size=low, max_size=high)
    assert kind == "object"
    declared = spec.get("properties")
    if declared is None:
        return st.dictionaries(st.text(max_size=4), json_values, max_size=3)
    required = {}
    optional = {}
    for name, prop in declared.items():
        if prop.get("required", False):
            required[name] = valid_values(prop)
        elif satisfiable(prop):
            optional[name] = st.none() | valid_values(prop)
        else:
            optional[name] = st.none()
    return st.tuples(st.fixed_dictionaries(required, optional=optional), extra_keys(declared)).map(
        merged
    )


def any_values(spec: Spec) -> st.SearchStrategy[Any]:
    """Values near ``spec``: valid ones, ones with a local fault at any depth, and
    arbitrary JSON."""
    options: list[st.SearchStrategy[Any]] = [json_values, lookalikes]
    if satisfiable(spec):
        options.append(valid_values(spec))
    kind = spec["type"]
    if kind == "array" and "items" in spec:
        longest = spec["max_length"] if "max_length" in spec else spec.get("min_length", 0)
        size = longest + 1
        options.append(st.lists(any_values(spec["items"]), max_size=size))
    if kind == "object" and "properties" in spec:
        declared = spec["properties"]
        options.append(
            st.tuples(
                st.fixed_dictionaries(
                    {},
                    optional={
                        name: st.none() | any_values(prop) for name, prop in declared.items()
                    },
                ),
                extra_keys(declared),
            ).map(merged)
        )
    return st.one_of(options)


def root_of(parameters: dict[str, Spec]) -> Spec:
    return {"type": "object", "properties": parameters}


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Spec], Any, bool]:
    """(parameters, arguments, send the arguments as JSON text)."""
    parameters = draw(properties())
    root = root_of(parameters)
    strategies = [any_values(root), json_values]
    if satisfiable(root):
        strategies.append(valid_values(root))
    arguments = draw(st.one_of(strategies))
    as_text = draw(st.integers(0, 5)) == 0
    return parameters, arguments, as_text


# ---------------------------------------------------------------------------
# The oracle


def _integer_type(checker: Any, value: object) -> bool:
    return is_int(value)


Validator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer_type),
)


def without_null_properties(value: Any, spec: Spec) -> Any:
    """``value`` with null properties removed wherever ``spec`` declares properties."""
    kind = spec["type"]
    if kind == "object" and "properties" in spec and isinstance(value, dict):
        declared = spec["properties"]
        return {
            key: without_null_properties(item, declared[key]) if key in declared else item
            for key, item in value.items()
            if not (key in declared and item is None)
        }
    if kind == "array" and "items" in spec and isinstance(value, list):
        return [without_null_properties(item, spec["items"]) for item in value]
    return value


def oracle_valid(tool: type[Tool], parameters: dict[str, Spec], arguments: Any) -> bool:
    if not isinstance(arguments, dict):
        return False
    schema = tool.schema()["input_schema"]
    cleaned = without_null_properties(arguments, root_of(parameters))
    return bool(Validator(schema).is_valid(cleaned))


def expected_arguments(value: Any, spec: Spec) -> Any:
    """What ``run`` should receive for a valid ``value``: declared, non-null properties
    (recursively), plus the defaults of the absent ones. A default stands for the value
    not given, so it reaches ``run`` as that value would: cleaned the same way."""
    kind = spec["type"]
    if kind == "object" and "properties" in spec:
        out = {}
        for name, prop in spec["properties"].items():
            item = value.get(name)
            if item is None:
                if "default" in prop:
                    out[name] = expected_arguments(prop["default"], prop)
                continue
            out[name] = expected_arguments(item, prop)
        return out
    if kind == "array" and "items" in spec:
        return [expected_arguments(item, spec["items"]) for item in value]
    return value


def undeclared(value: Any, spec: Spec, path: str = "arguments") -> list[str]:
    """Where ``value`` holds a key that ``spec`` does not declare, or a null property."""
    kind = spec["type"]
    found: list[str] = []
    if kind == "object" and "properties" in spec and isinstance(value, dict):
        declared = spec["properties"]
        for key, item in value.items():
            if key not in declared:
                found.append(f"{path}: undeclared key {key!r}")
            elif item is None:
                found.append(f"{path}: null property {key!r}")
            else:
                found.extend(undeclared(item, declared[key], f"{path}.{key}"))
    elif kind == "array" and "items" in spec and isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(undeclared(item, spec["items"], f"{path}[{index}]"))
    return found


# ---------------------------------------------------------------------------
# Running


def make_tool(parameters: dict[str, Spec], received: list[Any]) -> type[Tool]:
    async def run(self: Tool, args: dict[str, Any], ctx: ToolContext) -> Any:
        received.append(copy.deepcopy(args))
        return ("ok", json.dumps(args, sort_keys=True))

    return type(
        "Probe",
        (Tool,),
        {
            "name": "probe",
            "description": "Echo the validated arguments",
            "parameters": parameters,
            "run": run,
        },
    )


def execute(tool: type[Tool], arguments: Any, as_text: bool) -> list[ToolOutcome]:
    runner = ToolRunner([tool])
    # A str input is JSON text (DESIGN.md): a string argument can only be sent encoded.
    if as_text or isinstance(arguments, str):
        call_input: Any = json.dumps(arguments)
    else:
        call_input = copy.deepcopy(arguments)

    async def main() -> list[ToolOutcome]:
        return await runner.execute([ToolCall("toolu_prop", "probe", call_input)])

    return trio.run(main)


# ---------------------------------------------------------------------------
# Properties


@SETTINGS
@given(cases())
def test_one_outcome_per_call_and_never_raises(
    case: tuple[dict[str, Spec], Any, bool],
) -> None:
    parameters, arguments, as_text = case
    received: list[Any] = []
    tool = make_tool(parameters, received)
    outcomes = execute(tool, arguments, as_text)
    assert len(outcomes) == 1
    (outcome,) = outcomes
    assert isinstance(outcome, ToolOutcome)
    assert outcome.tool_use_id == "toolu_prop"
    assert outcome.tool_name == "probe"
    assert outcome.error_kind in (None, "invalid_args")
    assert len(received) == (0 if outcome.is_error else 1)


@SETTINGS
@given(cases())
def test_ok_exactly_when_the_oracle_says_valid(
    case: tuple[dict[str, Spec], Any, bool],
) -> None:
    parameters, arguments, as_text = case
    received: list[Any] = []
    tool = make_tool(parameters, received)
    (outcome,) = execute(tool, arguments, as_text)
    if oracle_valid(tool, parameters, arguments):
        assert outcome.error_kind is None, outcome.content
        assert outcome.is_error is False
        assert len(received) == 1
    else:
        assert outcome.error_kind == "invalid_args", outcome.content
        assert outcome.is_error is True
        assert isinstance(outcome.content, str)
        assert outcome.content.startswith(PREFIX)
        assert all(part for part in outcome.content.removeprefix(PREFIX).split("; "))
        assert received == []


@SETTINGS
@given(cases())
def test_run_receives_only_declared_keys(case: tuple[dict[str, Spec], Any, bool]) -> None:
    parameters, arguments, as_text = case
    received: list[Any] = []
    tool = make_tool(parameters, received)
    (outcome,) = execute(tool, arguments, as_text)
    if outcome.is_error:
        return
    (args,) = received
    assert undeclared(args, root_of(parameters)) == []


@SETTINGS
@given(cases())
def test_run_receives_the_cleaned_arguments(case: tuple[dict[str, Spec], Any, bool]) -> None:
    parameters, arguments, as_text = case
    received: list[Any] = []
    tool = make_tool(parameters, received)
    (outcome,) = execute(tool, arguments, as_text)
    if outcome.is_error:
        return
    (args,) = received
    assert args == expected_arguments(arguments, root_of(parameters))


@SETTINGS
@given(cases())
def test_validation_is_deterministic(case: tuple[dict[str, Spec], Any, bool]) -> None:
    parameters, arguments, as_text = case
    received: list[Any] = []
    tool = make_tool(parameters, received)
    first = execute(tool, arguments, as_text)[0]
    second = execute(tool, arguments, not as_text)[0]
    assert (first.is_error, first.error_kind, first.content) == (
        second.is_error,
        second.error_kind,
        second.content,
    )


@SETTINGS
@given(properties())
def test_published_schema_is_valid_json_schema(parameters: dict[str, Spec]) -> None:
    tool = make_tool(parameters, [])
    schema = tool.schema()["input_schema"]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert list(schema["properties"]) == list(parameters)
