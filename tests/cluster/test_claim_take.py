"""A node's claim with its agent taken, the run started and the agent loaded in one
transaction (issue 36: ``store/_claim_take.py``), handed to the agent explicitly
(``agents.internal.open_taken``, ``store.Taken``): one transaction, locks in the sweep's
order, a node counted dead takes nothing, a run no longer the node's is refused, a take
refused after the claim hands the run back, a claim whose connection breaks as it
commits leaves the run to complete, and a lease whose agent never opened is let go."""

from __future__ import annotations

import os
import socket
from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma.agents import internal
from satsuma.cluster import Cluster, Node
from satsuma.cluster import _node as node_module
from satsuma.cluster._results import encode_result
from satsuma.store import LeaseLost, Owner, PostgresStore, RunRecord, Step, StoreUnavailable
from satsuma.store import _queue as queue
from satsuma.store._claim_take import claim_and_take, undo_lost_claim
from satsuma.testing import FunctionModel

LEASE = 30.0


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


async def _register(store: PostgresStore, node_id: str) -> None:
    await queue.register_node(
        store, node_id, name=node_id, host="test", pid=1, agents=["echo"], lease_seconds=600
    )


async def _status(store: PostgresStore, run_id: str) -> str:
    run, _ = await queue.outcome(store, run_id) or (None, None)
    assert run is not None
    return run.status


def _holder(dsn: str, agent_id: str) -> tuple[str | None, int]:
    with psycopg.connect(dsn) as db:
        row = db.execute(
            "SELECT owner_id, epoch FROM leases WHERE agent_id = %s", (agent_id,)
        ).fetchone()
    assert row is not None
    return row[0], row[1]


