"""The check of a spec's arguments in one loop, for the commonest spec: a flat object of
strings, integers and booleans with no constraint beyond their type (a ``@tool``
function of ``str``, ``int`` and ``bool`` parameters).

Arguments that are a dict holding every property as an exact value of its type (what the
JSON gate gives for a valid call) are copied in one pass; anything else (a missing or
null property, another type, a Mapping that is not a dict) goes to ``check_arguments``,
which says what is wrong: the result is always ``check_arguments``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ._spec import BooleanNode, IntegerNode, ObjectNode, StringNode, check_arguments

__all__ = ["spec_checker"]

# A node of these classes that equals a fresh one of its description asserts its type only.
_EXACT: dict[type, type] = {StringNode: str, IntegerNode: int, BooleanNode: bool}


def _plan(root: ObjectNode) -> tuple[tuple[str, type], ...] | None:
    """Each property's name and exact type, or None when the spec is not that simple."""
    if root.properties is None:
        return None
    plan: list[tuple[str, type]] = []
    for prop in root.properties:
        node = prop.node
        kind = _EXACT.get(type(node))
        if kind is None or node != type(node)(description=node.description):  # type: ignore[call-arg]
            return None
        plan.append((prop.name, kind))
    return tuple(plan)


def spec_checker(root: ObjectNode) -> Callable[[object], tuple[dict[str, Any], list[str]]]:
    """``check_arguments(root, arguments)`` as a function of the arguments, in one loop
    when the spec and the arguments allow it."""
    full = partial(check_arguments, root)
    plan = _plan(root)
    if plan is None:
        return full

    def check(arguments: object) -> tuple[dict[str, Any], list[str]]:
        if type(arguments) is dict:
            cleaned: dict[str, Any] = {}
            for name, kind in plan:
                item = arguments.get(name)
                if type(item) is not kind:
                    break
                cleaned[name] = item
            else:
                return cleaned, []
        return full(arguments)

    return check
