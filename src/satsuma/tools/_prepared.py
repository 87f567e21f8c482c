"""A runner's tools and options, checked once: what every ``ToolRunner`` built from one
declaration shares.

An agent class declares its tools once, and each of its agents gets a runner of its own
(its own concurrency and thread limits, its own instances of tool classes). Expanding
the tools, reading their definitions and checking the options depend on the declaration
only, so an agent class prepares them once (``AgentSpec.prepared_tools``) and every
``open_agent`` builds its runner from that: ``ToolRunner(prepared)``.

A ``@tool`` function, a Tool instance and a Toolset's bound tools are one object that
every runner of the declaration calls, as they were before; a Tool class is instantiated
anew for each runner, so that its state stays the agent's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

import attrs
import trio

from ._environment import count_or_none, positive_or_none
from ._events import EventSink, make_emitter
from ._hookchain import HookChain
from ._registry import Entry, instantiate, tool_entries
from ._strategies import Strategy, StrategyName, as_strategy
from ._tool import Tool, definition_of

__all__ = ["PreparedTools", "prepare_tools"]


@attrs.frozen(eq=False)
class PreparedTools:
    """The checked tools and options of a runner (see ``ToolRunner``'s arguments).

    Iterating it gives the tools it was prepared from, so that it is what ``ToolRunner``
    takes (which then keeps the prepared options, not its own arguments).

    Attributes:
        items: The tools as given.
        entries: Each tool by its name, in the order given; read-only, shared by every
            runner built from this (but for the classes' entries, see ``classes``).
        classes: The names of the entries that come from Tool classes, and the classes:
            each runner makes its own instance of them.
    """

    items: tuple[object, ...]
    entries: Mapping[str, Entry]
    classes: tuple[tuple[str, type[Tool]], ...]
    timeout: float | None
    max_concurrency: int | None
    strategy: Strategy
    hooks: HookChain
    max_result_chars: int | None
    max_threads: int
    events: EventSink | None

    def __iter__(self) -> Iterator[object]:
        return iter(self.items)

    def for_runner(
        self,
    ) -> tuple[Mapping[str, Entry], trio.CapacityLimiter | None, trio.CapacityLimiter]:
        """What one new runner has of its own: its entries (the shared ones, and fresh
        instances of the tool classes), its limit on calls at once (None: no cap) and
        its limit on worker threads.

        Raises:
            ToolDefinitionError: a tool class cannot be created without arguments.
        """
        entries = self.entries
        if self.classes:
            entries = dict(entries)
            for name, cls in self.classes:
                entries[name] = Entry(entries[name].definition, instantiate(cls))
        concurrency = self.max_concurrency
        limiter = trio.CapacityLimiter(concurrency) if concurrency is not None else None
        return entries, limiter, trio.CapacityLimiter(self.max_threads)


def prepare_tools(
    tools: Iterable[object],
    *,
    timeout: float | None = 120.0,
    max_concurrency: int | None = None,
    strategy: StrategyName | Strategy = "parallel",
    hooks: object = None,
    hook_timeout: float = 10.0,
    max_result_chars: int | None = 100_000,
    max_threads: int = 40,
    events: EventSink | None = None,
) -> PreparedTools:
    """The tools and options of a runner, checked (the arguments are ``ToolRunner``'s);
    ``tools`` as they are when they are prepared already, whatever the options.

    Raises:
        ToolDefinitionError: a tool is not a tool, or two tools share a name.
        ValueError: an option is out of range.
        TypeError: a hook or the event sink has the wrong shape.
    """
    if isinstance(tools, PreparedTools):
        return tools
    items = tuple(tools)
    entries = tool_entries(items)
    classes = _classes(items)
    checked_timeout = positive_or_none("timeout", timeout)
    concurrency = count_or_none("max_concurrency", max_concurrency)
    checked_strategy = as_strategy(strategy)
    hook_deadline = positive_or_none("hook_timeout", hook_timeout)
    if hook_deadline is None:
        raise ValueError("hook_timeout must be a positive number")
    chain = HookChain.of(hooks, hook_deadline)
    chars = count_or_none("max_result_chars", max_result_chars, 100)
    threads = count_or_none("max_threads", max_threads)
    make_emitter(events)  # check the type now rather than at the first execute
    return PreparedTools(
        items=items,
        entries=MappingProxyType(entries),
        classes=classes,
        timeout=checked_timeout,
        max_concurrency=concurrency,
        strategy=checked_strategy,
        hooks=chain,
        max_result_chars=chars,
        max_threads=threads or 40,
        events=events,
    )


def _classes(items: tuple[object, ...]) -> tuple[tuple[str, type[Tool]], ...]:
    """The Tool classes given directly, by their tools' names (a Toolset's tools are
    bound to its one instance)."""
    return tuple(
        (definition_of(item).name, item)
        for item in items
        if isinstance(item, type) and issubclass(item, Tool)
    )
