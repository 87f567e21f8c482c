"""The cluster's client when the network stops answering: a real server behind the
loopback proxy of tests/store/conftest.py (``partition``), switched to a black hole that
accepts and reads but forwards and answers nothing. ``Cluster.result(timeout=1)`` and an
event stream under a 1 s deadline give up at that deadline, whatever they were doing
(connecting the shared listener, reading the queue, waiting), instead of waiting for
TCP (for ever here, where the kernel acknowledges everything; about 15 minutes on a real
network). Measured here, each returns about 1 s after it was called.

A watchdog heals the network and closes its connections should a wait still be going
after 10 s, so that the old code fails instead of hanging.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore

WATCHDOG_SECONDS = 10.0


class Echo(satsuma.Agent):
    name = "echo"  # no node serves it here: its runs stay queued


@attrs.define
class Watchdog:
    partition: Any
    seconds: float = WATCHDOG_SECONDS
    fired: bool = False

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep(self.seconds)
        self.fired = True
        self.partition.black_hole = False
        self.partition.cut()


async def guarded(partition: Any, wait: Callable[[], Awaitable[object]]) -> None:
    """Run ``wait``, which must end by itself (its own 1 s bound) before the watchdog."""
    watchdog = Watchdog(partition)
    async with trio.open_nursery() as nursery:
        await nursery.start(watchdog.watch)
        try:
            await wait()
        finally:
            nursery.cancel_scope.cancel()
            assert not watchdog.fired, "the wait outlived its 1 s bound by 9 s"


@pytest.mark.parametrize("listening", [False, True], ids=["first-wait", "listener-connected"])
async def test_result_with_a_timeout_gives_up_at_it_behind_a_black_hole(
    partition: Any, listening: bool
) -> None:
    async with PostgresStore(partition.dsn, connect_timeout=2) as store:
        cluster = Cluster(store, poll_interval=0.5)
        run_id = await cluster.submit(Echo, "t-1", "hello")
        if listening:
            # The shared listener connected, and the store's pool warm, before the cut.
            with pytest.raises(TimeoutError):
                await cluster.result(run_id, timeout=0.2)
        partition.black_hole = True

        async def wait() -> None:
            with pytest.raises(TimeoutError, match=r"had not ended after 1s"):
                await cluster.result(run_id, timeout=1)

        await guarded(partition, wait)

        # Once the network is back, the same waits work again.
        partition.black_hole = False
        with trio.fail_after(30):
            assert await cluster.cancel(run_id) == "cancelled"
            result = await cluster.result(run_id, timeout=20)
        assert result.status == "cancelled"


async def test_an_event_stream_whose_database_stops_answering_gives_up_at_its_deadline(
    partition: Any,
) -> None:
    async with PostgresStore(partition.dsn, connect_timeout=2) as store:
        cluster = Cluster(store, poll_interval=0.5)
        run_id = await cluster.submit(Echo, "t-1", "hello")

        async def cut_soon() -> None:
            # After the stream listened and read once; its next read (at its poll
            # interval) goes into the black hole.
            await trio.sleep(0.2)
            partition.black_hole = True

        async def wait() -> None:
            with trio.move_on_after(1) as scope:
                async with cluster.events(run_id) as stream, trio.open_nursery() as nursery:
                    nursery.start_soon(cut_soon)
                    async for _ in stream:
                        raise AssertionError("no event can come through a black hole")
            assert scope.cancelled_caught
            assert partition.black_hole

        await guarded(partition, wait)


async def test_a_node_cut_off_by_a_black_hole_still_stops(partition: Any) -> None:
    # Its listener, heartbeat and claims all wait on the black hole; stopping it cancels
    # them, and leaving the node table is given its own 5 s (its connecting, 2 s here):
    # it stops in 2 to 5 s, where the old code waited for TCP. The watchdog gives 20 s.
    async with PostgresStore(partition.dsn, connect_timeout=2) as store:
        node = Node(store, agents=[Echo], name="n1", poll_interval=0.2, lease_seconds=1.5)
        watchdog = Watchdog(partition, seconds=20)
        async with trio.open_nursery() as nursery:
            await nursery.start(node.serve)
            await trio.sleep(0.5)  # listening, beating, claiming
            partition.black_hole = True
            await trio.sleep(1.0)  # each of them now stuck in the black hole
            async with trio.open_nursery() as guard:
                await guard.start(watchdog.watch)
                started = trio.current_time()
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    while nursery.child_tasks:  # noqa: ASYNC110  (the node's own tasks)
                        await trio.sleep(0.05)
                took = trio.current_time() - started
                guard.cancel_scope.cancel()
        assert not watchdog.fired, f"the node took {took:.1f}s to stop"
