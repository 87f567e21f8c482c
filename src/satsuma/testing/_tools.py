"""Helpers for testing tools: run one call through the real runner path, build calls,
record events."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, TypeVar, final

import attrs

from ..tools import ToolCall, ToolEvent, ToolOutcome, ToolRunner

__all__ = ["EventRecorder", "run_tool", "tool_call"]

_ids = itertools.count(1)

E = TypeVar("E")


def tool_call(name: str, input: Any = None, id: str | None = None) -> ToolCall:
    """A ToolCall, with a fresh id (``toolu_test_1``, ``toolu_test_2``, ...) unless given.

    Under pytest (satsuma's plugin) the ids start again at ``toolu_test_1`` in each
    test, so a test's expected ids do not depend on the tests run before it; elsewhere
    they count up for the life of the process. ``input`` defaults to no arguments
    (``{}``).
    """
    return ToolCall(
        id if id is not None else f"toolu_test_{next(_ids)}", name, {} if input is None else input
    )


def restart_ids() -> None:
    """Number tool_call's next ids from ``toolu_test_1`` again (satsuma's pytest plugin
    calls it before each test)."""
    global _ids
    _ids = itertools.count(1)


@final
@attrs.define(eq=False)
class EventRecorder:
    """An event sink that keeps every event, for assertions.

    Pass it as ``events=`` to ``run_tool`` or ``ToolRunner.execute``.
    """

    events: list[ToolEvent] = attrs.Factory(list)

    def __call__(self, event: ToolEvent) -> None:
        self.events.append(event)

    def of_type(self, kind: type[E]) -> list[E]:
        """The recorded events of one class, in order."""
        return [event for event in self.events if isinstance(event, kind)]


async def run_tool(
    tool: object,
    args: Any = None,
    context: Mapping[str, Any] | None = None,
    *,
    timeout: float | None = 120.0,  # noqa: ASYNC109  (the tool's deadline, as ToolRunner's)
    events: Any = None,
    max_result_chars: int | None = 100_000,
) -> ToolOutcome:
    """Run one call of ``tool`` as a ToolRunner would, and return its outcome.

    The call goes through the same validation, deadline, crash capture, normalisation and
    truncation as in an agent, so what the test sees is what the model would read.

    Args:
        tool: A Tool class or instance, or an ``@tool`` function.
        args: The arguments, as the model would send them (default: none).
        context: The context mapping (``working_dir``, ``capabilities``, extras).
        timeout: The runner's deadline for tools that declare none.
        events: An event sink (an EventRecorder, a callback, a memory channel).
        max_result_chars: As for ToolRunner.
    """
    runner = ToolRunner([tool], timeout=timeout, max_result_chars=max_result_chars)
    (definition,) = runner.definitions
    (outcome,) = await runner.execute(
        [tool_call(definition.name, {} if args is None else args)], context, events=events
    )
    return outcome
