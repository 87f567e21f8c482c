"""A run slot kept until its run ends, even when the request that took it ends first.

AG-UI and MCP start a run and follow it within one request; a client that goes away
ends the request, not the run, so the run is still in flight and still counts against
its token's cap. ``hand_back`` gives the slot back at once when the run is over, or
else when it ends, from a task that lives no longer than the run.
"""

from __future__ import annotations

import trio

from ._runs import Runs
from ._slots import RunSlot

__all__ = ["hand_back"]


def hand_back(runs: Runs, run_id: str, slot: RunSlot | None, *, run_over: bool) -> None:
    """Release ``slot`` now if ``run_over``, else once the run ends or pauses."""
    if slot is None:
        return
    if run_over:
        slot.release()
        return
    trio.lowlevel.spawn_system_task(_release_after, runs, run_id, slot)


async def _release_after(runs: Runs, run_id: str, slot: RunSlot) -> None:
    try:
        await runs.wait(run_id)
    except Exception:  # the run is gone (UnknownRun, a store error): not in flight
        pass
    finally:
        slot.release()
