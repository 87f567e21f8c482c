"""What a call ends as: ToolResult (a tool's own return form), ToolOutcome (the one
uniform record per call), the outcome of a call that failed, and the helpers over lists
of outcomes. The texts the model reads are in ``_texts``; the gate every result passes,
``_gate``.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from .._shapes import tool_result_block
from .._text import type_name, valid_text

__all__ = [
    "ErrorKind",
    "ToolOutcome",
    "ToolResult",
    "ToolReturn",
    "format_results",
    "get_errors",
    "has_errors",
]

ErrorKind = Literal[
    "invalid_args",
    "unknown_tool",
    "failed",
    "crashed",
    "timeout",
    "cancelled",
    "denied",
    "skipped",
    "invalid_result",
    "interrupted",
]

Content = str | list[dict[str, Any]]


@attrs.frozen
class ToolResult:
    """A tool's return value in full form, when a tuple is not enough.

    Attributes:
        content: A string, or a list of Anthropic content blocks (``text``, ``image``).
        is_error: The tool ran but its outcome is a failure (like ``("ok", c, True)``).
        details: Data for UIs and logs; never sent to the model.
    """

    content: Content
    is_error: bool = attrs.field(default=False, kw_only=True)
    details: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True)


ToolReturn: TypeAlias = (
    str
    | ToolResult
    | tuple[Literal["ok"], Content]
    | tuple[Literal["ok"], Content, bool]
    | tuple[Literal["error"], str]
)
"""What a tool may return: the annotation for ``run`` or a ``@tool`` function that
returns ``("error", reason)`` on one path and text on another.

``("ok", content)``, ``("ok", content, is_error)``, ``("error", reason)``, a ``str``
(same as ``("ok", s)``) or a ToolResult, where ``content`` (``Content``) is a string or
a list of Anthropic content blocks. A tool that only ever returns text is annotated
``-> str``.
"""


@attrs.frozen(kw_only=True)
class ToolOutcome:
    """How one call ended: exactly one per ``tool_use``, whatever the tool did.

    Attributes:
        tool_use_id: The id of the call this answers.
        tool_name: The tool that was asked for.
        content: What the model reads: a string or a list of content blocks.
        is_error: Sent to the model as the tool_result's ``is_error``.
        error_kind: None for success, else why the call failed (see ErrorKind).
        details: For UIs and logs only (tracebacks, full output before truncation,
            a tool's own details); never sent to the model.
        duration: Seconds from the call's start to its end, on trio's clock.
    """

    tool_use_id: str
    tool_name: str
    content: Content
    is_error: bool
    error_kind: ErrorKind | None = None
    details: Mapping[str, Any] | None = None
    duration: float = 0.0

    @property
    def text(self) -> str:
        """The content as plain text (text blocks joined by newlines, others left out)."""
        return content_text(self.content)


def content_text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block["text"] for block in content if block.get("type") == "text")


def error_outcome(
    call_id: str,
    tool_name: str,
    kind: ErrorKind,
    text: str,
    *,
    duration: float = 0.0,
    details: Mapping[str, Any] | None = None,
) -> ToolOutcome:
    return ToolOutcome(
        tool_use_id=call_id,
        tool_name=tool_name,
        content=text,
        is_error=True,
        error_kind=kind,
        details=details,
        duration=duration,
    )


def crash_details(exc: BaseException) -> dict[str, Any]:
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception as failure:  # traceback's own guards cover __str__, not every hostile object
        text = f"<the traceback could not be formatted: {type_name(failure)}>"
    return {"exception": type_name(exc), "traceback": valid_text(text)}


# --- Helpers over lists of outcomes. ------------------------------------------------------


def format_results(outcomes: Iterable[ToolOutcome]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks for a user message, one per outcome, in order."""
    # A text result's block is built here, as tool_result_block builds it, without a
    # call: this is every call's answer. Blocks of content are copied there.
    return [
        {
            "type": "tool_result",
            "tool_use_id": outcome.tool_use_id,
            "content": outcome.content,
            "is_error": outcome.is_error,
        }
        if type(outcome.content) is str
        else tool_result_block(outcome.tool_use_id, outcome.content, outcome.is_error)
        for outcome in outcomes
    ]


def has_errors(outcomes: Iterable[ToolOutcome]) -> bool:
    """True if any outcome has ``is_error`` set (failures of any kind, including
    ``("ok", content, True)``)."""
    return any(outcome.is_error for outcome in outcomes)


def get_errors(outcomes: Iterable[ToolOutcome]) -> list[tuple[str, str]]:
    """``(tool_use_id, error text)`` for each outcome with ``is_error`` set."""
    return [(outcome.tool_use_id, outcome.text) for outcome in outcomes if outcome.is_error]
