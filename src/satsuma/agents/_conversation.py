"""The agent's conversation as its runs edit it: the messages, each change marked for the
store's next write-back, the usage of the last model call (what history processors
read), and the steering messages waiting to join it.

The actor owns one of each and hands them to every run (``RunContext``): a supervisor
restarting the agent gives the new incarnation the same list of messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

from .._messages import Message, Usage
from ._history import TrimMemo
from ._ids import TakenIds
from ._summary_state import CompactionState

if TYPE_CHECKING:
    from ._persist import Persistence

__all__ = ["Conversation", "Steering"]


@final
class Conversation:
    """The messages, and what changed since the store last wrote them."""

    __slots__ = ("compaction", "last_usage", "messages", "persistence", "taken_ids", "trim")

    def __init__(self, messages: list[Message], persistence: Persistence | None) -> None:
        self.messages = messages
        self.persistence = persistence
        self.last_usage: Usage | None = None
        self.trim = TrimMemo()  # where the history processor last cut, for the cache
        self.compaction = CompactionState()  # the summary in force (history = Compaction)
        # Its tool_use ids, read as it grows: kept across runs, so that a run of a long
        # conversation does not walk the whole history again for them.
        self.taken_ids = TakenIds()

    def commit(self, message: Message) -> None:
        if self.persistence is not None:
            self.persistence.changed(len(self.messages))
        self.messages.append(message)

    def replace_last(self, message: Message) -> None:
        if self.persistence is not None:
            self.persistence.changed(len(self.messages) - 1)
        self.messages[-1] = message

    def changed_from(self, index: int) -> None:
        """The conversation changed from ``index`` on (a roll-back, a reset)."""
        if self.persistence is not None:
            self.persistence.changed(index)
        summary = self.compaction.summary
        if summary is not None and index < summary.through:
            self.compaction.summary = None  # it no longer says what the messages held

    async def flush(self) -> None:
        """Write what changed in the conversation to the store (no-op without one).

        Raises:
            StoreError: the store could not write it.
        """
        if self.persistence is not None:
            await self.persistence.flush(self.messages)


@final
class Steering:
    """Messages the user sent while a run works (``agent.steer``), and the event that
    interrupts the tools running meanwhile (made when a turn's calls first ask for it:
    most conversations never steer, nor run a tool)."""

    __slots__ = ("_event", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._event: trio.Event | None = None

    @property
    def event(self) -> trio.Event:
        """Set from the moment a message waits until it is taken."""
        event = self._event
        if event is None:
            event = self._event = trio.Event()
            if self.texts:
                event.set()
        return event

    def add(self, text: str) -> None:
        self.texts.append(text)
        self.event.set()

    def take(self) -> list[str]:
        texts, self.texts = self.texts, []
        event = self._event
        if event is not None and event.is_set():
            self._event = None
        return texts

    def waiting(self) -> bool:
        return bool(self.texts)
