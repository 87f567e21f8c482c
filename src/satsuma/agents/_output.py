"""Typed answers: an agent's ``output_type`` compiled to the final-answer tool.

The model gives its answer by calling one more tool, ``final_answer``, whose input schema
is the type's (an object type's own; any other type wrapped as ``{"value": ...}``, since a
tool's input is an object). The schema comes from the same machinery as tool parameters
(``satsuma.tools._hints``), the input is checked by the same nodes, with the same
path-precise errors, and structured with cattrs. A tool call works on every model with
tool use, and its input streams as any tool input does.

``str`` is the default: the final text, with no tool.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .._exceptions import ToolDefinitionError
from .._frozen import freeze
from .._jsonvalue import plain_or_problem
from ..tools import (
    ObjectNode,
    Property,
    check_arguments,
    compile_hint,
    structure,
    unstructure,
)
from ..tools import structure_errors as _structure_errors

__all__ = [
    "OUTPUT_TOOL",
    "OutputSpec",
    "compile_output",
    "invalid_answer_text",
    "reminder_text",
]

# The name of the tool the model answers with. A user tool may not take it.
OUTPUT_TOOL: Final = "final_answer"

_DESCRIPTION: Final = (
    "Give your final answer. Call this once you have the answer, with the answer as its "
    "input; it ends your work. Do not call it before you are done."
)


def invalid_answer_text(errors: Sequence[str]) -> str:
    """What the model reads in the tool_result of an answer that does not validate."""
    return (
        f"Error: Invalid answer: {'; '.join(errors)}. "
        f"Call {OUTPUT_TOOL} again with the corrected answer."
    )


def reminder_text() -> str:
    """What the model reads when it ends a turn in text while a typed answer is due."""
    return (
        f"Your answer must be given by calling the {OUTPUT_TOOL} tool, with the answer as "
        "its input. Call it now."
    )


NOT_RUN_TEXT: Final = f"Error: Not run: the run ended with the {OUTPUT_TOOL} answer of this turn."
ONE_ANSWER_TEXT: Final = (
    f"Error: Only the first {OUTPUT_TOOL} call of a turn is read; this one was not."
)
ANSWER_TAKEN_TEXT: Final = "Answer received."
STEERED_TEXT: Final = (
    "Error: Answer not taken: a new user message came while you answered. Read it, then "
    f"call {OUTPUT_TOOL} again."
)


@attrs.frozen(kw_only=True, eq=False)
class OutputSpec:
    """An output type, compiled.

    Attributes:
        type: The type as declared.
        root: The object node the tool's input is checked with.
        wrapped: Whether the answer is the input's ``value`` (not an object type).
        needs_structure: Whether the checked JSON must be structured (classes, enums).
        tool: The final-answer tool's Anthropic definition.
    """

    type: Any
    root: ObjectNode
    wrapped: bool
    needs_structure: bool
    tool: Mapping[str, Any]

    def parse(self, arguments: object) -> tuple[Any, list[str]]:
        """The typed answer in a final-answer call's input, or the errors (path-precise,
        as for tool arguments) that make it invalid.

        The input passes the JSON gate first, as tool arguments do: an answer nested past
        64 levels, holding NaN or what JSON cannot hold is invalid (and retried), so a
        caller's ``repr`` or ``json.dumps`` of the output never meets it."""
        plain, problem = plain_or_problem(arguments, "")
        if problem is not None:
            return None, [problem]
        cleaned, errors = check_arguments(self.root, plain)
        if errors:
            return None, errors
        value = cleaned.get("value") if self.wrapped else cleaned
        if not self.needs_structure or value is None:
            return value, []
        try:
            return structure(value, self.type), []
        except Exception as exc:  # an attrs validator or a __post_init__ refused it
            return None, _structure_errors(exc)

    def to_json(self, value: Any) -> Any:
        """The answer as a JSON value (what the model sent, defaults filled in)."""
        return unstructure(value)

    def from_json(self, data: Any) -> Any:
        """An answer kept as JSON (``to_json``'s), typed again.

        Raises:
            ValueError: it does not validate against the type (any longer).
        """
        return self.from_input({"value": data} if self.wrapped else data)

    def from_input(self, arguments: Any) -> Any:
        """The answer in a final_answer call's input (a stored one), typed.

        Raises:
            ValueError: it does not validate against the type (any longer).
        """
        value, errors = self.parse(arguments)
        if errors:
            raise ValueError(
                f"the stored answer does not fit {_type_text(self.type)}: {'; '.join(errors)} "
                "(if the run was asked for another type, run(..., output_type=X), read it "
                "with result(run_id, output_type=X))"
            )
        return value


def _type_text(hint: object) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


SUPPORTED: Final = (
    "attrs classes, dataclasses, TypedDicts, enums, Literal[...], str, int, float, bool, "
    "list[...] of these, and unions of attrs classes or dataclasses"
)


def compile_output(hint: Any) -> OutputSpec | None:
    """Compile an output type; None for ``str`` and None (the plain final text).

    Raises:
        TypeError: the type is not one satsuma can ask a model for, saying why.
    """
    if hint is None or hint is str:
        return None
    try:
        hash(hint)
    except TypeError:
        return _compile(hint)  # an Annotated with a dict in it, say: not cached
    return _compile_cached(hint)


@functools.lru_cache(maxsize=256)
def _compile_cached(hint: Any) -> OutputSpec:
    return _compile(hint)


def _compile(hint: Any) -> OutputSpec:
    try:
        compiled = compile_hint(OUTPUT_TOOL, hint, "", None)
    except ToolDefinitionError as exc:
        where = f"its field {exc.path} " if exc.path else ""
        raise TypeError(
            f"output_type {_type_text(hint)} is not supported: {where}{exc.problem}. "
            f"Supported: {SUPPORTED}"
        ) from None
    node = compiled.node
    description = node.description
    if isinstance(node, ObjectNode) and node.properties is not None and not compiled.optional:
        root, wrapped = node, False
    else:
        root = ObjectNode(
            properties=(Property(name="value", node=node, required=not compiled.optional),)
        )
        wrapped = True
    schema = root.schema()
    schema.pop("description", None)
    text = _DESCRIPTION if not description else f"{_DESCRIPTION} The answer: {description}"
    return OutputSpec(
        type=hint,
        root=root,
        wrapped=wrapped,
        needs_structure=compiled.needs_structure,
        tool=freeze({"name": OUTPUT_TOOL, "description": text, "input_schema": schema}),
    )


def output_to_json(value: Any) -> Any:
    """A run's output as JSON data: a typed answer unstructured (an attrs instance or a
    dataclass as an object, an enum member as its value), text as it is."""
    return unstructure(value)


def answer_json(arguments: object) -> str:
    """An answer's input as the model sent it, for an error message (shortened)."""
    try:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    except (TypeError, ValueError):
        text = repr(arguments)
    return text if len(text) <= 2000 else f"{text[:2000]}..."
