"""The tools of a ToolRunner: what it accepts (Tool classes and instances, ``@tool``
functions, Toolsets), expanded to one instance per tool name, with its definition."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from .._exceptions import ToolDefinitionError
from ._tool import FunctionTool, Tool, ToolDefinition, definition_of, direct_function

__all__ = ["Entry", "instantiate", "tool_entries"]


@attrs.frozen
class Entry:
    """One tool of a runner: its compiled definition, and the instance whose ``run`` is
    called; ``direct``, the async function that ``run`` would only call with the
    arguments (``direct_function``), called instead: one frame fewer per call."""

    definition: ToolDefinition
    instance: Tool
    direct: Callable[..., Any] | None = attrs.field(init=False)

    @direct.default
    def _direct(self) -> Callable[..., Any] | None:
        return direct_function(self.instance) if self.definition.is_async else None


def tool_entries(tools: Iterable[object]) -> dict[str, Entry]:
    """Each tool by its name, in the order given.

    Raises:
        ToolDefinitionError: a tool is not a tool, or two tools share a name.
    """
    entries: dict[str, Entry] = {}
    for instance in _expand(tools):
        definition = definition_of(instance)
        if definition.name in entries:
            raise ToolDefinitionError(
                definition.name, "is declared twice in one runner; tool names must be unique"
            )
        entries[definition.name] = Entry(definition, instance)
    return entries


def instantiate(item: type[Tool]) -> Tool:
    """A new instance of a Tool class, made without arguments.

    Raises:
        ToolDefinitionError: the class needs arguments.
    """
    definition = definition_of(item)
    try:
        return item()
    except TypeError as exc:
        raise ToolDefinitionError(
            definition.name,
            f"cannot be created without arguments ({exc}); pass an instance instead of the class",
        ) from exc


def _expand(tools: Iterable[object]) -> list[Tool]:
    found: list[Tool] = []
    for item in tools:
        if isinstance(item, type) and issubclass(item, Tool):
            found.append(instantiate(item))
        elif isinstance(item, Tool):
            if isinstance(item, FunctionTool) and item.is_unbound_method:
                raise ToolDefinitionError(
                    item.definition.name,
                    "is a toolset method; pass an instance of its Toolset instead",
                )
            definition_of(item)  # an abstract base instance fails here
            found.append(item)
        elif isinstance(item, type) and callable(getattr(item, "tools", None)):
            raise ToolDefinitionError(
                None,
                f"{item.__name__} is a toolset class; pass an instance of it (its tools share its state)",
            )
        elif callable(getattr(item, "tools", None)):
            found.extend(_expand(item.tools()))  # type: ignore[attr-defined]
        else:
            raise ToolDefinitionError(
                None,
                "ToolRunner takes Tool classes, Tool instances, @tool functions and Toolsets, "
                f"got: {item!r}",
            )
    return found
