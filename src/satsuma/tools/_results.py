"""What a call ends as: ToolResult (a tool's own return form), ToolOutcome (the one
uniform record per call), the normalisation of every return form, the fixed texts the
model reads, truncation of large output, and the helpers over lists of outcomes.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs

from .._jsonvalue import MAX_MEMBERS, JsonProblem, plain_json
from .._shapes import tool_result_block
from .._text import describe_exception, type_name, valid_text

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
    return f"Error: Denied: {_safe_str(reason)}"


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


def _safe_str(value: object) -> str:
    # A user object whose __str__ raises (or returns a str subclass of its own) must not
    # take the runner down with it: the text then says so, and what it is.
    try:
        if issubclass(type(value), str):  # read from its storage, not its own __str__
            return _plain_text(value)  # type: ignore[arg-type]
        return _plain_text(str(value))
    except Exception as exc:
        return f"<{type_name(value)} whose str() failed: {type_name(exc)}>"


def crash_details(exc: BaseException) -> dict[str, Any]:
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception as failure:  # traceback's own guards cover __str__, not every hostile object
        text = f"<the traceback could not be formatted: {type_name(failure)}>"
    return {"exception": type_name(exc), "traceback": valid_text(text)}


# --- Normalisation of whatever run returned. ---------------------------------------------

_EXPECTED: Final = (
    'expected ("ok", content), ("ok", content, is_error), ("error", reason), a str or a '
    "ToolResult, got: "
)


def _plain_text(text: str) -> str:
    """``text`` as an exact str, read from its storage (a str subclass's own ``__len__``,
    ``__format__`` or ``__str__`` is never called), and valid Unicode: a lone surrogate
    is replaced by U+FFFD (``satsuma._text``)."""
    return valid_text(text if type(text) is str else str.__str__(text))


def _short_repr(value: object, limit: int = 120) -> str:
    try:
        text = _plain_text(repr(value))
    except Exception:  # a user object whose __repr__ raises must not crash the runner
        text = f"<{type_name(value)} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_IMAGE_TYPES: Final = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _image_problem(index: int, source: dict[str, Any]) -> str | None:
    """What the API would refuse in an image block's source, decided before it is sent."""
    kind = source.get("type")
    where = f"content block {index} (image)"
    if kind == "base64":
        media_type = source.get("media_type")
        if type(media_type) is not str or media_type not in _IMAGE_TYPES:
            return (
                f"{where} must have a media_type among {', '.join(_IMAGE_TYPES)}, "
                f"got: {_short_repr(media_type)}"
            )
        if type(source.get("data")) is not str:
            return (
                f"{where} must have its data as base64 text (a str), got: "
                + type(source.get("data")).__name__
            )
        return None
    if kind == "url":
        if type(source.get("url")) is not str:
            return f"{where} must have a str url"
        return None
    return f"{where} must have a source of type 'base64' or 'url', got: {_short_repr(kind)}"


def _shallow(value: object) -> object:
    """A mapping as an exact dict of its members (keys and str values as exact strs), a
    str subclass as an exact str, anything else as it is: enough for the block checks
    to read plain values, before the deep copy."""
    kind = type(value)
    if issubclass(kind, str):
        return _exact(value)  # type: ignore[arg-type]
    if issubclass(kind, dict):
        pairs: Iterable[tuple[Any, Any]] = dict.items(value)  # type: ignore[arg-type]
    elif isinstance(value, Mapping):
        pairs = itertools.islice(value.items(), MAX_MEMBERS + 1)
    else:
        return value
    return {
        (_exact(key) if issubclass(type(key), str) else key): (
            _exact(member) if issubclass(type(member), str) else member
        )
        for key, member in pairs
    }


def _exact(text: str) -> str:
    # Exact, not yet made valid: plain_json does that once, after the block checks.
    return text if type(text) is str else str.__str__(text)


