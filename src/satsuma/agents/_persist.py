"""An agent's link to its store: the conversation written back before each model call and
before tools run, run records, the tool-call journal, and the repair of calls that a crash
or a kill left without a result."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._exceptions import StoreError
from .._messages import Message, Usage
from ..store import JournalEntry, RunRecord, RunRecordStatus, Store
from ..tools import ToolCall, ToolOutcome
from ..tools._results import INTERRUPTED_TEXT, error_outcome

__all__ = ["Persistence", "dangling_tool_uses"]

logger = logging.getLogger("satsuma.agents")


def dangling_tool_uses(history: Sequence[Message]) -> list[dict[str, Any]]:
    """The tool_use blocks of the last message when it is an assistant message whose
    calls were never answered (the process stopped, or the agent crashed, mid-tool)."""
    if not history or history[-1].role != "assistant":
        return []
    return [dict(block) for block in history[-1].content if block.get("type") == "tool_use"]


def journaled_outcome(entry: JournalEntry) -> ToolOutcome:
    """The recorded outcome of a finished call, as the model first saw it."""
    return ToolOutcome(
        tool_use_id=entry.tool_use_id,
        tool_name=entry.tool_name,
        content=entry.content,
        is_error=entry.is_error,
        error_kind=entry.error_kind,  # type: ignore[arg-type]
    )


def interrupted_outcome(tool_use: dict[str, Any]) -> ToolOutcome:
    return error_outcome(tool_use["id"], tool_use.get("name", ""), "interrupted", INTERRUPTED_TEXT)


@attrs.define(eq=False)
class Persistence:
    """Writes one agent's state to its store."""

    store: Store
    agent_id: str
    # False once a newer incarnation of the agent has started (see Actor.is_current).
    fence: Callable[[], bool] = attrs.field(default=lambda: True, kw_only=True)
    dirty_from: int | None = None  # the first message not yet written as it stands

    def _check_fence(self, what: str) -> None:
        if self.fence():
            return
        logger.warning(
            "agent %s: refused a write (%s) from an incarnation that a newer one replaced",
            self.agent_id,
            what,
        )
        raise StoreError(
            f"agent {self.agent_id}",
            f"this incarnation was replaced by a newer one; its write ({what}) was refused",
        )

    def changed(self, index: int) -> None:
        if self.dirty_from is None or index < self.dirty_from:
            self.dirty_from = max(index, 0)

    async def load(self) -> tuple[list[Message], list[RunRecord]]:
        messages = await self.store.load_messages(self.agent_id)
        await self.store.mark_interrupted(self.agent_id)
        # Every run still interrupted, also one an earlier start found and did not resume.
        runs = await self.store.runs(self.agent_id)
        return messages, [record for record in runs if record.status == "interrupted"]

    async def flush(self, history: Sequence[Message]) -> None:
        """Write the changed tail of the conversation (one transaction). On failure the
        tail stays marked, and the next flush writes it again."""
        start = self.dirty_from
        if start is None:
            return
        self._check_fence("the conversation")
        start = min(start, len(history))
        await self.store.write_tail(self.agent_id, start, history[start:])
        self.dirty_from = None

    async def start_run(self, run_id: str, prompt: str) -> None:
        self._check_fence("a run record")
        await self.store.start_run(
            RunRecord(
                run_id=run_id,
                agent_id=self.agent_id,
                status="running",
                prompt=prompt,
                started_at=time.time(),
            )
        )

    async def end_run(
        self, run_id: str, status: RunRecordStatus, usage: Usage, error: str | None
    ) -> None:
        self._check_fence("a run's end")
        await self.store.end_run(
            run_id, status=status, ended_at=time.time(), usage=usage, error=error
        )

    async def calls_started(self, run_id: str, calls: Sequence[ToolCall]) -> None:
        """Journal a turn's calls as started, before any of them runs.

        Raises:
            StoreError: the store could not record them (the run then fails with the
                store's reason, before any tool runs: never a denial the model reads).
        """
        self._check_fence("the journal")
        for call in calls:
            await self.store.call_started(run_id, call.id, call.name, call.input)

    async def call_finished(self, run_id: str, outcome: ToolOutcome) -> None:
        """Journal a call's final outcome, as the model reads it. A store that cannot
        record it is logged: the outcome stands, and on resume the call counts as
        unfinished."""
        try:
            self._check_fence("the journal")
            await self.store.call_finished(
                run_id,
                outcome.tool_use_id,
                content=outcome.content,
                is_error=outcome.is_error,
                error_kind=outcome.error_kind,
            )
        except StoreError:
            logger.warning(
                "could not journal the outcome of call %s", outcome.tool_use_id, exc_info=True
            )