async def test_a_claim_takes_starts_and_loads_its_agent_in_one_transaction(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        # The agent has a conversation, and a run a crash left running.
        async with satsuma.open_agent(
            Echo, model=FunctionModel(echo), store=store, agent_id="ct-1"
        ) as agent:
            await agent.run("first")
        await store.start_run(
            RunRecord(
                run_id="run_left",
                agent_id="ct-1",
                status="running",
                prompt="left",
                started_at=1.0,
                position=2,
            ),
            start=None,
            messages=(),
            lease=None,
        )
        await _register(store, "node-1")
        await queue.enqueue(store, "run_c1", "echo", "ct-1", "second")
        transactions: list[object] = []
        transaction = store.transaction

        async def counted(work: Any) -> Any:
            transactions.append(work)
            return await transaction(work)

        monkeypatch.setattr(store, "transaction", counted)
        owner = Owner.new()
        got = await claim_and_take(store, "node-1", ["echo"], owner, seconds=LEASE)
        monkeypatch.undo()
        assert len(transactions) == 1
        assert got.run is not None and got.run.run_id == "run_c1" and got.refusal is None
        taken = got.taken
        assert taken is not None and taken.lease.owner == owner and taken.lease.epoch == 2
        assert [m.text for m in taken.loaded.messages] == ["first", "echo: first"]
        assert {r.run_id: r.status for r in taken.loaded.runs}["run_left"] == "interrupted"
        assert await _status(store, "run_c1") == "running"
        assert _holder(postgres_dsn, "ct-1") == (owner.owner_id, 2)
        # The agent opens from what was taken: it writes under that lease, no take of
        # its own, and lets it go as it closes.
        async with internal.open_taken(
            Echo, taken, store=store, model=FunctionModel(echo)
        ) as agent:
            assert taken.adopted
            assert [m.text for m in agent.history] == ["first", "echo: first"]
            result = await internal.run_with_id(agent, "second", "run_c1")
        assert result[0].output == "echo: second"
        assert _holder(postgres_dsn, "ct-1") == (None, 2)
        assert [r.status for r in await store.runs("ct-1")][-1] == "completed"


async def test_a_node_counted_dead_claims_and_takes_nothing(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        await queue.enqueue(store, "run_d1", "echo", "dead-1", "hi")
        await queue.unregister_node(store, "node-1")  # counted dead: its row went
        got = await claim_and_take(store, "node-1", ["echo"], Owner.new(), seconds=LEASE)
        assert got.run is None and got.taken is None
        assert await _status(store, "run_d1") == "queued"
        # Nothing was taken: the agent is free, at its first epoch.
        lease = await store.acquire_lease("dead-1", Owner.new(), seconds=LEASE)
        assert lease.epoch == 1


async def test_a_run_no_longer_the_nodes_is_refused_its_writes_and_its_end(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await queue.register_node(
            store,
            "node-1",
            name="node-1",
            host=socket.gethostname(),
            pid=os.getpid(),
            agents=["echo"],
            lease_seconds=600,
        )
        await queue.enqueue(store, "run_r1", "echo", "refused-1", "hi")
        got = await claim_and_take(store, "node-1", ["echo"], Owner.new(), seconds=LEASE)
        assert got.run is not None and got.taken is not None
        # Counted dead after its claim (its heartbeat long past): the sweep puts the run
        # back and lets its agent's lease go.
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("UPDATE nodes SET heartbeat_at = 0, expires_at = 0")
        assert await queue.sweep(store, lock_timeout=5) == 1
        assert await _status(store, "run_r1") == "queued"
        late = Step(agent_id="refused-1", start=0, messages=(satsuma.Message.user("late"),))
        with pytest.raises(LeaseLost):
            await store.write_step(late, lease=got.taken.lease)
        result = encode_result(satsuma.RunResult(run_id="run_r1", output="x", status="completed"))
        assert not await queue.finish(
            store,
            got.run,
            "node-1",
            status="completed",
            result=result,
            error=None,
            release=got.taken.lease,
        )
        # Another node takes the run and its agent, at the next epoch.
        await _register(store, "node-2")
        again = await claim_and_take(store, "node-2", ["echo"], Owner.new(), seconds=LEASE)
        assert again.run is not None and again.run.run_id == "run_r1"
        assert again.taken is not None and again.taken.lease.epoch == got.taken.lease.epoch + 1


async def test_a_take_refused_after_the_claim_hands_the_run_back_and_it_completes(
    postgres_dsn: str,
) -> None:
    """The agent is held by a live owner elsewhere (a node on another host whose lease
    has not expired): the claim commits alone, the agent untouched; the node hands the
    run back, and a later claim, once that lease has expired, completes it."""
    elsewhere = Owner(owner_id="elsewhere", pid=1, host="another-host")
    async with PostgresStore(postgres_dsn) as store:
        held = await store.acquire_lease("held-1", elsewhere, seconds=1.5)
        await _register(store, "node-1")
        await queue.enqueue(store, "run_h1", "echo", "held-1", "hi")
        got = await claim_and_take(store, "node-1", ["echo"], Owner.new(), seconds=LEASE)
        assert got.run is not None and got.taken is None
        assert got.refusal is not None and "already open" in str(got.refusal)
        assert await _status(store, "run_h1") == "claimed"
        assert _holder(postgres_dsn, "held-1") == ("elsewhere", held.epoch)
        await queue.unregister_node(store, "node-1")  # the run goes back to the queue
        async with trio.open_nursery() as nursery:
            node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.2)
            await nursery.start(node.serve)
            with trio.fail_after(20):
                result = await Cluster(store).result("run_h1")
            nursery.cancel_scope.cancel()
        assert result.output == "echo: hi"
        [run] = await Cluster(store).runs("held-1")
        assert run.attempts >= 3  # refused once here, at least once by the node, then run
        assert _holder(postgres_dsn, "held-1") == (None, held.epoch + 1)


_KILL_AT_COMMIT = """
CREATE SEQUENCE lost_claims;
CREATE FUNCTION lose_claim() RETURNS trigger AS $$
BEGIN
    IF NEW.status = 'running' AND nextval('lost_claims') = 1 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
        PERFORM pg_sleep(5);  -- the termination comes first
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER lose_claim AFTER UPDATE ON run_queue
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose_claim();
"""


async def test_a_claim_whose_connection_breaks_as_it_commits_leaves_the_run_to_complete(
    postgres_dsn: str,
) -> None:
    """The claim's connection is lost inside its COMMIT (its answers before came back:
    the node cannot tell whether it committed). What it may have claimed and taken goes
    back, and the run completes on a later claim."""
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        await store.open()
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(_KILL_AT_COMMIT)
        node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.2)
        await nursery.start(node.serve)
        with trio.fail_after(20):
            result = await Cluster(store).run(Echo, "lost-1", "hi")
        nursery.cancel_scope.cancel()
    assert result.output == "echo: hi"
    with psycopg.connect(postgres_dsn) as db:
        row = db.execute("SELECT last_value FROM lost_claims").fetchone()
    assert row is not None and row[0] >= 2  # the first claim's COMMIT was cut
    assert _holder(postgres_dsn, "lost-1")[0] is None


async def test_a_lost_claim_that_committed_is_put_back_and_its_lease_let_go(
    postgres_dsn: str,
) -> None:
    """The real case, made by hand: the claim committed, its answer never came."""
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        for run_id, agent_id in (("run_u1", "undo-1"), ("run_u2", "undo-2")):
            await queue.enqueue(store, run_id, "echo", agent_id, "hi")
        owner = Owner.new()
        kept = await claim_and_take(store, "node-1", ["echo"], Owner.new(), seconds=LEASE)
        lost = await claim_and_take(store, "node-1", ["echo"], owner, seconds=LEASE)
        assert kept.run is not None and lost.run is not None and lost.taken is not None
        back = await undo_lost_claim(store, "node-1", owner, keep=[kept.run.run_id])
        assert back == 1
        assert await _status(store, lost.run.run_id) == "queued"
        assert await _status(store, kept.run.run_id) == "running"
        assert _holder(postgres_dsn, lost.run.agent_id) == (None, 1)
        assert _holder(postgres_dsn, kept.run.agent_id)[0] is not None


async def test_a_lease_taken_for_an_agent_that_never_opens_is_let_go(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's agent cannot open (no model, and no API key): the run fails, and the
    lease its claim took is let go, not left to expire."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Echo], poll_interval=0.2)
        await nursery.start(node.serve)
        with trio.fail_after(20):
            result = await Cluster(store).run(Echo, "never-1", "hi")
        nursery.cancel_scope.cancel()
    assert result.status == "failed"
    assert _holder(postgres_dsn, "never-1") == (None, 1)


async def test_a_node_whose_claim_committed_unanswered_puts_it_back_and_completes_the_run(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's claim commits, run and lease taken, but its answer is lost
    (``StoreUnavailable``): the node puts the run back and lets that lease go, and the
    run completes on its next claim, its agent taken at the next epoch."""
    real = node_module.claim_and_take
    lost: list[str] = []

    async def unanswered(*args: Any, **kwargs: Any) -> Any:
        got = await real(*args, **kwargs)
        if got.run is not None and not lost:
            lost.append(got.run.run_id)
            raise StoreUnavailable("test", "the connection broke as the claim committed")
        return got

    monkeypatch.setattr(node_module, "claim_and_take", unanswered)
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.2)
        await nursery.start(node.serve)
        with trio.fail_after(20):
            result = await Cluster(store).run(Echo, "unanswered-1", "hi")
        nursery.cancel_scope.cancel()
    assert lost == [result.run_id] and result.output == "echo: hi"
    assert _holder(postgres_dsn, "unanswered-1") == (None, 2)  # taken twice, let go
