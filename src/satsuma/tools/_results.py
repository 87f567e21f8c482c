"""What a call ends as: ToolResult (a tool's own return form), ToolOutcome (the one
uniform record per call), the normalisation of every return form, the fixed texts the
model reads, truncation of large output, and the helpers over lists of outcomes.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from .._codec import tool_result_block

__all__ = [
    "ErrorKind",
    "ToolOutcome",
    "ToolResult",
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


# --- The fixed texts the model reads (DESIGN.md), each written once. -------------------

SKIPPED_TEXT: Final = "Error: Skipped due to queued user message."
INTERRUPTED_TEXT: Final = (
    "Error: Interrupted: the process stopped while this tool was running; "
    "not re-run because the tool is not idempotent."
)


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


def failed_text(reason: str) -> str:
    return f"Error: {reason}"


def unknown_tool_text(name: str) -> str:
    return f"Error: Unknown tool: {name}"


def invalid_args_text(errors: Sequence[str]) -> str:
    return f"Error: Invalid arguments: {'; '.join(errors)}"


def crashed_text(exc: BaseException) -> str:
    return f"Error: Tool crashed: {describe_exception(exc)}"


def timeout_text(seconds: float) -> str:
    return f"Error: Tool timed out after {seconds:g}s"


def denied_text(reason: str) -> str:
    return f"Error: Denied: {reason}"


def capability_denied_text(capability: str) -> str:
    return f"Error: Tool capability denied: {capability}"


def invalid_result_text(problem: str) -> str:
    return f"Error: Invalid tool result: {problem}"


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]


def describe_exception(exc: BaseException) -> str:
    """``ExcType: message``; an exception group by its leaves, joined with ``; ``."""
    parts = []
    for leaf in leaf_exceptions(exc):
        message = str(leaf)
        parts.append(f"{type(leaf).__name__}: {message}" if message else type(leaf).__name__)
    return "; ".join(parts)


def crash_details(exc: BaseException) -> dict[str, Any]:
    return {
        "exception": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(exc)),
    }


# --- Normalisation of whatever run returned. ---------------------------------------------

_EXPECTED: Final = (
    'expected ("ok", content), ("ok", content, is_error), ("error", reason), a str or a '
    "ToolResult, got: "
)


def _short_repr(value: object, limit: int = 120) -> str:
    try:
        text = repr(value)
    except Exception:  # a user object whose __repr__ raises must not crash the runner
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_content(content: object) -> tuple[Content | None, str | None]:
    """The content as satsuma stores it, or a problem text."""
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list | tuple):
        return (
            None,
            f"content must be a str or a list of content blocks, got: {_short_repr(content)}",
        )
    blocks: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        if not isinstance(block, Mapping):
            return None, f"content block {index} must be a dict, got: {_short_repr(block)}"
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                return None, f"content block {index} (text) must have a str 'text'"
        elif kind == "image":
            if not isinstance(block.get("source"), Mapping):
                return None, f"content block {index} (image) must have a 'source' dict"
        else:
            return None, f"content block {index} has type {kind!r}; expected 'text' or 'image'"
        blocks.append(dict(block))
    return blocks, None


def normalise(raw: object, call_id: str, tool_name: str, duration: float) -> ToolOutcome:
    """Turn anything ``run`` returned into the call's outcome."""
    content: object
    is_error = False
    details: Mapping[str, Any] | None = None
    if isinstance(raw, str):
        content = raw
    elif isinstance(raw, tuple) and raw and raw[0] == "ok" and len(raw) in (2, 3):
        content = raw[1]
        if len(raw) == 3:
            if not isinstance(raw[2], bool):
                return error_outcome(
                    call_id,
                    tool_name,
                    "invalid_result",
                    invalid_result_text(
                        f"is_error must be True or False, got: {_short_repr(raw[2])}"
                    ),
                    duration=duration,
                )
            is_error = raw[2]
    elif isinstance(raw, tuple) and len(raw) == 2 and raw[0] == "error":
        reason = raw[1]
        if not isinstance(reason, str):
            return error_outcome(
                call_id,
                tool_name,
                "invalid_result",
                invalid_result_text(f"the error reason must be a str, got: {_short_repr(reason)}"),
                duration=duration,
            )
        return error_outcome(call_id, tool_name, "failed", failed_text(reason), duration=duration)
    elif isinstance(raw, ToolResult):
        content, is_error, details = raw.content, raw.is_error, raw.details
        if not isinstance(is_error, bool):
            return error_outcome(
                call_id,
                tool_name,
                "invalid_result",
                invalid_result_text(
                    f"is_error must be True or False, got: {_short_repr(is_error)}"
                ),
                duration=duration,
            )
    else:
        return error_outcome(
            call_id,
            tool_name,
            "invalid_result",
            invalid_result_text(_EXPECTED + _short_repr(raw)),
            duration=duration,
        )
    checked, problem = _check_content(content)
    if checked is None:
        return error_outcome(
            call_id,
            tool_name,
            "invalid_result",
            invalid_result_text(problem or ""),
            duration=duration,
        )
    return ToolOutcome(
        tool_use_id=call_id,
        tool_name=tool_name,
        content=checked,
        is_error=is_error,
        error_kind="failed" if is_error else None,
        details=details,
        duration=duration,
    )


# --- Truncation. -----------------------------------------------------------------------


def _cut(text: str, limit: int) -> tuple[str, int]:
    """Keep the head and the tail of ``text`` within about ``limit`` characters."""
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    marker = f"\n\n[... {cut:,} characters truncated ...]\n\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else ""), cut


def truncate(outcome: ToolOutcome, limit: int) -> ToolOutcome:
    """Cap the text the model reads at about ``limit`` characters, head and tail kept with
    a marker saying how much was cut; the full content goes to ``details``."""
    content = outcome.content
    if isinstance(content, str):
        if len(content) <= limit:
            return outcome
        new_content: Content
        new_content, cut = _cut(content, limit)
    else:
        total = sum(len(block["text"]) for block in content if block.get("type") == "text")
        if total <= limit:
            return outcome
        budget = limit
        cut = 0
        new_content = []
        for block in content:
            if block.get("type") == "text":
                text, removed = _cut(block["text"], max(budget, 0))
                budget -= len(block["text"]) - removed
                cut += removed
                block = {**block, "text": text}
            new_content.append(block)
    details = dict(outcome.details or {})
    details["full_content"] = content
    details["truncated_chars"] = cut
    return attrs.evolve(outcome, content=new_content, details=details)


# --- Helpers over lists of outcomes. ------------------------------------------------------


def format_results(outcomes: Iterable[ToolOutcome]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks for a user message, one per outcome, in order."""
    return [
        tool_result_block(outcome.tool_use_id, outcome.content, outcome.is_error)
        for outcome in outcomes
    ]


def has_errors(outcomes: Iterable[ToolOutcome]) -> bool:
    """True if any outcome has ``is_error`` set (failures of any kind, including
    ``("ok", content, True)``)."""
    return any(outcome.is_error for outcome in outcomes)


def get_errors(outcomes: Iterable[ToolOutcome]) -> list[tuple[str, str]]:
    """``(tool_use_id, error text)`` for each outcome with ``is_error`` set."""
    return [(outcome.tool_use_id, outcome.text) for outcome in outcomes if outcome.is_error]
