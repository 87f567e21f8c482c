"""ContextEditing: the Anthropic API's server-side context editing, as an AnthropicModel
option.

The API clears old tool results (``clear_tool_uses_20250919``) and old thinking blocks
(``clear_thinking_20251015``) from a request before the model reads it, when the request
carries a ``context_management`` field and the ``context-management-2025-06-27`` beta
header. The history satsuma stores is not changed: the edit happens on the API's side, on
every request, so the conversation is kept whole and can be resumed on any model.

With ``compact=True`` the API also compacts (``compact_20260112``, beta header
``compact-2026-01-12``): past the trigger it summarises the conversation and answers
with a ``compaction`` block before its reply. That block is kept in the history like any
other block and sent back verbatim; the API then drops what came before it.

The pinned SDK types the field only on its beta client, which satsuma does not use; the
regular client sends it as ``extra_body`` and the header as ``extra_headers``, which is
what ``request_options`` gives.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

import attrs

__all__ = [
    "BETA_HEADER",
    "COMPACT_BETA_HEADER",
    "ContextEditing",
    "check_context_editing",
    "log_applied_edits",
]

BETA_HEADER = "context-management-2025-06-27"
"""The ``anthropic-beta`` header value that turns context editing on."""

COMPACT_BETA_HEADER = "compact-2026-01-12"
"""The ``anthropic-beta`` header value that turns the API's compaction on."""

_LEAST_COMPACT_TRIGGER = 50_000  # the API refuses a smaller compaction trigger

_logger = logging.getLogger("satsuma.models")


def _positive(name: str, value: object, *, zero: bool = False) -> None:
    if value is None:
        return
    smallest = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        wanted = "a whole number >= 0" if zero else "a positive whole number"
        raise ValueError(f"ContextEditing.{name} must be {wanted} or None, got: {value!r}")


def _tool_names(value: object) -> tuple[str, ...]:
    # A bare string is a sequence of one-letter names: refused rather than split.
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise TypeError(
            f"ContextEditing.exclude_tools must be a list or tuple of tool names, got: {value!r}"
        )
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(
                f"ContextEditing.exclude_tools must hold non-empty tool names, got: {name!r}"
            )
    return names