def _check_content(content: object) -> tuple[Content | None, str | None]:
    """The content as satsuma stores it (exact strs, dicts and lists, finite JSON values
    only: nothing of the tool's own classes), or a problem text naming the type and
    where it is."""
    kind = type(content)
    if issubclass(kind, str):
        return _plain_text(content), None  # type: ignore[arg-type]
    if issubclass(kind, (bytes, bytearray, memoryview)):
        return None, (
            f"content must be a str or a list of content blocks, got: {kind.__name__}; "
            "send binary data as base64 text (an image as an image block)"
        )
    if not issubclass(kind, (list, tuple)):
        return (
            None,
            f"content must be a str or a list of content blocks, got: {_short_repr(content)}",
        )
    # Read from the list's own storage, and each block (and an image's source) as a
    # plain dict before it is judged: the checks never call a block's own get(), and
    # what they judge is what is copied and sent.
    sequence: Any = content
    given: list[Any] = (
        list.copy(sequence) if issubclass(kind, list) else list(tuple.__iter__(sequence))
    )
    blocks: list[Any] = []
    for index, raw_block in enumerate(given):
        block = _shallow(raw_block)
        if type(block) is not dict:
            return None, f"content block {index} must be a dict, got: {_short_repr(raw_block)}"
        block_type = block.get("type")
        if block_type == "text":
            if type(block.get("text")) is not str:
                return None, f"content block {index} (text) must have a str 'text'"
        elif block_type == "image":
            source = _shallow(block.get("source"))
            if type(source) is not dict:
                return None, f"content block {index} (image) must have a 'source' dict"
            block["source"] = source
            problem = _image_problem(index, source)
            if problem is not None:
                return None, problem
        else:
            return (
                None,
                f"content block {index} has type {_short_repr(block_type)}; "
                "expected 'text' or 'image'",
            )
        blocks.append(block)
    try:
        return plain_json(blocks, "content"), None
    except JsonProblem as refused:
        return None, str(refused)


def _plain_details(details: object) -> dict[str, Any] | None:
    """A tool's details as a plain dict of its own (its values as the tool gave them:
    details are for UIs and logs, never sent to the model nor journaled)."""
    if details is None:
        return None
    kind = type(details)
    if issubclass(kind, dict):
        pairs: Iterable[tuple[Any, Any]] = dict.items(details)  # type: ignore[arg-type]
    elif isinstance(details, Mapping):
        pairs = itertools.islice(details.items(), MAX_MEMBERS)
    else:
        raise TypeError(f"details must be a mapping, got: {_short_repr(details)}")
    plain: dict[str, Any] = {}
    for key, value in pairs:
        if not issubclass(type(key), str):
            raise TypeError(f"details has a key that is not a str: {_short_repr(key)}")
        plain[_plain_text(key)] = value
    return plain


def _invalid(call_id: str, tool_name: str, problem: str, duration: float) -> ToolOutcome:
    return error_outcome(
        call_id, tool_name, "invalid_result", invalid_result_text(problem), duration=duration
    )


def normalise(raw: object, call_id: str, tool_name: str, duration: float) -> ToolOutcome:
    """Turn anything ``run`` returned into the call's outcome.

    This is the gate every result passes: the outcome holds only built-in values
    (``content`` exact strs, dicts and lists; ``is_error`` a bool), read from the
    result's own storage, so that nothing after it (events, the journal, the codec, the
    live view) ever runs code of the result's class. Whatever the result does meanwhile
    (a method that raises or lies, a subclass of a tuple, str, list or dict) makes this
    call ``invalid_result``, never an exception."""
    try:
        return _normalise(raw, call_id, tool_name, duration)
    except Exception as exc:  # the result's own code raised: describe it, never run it again
        return _invalid(
            call_id,
            tool_name,
            f"the result could not be read: {describe_exception(exc)}",
            duration,
        )


