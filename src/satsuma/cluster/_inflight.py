"""A run a node claimed and runs now, as the node and the run's attempt share it: its
cancel scope and agent, whether a cancel was asked for, and whether someone streams
its events (``watch``: its model's answers are then streamed)."""

from __future__ import annotations

import attrs
import trio

from .._exceptions import StoreError
from ..agents import AgentHandle
from ..store import QueuedRun, Taken
from ._recording import RunRecorder

__all__ = ["InFlight"]


@attrs.define(eq=False)
class InFlight:
    """A run this node claimed and runs now."""

    run: QueuedRun
    # The node's id when it claimed the run: its queue writes are made under it, and
    # refused once the node was counted dead and joined again under another.
    node_id: str
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    handle: AgentHandle | None = None
    cancel_requested: bool = False
    lost: bool = False  # the node was counted dead: the run is another node's now
    # Its agent, taken with the claim (None: not taken, for ``refusal``).
    taken: Taken | None = None
    refusal: StoreError | None = None
    # Someone streams its events: its model's answers are streamed (RunRecorder).
    watched: bool = False
    recorder: RunRecorder | None = None

    def watch(self) -> None:
        """Someone streams the run's events now: from its next model call on, answers
        are streamed to them as they are written."""
        self.watched = True
        if self.recorder is not None:
            self.recorder.watch()

    async def cancel(self) -> None:
        self.cancel_requested = True
        if self.handle is not None:
            await self.handle.cancel()
