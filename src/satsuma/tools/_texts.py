"""The fixed texts the model reads (DESIGN.md), each written once, and the guarded
reading of a user's value into text (a str subclass read from its storage, a ``__str__``
or ``__repr__`` that raises named by its type) that they and the results gate use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._text import describe_exception, type_name, valid_text

SKIPPED_TEXT: Final = "Error: Skipped due to queued user message."
INTERRUPTED_TEXT: Final = (
    "Error: Interrupted: the process stopped while this tool was running; "
    "not re-run because the tool is not idempotent."
)


def failed_text(reason: str) -> str:
    return f"Error: {safe_str(reason)}"


def unknown_tool_text(name: str) -> str:
    return f"Error: Unknown tool: {name}"


def invalid_args_text(errors: Sequence[str]) -> str:
    return f"Error: Invalid arguments: {'; '.join(errors)}"


def crashed_text(exc: BaseException) -> str:
    return f"Error: Tool crashed: {describe_exception(exc)}"


def timeout_text(seconds: float) -> str:
    return f"Error: Tool timed out after {seconds:g}s"


def denied_text(reason: str) -> str:
    return f"Error: Denied: {safe_str(reason)}"


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


def safe_str(value: object) -> str:
    # A user object whose __str__ raises (or returns a str subclass of its own) must not
    # take the runner down with it: the text then says so, and what it is.
    try:
        if issubclass(type(value), str):  # read from its storage, not its own __str__
            return plain_text(value)  # type: ignore[arg-type]
        return plain_text(str(value))
    except Exception as exc:
        return f"<{type_name(value)} whose str() failed: {type_name(exc)}>"


def plain_text(text: str) -> str:
    """``text`` as an exact str, read from its storage (a str subclass's own ``__len__``,
    ``__format__`` or ``__str__`` is never called), and valid Unicode: a lone surrogate
    is replaced by U+FFFD (``satsuma._text``)."""
    return valid_text(text if type(text) is str else str.__str__(text))


def short_repr(value: object, limit: int = 120) -> str:
    try:
        text = plain_text(repr(value))
    except Exception:  # a user object whose __repr__ raises must not crash the runner
        text = f"<{type_name(value)} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
