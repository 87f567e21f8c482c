"""Read-only JSON values, for definitions that many agents share.

An agent class's tool definitions are made once and sent with every request of every
agent of the class (``ModelRequest.tools``). A user ``Model`` that changed one in place
would change what every other agent sends: so they are frozen, all the way down.

``FrozenDict`` and ``FrozenList`` are a ``dict`` and a ``list`` whose mutating methods
raise ``TypeError``, rather than a ``MappingProxyType`` and a tuple, because the values go
on to code that wants JSON objects and arrays: the provider SDKs, ``json.dumps``,
cattrs, a test comparing them with ``Tool.schema()``. Each of them reads the subclasses
as what they extend. A copy (``copy.copy``, ``copy.deepcopy``, pickling) is a plain,
mutable ``dict`` or ``list``: a model that wants to change its own copy makes one.

Imports nothing of satsuma.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NoReturn, final

__all__ = ["FrozenDict", "FrozenList", "freeze"]

_REFUSAL = (
    "this definition is shared by every agent of its class and cannot be changed; "
    "change a copy (copy.deepcopy gives a plain one)"
)


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(_REFUSAL)


@final
class FrozenDict(dict[str, Any]):
    """A dict that refuses to change. Made by ``freeze``, which freezes its values too."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return dict, (dict(self),)


@final
class FrozenList(list[Any]):
    """A list that refuses to change. Made by ``freeze``, which freezes its items too."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    clear = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    reverse = _refuse
    sort = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(item, memo) for item in self]

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:
        return list, (list(self),)


def freeze(value: Any) -> Any:
    """``value`` with every mapping a ``FrozenDict``, every list a ``FrozenList`` and
    every tuple's items frozen, all the way down; a frozen value is returned as it is
    (it was frozen whole when made). Scalars and other objects are kept."""
    kind = type(value)
    if kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, Mapping):
        frozen = FrozenDict()
        for key, item in value.items():
            dict.__setitem__(frozen, key, freeze(item))
        return frozen
    if isinstance(value, list):
        return FrozenList(map(freeze, value))  # list.__init__: not a mutator refused here
    if isinstance(value, tuple):
        return tuple(map(freeze, value))
    return value
