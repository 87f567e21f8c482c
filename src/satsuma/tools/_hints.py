"""Parameter specs from Python type hints: attrs classes, and plain functions decorated
with ``@satsuma.tool``, with descriptions from Google-style docstrings.

Supported hints: ``str``, ``int``, ``float``, ``bool``, ``list[X]`` (and ``Sequence[X]``,
``tuple[X, ...]``), ``dict`` / ``dict[str, X]`` (a free-form object), ``Any``,
``Literal[...]`` of strings or of integers, ``Optional[X]`` / ``X | None``, ``Enum``
subclasses, attrs classes, dataclasses, TypedDicts, unions of attrs classes or
dataclasses, and ``Annotated[X, "description"]``. Anything else is a declaration error.

The same compiled nodes serve tool parameters and agents' typed answers
(``satsuma.agents._output``): one machinery from type hints to JSON Schema and back.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Union, get_args, get_origin

import attrs
import cattrs
import typing_extensions

from .._exceptions import ToolDefinitionError
from ._spec import (
    NO_DEFAULT,
    AnyNode,
    ArrayNode,
    BooleanNode,
    IntegerNode,
    Node,
    NullableNode,
    NumberNode,
    ObjectNode,
    Property,
    StringNode,
    UnionNode,
)

__all__ = [
    "Docstring",
    "HintedNode",
    "compile_hint",
    "node_for_attrs_class",
    "parse_docstring",
    "structure",
    "unstructure",
]

# satsuma's own converter: never cattrs' global one, which users may have configured.
_converter: Final = cattrs.Converter()

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Attributes|Keyword Args|Keyword Arguments|Returns|"
    r"Return|Yields|Raises|Note|Notes|Example|Examples|See Also|Warning|Warnings|Todo):\s*$"
)
_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@attrs.frozen
class Docstring:
    """A docstring split into its description and its documented names."""

    description: str
    params: Mapping[str, str]


def parse_docstring(doc: str | None) -> Docstring:
    """Split a Google-style docstring into the text before its first section and the
    descriptions of the names listed under ``Args:`` or ``Attributes:``."""
    if not doc:
        return Docstring("", {})
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    index = 0
    while index < len(lines) and not _SECTION.match(lines[index]):
        description.append(lines[index])
        index += 1
    section = ""
    current: str | None = None
    entry_indent: int | None = None
    for line in lines[index:]:
        header = _SECTION.match(line)
        if header:
            section, current, entry_indent = header.group(1), None, None
            continue
        if section not in (
            "Args",
            "Arguments",
            "Parameters",
            "Params",
            "Attributes",
            "Keyword Args",
            "Keyword Arguments",
        ):
            continue
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        match = _ENTRY.match(stripped)
        if indent <= entry_indent and match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return Docstring("\n".join(description).strip(), params)


@attrs.frozen
class HintedNode:
    """A compiled hint: its node, whether None is allowed, whether the checked JSON value
    must be structured (into an attrs instance or an enum) before the tool sees it."""

    node: Node
    optional: bool
    needs_structure: bool


def _fail(tool: str, path: str, problem: str) -> ToolDefinitionError:
    return ToolDefinitionError(tool, problem, path=path)


def _hint_text(hint: object) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def compile_hint(tool: str, hint: Any, path: str, description: str | None) -> HintedNode:
    """Compile one type hint into a spec node."""
    origin = get_origin(hint)
    args = get_args(hint)

    if origin is typing.Annotated:
        base, *extras = args
        text = next((extra for extra in extras if isinstance(extra, str)), None)
        return compile_hint(tool, base, path, text if text is not None else description)

    if origin is Union or origin is types.UnionType:
        members = [arg for arg in args if arg is not type(None)]
        optional = len(members) < len(args)
        if len(members) > 1 and all(_is_record_class(member) for member in members):
            node = UnionNode(
                members=tuple(
                    (member.__name__, _record_node(tool, member, path, None)) for member in members
                ),
                description=description,
            )
            return HintedNode(node, optional, True)
        if len(members) != 1:
            raise _fail(
                tool,
                path,
                f"has unsupported type hint {_hint_text(hint)!r}: only X | None unions and "
                "unions of attrs classes or dataclasses are supported",
            )
        inner = compile_hint(tool, members[0], path, description)
        return HintedNode(inner.node, True, inner.needs_structure)

    if hint is Any:
        return HintedNode(AnyNode(description=description), False, False)
    if hint is str:
        return HintedNode(StringNode(description=description), False, False)
    if hint is bool:
        return HintedNode(BooleanNode(description=description), False, False)
    if hint is int:
        return HintedNode(IntegerNode(description=description), False, False)
    if hint is float:
        return HintedNode(NumberNode(description=description), False, False)

    if hint is list or hint is tuple:
        return HintedNode(ArrayNode(description=description), False, False)
    if origin in (list, Sequence, tuple):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise _fail(
                tool,
                path,
                f"has unsupported type hint {_hint_text(hint)!r}: use tuple[X, ...] or list[X]",
            )
        item = compile_hint(tool, args[0], f"{path}[]", None)
        item_node = NullableNode(inner=item.node) if item.optional else item.node
        needs = item.needs_structure or origin is tuple
        return HintedNode(ArrayNode(description=description, items=item_node), False, needs)

    if hint is dict or origin in (dict, Mapping):
        if args and args[0] is not str:
            raise _fail(
                tool,
                path,
                f"has unsupported type hint {_hint_text(hint)!r}: object keys are strings",
            )
        if len(args) == 2 and args[1] is not Any:
            # dict[str, X]: each value checked (and structured) as an X.
            value = compile_hint(tool, args[1], f"{path}.*", None)
            each = NullableNode(inner=value.node) if value.optional else value.node
            return HintedNode(
                ObjectNode(description=description, values=each), False, value.needs_structure
            )
        return HintedNode(ObjectNode(description=description), False, False)

    if origin is Literal:
        return HintedNode(_literal(tool, path, list(args), description), False, False)

    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        return HintedNode(_literal(tool, path, values, description), False, True)

    if _is_record_class(hint):
        return HintedNode(_record_node(tool, hint, path, description), False, True)

    if isinstance(hint, type) and typing_extensions.is_typeddict(hint):
        typed_dict = _unless_recursive(
            tool, hint, path, lambda: node_for_typeddict(tool, hint, path, description)
        )
        return HintedNode(typed_dict, False, True)

    raise _fail(tool, path, f"has unsupported type hint {_hint_text(hint)!r}")


def _literal(tool: str, path: str, values: list[Any], description: str | None) -> Node:
    if values and all(isinstance(value, str) for value in values):
        return StringNode(description=description, enum=tuple(values))
    if values and all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return IntegerNode(description=description, enum=tuple(values))
    raise _fail(tool, path, f"has choices {values!r}: choices must be all strings or all integers")


def _json_default(value: object) -> Any:
    """A default as JSON, or NO_DEFAULT when it has no JSON form (then Python supplies it)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, str | int | float | bool):
        return value if value is not None else NO_DEFAULT
    if isinstance(value, list | tuple):
        items = [_json_default(item) for item in value]
        return NO_DEFAULT if any(item is NO_DEFAULT for item in items) else items
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        members = {key: _json_default(item) for key, item in value.items()}
        return NO_DEFAULT if any(item is NO_DEFAULT for item in members.values()) else members
    return NO_DEFAULT


