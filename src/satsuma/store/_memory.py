"""MemoryStore: the Store interface kept in memory, for tests (nothing survives the
process)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import attrs
import trio

from .._messages import Message, Usage
from ._records import JournalEntry, RunRecord, RunRecordStatus

__all__ = ["MemoryStore"]


@final
class MemoryStore:
    """A Store in memory. Values are frozen, so what it hands out cannot be changed
    behind its back."""

    def __init__(self) -> None:
        self._messages: dict[str, list[Message]] = {}
        self._runs: dict[str, RunRecord] = {}
        self._calls: dict[str, dict[str, JournalEntry]] = {}

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def load_messages(self, agent_id: str) -> list[Message]:
        await trio.lowlevel.checkpoint()
        return list(self._messages.get(agent_id, ()))

    async def write_tail(self, agent_id: str, start: int, messages: Sequence[Message]) -> None:
        await trio.lowlevel.checkpoint()
        stored = self._messages.setdefault(agent_id, [])
        if start > len(stored):
            raise ValueError(f"write_tail at {start} past the end ({len(stored)}) for {agent_id!r}")
        del stored[start:]
        stored.extend(messages)

    async def start_run(self, record: RunRecord) -> None:
        await trio.lowlevel.checkpoint()
        self._runs[record.run_id] = record

    async def end_run(
        self,
        run_id: str,
        *,
        status: RunRecordStatus,
        ended_at: float,
        usage: Usage,
        error: str | None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        record = self._runs[run_id]
        self._runs[run_id] = attrs.evolve(
            record, status=status, ended_at=ended_at, usage=usage, error=error
        )

    async def runs(self, agent_id: str) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        mine = [r for r in self._runs.values() if r.agent_id == agent_id]
        return sorted(mine, key=lambda r: r.started_at)

    async def get_run(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._runs.get(run_id)

    async def mark_interrupted(self, agent_id: str) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        marked = []
        for run_id, record in list(self._runs.items()):
            if record.agent_id == agent_id and record.status == "running":
                self._runs[run_id] = marked_record = attrs.evolve(record, status="interrupted")
                marked.append(marked_record)
        return sorted(marked, key=lambda r: r.started_at)

    async def call_started(self, run_id: str, tool_use_id: str, tool_name: str, input: Any) -> None:
        await trio.lowlevel.checkpoint()
        # dicts keep insertion order: a call run again keeps its place in the journal.
        self._calls.setdefault(run_id, {})[tool_use_id] = JournalEntry(
            run_id=run_id, tool_use_id=tool_use_id, tool_name=tool_name, input=input
        )

    async def call_finished(
        self, run_id: str, tool_use_id: str, *, content: Any, is_error: bool, error_kind: str | None
    ) -> None:
        await trio.lowlevel.checkpoint()
        entry = self._calls.get(run_id, {}).get(tool_use_id)
        if entry is None:
            return  # never journaled as started: nothing to finish (as SQLiteStore does)
        self._calls[run_id][tool_use_id] = attrs.evolve(
            entry, finished=True, content=content, is_error=is_error, error_kind=error_kind
        )

    async def calls(self, run_id: str) -> list[JournalEntry]:
        await trio.lowlevel.checkpoint()
        return list(self._calls.get(run_id, {}).values())
