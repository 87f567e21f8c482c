"""The copies of a response's blocks: each block without its null fields, and, for a
whole response, the copy that also judges what the JSON gate judges.

The API sends some fields as null; the history keeps the block without them
(``without_none``). A whole (non-streamed) response is decoded by ``json.loads``, each
block copied so, then checked by ``checked_response``, which walked every block a second
time. ``plain_block`` does both in one walk: the same copy, when every key and string is
valid text, every number finite (an int within the gate's quick bound) and the nesting
shallow; else None, and the block takes ``without_none`` and the full check, which
names what is wrong. A block it copied is plain (``is_plain``), so the response's check
does not walk it again (``checked_response_of_plain``).

Like the codec, it imports nothing of satsuma.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["plain_block", "without_none"]


class _TooDeep(Exception):
    pass


_SCALARS = frozenset((str, int, float, bool))
_SHALLOW = 50  # levels the recursive copy takes before the iterative one takes over


def _copied(value: Any, depth: int) -> Any:
    # Scalars are judged inline, not by a call each: this copies every block of every
    # response, and a block is mostly strings and numbers.
    kind = type(value)
    if kind is dict:
        if depth > _SHALLOW:
            raise _TooDeep
        copy: dict[Any, Any] = {}
        for key, member in value.items():
            member_kind = type(member)
            if member_kind is dict or member_kind is list:
                copy[key] = _copied(member, depth + 1)
            elif member_kind in _SCALARS:
                copy[key] = member
            elif member is not None:
                raise _TooDeep  # another type: the general copy decides
        return copy
    if kind is list:
        if depth > _SHALLOW:
            raise _TooDeep
        return [_copied(member, depth + 1) for member in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    raise _TooDeep  # another type: the general copy decides


def without_none(value: Any) -> Any:
    """A copy of a block, its null fields left out."""
    # The API sends some fields as null (``"citations": null``); they are left out of the
    # history, as the SDK's ``model_dump(exclude_none=True)`` would. What json.loads made
    # is copied recursively; anything else, or a block nested deeper than that copy goes,
    # iteratively (a block nested past Python's recursion limit is copied, and refused
    # later by depth).
    try:
        return _copied(value, 0)
    except _TooDeep:
        return _without_none_iteratively(value)


def _without_none_iteratively(value: Any) -> Any:
    holder: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, holder, 0)]
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, Mapping):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for key, member in item.items():
                if member is not None:
                    copy[key] = None
                    stack.append((member, copy, key))
        elif isinstance(item, (list, tuple)):
            array: list[Any] = [None] * len(item)
            parent[slot] = array
            stack.extend((member, array, index) for index, member in enumerate(item))
        else:
            parent[slot] = item
    return holder[0]


# Far within the gate's depth (MAX_DEPTH, 64) and Python's recursion limit.
_DEPTH: Final = 50

# The keys and the ``type`` values every block carries: a string equal to one of these is
# ASCII, so a set lookup (no call) stands for str.isascii (a call) on most of a block.
_KNOWN: Final = frozenset(
    (
        "type", "id", "name", "input", "text", "citations", "thinking", "signature", "data",
        "tool_use", "server_tool_use", "redacted_thinking", "caller", "cache_control",
    )
)  # fmt: skip
# Any int this small is far within every digit limit Python allows (as the gate judges).
_SMALL: Final = 10**18


def _valid(text: str) -> bool:
    # Text with no surrogate code point (what the gate's is_valid_text judges): UTF-8
    # can encode it. Only text that is not ASCII gets here.
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _NotPlain(Exception):
    pass


def plain_block(block: object) -> dict[str, Any] | None:
    """A copy of ``block`` (a dict, as ``json.loads`` made it) without its null fields,
    every part of it plain JSON; None when some part is not (or ``block`` is no dict)."""
    if type(block) is not dict:
        return None
    try:
        return _copy(block, 0)  # type: ignore[no-any-return]
    except _NotPlain:
        return None


def _copy(value: Any, depth: int) -> Any:
    # Scalars judged inline, not by a call each: this copies every block of every whole
    # response, and a block is mostly strings and numbers.
    if depth > _DEPTH:
        raise _NotPlain
    if type(value) is dict:
        copy: dict[str, Any] = {}
        for key, member in value.items():
            if member is None:
                continue  # left out, as without_none leaves out the API's nulls
            if type(key) is not str or not (key in _KNOWN or str.isascii(key) or _valid(key)):
                raise _NotPlain
            kind = type(member)
            if kind is str:
                if not (member in _KNOWN or str.isascii(member) or _valid(member)):
                    raise _NotPlain
            elif kind is int:
                if not -_SMALL < member < _SMALL:
                    raise _NotPlain
            elif kind is dict or kind is list:
                member = _copy(member, depth + 1)
            elif kind is float:
                if not math.isfinite(member):
                    raise _NotPlain
            elif kind is not bool:
                raise _NotPlain
            copy[key] = member
        return copy
    items: list[Any] = []
    for member in value:
        kind = type(member)
        if kind is str:
            if not (str.isascii(member) or _valid(member)):
                raise _NotPlain
        elif kind is int:
            if not -_SMALL < member < _SMALL:
                raise _NotPlain
        elif kind is dict or kind is list:
            member = _copy(member, depth + 1)
        elif kind is float:
            if not math.isfinite(member):
                raise _NotPlain
        elif kind is not bool and member is not None:
            raise _NotPlain
        items.append(member)
    return items
