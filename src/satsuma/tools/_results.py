"""What a call ends as: ToolResult (a tool's own return form), ToolOutcome (the one
uniform record per call), the normalisation of every return form, the fixed texts the
model reads, truncation of large output, and the helpers over lists of outcomes.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from .._codec import tool_result_block
from .._jsonvalue import JsonProblem, plain_json

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
    return f"Error: {_safe_str(reason)}"


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


def withheld_text(tool_name: str, problem: str) -> str:
    """An after_call hook failed: the tool did run, so the model must not read that it
    did not (it would do it again), but what it returned is not let through."""
    return f"Error: Denied: {tool_name} ran, but its result was withheld: {problem}"


def cancelled_text(why: str) -> str:
    return f"Error: Cancelled: {why} before this tool finished."


def capability_denied_text(capability: str) -> str:
    return f"Error: Tool capability denied: {capability}"


def invalid_result_text(problem: str) -> str:
    return f"Error: Invalid tool result: {problem}"


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_exceptions(inner)]
    return [exc]


def _safe_str(value: object) -> str:
    # A user object whose __str__ raises (or returns a non-str) must not take the
    # runner down with it: the text then says so, and what it is.
    try:
        text = str(value)
    except Exception as exc:
        return f"<{type(value).__name__} whose str() failed: {type(exc).__name__}>"
    return text


def describe_exception(exc: BaseException) -> str:
    """``ExcType: message``; an exception group by its leaves, joined with ``; ``.

    Never raises: an exception whose ``__str__`` fails is named by its type alone."""
    parts = []
    for leaf in leaf_exceptions(exc):
        name = type(leaf).__name__
        try:
            message = str(leaf)
        except Exception:
            parts.append(f"{name} (its message could not be read)")
            continue
        parts.append(f"{name}: {message}" if message else name)
    return "; ".join(parts)


def crash_details(exc: BaseException) -> dict[str, Any]:
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception as failure:  # traceback's own guards cover __str__, not every hostile object
        text = f"<the traceback could not be formatted: {type(failure).__name__}>"
    return {"exception": type(exc).__name__, "traceback": text}


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


_IMAGE_TYPES: Final = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _image_problem(index: int, source: Mapping[str, Any]) -> str | None:
    """What the API would refuse in an image block's source, decided before it is sent."""
    kind = source.get("type")
    where = f"content block {index} (image)"
    if kind == "base64":
        if source.get("media_type") not in _IMAGE_TYPES:
            return (
                f"{where} must have a media_type among {', '.join(_IMAGE_TYPES)}, "
                f"got: {_short_repr(source.get('media_type'))}"
            )
        if not isinstance(source.get("data"), str):
            return (
                f"{where} must have its data as base64 text (a str), got: "
                + type(source.get("data")).__name__
            )
        return None
    if kind == "url":
        if not isinstance(source.get("url"), str):
            return f"{where} must have a str url"
        return None
    return f"{where} must have a source of type 'base64' or 'url', got: {_short_repr(kind)}"


def _check_content(content: object) -> tuple[Content | None, str | None]:
    """The content as satsuma stores it (plain dicts and lists, finite JSON values only),
    or a problem text naming the type and where it is."""
    if isinstance(content, str):
        return content, None
    if isinstance(content, (bytes, bytearray, memoryview)):
        return None, (
            f"content must be a str or a list of content blocks, got: {type(content).__name__}; "
            "send binary data as base64 text (an image as an image block)"
        )
    if not isinstance(content, list | tuple):
        return (
            None,
            f"content must be a str or a list of content blocks, got: {_short_repr(content)}",
        )
    for index, block in enumerate(content):
        if not isinstance(block, Mapping):
            return None, f"content block {index} must be a dict, got: {_short_repr(block)}"
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                return None, f"content block {index} (text) must have a str 'text'"
        elif kind == "image":
            source = block.get("source")
            if not isinstance(source, Mapping):
                return None, f"content block {index} (image) must have a 'source' dict"
            problem = _image_problem(index, source)
            if problem is not None:
                return None, problem
        else:
            return (
                None,
                f"content block {index} has type {_short_repr(kind)}; expected 'text' or 'image'",
            )
    try:
        blocks = plain_json(content, "content")
    except JsonProblem as problem:
        return None, str(problem)
    return blocks, None


def _tag(raw: tuple[Any, ...]) -> str | None:
    first = raw[0]
    return first if isinstance(first, str) else None


def normalise(raw: object, call_id: str, tool_name: str, duration: float) -> ToolOutcome:
    """Turn anything ``run`` returned into the call's outcome."""
    content: object
    is_error = False
    details: Mapping[str, Any] | None = None
    if isinstance(raw, (str, bytes, bytearray, memoryview)):
        content = raw  # bytes are refused below, with what to send instead
    # The tag is compared only once it is known to be a str: an array-like first element
    # (numpy's) answers == with an array, whose truth value raises.
    elif isinstance(raw, tuple) and len(raw) in (2, 3) and _tag(raw) == "ok":
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
    elif isinstance(raw, tuple) and len(raw) == 2 and _tag(raw) == "error":
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