@attrs.frozen(kw_only=True)
class ContextEditing:
    """What the Anthropic API clears from each request before the model reads it.

    Set it on the model: ``AnthropicModel(context_editing=ContextEditing(...))``. Every
    request then carries the API's ``context_management`` field and its beta header. A
    setting left None takes the API's default.

    Args:
        clear_tool_uses: Clear the oldest tool results once the request is large
            (``clear_tool_uses_20250919``).
        trigger_tokens: The request's input tokens at which tool results are cleared (the
            API's default: 100,000).
        keep_tool_uses: How many of the latest tool uses keep their results (the API's
            default: 3).
        clear_at_least_tokens: Clear only if at least this many tokens go, so that a
            clearing (which rewrites the prompt cache from its point on) is worth it.
        exclude_tools: Names of tools whose results are never cleared.
        clear_tool_inputs: Clear the calls' inputs too, not only their results.
        keep_thinking_turns: Also clear thinking blocks (``clear_thinking_20251015``),
            keeping those of this many latest assistant turns, or ``"all"`` to keep every
            one (which keeps the cache); None (the default): no thinking edit.
        compact: Also let the API compact the conversation (``compact_20260112``): past
            the trigger it answers with a ``compaction`` block (a summary) before its
            reply, which the history keeps and later requests send back.
        compact_trigger_tokens: The request's input tokens at which the API compacts (the
            API's default: 150,000; at least 50,000).
        compact_instructions: Instructions for the summary, replacing the API's own.

    Raises:
        ValueError: A count that is not a positive whole number, a compaction setting
            without ``compact``, or nothing to clear.
        TypeError: ``exclude_tools`` is not a list of tool names, a flag not a bool, or
            ``compact_instructions`` not a string.
    """

    clear_tool_uses: bool = True
    trigger_tokens: int | None = None
    keep_tool_uses: int | None = None
    clear_at_least_tokens: int | None = None
    exclude_tools: tuple[str, ...] = attrs.field(default=(), converter=_tool_names)
    clear_tool_inputs: bool = False
    keep_thinking_turns: int | Literal["all"] | None = None
    compact: bool = False
    compact_trigger_tokens: int | None = None
    compact_instructions: str | None = None

    def __attrs_post_init__(self) -> None:
        for flag in ("clear_tool_uses", "clear_tool_inputs", "compact"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(
                    f"ContextEditing.{flag} must be True or False, got: {getattr(self, flag)!r}"
                )
        _positive("trigger_tokens", self.trigger_tokens)
        _positive("keep_tool_uses", self.keep_tool_uses, zero=True)
        _positive("clear_at_least_tokens", self.clear_at_least_tokens)
        if self.keep_thinking_turns != "all":
            _positive("keep_thinking_turns", self.keep_thinking_turns)
        self._check_compaction()
        if not self.clear_tool_uses:
            for name in ("trigger_tokens", "keep_tool_uses", "clear_at_least_tokens"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"ContextEditing.{name} is set but clear_tool_uses is False: "
                        "it only applies to clearing tool results"
                    )
            if self.exclude_tools or self.clear_tool_inputs:
                name = "exclude_tools" if self.exclude_tools else "clear_tool_inputs"
                raise ValueError(
                    f"ContextEditing.{name} is set but clear_tool_uses is False: "
                    "it only applies to clearing tool results"
                )
            if self.keep_thinking_turns is None and not self.compact:
                raise ValueError(
                    "ContextEditing clears nothing: clear_tool_uses is False, "
                    "keep_thinking_turns is None and compact is False"
                )

    def _check_compaction(self) -> None:
        trigger, instructions = self.compact_trigger_tokens, self.compact_instructions
        _positive("compact_trigger_tokens", trigger)
        if trigger is not None and trigger < _LEAST_COMPACT_TRIGGER:
            raise ValueError(
                "ContextEditing.compact_trigger_tokens must be at least 50,000 (the API's "
                f"least), got: {trigger!r}"
            )
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(
                f"ContextEditing.compact_instructions must be a string, got: {instructions!r}"
            )
        if instructions is not None and not instructions.strip():
            raise ValueError("ContextEditing.compact_instructions is empty")
        if not self.compact:
            name = "compact_trigger_tokens" if trigger is not None else "compact_instructions"
            if trigger is not None or instructions is not None:
                raise ValueError(
                    f"ContextEditing.{name} is set but compact is False: "
                    "it only applies to the API's compaction"
                )

    @property
    def betas(self) -> tuple[str, ...]:
        """The ``anthropic-beta`` values these edits need."""
        only_compact = (
            self.compact and not self.clear_tool_uses and self.keep_thinking_turns is None
        )
        if only_compact:
            return (COMPACT_BETA_HEADER,)
        return (BETA_HEADER, COMPACT_BETA_HEADER) if self.compact else (BETA_HEADER,)

    def request_options(self) -> dict[str, Any]:
        """The SDK call's ``extra_headers`` and ``extra_body`` that ask for these edits."""
        edits: list[dict[str, Any]] = []
        # The API takes the thinking edit first when both are given.
        if self.keep_thinking_turns is not None:
            keep: Any = (
                "all"
                if self.keep_thinking_turns == "all"
                else {"type": "thinking_turns", "value": self.keep_thinking_turns}
            )
            edits.append({"type": "clear_thinking_20251015", "keep": keep})
        if self.clear_tool_uses:
            edit: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
            if self.trigger_tokens is not None:
                edit["trigger"] = {"type": "input_tokens", "value": self.trigger_tokens}
            if self.keep_tool_uses is not None:
                edit["keep"] = {"type": "tool_uses", "value": self.keep_tool_uses}
            if self.clear_at_least_tokens is not None:
                edit["clear_at_least"] = {
                    "type": "input_tokens",
                    "value": self.clear_at_least_tokens,
                }
            if self.exclude_tools:
                edit["exclude_tools"] = list(self.exclude_tools)
            if self.clear_tool_inputs:
                edit["clear_tool_inputs"] = True
            edits.append(edit)
        if self.compact:
            compact: dict[str, Any] = {"type": "compact_20260112"}
            if self.compact_trigger_tokens is not None:
                compact["trigger"] = {"type": "input_tokens", "value": self.compact_trigger_tokens}
            if self.compact_instructions is not None:
                compact["instructions"] = self.compact_instructions
            edits.append(compact)
        return {
            "extra_headers": {"anthropic-beta": ",".join(self.betas)},
            "extra_body": {"context_management": {"edits": edits}},
        }


def check_context_editing(value: object) -> None:
    """Refuse a ``context_editing`` that is not a ContextEditing or None (a TypeError)."""
    if value is not None and not isinstance(value, ContextEditing):
        raise TypeError(f"context_editing must be a satsuma.ContextEditing or None, got: {value!r}")


def log_applied_edits(payload: Mapping[str, Any]) -> None:
    """Log (``satsuma.models``, INFO) the edits the API says it applied, from a message or
    a ``message_delta`` event's ``context_management``; nothing if it reports none."""
    report = payload.get("context_management")
    edits = report.get("applied_edits") if isinstance(report, Mapping) else None
    if not isinstance(edits, list):
        return
    for edit in edits:
        if isinstance(edit, Mapping):
            cleared = {key: value for key, value in edit.items() if key != "type"}
            _logger.info("context editing applied by the API: %s %s", edit.get("type"), cleared)


# The usage keys of a step of ``usage.iterations`` that are added up.
_STEP_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def compaction_steps(usage: Mapping[str, Any]) -> dict[str, int] | None:
    """The tokens of the API's server-side compaction steps in a response's usage, summed
    (``usage.iterations`` entries of type ``compaction``), or None if it made none. The
    top-level counts leave them out: they are priced into the call's cost on their own."""
    steps = usage.get("iterations")
    if not isinstance(steps, list):
        return None
    summed = dict.fromkeys(_STEP_KEYS, 0)
    found = False
    for step in steps:
        if isinstance(step, Mapping) and step.get("type") == "compaction":
            found = True
            for key in _STEP_KEYS:
                count = step.get(key)
                if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                    summed[key] += count
    return summed if found else None
