"""Helpers for testing tools: run one call through the real runner path, build calls,
record events."""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Mapping
from typing import Any, TypeVar, final

import attrs

from ..tools import ToolCall, ToolEvent, ToolOutcome, ToolRunner

__all__ = ["EventRecorder", "run_tool", "tool_call"]


def _process_prefix() -> str:
    # A part of its own for each process: a conversation continued in another process
    # (a store written by one `satsuma run --model fake`, resumed by the next) never
    # gets an id its history already holds.
    return f"toolu_test_{secrets.token_hex(6)}_"


_prefix = _process_prefix()
_ids = itertools.count(1)


def _after_fork() -> None:
    # A forked child counts on from its parent's count: its own part keeps the two apart.
    global _prefix
    _prefix = _process_prefix()


os.register_at_fork(after_in_child=_after_fork)

E = TypeVar("E")


def tool_call(name: str, input: Any = None, id: str | None = None) -> ToolCall:
    """A ToolCall, with a fresh id unless given.

    Fresh ids are unique across processes: ``toolu_test_<process>_1``,
    ``toolu_test_<process>_2``, ..., where ``<process>`` is 12 hex digits drawn when the
    process starts (and again in a forked child). Under pytest (satsuma's plugin) the
    ids are ``toolu_test_1``, ``toolu_test_2``, ... instead, starting again in each
    test, so that a test's expected ids do not depend on the tests run before it; a
    conversation a test stores and another process continues still gets unique ids
    there. ``input`` defaults to no arguments (``{}``).
    """
    return ToolCall(
        id if id is not None else f"{_prefix}{next(_ids)}", name, {} if input is None else input
    )


def restart_ids() -> None:
    """Number tool_call's next ids from ``toolu_test_1`` again, with no process part
    (satsuma's pytest plugin calls it before each test)."""
    global _ids, _prefix
    _ids = itertools.count(1)
    _prefix = "toolu_test_"


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
