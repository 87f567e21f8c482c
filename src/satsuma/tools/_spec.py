"""Compiled parameter specs: one node per declared value, each able to check an argument
and to describe itself as JSON Schema.

Whatever form a tool's parameters are declared in (a spec dict, an attrs class, a
function's type hints), they compile to these nodes once, when the tool is declared. A
call's arguments are then checked by walking the nodes: no schema is interpreted per call.

Checking follows DESIGN.md: no coercion (``3.0`` is not an integer, ``True`` is not an
integer, ``"true"`` is not a boolean), ``null`` counts as an absent property, undeclared
keys are dropped, defaults are filled in, and every error is collected (in declaration
order, then array index order) before any is reported.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from .._jsonvalue import expected_text, json_problem, json_type

__all__ = [
    "AnyNode",
    "ArrayNode",
    "BooleanNode",
    "IntegerNode",
    "Node",
    "NullableNode",
    "NumberNode",
    "ObjectNode",
    "Property",
    "StringNode",
    "UnionNode",
    "check_arguments",
    "json_type",
]

JsonType = Literal["string", "integer", "number", "boolean", "array", "object", "null"]


def _render(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def enum_text(path: str, allowed: list[Any] | tuple[Any, ...], value: object) -> str:
    return f"{path} must be one of {_render(list(allowed))}, got: {_render(value)}"


def _plural(count: int | float, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def bound_text(path: str, relation: str, bound: int | float, value: object) -> str:
    return f"{path} must be {relation} {bound}, got: {_render(value)}"


def length_text(path: str, which: Literal["least", "most"], limit: int, unit: str, got: int) -> str:
    verb = "be" if unit == "character" else "have"
    return f"{path} must {verb} at {which} {_plural(limit, unit)}, got: {got}"


def missing_text(path: str) -> str:
    return f"missing required parameter: {path}"


class Node:
    """A compiled spec for one value. Subclasses implement ``check`` and ``schema``."""

    __slots__ = ()

    description: str | None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        """Check a present (non-null, for properties) value; return it cleaned.

        Errors are appended to ``errors``; the return value is meaningless once any
        error has been appended.
        """
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """This node as a JSON Schema fragment."""
        raise NotImplementedError

    def _base(self, json_type_name: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {} if json_type_name is None else {"type": json_type_name}
        if self.description:
            out["description"] = self.description
        return out


@attrs.frozen(kw_only=True)
class AnyNode(Node):
    """Accepts any JSON value (an ``Any`` hint)."""

    description: str | None = None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        return value

    def schema(self) -> dict[str, Any]:
        return self._base(None)


@attrs.frozen(kw_only=True)
class StringNode(Node):
    description: str | None = None
    enum: tuple[str, ...] | None = None
    min_length: int | None = None
    max_length: int | None = None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, str):
            errors.append(expected_text(path, "string", value))
            return value
        if self.enum is not None and value not in self.enum:
            errors.append(enum_text(path, self.enum, value))
        if self.min_length is not None and len(value) < self.min_length:
            errors.append(length_text(path, "least", self.min_length, "character", len(value)))
        if self.max_length is not None and len(value) > self.max_length:
            errors.append(length_text(path, "most", self.max_length, "character", len(value)))
        return value

    def schema(self) -> dict[str, Any]:
        out = self._base("string")
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.min_length is not None:
            out["minLength"] = self.min_length
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        return out


@attrs.frozen(kw_only=True)
class _NumericNode(Node):
    description: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    enum: tuple[int | float, ...] | None = None

    def _bounds(self, value: int | float, path: str, errors: list[str]) -> None:
        if self.enum is None and self.minimum is None and self.maximum is None:
            return
        if self.enum is not None and value not in self.enum:
            errors.append(enum_text(path, self.enum, value))
        if self.minimum is not None and value < self.minimum:
            errors.append(bound_text(path, ">=", self.minimum, value))
        if self.maximum is not None and value > self.maximum:
            errors.append(bound_text(path, "<=", self.maximum, value))

    def _numeric_schema(self, json_type_name: str) -> dict[str, Any]:
        out = self._base(json_type_name)
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@attrs.frozen(kw_only=True)
class IntegerNode(_NumericNode):
    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(expected_text(path, "integer", value))
            return value
        if self.enum is not None or self.minimum is not None or self.maximum is not None:
            self._bounds(value, path, errors)
        return value

    def schema(self) -> dict[str, Any]:
        return self._numeric_schema("integer")


@attrs.frozen(kw_only=True)
class NumberNode(_NumericNode):
    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append(expected_text(path, "number", value))
            return value
        # NaN compares False with every bound and no JSON can carry it back to the API.
        problem = json_problem(value, path)
        if problem is not None:
            errors.append(problem)
            return value
        self._bounds(value, path, errors)
        return value

    def schema(self) -> dict[str, Any]:
        return self._numeric_schema("number")


@attrs.frozen(kw_only=True)
class BooleanNode(Node):
    description: str | None = None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, bool):
            errors.append(expected_text(path, "boolean", value))
        return value

    def schema(self) -> dict[str, Any]:
        return self._base("boolean")


@attrs.frozen(kw_only=True)
class ArrayNode(Node):
    description: str | None = None
    items: Node | None = None
    min_length: int | None = None
    max_length: int | None = None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, (list, tuple)):
            errors.append(expected_text(path, "array", value))
            return value
        if self.min_length is not None and len(value) < self.min_length:
            errors.append(length_text(path, "least", self.min_length, "item", len(value)))
        if self.max_length is not None and len(value) > self.max_length:
            errors.append(length_text(path, "most", self.max_length, "item", len(value)))
        items = self.items
        if items is None:
            return list(value)
        return [items.check(item, f"{path}[{index}]", errors) for index, item in enumerate(value)]

    def schema(self) -> dict[str, Any]:
        out = self._base("array")
        if self.items is not None:
            out["items"] = self.items.schema()
        if self.min_length is not None:
            out["minItems"] = self.min_length
        if self.max_length is not None:
            out["maxItems"] = self.max_length
        return out


@attrs.frozen(kw_only=True)
class NullableNode(Node):
    """``Optional[X]`` where it is not a property (an array item): null is a value."""

    inner: Node
    description: str | None = None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if value is None:
            return None
        return self.inner.check(value, path, errors)

    def schema(self) -> dict[str, Any]:
        out = self._base(None)
        out["anyOf"] = [self.inner.schema(), {"type": "null"}]
        return out


@attrs.frozen(kw_only=True)
class UnionNode(Node):
    """One of several object types (a union of attrs classes or dataclasses).

    A value takes the first member it matches exactly (every key it has is declared by
    that member), else the first it matches once undeclared keys are dropped: so of
    ``Cat(name)`` and ``Dog(name, barks)``, ``{"name": "Rex", "barks": true}`` is a Dog.
    """

    members: tuple[tuple[str, ObjectNode], ...]  # (the class's name, its node)
    description: str | None = None

    def match(self, value: Mapping[str, Any], path: str) -> tuple[int | None, Any, list[str]]:
        """The index of the member ``value`` matches (None if none), the value as that
        member cleans it, and otherwise one error naming what each member found wrong."""
        prefix = f"{path}." if path else ""
        present = {key for key, item in value.items() if item is not None}
        loose: tuple[int, Any] | None = None
        problems: list[str] = []
        for index, (name, node) in enumerate(self.members):
            errors: list[str] = []
            cleaned = node.check_members(value, prefix, errors)
            if errors:
                problems.append(f"as {name}: {', '.join(errors)}")
                continue
            declared = {prop.name for prop in node.properties or ()}
            if node.properties is None or present <= declared:
                return index, cleaned, []
            if loose is None:
                loose = (index, cleaned)
        if loose is not None:
            return loose[0], loose[1], []
        names = ", ".join(name for name, _ in self.members)
        return None, value, [f"{path or 'value'} matches none of {names} ({'; '.join(problems)})"]

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, Mapping):
            errors.append(expected_text(path, "object", value))
            return value
        _, cleaned, problems = self.match(value, path)
        errors.extend(problems)
        return cleaned

    def schema(self) -> dict[str, Any]:
        out = self._base(None)
        out["anyOf"] = [node.schema() for _, node in self.members]
        return out


_NO_DEFAULT: Final = object()


@attrs.frozen(kw_only=True)
class Property:
    """One named property of an object node."""

    name: str
    node: Node
    required: bool = False
    default: Any = _NO_DEFAULT

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def default_value(self) -> Any:
        """A fresh copy of the default, so no call can change another call's default."""
        value = self.default
        if isinstance(value, list | dict):
            return copy.deepcopy(value)
        return value


