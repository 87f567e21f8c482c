"""The Messages API's server-side compaction (``compact_20260112``), as MessagesServer
simulates it.

A request whose ``context_management`` carries the compaction edit is measured from its
last ``compaction`` block on (the API drops what came before one). Past the edit's
trigger, a token per 4 characters of that body as the server bills, the answer begins
with a compaction block holding ``SUMMARY`` and is billed from it on; the compaction's
own call is reported in ``usage.iterations``, as the API reports it, not in the top-level
counts. The summary is fixed text, not a summary of anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "SUMMARY",
    "Compacting",
    "compacted",
    "compacting",
    "compaction_iteration",
    "stream_compaction",
]

SUMMARY = "Summary of the conversation so far (MessagesServer's compaction)."
"""The text of every compaction block MessagesServer answers with."""

_DEFAULT_TRIGGER = 150_000  # the API's default trigger, in input tokens


@attrs.frozen
class Compacting:
    """What a request asks of the simulated compaction.

    Attributes:
        payload: The request as the model reads it: its messages from its last compaction
            block on.
        prompt_chars: That request's size, in characters of JSON.
        compacts: Whether it passes the trigger, so that the answer compacts.
    """

    payload: dict[str, Any]
    prompt_chars: int
    compacts: bool


def _trigger(payload: Mapping[str, Any]) -> int | None:
    management = payload.get("context_management")
    edits = management.get("edits") if isinstance(management, Mapping) else None
    for edit in edits if isinstance(edits, list) else ():
        if isinstance(edit, Mapping) and edit.get("type") == "compact_20260112":
            trigger = edit.get("trigger")
            value = trigger.get("value") if isinstance(trigger, Mapping) else None
            return value if isinstance(value, int) else _DEFAULT_TRIGGER
    return None


def _from_last_compaction(messages: list[Any]) -> list[Any] | None:
    for at in range(len(messages) - 1, -1, -1):
        message = messages[at]
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for block_at in range(len(content) - 1, -1, -1):
            block = content[block_at]
            if isinstance(block, Mapping) and block.get("type") == "compaction":
                return [{**message, "content": content[block_at:]}, *messages[at + 1 :]]
    return None


def compacting(payload: dict[str, Any], prompt_chars: int) -> Compacting | None:
    """What a request asks of the compaction; None if it does not carry the edit."""
    trigger = _trigger(payload)
    if trigger is None:
        return None
    messages = payload.get("messages")
    kept = _from_last_compaction(messages) if isinstance(messages, list) else None
    if kept is not None:
        payload = {**payload, "messages": kept}
        prompt_chars = len(json.dumps(payload))
    return Compacting(payload, prompt_chars, compacts=prompt_chars // 4 >= trigger)


def compacted(payload: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The request as the model reads it after compacting: its messages replaced by the
    summary; and its size in characters."""
    block = {"type": "compaction", "content": SUMMARY}
    summary = {**payload, "messages": [{"role": "assistant", "content": [block]}]}
    return summary, len(json.dumps(summary))


def compaction_iteration(prompt_chars: int) -> dict[str, Any]:
    """The ``usage.iterations`` entry of the compaction's own call: it read the request,
    a token per 4 characters, and wrote the summary."""
    return {
        "type": "compaction",
        "input_tokens": max(1, prompt_chars // 4),
        "output_tokens": max(1, len(SUMMARY) // 4),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def stream_compaction(events: list[dict[str, Any]]) -> None:
    """Stream the compaction block as the API does: opened empty, its summary in one
    ``compaction_delta`` (the SDK's accumulator takes the delta's content whole)."""
    for at, event in enumerate(events):
        block = event.get("content_block")
        if event["type"] == "content_block_start" and block and block["type"] == "compaction":
            event["content_block"] = {"type": "compaction", "content": ""}
            delta = {"type": "compaction_delta", "content": block["content"]}
            events.insert(
                at + 1,
                {"type": "content_block_delta", "index": event["index"], "delta": delta},
            )
            return