def make_property(
    tool: str, name: str, hint: Any, path: str, description: str | None, default: object
) -> tuple[Property, bool]:
    """A property for a field or function parameter; also says if it needs structuring.

    ``default`` is the Python default, or NO_DEFAULT for a required parameter.
    """
    compiled = compile_hint(tool, hint, path, description)
    required = default is NO_DEFAULT and not compiled.optional
    json_default = NO_DEFAULT if default is NO_DEFAULT else _json_default(default)
    if json_default is not NO_DEFAULT:
        errors: list[str] = []
        json_default = compiled.node.check(json_default, path, errors)
        if errors:
            raise _fail(tool, path, f"has a default that fails its own spec: {'; '.join(errors)}")
    if default is NO_DEFAULT and compiled.optional:
        # ``x: str | None`` with no default: the schema says optional, so an absent value
        # must reach Python as None rather than as a missing argument.
        json_default = None
    prop = Property(name=name, node=compiled.node, required=required, default=json_default)
    return prop, compiled.needs_structure


def _resolve_hints(tool: str, target: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # NameError and friends: a hint that names something unknown
        raise ToolDefinitionError(
            tool, f"cannot resolve its type hints: {type(exc).__name__}: {exc}"
        ) from exc


def node_for_attrs_class(tool: str, cls: type, prefix: str, description: str | None) -> ObjectNode:
    """An object node for an attrs class, from its fields' type hints."""
    hints = _resolve_hints(tool, cls)
    doc = parse_docstring(cls.__doc__)
    props = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        name = field.alias or field.name
        path = f"{prefix}.{name}" if prefix else name
        if name not in hints:
            raise _fail(tool, path, "has no type hint")
        field_description = field.metadata.get("description") or doc.params.get(field.name)
        default: object = NO_DEFAULT
        if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            factory = field.default
            # A factory that needs the instance has no value before there is one: the
            # field is optional and attrs supplies it.
            default = _NO_VALUE_YET if factory.takes_self else factory.factory()
        elif field.default is not attrs.NOTHING:
            default = field.default
        prop, _ = make_property(tool, name, hints[field.name], path, field_description, default)
        props.append(prop)
    class_description = description or doc.description or None
    return ObjectNode(description=class_description, properties=tuple(props))


# Stands for a default that exists but has no value yet (an attrs factory taking self).
_NO_VALUE_YET: Final = object()


def _is_record_class(hint: object) -> bool:
    """An attrs class or a dataclass: an object whose fields are its type hints."""
    return isinstance(hint, type) and (attrs.has(hint) or dataclasses.is_dataclass(hint))


# The classes whose nodes are being built, in this thread: a class met again inside
# itself is a recursive type, which a JSON schema without references cannot state.
_building = threading.local()


def _unless_recursive(
    tool: str, cls: type, prefix: str, build: Callable[[], ObjectNode]
) -> ObjectNode:
    stack: list[type] = _building.__dict__.setdefault("stack", [])
    if cls in stack:
        raise _fail(
            tool,
            prefix,
            f"refers to {cls.__name__} inside {cls.__name__}: recursive types are not supported",
        )
    stack.append(cls)
    try:
        return build()
    finally:
        stack.pop()


def _record_node(tool: str, cls: type, prefix: str, description: str | None) -> ObjectNode:
    if attrs.has(cls):
        return _unless_recursive(
            tool, cls, prefix, lambda: node_for_attrs_class(tool, cls, prefix, description)
        )
    return _unless_recursive(
        tool, cls, prefix, lambda: node_for_dataclass(tool, cls, prefix, description)
    )


def _own_docstring(cls: type) -> str | None:
    doc = cls.__doc__
    # A dataclass without a docstring gets its signature as one: not a description.
    if dataclasses.is_dataclass(cls) and doc is not None and doc.startswith(f"{cls.__name__}("):
        return None
    return doc


def node_for_dataclass(tool: str, cls: type, prefix: str, description: str | None) -> ObjectNode:
    """An object node for a dataclass, from its fields' type hints (descriptions as for
    attrs classes: ``metadata={"description": ...}`` or the docstring's ``Attributes:``)."""
    hints = _resolve_hints(tool, cls)
    doc = parse_docstring(_own_docstring(cls))
    props = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        path = f"{prefix}.{field.name}" if prefix else field.name
        if field.name not in hints:
            raise _fail(tool, path, "has no type hint")
        default: object = NO_DEFAULT
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        field_description = field.metadata.get("description") or doc.params.get(field.name)
        prop, _ = make_property(
            tool, field.name, hints[field.name], path, field_description, default
        )
        props.append(prop)
    return ObjectNode(description=description or doc.description or None, properties=tuple(props))


_REQUIRED_MARKS: Final = (
    typing_extensions.Required,
    typing_extensions.NotRequired,
    getattr(typing, "Required", typing_extensions.Required),
    getattr(typing, "NotRequired", typing_extensions.NotRequired),
)


def node_for_typeddict(tool: str, cls: type, prefix: str, description: str | None) -> ObjectNode:
    """An object node for a TypedDict: its required keys are required properties."""
    hints = _resolve_hints(tool, cls)
    doc = parse_docstring(cls.__doc__)
    required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    props = []
    for name, hint in hints.items():
        while get_origin(hint) in _REQUIRED_MARKS:
            hint = get_args(hint)[0]
        path = f"{prefix}.{name}" if prefix else name
        compiled = compile_hint(tool, hint, path, doc.params.get(name))
        props.append(Property(name=name, node=compiled.node, required=name in required_keys))
    return ObjectNode(description=description or doc.description or None, properties=tuple(props))


def structure(value: Any, hint: Any) -> Any:
    """Structure a checked JSON value into ``hint`` (attrs instances, dataclasses, enums,
    tuples, TypedDicts, a member of a union of classes)."""
    return _converter.structure(value, hint)


def unstructure(value: Any) -> Any:
    """A structured value (attrs instance, dataclass, enum member...) as JSON data."""
    return _converter.unstructure(value)


def _is_class_union(hint: Any) -> bool:
    if get_origin(hint) not in (Union, types.UnionType):
        return False
    members = [arg for arg in get_args(hint) if arg is not type(None)]
    return len(members) > 1 and all(_is_record_class(member) for member in members)


@functools.cache
def _union_node(hint: Any) -> UnionNode:
    compiled = compile_hint("", hint, "", None)
    assert isinstance(compiled.node, UnionNode)
    return compiled.node


def _structure_class_union(value: Any, hint: Any) -> Any:
    # The member is the one the checks chose (see UnionNode), so that what was validated
    # is what is built; cattrs' own guess goes by unique field names only.
    if value is None:
        return None
    index, _, problems = _union_node(hint).match(value, "")
    if index is None:
        raise ValueError(problems[0])
    members = [arg for arg in get_args(hint) if arg is not type(None)]
    return _converter.structure(value, members[index])


_converter.register_structure_hook_func(_is_class_union, _structure_class_union)


def function_parameters(
    tool: str, fn: Callable[..., Any], context_type: type, docstring: Docstring
) -> tuple[ObjectNode, str | None, dict[str, Any], bool]:
    """Compile a function's signature.

    Returns the root node, the name of the parameter that receives the ToolContext (if
    any), the hints of parameters whose values must be structured, and whether the first
    parameter is ``self`` (a toolset method).
    """
    signature = inspect.signature(fn)
    hints = _resolve_hints(tool, fn)
    props: list[Property] = []
    context_param: str | None = None
    to_structure: dict[str, Any] = {}
    is_method = False
    for position, param in enumerate(signature.parameters.values()):
        name = param.name
        if position == 0 and name == "self":
            is_method = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise _fail(tool, name, "is *args or **kwargs; tools take named parameters only")
        if param.kind is param.POSITIONAL_ONLY:
            raise _fail(tool, name, "is positional-only; tools are called with keyword arguments")
        if name not in hints:
            raise _fail(tool, name, "has no type hint")
        hint = hints[name]
        if hint is context_type:
            context_param = name
            continue
        default: object = NO_DEFAULT if param.default is param.empty else param.default
        prop, needs = make_property(tool, name, hint, name, docstring.params.get(name), default)
        props.append(prop)
        if needs:
            to_structure[name] = hint
    return ObjectNode(properties=tuple(props)), context_param, to_structure, is_method