NO_DEFAULT: Final = _NO_DEFAULT


@attrs.frozen(kw_only=True)
class ObjectNode(Node):
    """An object: with ``properties``, undeclared keys are dropped; without, any object
    passes through as it is, each of its values checked by ``values`` when given (a
    ``dict[str, X]``)."""

    description: str | None = None
    properties: tuple[Property, ...] | None = None
    values: Node | None = None

    def check(self, value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, Mapping):
            errors.append(expected_text(path, "object", value))
            return value
        return self.check_members(value, f"{path}.", errors)

    def check_members(self, value: Mapping[str, Any], prefix: str, errors: list[str]) -> Any:
        properties = self.properties
        if properties is None:
            values = self.values
            if values is None:
                return dict(value)
            return {key: values.check(item, prefix + key, errors) for key, item in value.items()}
        out: dict[str, Any] = {}
        for prop in properties:
            name = prop.name
            item = value.get(name)
            if item is None:
                if prop.required:
                    errors.append(missing_text(prefix + name))
                elif prop.default is not _NO_DEFAULT:
                    out[name] = prop.default_value()
                continue
            out[name] = prop.node.check(item, prefix + name, errors)
        return out

    def schema(self) -> dict[str, Any]:
        out = self._base("object")
        if self.properties is not None:
            out["properties"] = {prop.name: _property_schema(prop) for prop in self.properties}
            required = [prop.name for prop in self.properties if prop.required]
            if required:
                out["required"] = required
        elif self.values is not None:
            out["additionalProperties"] = self.values.schema()
        return out


def _property_schema(prop: Property) -> dict[str, Any]:
    out = prop.node.schema()
    if prop.has_default and prop.default is not None:
        out["default"] = copy.deepcopy(prop.default)
    return out


def check_arguments(root: ObjectNode, arguments: object) -> tuple[dict[str, Any], list[str]]:
    """Check a call's arguments against the root object of a tool's parameters.

    Returns the cleaned arguments and the list of error texts (empty when valid).
    """
    errors: list[str] = []
    # A dict (what the JSON gate gives) is known without the ABC's isinstance.
    if type(arguments) is not dict and not isinstance(arguments, Mapping):
        errors.append(expected_text("arguments", "object", arguments))
        return {}, errors
    cleaned = root.check_members(arguments, "", errors)
    return cleaned, errors
