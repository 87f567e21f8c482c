"""The results gate: whatever ``run`` returned (or an after_call hook put in its place)
becomes a ToolOutcome of built-in values only, read from the result's own storage, or
the call's ``invalid_result``; and the check of content blocks that progress updates
pass too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, get_args

import attrs

from .._jsonvalue import MAX_MEMBERS, JsonProblem, plain_json
from .._text import describe_exception, is_valid_text
from ._calls import ToolCall, gated
from ._results import Content, ErrorKind, ToolOutcome, ToolResult, error_outcome
from ._texts import failed_text, invalid_args_text, invalid_result_text, plain_text, short_repr

__all__ = ["check_content", "gate_call", "normalise", "plain_outcome"]

_EXPECTED: Final = (
    'expected ("ok", content), ("ok", content, is_error), ("error", reason), a str or a '
    "ToolResult, got: "
)


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
                f"got: {short_repr(media_type)}"
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
    return f"{where} must have a source of type 'base64' or 'url', got: {short_repr(kind)}"


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


# Any int this small is far within every digit limit Python allows (at least 640).
_SMALL: Final = 10**18


def _flat_copy(value: object) -> dict[str, Any] | None:
    """A copy of an exact dict whose keys and members are all exact, valid, finite JSON
    scalars (a copy of one level is then a whole copy); None for anything else."""
    if type(value) is not dict:
        return None
    for key, member in dict.items(value):
        if type(key) is not str or not (str.isascii(key) or is_valid_text(key)):
            return None
        kind = type(member)
        if kind is str:
            if not (str.isascii(member) or is_valid_text(member)):
                return None
        elif kind is int:
            if not -_SMALL < member < _SMALL:
                return None
        elif kind is float:
            if not math.isfinite(member):
                return None
        elif kind is not bool and member is not None:
            return None
    return dict.copy(value)


def _plain_blocks(given: list[Any]) -> list[Any] | None:
    """The blocks copied in one pass, when every one is a flat text block or an image
    block with a flat source that the API takes (the common results); None when any is
    not, for the full check to say what is wrong, or to copy what is nested."""
    blocks: list[Any] = []
    for index, raw_block in enumerate(given):
        block = _flat_copy(raw_block)
        if block is None:
            source = _flat_copy(raw_block.get("source")) if type(raw_block) is dict else None
            if source is None or raw_block.get("type") != "image":
                return None
            block = _flat_copy({**raw_block, "source": None})
            if block is None or _image_problem(index, source) is not None:
                return None
            block["source"] = source
        elif block.get("type") != "text" or type(block.get("text")) is not str:
            return None
        blocks.append(block)
    return blocks


def check_content(content: object) -> tuple[Content | None, str | None]:
    """The content as satsuma stores it (exact strs, dicts and lists, finite JSON values
    only: nothing of the tool's own classes), or a problem text naming the type and
    where it is."""
    kind = type(content)
    if type(content) is str and str.isascii(content):
        return content, None  # an exact str of ASCII: plain and valid as it is
    if issubclass(kind, str):
        return plain_text(content), None  # type: ignore[arg-type]
    if kind is list:
        quick = _plain_blocks(content)  # type: ignore[arg-type]
        if quick is not None:
            return quick, None
    return check_content_fully(content)


def check_content_fully(content: object) -> tuple[Content | None, str | None]:
    """``check_content`` without its one-pass copy of common blocks: every result
    through the block checks and the deep copy (what the quick path must equal)."""
    kind = type(content)
    if issubclass(kind, str):
        return plain_text(content), None  # type: ignore[arg-type]
    if issubclass(kind, (bytes, bytearray, memoryview)):
        return None, (
            f"content must be a str or a list of content blocks, got: {kind.__name__}; "
            "send binary data as base64 text (an image as an image block)"
        )
    if not issubclass(kind, (list, tuple)):
        return (
            None,
            f"content must be a str or a list of content blocks, got: {short_repr(content)}",
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
            return None, f"content block {index} must be a dict, got: {short_repr(raw_block)}"
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
                f"content block {index} has type {short_repr(block_type)}; "
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
        raise TypeError(f"details must be a mapping, got: {short_repr(details)}")
    plain: dict[str, Any] = {}
    for key, value in pairs:
        if not issubclass(type(key), str):
            raise TypeError(f"details has a key that is not a str: {short_repr(key)}")
        plain[plain_text(key)] = value
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
    if type(raw) is str and str.isascii(raw):
        # The common result, plain and valid as it is: what check_content would keep.
        return ToolOutcome(
            tool_use_id=call_id,
            tool_name=tool_name,
            content=raw,
            is_error=False,
            duration=duration,
        )
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
        tag = plain_text(parts[0]) if parts and issubclass(type(parts[0]), str) else None
        if tag == "ok" and len(parts) in (2, 3):
            content = parts[1]
            if len(parts) == 3:
                if type(parts[2]) is not bool:
                    return _invalid(
                        call_id,
                        tool_name,
                        f"is_error must be True or False, got: {short_repr(parts[2])}",
                        duration,
                    )
                is_error = parts[2]
        elif tag == "error" and len(parts) == 2:
            reason = parts[1]
            if not issubclass(type(reason), str):
                return _invalid(
                    call_id,
                    tool_name,
                    f"the error reason must be a str, got: {short_repr(reason)}",
                    duration,
                )
            return error_outcome(
                call_id,
                tool_name,
                "failed",
                failed_text(plain_text(reason)),
                duration=duration,
            )
        else:
            return _invalid(call_id, tool_name, _EXPECTED + short_repr(raw), duration)
    elif issubclass(kind, ToolResult):
        content, is_error = raw.content, raw.is_error  # type: ignore[attr-defined]
        if type(is_error) is not bool:
            return _invalid(
                call_id,
                tool_name,
                f"is_error must be True or False, got: {short_repr(is_error)}",
                duration,
            )
        details = _plain_details(raw.details)  # type: ignore[attr-defined]
    else:
        return _invalid(call_id, tool_name, _EXPECTED + short_repr(raw), duration)
    checked, problem = check_content(content)
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
        content, problem = check_content(fields["content"])
        if content is None:
            raise ValueError(problem)
        if type(fields["is_error"]) is not bool:
            raise ValueError(
                f"is_error must be True or False, got: {short_repr(fields['is_error'])}"
            )
        kind = fields["error_kind"]
        if kind is not None and (not issubclass(type(kind), str) or kind not in _ERROR_KINDS):
            raise ValueError(f"error_kind must be None or an ErrorKind, got: {short_repr(kind)}")
        duration = fields["duration"]
        if type(duration) is not float and type(duration) is not int:
            raise ValueError(f"duration must be a number, got: {short_repr(duration)}")
        return ToolOutcome(
            tool_use_id=plain_text(fields["tool_use_id"]),
            tool_name=plain_text(fields["tool_name"]),
            content=content,
            is_error=fields["is_error"],
            error_kind=None if kind is None else plain_text(kind),  # type: ignore[arg-type]
            details=_plain_details(fields["details"]),
            duration=float(duration),
        )
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"the outcome could not be read: {describe_exception(exc)}") from None


_OUTCOME_FIELDS: Final = tuple(field.name for field in attrs.fields(ToolOutcome))
_ERROR_KINDS: Final = frozenset(get_args(ErrorKind))


def gate_call(call: ToolCall) -> tuple[ToolCall, ToolOutcome | None]:
    """The call with its input as plain JSON values, or its refusal: for input that did
    not pass through ``execute``'s gate (decoded JSON text, a hook's Rewrite, an
    approver's edit)."""
    call = gated(call)
    if call.refused is None:
        return call, None
    return call, error_outcome(
        call.id, call.name, "invalid_args", invalid_args_text([call.refused])
    )
