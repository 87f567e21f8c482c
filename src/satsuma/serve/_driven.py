"""``DrivenRun``: a run this server drives (``LocalRuns``), with its view and its event
log, and how the agent's events reach them.

The agent's ``RunEnd`` is held back until the run's view is settled (``settle``, called
once the run's task has its result): a client that reads the end from the event stream
and then asks for the run finds it ended, never still ``running``. The end is settled
after the run's last save, so a save that fails shows ``failed`` in both places.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from ..agents import AgentEvent, RunEnd, RunResult, event_to_json
from ._eventlog import EventLog
from ._runs import RunView
from ._views import add_usage, epoch_now, public_event, settled_view

__all__ = ["DrivenRun"]


@attrs.define(eq=False)
class DrivenRun:
    """A run this server drives (or drove, until its retention passes)."""

    view: RunView
    log: EventLog
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    stopped: trio.Event = attrs.Factory(trio.Event)  # ended or paused
    done: trio.Event = attrs.Factory(trio.Event)  # its driver returned
    settled_at: float | None = None
    # Called once when it next stops (see ``LocalRuns.when_stopped``).
    on_stop: list[Callable[[], None]] = attrs.Factory(list)
    held_end: RunEnd | None = None  # the agent's RunEnd, until the view is settled

    def record(self, event: AgentEvent) -> None:
        """Take one of the agent's events into the view and the log."""
        if isinstance(event, RunEnd):
            self.held_end = event
            return
        kind = type(event).__name__
        if kind == "TurnEnd":
            data = public_event(event_to_json(event))
            if isinstance(data.get("usage"), Mapping):
                # Spent so far: what a run that crashes before its result shows.
                usage = add_usage(self.view.usage, data["usage"])
                self.view = attrs.evolve(self.view, usage=usage)
            self.log.append(data)
            return
        if kind == "RunStart" and self.view.status == "queued":
            self.view = attrs.evolve(self.view, status="running", started_at=epoch_now())
        # Encoded only if someone reads it (see EventLog).
        self.log.append_lazy(kind, lambda: public_event(event_to_json(event)))

    def settle(self, result: RunResult[Any] | None, failure: BaseException | None) -> None:
        """The run stopped (ended or paused) with ``result``, or failed to run with
        ``failure``: its view settled, then its end in the log, then its waiters woken."""
        view = self.view = settled_view(self.view, result, failure)
        end, self.held_end = self.held_end, None
        if end is not None and end.result.status == view.status:
            self.log.append_lazy("RunEnd", lambda: public_event(event_to_json(end)))
        elif self.log.last_type != "RunEnd":
            self.log.append({"type": "RunEnd", "run_id": view.run_id, "status": view.status})
        self._stop()

    def pause_again(self, view: RunView) -> None:
        """A resume that never took the run up (the store refused its claim): the run is
        ``view`` again, paused as it was, with no new event; its waiters woken."""
        self.view = view
        self.held_end = None
        self._stop()

    def _stop(self) -> None:
        self.log.settle()
        self.settled_at = trio.current_time()
        self.stopped.set()
        for callback in self.on_stop:
            callback()
        self.on_stop.clear()
