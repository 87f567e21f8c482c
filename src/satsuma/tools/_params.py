"""Parameter spec dicts (DESIGN.md's ``parameters = {...}``) compiled to spec nodes.

Every mistake raises ToolDefinitionError naming the tool and the parameter path, so a
bad declaration fails when the class is created, never at the first call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from .._exceptions import ToolDefinitionError
from ._spec import (
    NO_DEFAULT,
    ArrayNode,
    BooleanNode,
    IntegerNode,
    Node,
    NumberNode,
    ObjectNode,
    Property,
    StringNode,
)

__all__ = ["compile_parameters"]

VALID_TYPES: Final = ("string", "integer", "number", "boolean", "array", "object")
VALID_OPTIONS: Final = (
    "type",
    "required",
    "description",
    "enum",
    "items",
    "properties",
    "minimum",
    "maximum",
    "min_length",
    "max_length",
    "default",
)
# Which options apply to which types; "type", "required", "description" and "default"
# apply to all of them.
_OPTION_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "enum": ("string",),
    "items": ("array",),
    "properties": ("object",),
    "minimum": ("integer", "number"),
    "maximum": ("integer", "number"),
    "min_length": ("string", "array"),
    "max_length": ("string", "array"),
}


def compile_parameters(tool: str, parameters: object) -> ObjectNode:
    """Compile a tool's ``parameters`` dict (or None) into the root object node."""
    if parameters is None:
        return ObjectNode(properties=())
    if not isinstance(parameters, Mapping):
        raise ToolDefinitionError(
            tool,
            "parameters must be a dict of parameter specs, an attrs class or None, "
            f"got: {type(parameters).__name__}",
        )
    return ObjectNode(properties=_compile_properties(tool, parameters, ""))


def _compile_properties(tool: str, specs: Mapping[Any, Any], prefix: str) -> tuple[Property, ...]:
    props = []
    for name, spec in specs.items():
        if not isinstance(name, str) or not name:
            raise ToolDefinitionError(
                tool, f"parameter names must be non-empty strings, got: {name!r}"
            )
        path = prefix + name
        node, required, default = _compile_spec(tool, spec, path)
        props.append(Property(name=name, node=node, required=required, default=default))
    return tuple(props)


def _type_name(value: object) -> str:
    if isinstance(value, type):
        return value.__name__
    return str(value)


def _compile_spec(tool: str, spec: object, path: str) -> tuple[Node, bool, Any]:
    def fail(problem: str) -> ToolDefinitionError:
        return ToolDefinitionError(tool, problem, path=path)

    if not isinstance(spec, Mapping):
        raise fail(f"must be a dict of options, got: {type(spec).__name__}")
    unknown = [key for key in spec if key not in VALID_OPTIONS]
    if unknown:
        raise fail(f"has unknown option {unknown[0]!r}. Valid options: {', '.join(VALID_OPTIONS)}")
    if "type" not in spec:
        raise fail(f"has no 'type'. Valid types: {', '.join(VALID_TYPES)}")
    kind = spec["type"]
    if kind not in VALID_TYPES:
        raise fail(f"has invalid type {_type_name(kind)!r}. Valid types: {', '.join(VALID_TYPES)}")
    for option, types in _OPTION_TYPES.items():
        if option in spec and kind not in types:
            raise fail(f"has option {option!r}, which does not apply to type {kind}")

    required = spec.get("required", False)
    if not isinstance(required, bool):
        raise fail(f"option 'required' must be true or false, got: {required!r}")
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise fail(f"option 'description' must be a string, got: {type(description).__name__}")

    node = _BUILDERS[kind](tool, spec, path, fail, description)

    default = spec.get("default", NO_DEFAULT)
    if default is not NO_DEFAULT:
        if required:
            raise fail("is required and has a default; the default could never apply")
        if default is None:
            raise fail("has default null; leave the default out instead")
        errors: list[str] = []
        # The default is stored as checking leaves it (nulls and undeclared keys dropped,
        # nested defaults filled), so run receives a default exactly like a sent value.
        default = node.check(default, path, errors)
        if errors:
            raise fail(f"has a default that fails its own spec: {'; '.join(errors)}")
    return node, required, default


