"""Tool definitions as the SDK copies them fastest: plain dicts and lists.

A request's tool definitions are read-only all the way down (``FrozenDict`` and
``FrozenList``, shared by every agent of a class). The Anthropic SDK copies a request's
body before sending it, and it tells a plain ``dict`` or ``list`` by its exact type but a
subclass only by the abstract ``Mapping`` and ``Sequence`` instance checks, some five
Python calls for each: about 150 a request for four small tools, on every turn of every
run. So each definition is given to the SDK as a plain deep copy, made once per
definition and kept while the definition lives; the SDK copies it again before sending,
so nothing can change the one kept here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["plain_definitions"]

# A definition's plain copy, by the definition's id; the definition is held beside it so
# that its id is not reused while the entry stands. A class's definitions are made once,
# but a run's output tool is made per declaration: the table is emptied when it fills,
# so that definitions made on the fly do not pile up.
_copies: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}
_MOST = 1024


def plain_definitions(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``tools`` with each definition that is not a plain ``dict`` as a plain copy."""
    out: list[Mapping[str, Any]] = []
    for tool in tools:
        if type(tool) is dict:
            out.append(tool)
            continue
        kept = _copies.get(id(tool))
        if kept is None or kept[0] is not tool:
            if len(_copies) >= _MOST:
                _copies.clear()
            kept = (tool, _plain(tool))
            _copies[id(tool)] = kept
        out.append(kept[1])
    return out


def _plain(value: Any) -> Any:
    # A definition is a schema: shallow, and made of JSON values (Tool.schema()).
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
