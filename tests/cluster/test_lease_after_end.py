"""A cluster run's end lets its agent's lease go in the same transaction (issue 36,
``run_queue.finish`` with ``release``); the agent closes after it. A renewal of that lease
in between is refused (``LeaseLost``): the node logs it at DEBUG, the run's result
stands and the node goes on running runs.

Driven, not waited for: the agent's renewal loop (``agents._persist``) sleeps until the
run's end was written, then renews at once; the end waits for that renewal's answer
before the agent closes."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
import trio

import satsuma
from satsuma.agents import _persist
from satsuma.cluster import Cluster, Node
from satsuma.cluster import _attempt as attempt
from satsuma.store import LeaseLost, PostgresStore
from satsuma.testing import FunctionModel


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


async def test_a_renewal_between_the_runs_end_and_its_agents_close_is_refused_quietly(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ended = trio.Event()  # the first run's end is written, its lease let go
    renewals: list[BaseException | None] = []
    renewed = trio.Event()  # the renewal that came after it has its answer
    sleeps = 0

    async def sleep(seconds: float) -> None:
        nonlocal sleeps
        sleeps += 1
        if sleeps == 1:
            await ended.wait()  # the first agent's first renewal: right after the end
        else:
            await trio.sleep(seconds)

    monkeypatch.setattr(_persist, "trio", types.SimpleNamespace(**{**vars(trio), "sleep": sleep}))
    finish = attempt.RunAttempts._finish

    async def finish_then_renew(self: Any, *args: Any, **kwargs: Any) -> bool:
        written = await finish(self, *args, **kwargs)
        if not ended.is_set():
            ended.set()
            with trio.fail_after(10):
                await renewed.wait()
        return written

    monkeypatch.setattr(attempt.RunAttempts, "_finish", finish_then_renew)
    caplog.set_level(logging.DEBUG, logger="satsuma.cluster")
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        renew = store.renew_lease

        async def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                return await renew(*args, **kwargs)
            except BaseException as exc:
                renewals.append(exc)
                raise
            finally:
                if ended.is_set():
                    renewed.set()

        monkeypatch.setattr(store, "renew_lease", watched)
        node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(20):
            first = await cluster.run(Echo, "after-end", "one")
            # The node goes on: the next run of the same agent, on the same node.
            second = await cluster.run(Echo, "after-end", "two")
        nursery.cancel_scope.cancel()
    assert renewed.is_set()
    assert len(renewals) == 1 and isinstance(renewals[0], LeaseLost)
    assert (first.status, first.output) == ("completed", "echo: one")
    assert (second.status, second.output) == ("completed", "echo: two")
    runs = await _runs(postgres_dsn)
    assert [(run.status, run.attempts) for run in runs] == [("completed", 1)] * 2
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "satsuma.cluster"]
    assert [
        level for level, text in said if f"run {first.run_id} ended; its agent closed" in text
    ] == [logging.DEBUG]
    assert not [text for level, text in said if level >= logging.WARNING], said


async def _runs(dsn: str) -> list[Any]:
    async with PostgresStore(dsn) as store:
        return list(await Cluster(store).runs("after-end"))
