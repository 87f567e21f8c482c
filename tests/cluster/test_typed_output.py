"""Typed answers in a cluster (real PostgreSQL): ``Cluster.run`` gives the answer typed
when a node ran the run, and also when the node found the run ended in the agent's own
records without the queue having heard (a takeover after the node that ran it died
between the two writes): that node rebuilds the result from the records, reading the
answer by the class's type. A typed run that did not complete raises NoOutput on
``output`` either way."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
import trio

import satsuma
from satsuma.agents._handle import run_with_id
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import Reply, ScriptedModel


@attrs.frozen
class Score:
    # Its only field is named value: its answer is {"value": 7} unwrapped, which a
    # reader guessing from the shape took for a wrapped 7.
    value: int


class Scorer(satsuma.Agent[Score]):
    name = "scorer"
    output_retries = 0


def answer(value: Any) -> Reply:
    return Reply(tool_calls=[("final_answer", value)])


async def run_recorded_but_not_queued(
    store: PostgresStore, replies: list[Reply]
) -> satsuma.RunResult[Score]:
    """``Cluster.run`` on a run whose agent ran it and recorded its end before any node
    claimed it from the queue (what a node that died after the agent's write and before
    the queue's leaves behind); then a node claims it."""
    cluster = Cluster(store, poll_interval=0.2)
    agent_id = f"scores-{uuid.uuid4().hex[:8]}"
    results: list[satsuma.RunResult[Score]] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            results.append(await cluster.run(Scorer, agent_id, "Score it"))
            done.set()

        nursery.start_soon(run)
        with trio.fail_after(10):
            # The queue is in the database: nothing to wait on here but a read.
            while not (queued := await cluster.runs(agent_id)):  # noqa: ASYNC110
                await trio.sleep(0.02)
        (queued_run,) = queued
        async with satsuma.open_agent(
            Scorer, model=ScriptedModel(replies), store=store, agent_id=agent_id
        ) as agent:
            ran, _ = await run_with_id(agent, "Score it", queued_run.run_id)
        assert ran.run_id == queued_run.run_id
        # The node asks no model: the run has ended.
        node = Node(store, agents=[Scorer], name="n1", model=ScriptedModel([]), poll_interval=0.2)
        await nursery.start(node.serve)
        with trio.fail_after(10):
            await done.wait()
        nursery.cancel_scope.cancel()
    (result,) = results
    return result


async def test_a_result_rebuilt_from_the_records_is_typed_like_a_run_s_own(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        rebuilt = await run_recorded_but_not_queued(store, [answer({"value": 7})])
        assert rebuilt.status == "completed"
        assert rebuilt.output == Score(7)
        # Cluster.result, without the class, reads the same JSON as a run's own end.
        assert (await Cluster(store).result(rebuilt.run_id)).output == {"value": 7}

        failed = await run_recorded_but_not_queued(store, [answer({"value": "seven"})])
        assert failed.status == "failed"
        assert failed.error is not None and "the last answer" in failed.error
        with pytest.raises(satsuma.NoOutput, match="it ended failed"):
            failed.output  # noqa: B018
        assert (await Cluster(store).result(failed.run_id)).output is None


async def test_a_typed_run_that_a_node_ran_is_typed_too(postgres_dsn: str) -> None:
    model = ScriptedModel([answer({"value": 3}), answer({"value": "three"})])
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Scorer], name="n1", model=model, poll_interval=0.2)
        await nursery.start(node.serve)
        cluster = Cluster(store, poll_interval=0.2)
        agent_id = f"scores-{uuid.uuid4().hex[:8]}"
        with trio.fail_after(10):
            done = await cluster.run(Scorer, agent_id, "Score it")
            failed = await cluster.run(Scorer, agent_id, "Score it again")
        assert done.output == Score(3)
        assert failed.status == "failed"
        with pytest.raises(satsuma.NoOutput, match="it ended failed"):
            failed.output  # noqa: B018
        nursery.cancel_scope.cancel()
