"""What may travel to the model: JSON values that every later step can handle.

A tool's input and a tool's result enter the conversation, which is sent with every later
request and written to the store. A value there that JSON cannot hold (bytes, an object),
a number JSON has no spelling for (``NaN``, ``Infinity``, what ``1e999`` parses to) or a
nesting deeper than Python's recursive encoders survive would fail every later request
for good, so such values are refused where they arrive, with the path of the first
offending part. The walk is iterative: a value nested a million levels deep is measured,
never recursed into.

Text is made valid here too: a lone surrogate in any string or key (a tool's result, a
model's input, a typed answer) is replaced by U+FFFD in the copy (``satsuma._text``), as
no UTF-8 request nor PostgreSQL could take it.

Imports nothing of satsuma but ``_text``, so that the codec, the tools and the agents may
all use it.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ._text import is_valid_text, valid_text

__all__ = [
    "MAX_DEPTH",
    "MAX_MEMBERS",
    "JsonProblem",
    "expected_text",
    "is_plain",
    "json_problem",
    "json_type",
    "plain_json",
    "plain_members",
    "plain_or_problem",
]

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


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    if type(text) is not str:
        text = str.__str__(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Each entry: (the value, where its copy goes, the key there, its path, its depth).
_Task = tuple[object, Any, Any, str, int]

# At most this many members are read from a mapping that is not a dict (whose ``items``
# is the user's code, and may never end); a dict, list or tuple is read from its own
# storage, whatever its class says its length is.
MAX_MEMBERS: Final = 1_000_000


def _plain_scalar(value: Any, kind: type, path: str) -> object:
    """``value`` as the exact built-in scalar it is an instance of, read from its own
    storage (never through a method its class may override); ``_NOT_SCALAR`` otherwise."""
    if kind is str:
        return valid_text(value)
    if kind is bool or value is None:
        return value
    if kind is int or (issubclass(kind, int) and kind is not bool):
        whole: int = value if kind is int else int.__int__(value)
        _check_digits(whole, path)
        return whole
    if kind is float or issubclass(kind, float):
        number: float = value if kind is float else float.__float__(value)
        if not math.isfinite(number):
            raise JsonProblem(
                path, f"expected {path} to be a finite number, got: {_non_finite_name(number)}"
            )
        return number
    if issubclass(kind, str):
        return valid_text(str.__str__(value))
    return _NOT_SCALAR


_NOT_SCALAR: Final = object()


def _check_digits(number: int, path: str) -> None:
    # Python refuses to write (and to read) an int of more decimal digits than
    # sys.get_int_max_str_digits(); json.dumps of one raises ValueError far from here.
    if not _short_enough(number) and abs(number) >= _big_power(sys.get_int_max_str_digits()):
        raise JsonProblem(
            path,
            f"expected {_short_path(path)} to be a number of at most "
            f"{sys.get_int_max_str_digits()} digits",
        )


_BITS_PER_DIGIT: Final = 3.3219280948873626  # log2(10)


def _short_enough(number: int) -> bool:
    """Surely within the digit limit, judged by its bits (no division)."""
    limit = sys.get_int_max_str_digits()
    return not limit or number.bit_length() <= _BITS_PER_DIGIT * (limit - 1)


def _big_power(digits: int) -> int:
    cached = _powers.get(digits)
    if cached is None:
        cached = _powers[digits] = 10**digits
    return cached


_powers: dict[int, int] = {}


def plain_json(value: object, root: str) -> Any:
    """A copy of ``value`` made of exact dicts, lists, strs, ints, floats, bools and None
    (tuples become lists, mappings dicts, subclasses their built-in base), after checking
    every part of it.

    This is the gate for anything that came from outside (a tool's result, a model's
    input, a typed answer): its copy holds no object of the caller's, so nothing later
    (events, the journal, the codec, a person's screen) runs the caller's code. A part is
    read from a built-in's own storage, never through a method its class may override
    (``__len__``, ``__iter__``, ``__str__``, ``keys``, ``__getitem__``...); only a
    mapping that is not a dict is read through its ``items``, at most ``MAX_MEMBERS``
    of them, and whatever that raises is a JsonProblem.

    Args:
        value: The value to check and copy.
        root: The name of the value itself in messages (``"arguments"``, ``"content"``);
            parts are named from it (``content[0].source``), or by their own path
            when ``root`` is empty.

    Raises:
        JsonProblem: the first part that is not a finite JSON value, or a nesting deeper
            than ``MAX_DEPTH``, or a part that could not be read.
    """
    holder: list[Any] = [None]
    stack: list[_Task] = [(value, holder, 0, root, 0)]
    path = root
    try:
        while stack:
            item, parent, slot, path, depth = stack.pop()
            _copy_one(item, parent, slot, path, depth, stack)
    except JsonProblem:
        raise
    except Exception as exc:  # the caller's own code (a Mapping's items, an isinstance)
        shown = path or "value"
        raise JsonProblem(
            shown, f"{_short_path(shown)} could not be read: {type(exc).__name__}"
        ) from None
    return holder[0]


def _copy_one(item: Any, parent: Any, slot: Any, path: str, depth: int, stack: list[_Task]) -> None:
    shown = path or "value"
    kind = type(item)  # type() cannot be lied to; isinstance can (a __class__ property)
    scalar = _plain_scalar(item, kind, shown)
    if scalar is not _NOT_SCALAR:
        parent[slot] = scalar
        return
    if depth >= MAX_DEPTH:
        raise JsonProblem(
            shown,
            f"{_short_path(shown)} is nested more than {MAX_DEPTH} levels deep",
        )
    if issubclass(kind, dict):
        members: Iterable[Any] = dict.items(item)  # its storage, not its own items()
    elif issubclass(kind, (list, tuple)):
        elements: list[Any] = (
            list.copy(item) if issubclass(kind, list) else list(tuple.__iter__(item))
        )
        array: list[Any] = [None] * len(elements)
        parent[slot] = array
        stack.extend(
            (element, array, index, f"{path}[{index}]", depth + 1)
            for index, element in reversed(list(enumerate(elements)))
        )
        return
    elif isinstance(item, Mapping):
        members = list(itertools.islice(item.items(), MAX_MEMBERS + 1))
        if len(members) > MAX_MEMBERS:
            raise JsonProblem(shown, f"{_short_path(shown)} has more than {MAX_MEMBERS} members")
    else:
        raise JsonProblem(
            shown,
            f"{_short_path(shown)} is {_type_name(item)}, which JSON cannot hold",
        )
    copy: dict[str, Any] = {}
    parent[slot] = copy
    found = []
    for pair in members:
        key, member = pair
        key_kind = type(key)
        if key_kind is not str:
            if not issubclass(key_kind, str):
                raise JsonProblem(
                    shown,
                    f"{_short_path(shown)} has a key that is not a string: {_short_repr(key)}",
                )
            key = str.__str__(key)
        key = valid_text(key)
        copy[key] = None  # keeps the key order; filled in when its turn comes
        found.append((member, copy, key, _join_key(path, key), depth + 1))
    # Reversed, so that parts are checked in order and the first problem is named.
    stack.extend(reversed(found))


# Any int this small is far within every digit limit Python allows (at least 640).
_SMALL: Final = 10**18


def _plainly_sendable(value: object, depth: int) -> bool:
    """Whether ``value`` is made only of dicts with string keys, lists, tuples and
    finite JSON scalars (strings and keys valid text), at most ``MAX_DEPTH`` levels deep: the common case, checked
    without the copy and the paths that ``plain_json`` makes to name a problem."""
    kind = type(value)
    if kind is str:
        return is_valid_text(value)  # type: ignore[arg-type]
    if kind is bool or value is None:
        return True
    if kind is int:
        return _short_enough(value)  # type: ignore[arg-type]
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if depth >= MAX_DEPTH:
        return False
    # Plain loops, scalars judged inline: this runs on every call's input, and a
    # generator or a call per member would cost more than the check itself.
    members: Any
    if kind is dict:
        for key in value:  # type: ignore[attr-defined]
            if type(key) is not str or not (str.isascii(key) or is_valid_text(key)):
                return False
        members = value.values()  # type: ignore[attr-defined]
    elif kind is list or kind is tuple:
        members = value
    else:
        return False  # anything else: plain_json says what, or copies it (a Mapping)
    for member in members:
        member_kind = type(member)
        if member_kind is str:
            if not (str.isascii(member) or is_valid_text(member)):
                return False
        elif member_kind is bool or member is None:
            continue
        elif member_kind is int:
            if not (-_SMALL < member < _SMALL or _short_enough(member)):
                return False
        elif member_kind is float:
            if not math.isfinite(member):
                return False
        elif not _plainly_sendable(member, depth + 1):
            return False
    return True


def plain_members(value: object, root: str) -> dict[str, Any] | None:
    """The members of a mapping as an exact dict with exact str keys, its values as they
    are (read from a dict's own storage, a Mapping's through ``items``); None for a value
    that is not a mapping. For what must be looked at before its parts are judged (a
    content block's type, with its tool input apart).

    Raises:
        JsonProblem: a key that is not a string, or reading the mapping raised.
    """
    try:
        kind = type(value)
        pairs: Iterable[Any]
        if issubclass(kind, dict):
            pairs = dict.items(value)  # type: ignore[arg-type]
        elif isinstance(value, Mapping):
            pairs = itertools.islice(value.items(), MAX_MEMBERS)
        else:
            return None
        members: dict[str, Any] = {}
        for key, member in pairs:
            if not issubclass(type(key), str):
                raise JsonProblem(
                    root or "value",
                    f"{_short_path(root or 'value')} has a key that is not a string: "
                    f"{_short_repr(key)}",
                )
            if type(key) is not str:
                key = str.__str__(key)
            # ASCII (nearly every key) is valid as it is: no call to find that out.
            members[key if str.isascii(key) else valid_text(key)] = member
    except JsonProblem:
        raise
    except Exception as exc:
        shown = root or "value"
        raise JsonProblem(
            shown, f"{_short_path(shown)} could not be read: {type(exc).__name__}"
        ) from None
    return members


def plain_or_problem(value: object, root: str) -> tuple[Any, str | None]:
    """``(value, None)`` when it is already made of built-in JSON values only (the common
    case, not copied), ``(its plain copy, None)`` when it holds subclasses of them, or
    ``(None, the problem's text)`` (see ``plain_json``)."""
    if _plainly_sendable(value, 0):
        return value, None
    try:
        return plain_json(value, root), None
    except JsonProblem as problem:
        return None, str(problem)


def is_plain(value: object) -> bool:
    """Whether ``value`` passes the gate as it is: made only of dicts with string keys,
    lists, tuples and finite JSON scalars, strings valid text, at most ``MAX_DEPTH``
    levels deep (``plain_or_problem`` would return it unchanged)."""
    return _plainly_sendable(value, 0)


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


# The words of a validation message about a value's JSON type, shared by the tools'
# argument checks and the JSON gate of a model's tool calls.
_ARTICLE: Final[dict[str, str]] = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def json_type(value: object) -> str:
    """The JSON name of a Python value's type, as written after ``got:``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def expected_text(path: str, json_types: str | list[str], value: object) -> str:
    """``expected <path> to be <a type>, got: <type>``; several types are joined with "or"."""
    names = [json_types] if isinstance(json_types, str) else json_types
    wanted = " or ".join(_ARTICLE.get(name, name) for name in names)
    return f"expected {path} to be {wanted}, got: {json_type(value)}"
