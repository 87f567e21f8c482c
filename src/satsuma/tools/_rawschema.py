"""Raw JSON Schema tool parameters (``input_schema = {...}``), as MCP servers and other
ecosystems publish them.

The schema is checked against its meta-schema when the tool is declared, and a validator
is built once. At call time jsonschema finds the errors and this module renders them in
the same words as satsuma's own specs wherever they map (types, required, enum, bounds,
lengths), with the same paths (``config.host``, ``tags[1]``).

Two of satsuma's rules hold here too: an integer is never a float (``3.0`` is not an
integer, unlike jsonschema's default), and a top-level ``null`` counts as absent when the
property's schema does not itself accept null.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._exceptions import ToolDefinitionError
from .._jsonvalue import expected_text, json_problem
from ._flatschema import FlatSchema, flat_schema
from ._spec import bound_text, enum_text, length_text, missing_text

if TYPE_CHECKING:
    import jsonschema.exceptions

__all__ = ["RawSchema", "compile_input_schema"]


def _is_integer(checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _render_path(parts: Iterable[object]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


@attrs.frozen
class RawSchema:
    """A compiled ``input_schema``."""

    schema: Mapping[str, Any]
    _validator: Any = attrs.field(alias="validator")
    _null_means_absent: frozenset[str] = attrs.field(alias="null_means_absent")
    # The same errors without jsonschema, for a flat schema (see ``_flatschema``).
    _fast: FlatSchema | None = attrs.field(alias="fast", default=None)

    def check(self, arguments: object) -> tuple[dict[str, Any], list[str]]:
        """Check arguments; return them (nulls dropped where absent) and the error texts."""
        if not isinstance(arguments, Mapping):
            return {}, [expected_text("arguments", "object", arguments)]
        cleaned = {
            key: value
            for key, value in arguments.items()
            if not (value is None and key in self._null_means_absent)
        }
        # jsonschema takes NaN for a number within any bounds; JSON cannot carry it back.
        problem = json_problem(cleaned, "")
        if problem is not None:
            return cleaned, [problem]
        if self._fast is not None:
            return cleaned, self._fast.errors(cleaned)
        errors: list[str] = []
        for error in self._validator.iter_errors(cleaned):
            text = _text(error, errors)
            if text not in errors:
                errors.append(text)
        return cleaned, errors


def _text(error: jsonschema.exceptions.ValidationError, so_far: list[str]) -> str:
    path = _render_path(error.absolute_path)
    shown = path or "arguments"
    # jsonschema's stubs type these as "maybe unset"; on a reported error they are set.
    kind: Any = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    if kind == "type":
        return expected_text(shown, value, instance)
    if kind == "required" and isinstance(instance, Mapping):
        # jsonschema reports each missing name in its own error, all sharing the list of
        # required names: take the first missing one not reported yet.
        for name in value:
            text = missing_text(_join(path, name))
            if name not in instance and text not in so_far:
                return text
    if kind == "enum":
        return enum_text(shown, list(value), instance)
    if kind in _BOUNDS:
        return bound_text(shown, _BOUNDS[kind], value, instance)
    if kind in _LENGTHS:
        which, unit = _LENGTHS[kind]
        return length_text(shown, which, value, unit, len(instance))
    return f"{shown}: {error.message}"


_BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_LENGTHS: dict[str, tuple[Any, str]] = {
    "minLength": ("least", "character"),
    "maxLength": ("most", "character"),
    "minItems": ("least", "item"),
    "maxItems": ("most", "item"),
}


def compile_input_schema(tool: str, schema: object) -> RawSchema:
    """Check a raw JSON Schema at declaration and build its validator once."""
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(
            tool, f"input_schema must be a JSON Schema object, got: {type(schema).__name__}"
        )
    if schema.get("type") != "object":
        raise ToolDefinitionError(
            tool, f'input_schema must have "type": "object", got: {schema.get("type")!r}'
        )
    # Imported on first use: only tools with a raw schema (MCP's, say) need it, and it
    # is a sixth of what importing satsuma would cost otherwise.
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators

    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        base.check_schema(dict(schema))
    except jsonschema.exceptions.SchemaError as exc:
        where = _render_path(exc.absolute_path) or "the schema"
        raise ToolDefinitionError(
            tool, f"input_schema is not a valid JSON Schema at {where}: {exc.message}"
        ) from exc
    checker = base.TYPE_CHECKER.redefine("integer", _is_integer)
    validator_cls = jsonschema.validators.extend(base, type_checker=checker)  # type: ignore[no-untyped-call]
    validator = validator_cls(schema)
    properties = schema.get("properties")
    absent: set[str] = set()
    if isinstance(properties, Mapping):
        for name in properties:
            # Probe with the whole schema so $refs resolve; only errors at this key count.
            probe = validator.iter_errors({name: None})
            if any(list(error.absolute_path) == [name] for error in probe):
                absent.add(name)
    return RawSchema(
        schema=schema,
        validator=validator,
        null_means_absent=frozenset(absent),
        fast=flat_schema(schema),
    )
