"""What a supervisor tells about its children for a dashboard (the console's tree):
each child's restarts so far, and the restarts held against its intensity now. On
trio's virtual clock."""

from __future__ import annotations

from typing import Any

import trio

from satsuma import Supervisor


class Flaky:
    """A service that crashes each time ``crash`` is set, and serves otherwise."""

    def __init__(self) -> None:
        self.crash = trio.Event()
        self.started = trio.Event()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.crash = trio.Event()
        task_status.started()
        self.started.set()
        await self.crash.wait()
        raise RuntimeError("flaky crashed")


async def _crash(child: Flaky) -> None:
    child.started = trio.Event()
    child.crash.set()
    await child.started.wait()


async def test_restarts_count_per_child_and_within_the_window(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky, steady = Flaky(), Flaky()
    async with Supervisor(max_restarts=5, within=10.0) as sup:
        await sup.start_child(flaky, id="flaky")
        await sup.start_child(steady, id="steady")
        assert [(c.id, c.restarts) for c in sup.which_children()] == [
            ("flaky", 0),
            ("steady", 0),
        ]
        assert sup.recent_restarts == 0
        await _crash(flaky)
        await _crash(flaky)
        assert [(c.id, c.state, c.restarts) for c in sup.which_children()] == [
            ("flaky", "running", 2),
            ("steady", "running", 0),
        ]
        assert sup.recent_restarts == 2
        await trio.sleep(11.0)  # past the window: still counted per child, not held
        assert sup.recent_restarts == 0
        assert sup.which_children()[0].restarts == 2
