"""The Store interface: what an agent needs to survive a crash or a kill."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .._messages import Message, Usage
from ._records import JournalEntry, RunRecord, RunRecordStatus

__all__ = ["Store"]


class Store(Protocol):
    """Where agents keep their conversations, run records and tool-call journal.

    Every method may be called concurrently from many agents. A store opens itself on
    first use; ``open`` opens it early (to see a bad file at start), ``aclose`` closes it.
    Implementations raise ``StoreError`` with a clear message for anything that goes
    wrong, and never leave a half-written change behind (each call is one transaction).
    """

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    async def load_messages(self, agent_id: str) -> list[Message]:
        """The agent's conversation, oldest first (empty for an unknown agent)."""
        ...

    async def write_tail(self, agent_id: str, start: int, messages: Sequence[Message]) -> None:
        """Make the conversation from position ``start`` on exactly ``messages``
        (appending, replacing the last message, or cutting the tail), atomically."""
        ...

    async def start_run(self, record: RunRecord) -> None: ...

    async def end_run(
        self,
        run_id: str,
        *,
        status: RunRecordStatus,
        ended_at: float,
        usage: Usage,
        error: str | None,
    ) -> None: ...

    async def runs(self, agent_id: str) -> list[RunRecord]:
        """The agent's run records, oldest first."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def mark_interrupted(self, agent_id: str) -> list[RunRecord]:
        """Mark the agent's runs still ``running`` as ``interrupted`` (the agent starting
        again knows no run of its is running) and return them."""
        ...

    async def call_started(
        self, run_id: str, tool_use_id: str, tool_name: str, input: Any
    ) -> None: ...

    async def call_finished(
        self, run_id: str, tool_use_id: str, *, content: Any, is_error: bool, error_kind: str | None
    ) -> None: ...

    async def calls(self, run_id: str) -> list[JournalEntry]:
        """The run's journal, in the order the calls started."""
        ...