def _normalise(raw: object, call_id: str, tool_name: str, duration: float) -> ToolOutcome:
    content: object
    is_error = False
    details: dict[str, Any] | None = None
    kind = type(raw)  # never isinstance: a __class__ property can lie to it
    if issubclass(kind, (str, bytes, bytearray, memoryview)):
        content = raw  # bytes are refused below, with what to send instead
    elif issubclass(kind, tuple):
        parts: list[Any] = list(tuple.__iter__(raw))  # type: ignore[arg-type]  # its storage
        # The tag is compared only once it is an exact str: an array-like first element
        # (numpy's) answers == with an array, whose truth value raises.
        tag = _plain_text(parts[0]) if parts and issubclass(type(parts[0]), str) else None
        if tag == "ok" and len(parts) in (2, 3):
            content = parts[1]
            if len(parts) == 3:
                if type(parts[2]) is not bool:
                    return _invalid(
                        call_id,
                        tool_name,
                        f"is_error must be True or False, got: {_short_repr(parts[2])}",
                        duration,
                    )
                is_error = parts[2]
        elif tag == "error" and len(parts) == 2:
            reason = parts[1]
            if not issubclass(type(reason), str):
                return _invalid(
                    call_id,
                    tool_name,
                    f"the error reason must be a str, got: {_short_repr(reason)}",
                    duration,
                )
            return error_outcome(
                call_id,
                tool_name,
                "failed",
                failed_text(_plain_text(reason)),
                duration=duration,
            )
        else:
            return _invalid(call_id, tool_name, _EXPECTED + _short_repr(raw), duration)
    elif issubclass(kind, ToolResult):
        content, is_error = raw.content, raw.is_error  # type: ignore[attr-defined]
        if type(is_error) is not bool:
            return _invalid(
                call_id,
                tool_name,
                f"is_error must be True or False, got: {_short_repr(is_error)}",
                duration,
            )
        details = _plain_details(raw.details)  # type: ignore[attr-defined]
    else:
        return _invalid(call_id, tool_name, _EXPECTED + _short_repr(raw), duration)
    checked, problem = _check_content(content)
    if checked is None:
        return _invalid(call_id, tool_name, problem or "", duration)
    return ToolOutcome(
        tool_use_id=call_id,
        tool_name=tool_name,
        content=checked,
        is_error=is_error,
        error_kind="failed" if is_error else None,
        details=details,
        duration=duration,
    )


def plain_outcome(outcome: ToolOutcome) -> ToolOutcome:
    """An outcome made elsewhere (an after_call hook's) passed through the same gate as
    a result: a fresh ToolOutcome of built-in values.

    Raises:
        ValueError: its content, ``is_error`` or details are not what an outcome holds
            (the message says what), or reading them raised.
    """
    try:
        fields = {name: getattr(outcome, name) for name in _OUTCOME_FIELDS}
        content, problem = _check_content(fields["content"])
        if content is None:
            raise ValueError(problem)
        if type(fields["is_error"]) is not bool:
            raise ValueError(
                f"is_error must be True or False, got: {_short_repr(fields['is_error'])}"
            )
        kind = fields["error_kind"]
        if kind is not None and (not issubclass(type(kind), str) or kind not in _ERROR_KINDS):
            raise ValueError(f"error_kind must be None or an ErrorKind, got: {_short_repr(kind)}")
        duration = fields["duration"]
        if type(duration) is not float and type(duration) is not int:
            raise ValueError(f"duration must be a number, got: {_short_repr(duration)}")
        return ToolOutcome(
            tool_use_id=_plain_text(fields["tool_use_id"]),
            tool_name=_plain_text(fields["tool_name"]),
            content=content,
            is_error=fields["is_error"],
            error_kind=None if kind is None else _plain_text(kind),  # type: ignore[arg-type]
            details=_plain_details(fields["details"]),
            duration=float(duration),
        )
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"the outcome could not be read: {describe_exception(exc)}") from None


_OUTCOME_FIELDS: Final = tuple(field.name for field in attrs.fields(ToolOutcome))
_ERROR_KINDS: Final = frozenset(get_args(ErrorKind))


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
