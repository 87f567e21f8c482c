"""What a conversation's ``Compaction`` holds between model calls (``CompactionState``,
kept by the conversation; ``_compaction`` uses it): the summary in force and the first
message sent, built from it."""

from __future__ import annotations

from typing import Final, final

from .._messages import Message
from ..store import Summary

__all__ = ["SUMMARY_HEADING", "CompactionState"]

SUMMARY_HEADING: Final = "Summary of the earlier conversation:\n"
"""What the summary's text block begins with, in the first message sent."""


@final
class CompactionState:
    """What a conversation's compaction holds between calls: the summary in force (read
    from the store once per incarnation), and the first message sent, built from it."""

    __slots__ = ("api_tokens", "head", "head_of", "loaded", "summary")

    def __init__(self) -> None:
        self.loaded = False
        # The last request's input tokens as the count endpoint counted them (count="api").
        self.api_tokens: int | None = None
        self.summary: Summary | None = None
        self.head: Message | None = None
        self.head_of: tuple[Summary, Message] | None = None

    def first_message(self, summary: Summary, message: Message) -> Message:
        """``message`` with the summary before its blocks (built once per summary)."""
        made = self.head_of
        if self.head is None or made is None or made[0] is not summary or made[1] is not message:
            text = {"type": "text", "text": SUMMARY_HEADING + summary.text}
            self.head = Message(role="user", content=[text, *message.content])
            self.head_of = (summary, message)
        return self.head
