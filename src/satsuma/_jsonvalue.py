"""What may travel to the model: JSON values that every later step can handle.

A tool's input and a tool's result enter the conversation, which is sent with every later
request and written to the store. A value there that JSON cannot hold (bytes, an object),
a number JSON has no spelling for (``NaN``, ``Infinity``, what ``1e999`` parses to) or a
nesting deeper than Python's recursive encoders survive would fail every later request
for good, so such values are refused where they arrive, with the path of the first
offending part. The walk is iterative: a value nested a million levels deep is measured,
never recursed into.

Imports nothing of satsuma, so that the codec, the tools and the agents may all use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MAX_DEPTH", "JsonProblem", "json_problem", "plain_json"]

# Deep enough for any real tool input or result (JSON Schemas of real tools rarely go past
# ten); shallow enough that every recursive step after this gate (validation, copies, the
# SDK's and json's encoders) stays far from the interpreter's recursion limit.
MAX_DEPTH: Final = 64


class JsonProblem(ValueError):
    """A value that cannot be sent as JSON; the message names the path (``a.b[2]``)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(problem)


def _join_key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _short_path(path: str, limit: int = 80) -> str:
    return path if len(path) <= limit else path[:limit] + "..."


def _non_finite_name(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _leaf_problem(value: object, path: str) -> JsonProblem | None:
    if isinstance(value, float) and not math.isfinite(value):
        return JsonProblem(
            path, f"expected {path} to be a finite number, got: {_non_finite_name(value)}"
        )
    return None


_SCALARS: Final = (str, int, float, bool, type(None))


def plain_json(value: object, root: str) -> Any:
    """A copy of ``value`` made of dicts, lists and JSON scalars only (tuples become
    lists, mappings dicts), after checking every part of it.

    Args:
        value: The value to check and copy.
        root: The name of the value itself in messages (``"arguments"``, ``"content"``);
            parts are named from it (``content[0].source``), or by their own path
            when ``root`` is empty.

    Raises:
        JsonProblem: the first part that is not a finite JSON value, or a nesting deeper
            than ``MAX_DEPTH``.
    """
    if isinstance(value, _SCALARS):
        problem = _leaf_problem(value, root or "value")
        if problem is not None:
            raise problem
        return value
    holder: list[Any] = [None]
    # Each entry: (the value, where its copy goes, the key there, its path, its depth).
    stack: list[tuple[object, Any, Any, str, int]] = [(value, holder, 0, root, 0)]
    while stack:
        item, parent, slot, path, depth = stack.pop()
        shown = path or "value"
        if isinstance(item, _SCALARS):
            problem = _leaf_problem(item, shown)
            if problem is not None:
                raise problem
            parent[slot] = item
            continue
        if depth >= MAX_DEPTH:
            raise JsonProblem(
                shown,
                f"{_short_path(shown)} is nested more than {MAX_DEPTH} levels deep",
            )
        if isinstance(item, Mapping):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            members = []
            for key, member in item.items():
                if not isinstance(key, str):
                    raise JsonProblem(
                        shown, f"{_short_path(shown)} has a key that is not a string: {key!r}"
                    )
                copy[key] = None  # keeps the key order; filled in when its turn comes
                members.append((member, copy, key, _join_key(path, key), depth + 1))
            # Reversed, so that parts are checked in order and the first problem is named.
            stack.extend(reversed(members))
        elif isinstance(item, (list, tuple)):
            array: list[Any] = [None] * len(item)
            parent[slot] = array
            stack.extend(
                (array_item, array, index, f"{path}[{index}]", depth + 1)
                for index, array_item in reversed(list(enumerate(item)))
            )
        else:
            raise JsonProblem(
                shown,
                f"{_short_path(shown)} is {_type_name(item)}, which JSON cannot hold",
            )
    return holder[0]


def _plainly_sendable(value: object, depth: int) -> bool:
    """Whether ``value`` is made only of dicts with string keys, lists, tuples and
    finite JSON scalars, at most ``MAX_DEPTH`` levels deep: the common case, checked
    without the copy and the paths that ``plain_json`` makes to name a problem."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(
            type(key) is str and _plainly_sendable(member, depth + 1)
            for key, member in value.items()  # type: ignore[attr-defined]
        )
    if kind is list or kind is tuple:
        return all(_plainly_sendable(member, depth + 1) for member in value)  # type: ignore[attr-defined]
    return False  # anything else: plain_json says what, or copies it (a Mapping)


def json_problem(value: object, root: str) -> str | None:
    """The text of what makes ``value`` unsendable (see ``plain_json``), or None."""
    if _plainly_sendable(value, 0):
        return None
    try:
        plain_json(value, root)
    except JsonProblem as problem:
        return str(problem)
    return None


def _type_name(value: object) -> str:
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}" if name not in ("bytes", "bytearray") else name