_Fail = Callable[[str], ToolDefinitionError]


def _is_length(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bounds(
    spec: Mapping[str, Any],
    fail: _Fail,
    names: tuple[str, str],
    valid: Callable[[object], bool],
    kind: str,
) -> tuple[Any, Any]:
    """A pair of lower/upper bound options, each checked, the lower not above the upper."""
    low, high = (spec.get(name) for name in names)
    for name, value in zip(names, (low, high), strict=True):
        if value is not None and not valid(value):
            raise fail(f"option {name!r} must be {kind}, got: {value!r}")
    if low is not None and high is not None and low > high:
        raise fail(f"has {names[0]} {low} greater than {names[1]} {high}")
    return low, high


def _lengths(spec: Mapping[str, Any], fail: _Fail) -> tuple[int | None, int | None]:
    return _bounds(spec, fail, ("min_length", "max_length"), _is_length, "a non-negative integer")


def _numeric_bounds(
    spec: Mapping[str, Any], fail: _Fail
) -> tuple[int | float | None, int | float | None]:
    return _bounds(spec, fail, ("minimum", "maximum"), _is_number, "a number")


def _string(
    tool: str, spec: Mapping[str, Any], path: str, fail: _Fail, description: str | None
) -> Node:
    enum = spec.get("enum")
    if enum is not None:
        if not isinstance(enum, list | tuple) or not enum:
            raise fail(
                "has an empty enum"
                if enum in ([], ())
                else "option 'enum' must be a list of strings"
            )
        if not all(isinstance(value, str) for value in enum):
            raise fail(f"option 'enum' must list only strings, got: {list(enum)!r}")
        if len(set(enum)) != len(enum):
            raise fail(f"option 'enum' lists a value twice: {list(enum)!r}")
        enum = tuple(enum)
    low, high = _lengths(spec, fail)
    return StringNode(description=description, enum=enum, min_length=low, max_length=high)


def _integer(
    tool: str, spec: Mapping[str, Any], path: str, fail: _Fail, description: str | None
) -> Node:
    low, high = _numeric_bounds(spec, fail)
    return IntegerNode(description=description, minimum=low, maximum=high)


def _number(
    tool: str, spec: Mapping[str, Any], path: str, fail: _Fail, description: str | None
) -> Node:
    low, high = _numeric_bounds(spec, fail)
    return NumberNode(description=description, minimum=low, maximum=high)


def _boolean(
    tool: str, spec: Mapping[str, Any], path: str, fail: _Fail, description: str | None
) -> Node:
    return BooleanNode(description=description)


def _array(
    tool: str, spec: Mapping[str, Any], path: str, fail: _Fail, description: str | None
) -> Node:
    items = None
    if "items" in spec:
        items, item_required, _ = _compile_spec(tool, spec["items"], f"{path}[]")
        if item_required:
            raise ToolDefinitionError(
                tool, "has option 'required', which does not apply to array items", path=f"{path}[]"
            )
    low, high = _lengths(spec, fail)
    return ArrayNode(description=description, items=items, min_length=low, max_length=high)


def _object(
    tool: str, spec: Mapping[str, Any], path: str, fail: _Fail, description: str | None
) -> Node:
    properties = spec.get("properties")
    if properties is None:
        return ObjectNode(description=description)
    if not isinstance(properties, Mapping):
        raise fail(f"option 'properties' must be a dict of specs, got: {type(properties).__name__}")
    return ObjectNode(
        description=description, properties=_compile_properties(tool, properties, f"{path}.")
    )


_BUILDERS: Final[dict[str, Callable[[str, Mapping[str, Any], str, _Fail, str | None], Node]]] = {
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": _boolean,
    "array": _array,
    "object": _object,
}
