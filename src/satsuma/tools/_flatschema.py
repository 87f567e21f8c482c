"""A fast check for the most common raw ``input_schema``: a flat object of strings,
integers, numbers and booleans, with bounds, lengths and string enums.

jsonschema finds the errors of any schema, at about 17 µs a call for five such
properties; most tools MCP servers publish are this simple, and this check walks them
in about a tenth of that. It gives exactly the error texts that ``RawSchema`` renders
from jsonschema's errors, in the same order: the keywords are applied in the schema's
own order, each one independently, as jsonschema applies them (a ``type`` failure does
not stop an ``enum``). A schema with anything else (a ``$ref``, a nested object, a
``null`` type, ``additionalProperties: false``, a ``$schema`` other than 2020-12, an
unknown keyword) keeps jsonschema. ``tests/tools/test_flatschema.py`` compares both on
random schemas and arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .._jsonvalue import expected_text
from ._spec import bound_text, enum_text, length_text, missing_text

__all__ = ["FlatSchema", "flat_schema"]

_TYPES: Final = frozenset({"string", "integer", "number", "boolean"})
# Keywords that assert nothing here (annotations; ``format`` is not asserted without a
# format checker, and the validator has none).
_ANNOTATIONS: Final = frozenset(
    {"description", "title", "default", "examples", "deprecated", "$comment", "format"}
)
_NUMERIC: Final = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_LENGTHS: Final = frozenset({"minLength", "maxLength"})
_TOP: Final = frozenset({"type", "properties", "required", "additionalProperties"})
_DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"

# One keyword of one property: (keyword, its value).
_Keyword = tuple[str, Any]


def _is_type(kind: str, value: object) -> bool:
    # As the validator's type checker judges (integer redefined: never a bool, never 3.0).
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _problem(keyword: str, expected: Any, value: Any, path: str) -> str | None:
    """The text of ``keyword`` failing on ``value``, or None when it holds."""
    if keyword == "type":
        return None if _is_type(expected, value) else expected_text(path, expected, value)
    if keyword == "enum":
        return None if value in expected else enum_text(path, list(expected), value)
    if keyword in _LENGTHS:
        if not isinstance(value, str):
            return None
        if keyword == "minLength":
            return (
                None
                if len(value) >= expected
                else length_text(path, "least", expected, "character", len(value))
            )
        return (
            None
            if len(value) <= expected
            else length_text(path, "most", expected, "character", len(value))
        )
    if not _is_number(value):
        return None
    if keyword == "minimum":
        return None if value >= expected else bound_text(path, ">=", expected, value)
    if keyword == "maximum":
        return None if value <= expected else bound_text(path, "<=", expected, value)
    if keyword == "exclusiveMinimum":
        return None if value > expected else bound_text(path, ">", expected, value)
    return None if value < expected else bound_text(path, "<", expected, value)


@attrs.frozen
class FlatSchema:
    """A flat schema compiled to what each call must check, in the schema's order."""

    # The top-level keywords that assert, in order: ("properties", ...) or
    # ("required", names).
    steps: tuple[tuple[str, Any], ...]

    def errors(self, arguments: Mapping[str, Any]) -> list[str]:
        """The error texts of ``arguments`` (nulls already dropped where absent)."""
        errors: list[str] = []
        for step, detail in self.steps:
            if step == "required":
                for name in detail:
                    if name not in arguments:
                        text = missing_text(name)
                        if text not in errors:
                            errors.append(text)
                continue
            for name, keywords in detail:
                if name not in arguments:
                    continue
                value = arguments[name]
                for keyword, expected in keywords:
                    problem = _problem(keyword, expected, value, name or "arguments")
                    if problem is not None and problem not in errors:
                        errors.append(problem)
        return errors


def _property_keywords(schema: object) -> tuple[_Keyword, ...] | None:
    if type(schema) is not dict:
        return None
    keywords: list[_Keyword] = []
    for keyword, expected in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword == "type":
            if type(expected) is not str or expected not in _TYPES:
                return None
        elif keyword == "enum":
            if type(expected) is not list or not all(type(item) is str for item in expected):
                return None
            expected = tuple(expected)
        elif keyword in _NUMERIC:
            if type(expected) not in (int, float):
                return None
        elif keyword in _LENGTHS:
            if type(expected) is not int:
                return None
        else:
            return None
        keywords.append((keyword, expected))
    return tuple(keywords)


def flat_schema(schema: Mapping[str, Any]) -> FlatSchema | None:
    """The fast check of ``schema`` (already valid against its meta-schema), or None
    when it is not one this module judges exactly as jsonschema does."""
    draft = schema.get("$schema", _DRAFT_2020_12)
    if draft != _DRAFT_2020_12:
        return None
    steps: list[tuple[str, Any]] = []
    for keyword, detail in schema.items():
        if keyword in _ANNOTATIONS or keyword == "$schema":
            continue
        if keyword not in _TOP:
            return None
        if keyword == "type":
            if detail != "object":
                return None
        elif keyword == "additionalProperties":
            if detail is not True:
                return None
        elif keyword == "required":
            if type(detail) is not list or not all(type(name) is str for name in detail):
                return None
            steps.append(("required", tuple(detail)))
        else:
            if type(detail) is not dict:
                return None
            properties: list[tuple[str, tuple[_Keyword, ...]]] = []
            for name, subschema in detail.items():
                keywords = _property_keywords(subschema)
                if type(name) is not str or keywords is None:
                    return None
                properties.append((name, keywords))
            steps.append(("properties", tuple(properties)))
    return FlatSchema(steps=tuple(steps))
