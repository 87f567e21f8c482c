"""Truncation of large output: the text the model reads is capped, head and tail kept
around a marker, and the full content goes to the outcome's details."""

from __future__ import annotations

import attrs

from ._results import Content, ToolOutcome

__all__ = ["truncate"]


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
