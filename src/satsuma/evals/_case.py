"""A case: one prompt to give an agent, what it should answer, and what it did before.

A case written by hand holds a prompt and expectations. A case taken from a store holds
what the stored run had: the conversation before it, its prompt, its output, and every
tool call it made with the outcome it got, so that a replay can answer the same calls
with the same outcomes without running anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._jsonvalue import json_problem
from .._messages import Message

__all__ = ["Case", "RecordedCall"]


def _frozen_json(value: Any) -> Any:
    problem = json_problem(value, "input")
    if problem is not None:
        raise ValueError(f"not JSON: {problem}")
    return value


@attrs.frozen
class RecordedCall:
    """One tool call a stored run made, and the outcome it got.

    Attributes:
        name: The tool.
        input: The arguments it was called with (JSON values).
        content: What the model read back: a string or content blocks.
        is_error: The outcome's ``is_error``.
    """

    name: str
    input: Any = attrs.field(converter=_frozen_json)
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False

    def matches(self, name: str, arguments: Any) -> bool:
        """Whether a call of ``name`` with ``arguments`` is this one (the same JSON)."""
        return name == self.name and _same_json(arguments, self.input)


def _same_json(a: Any, b: Any) -> bool:
    # JSON equality: 1 == 1.0 as JSON numbers, but True is not 1 (bool is its own type).
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b and not (isinstance(a, float) and math.isnan(a))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(_same_json, a, b))
    return type(a) is type(b) and a == b


def _id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ValueError(
            f"a case's id must be a non-empty str of at most 200 characters, got: {value!r}"
        )
    return value


def _prompt(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"a case's prompt must be a non-empty str, got: {value!r}")
    return value


def _tools(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"expected_tools must be a list of tool names, got: {value!r}")
    for name in value:
        if not isinstance(name, str) or not name:
            raise ValueError(f"expected_tools must hold tool names (str), got: {name!r}")
    return tuple(value)


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    items = tuple(value)
    for item in items:
        if not isinstance(item, Message):
            raise ValueError(f"history holds Messages, got: {type(item).__name__}")
    return items


def _calls(value: Iterable[RecordedCall]) -> tuple[RecordedCall, ...]:
    items = tuple(value)
    for item in items:
        if not isinstance(item, RecordedCall):
            raise ValueError(f"recorded holds RecordedCalls, got: {type(item).__name__}")
    return items


@attrs.frozen
class Case:
    """One case of a dataset.

    Attributes:
        id: Names the case in reports; a case from a store has its run's id. A baseline
            is matched by it.
        prompt: What the agent is asked.
        expected_output: What it should answer (for ``OutputMatches``), or None. A
            typed output is given as its JSON value.
        expected_tools: The tools it should call, in order (for ``ToolTrajectory``), or
            None to take them from ``recorded``.
        history: The conversation before the prompt.
        recorded: The calls a stored run made, with their outcomes (what a replay answers).
        output: What the stored run answered, if the case comes from one.
        metadata: Anything else worth keeping in the report (the agent_id, when it ran).
    """

    id: str = attrs.field(converter=_id)
    prompt: str = attrs.field(converter=_prompt)
    expected_output: Any = None
    expected_tools: tuple[str, ...] | None = attrs.field(default=None, converter=_tools)
    history: tuple[Message, ...] = attrs.field(default=(), converter=_messages)
    recorded: tuple[RecordedCall, ...] = attrs.field(default=(), converter=_calls)
    output: Any = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def trajectory(self) -> tuple[str, ...] | None:
        """The tools the case expects, by name: ``expected_tools``, else the recorded calls'."""
        if self.expected_tools is not None:
            return self.expected_tools
        if self.recorded:
            return tuple(call.name for call in self.recorded)
        return None
