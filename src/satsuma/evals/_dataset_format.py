"""The dataset file format: its JSON Schema (``DATASET_SCHEMA``), and where each case
and each field of a case is in a file's text, so that an error names the line.

A file is parsed first (``json`` or PyYAML), then its cases are checked one by one; the
lines come from a second, light reading of the same text: for JSON, a walk over the top
array (or the ``cases`` array) with the decoder's own ``raw_decode``; for YAML, the
positions of the composed nodes. A file whose shape is not the expected one has no
lines, and its errors name the case and field only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DATASET_SCHEMA", "Lines", "json_lines", "yaml_lines"]

Lines = list[dict[str, int]]
"""Per case, in order: ``""`` its line, and each field's line (all from 1)."""

_MESSAGE: Final = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {
            "oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "object", "required": ["type"]}},
            ]
        },
    },
}
_CASE: Final = {
    "type": "object",
    "required": ["id", "prompt"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1, "maxLength": 200},
        "prompt": {"type": "string", "minLength": 1},
        "expected_output": {"description": "text, or the JSON value of a typed output"},
        "expected_tools": {
            "type": ["array", "null"],
            "items": {"type": "string", "minLength": 1},
        },
        "history": {"type": ["array", "null"], "items": _MESSAGE},
        "recorded": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "input": {},
                    "content": {"type": ["string", "array"]},
                    "is_error": {"type": "boolean"},
                },
            },
        },
        "metadata": {"type": ["object", "null"]},
    },
}
DATASET_SCHEMA: Final[Mapping[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "satsuma evals dataset",
    "oneOf": [
        {"type": "array", "items": _CASE},
        {
            "type": "object",
            "required": ["cases"],
            "properties": {"version": {"const": 1}, "cases": {"type": "array", "items": _CASE}},
        },
    ],
}
"""The JSON Schema of a dataset file (JSON, or the same structure in YAML)."""

_SPACE: Final = " \t\n\r"
_DECODER: Final = json.JSONDecoder()


def json_lines(text: str) -> Lines:
    """Where each case and field is in the JSON ``text`` (empty if its shape is not a
    dataset's; the text is known to parse)."""
    try:
        return _json_cases(text)
    except (ValueError, IndexError, KeyError):
        return []


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def _json_cases(text: str) -> Lines:
    at = _skip(text, 0)
    if text[at] == "{":  # {"version": 1, "cases": [...]}: find the array
        found = None
        for key, _, value in _members(text, at):
            if key == "cases":
                found = value
        if found is None:
            return []
        at = found
    if text[at] != "[":
        return []
    cases: Lines = []
    at = _skip(text, at + 1)
    while text[at] != "]":
        fields = {"": _line(text, at)}
        if text[at] == "{":
            fields.update({key: _line(text, start) for key, start, _ in _members(text, at)})
        _, at = _DECODER.raw_decode(text, at)
        cases.append(fields)
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
    return cases


def _members(text: str, at: int) -> list[tuple[str, int, int]]:
    """The members of the object at ``at``: key, where the key starts, where its value
    starts."""
    members = []
    at = _skip(text, at + 1)
    while text[at] != "}":
        start = at
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        assert text[at] == ":"
        value = _skip(text, at + 1)
        _, at = _DECODER.raw_decode(text, value)
        members.append((str(key), start, value))
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
    return members


def yaml_lines(yaml: Any, text: str) -> Lines:
    """Where each case and field is in the YAML ``text``, from the nodes PyYAML
    composes (empty if its shape is not a dataset's)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if isinstance(root, yaml.MappingNode):
        root = next((v for k, v in root.value if getattr(k, "value", None) == "cases"), None)
    if not isinstance(root, yaml.SequenceNode):
        return []
    cases: Lines = []
    for node in root.value:
        fields = {"": node.start_mark.line + 1}
        if isinstance(node, yaml.MappingNode):
            for key, _ in node.value:
                fields[str(key.value)] = key.start_mark.line + 1
        cases.append(fields)
    return cases
