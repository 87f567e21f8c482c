"""A node and the cluster client decide by the store error's type (issue 29, item 12),
instead of reading the store again to learn what happened: a database that is away is
waited for, a lost lease hands the run back, a row that does not decode fails the run at
once, and a closed store stops the node and ends a wait."""

from __future__ import annotations

import psycopg
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore, StoreClosed
from satsuma.testing import FunctionModel, Reply
from satsuma.tools import ToolCall


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


def _node(store: PostgresStore, model: FunctionModel | None = None) -> Node:
    return Node(
        store, agents=[Echo], name="n1", model=model or FunctionModel(echo), poll_interval=0.2
    )


async def test_a_run_whose_conversation_does_not_decode_fails_at_once(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        await nursery.start(_node(store).serve)
        cluster = Cluster(store, poll_interval=0.2)
        with trio.fail_after(20):
            assert (await cluster.run(Echo, "t1", "first")).status == "completed"
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("UPDATE messages SET content = '{not json' WHERE seq = 1")
        with trio.fail_after(20):  # a hang guard: handed back again and again, it never ends
            result = await cluster.run(Echo, "t1", "second")
        assert result.status == "failed"
        assert result.error is not None
        assert "message 1 of agent 't1' cannot be read" in result.error
        # Claimed once: no attempt can read it better than the first.
        assert [run.attempts for run in await cluster.runs("t1")] == [1, 1]
        nursery.cancel_scope.cancel()


async def test_a_node_whose_store_is_closed_stops(postgres_dsn: str) -> None:
    node_store = PostgresStore(postgres_dsn)
    stopped: list[BaseException] = []
    try:
        with trio.fail_after(30):  # a hang guard: it went on polling a closed store
            async with trio.open_nursery() as nursery:
                await nursery.start(_node(node_store).serve)
                await node_store.aclose()
    except* StoreClosed as group:
        stopped.extend(group.exceptions)
    assert len(stopped) == 1
    assert isinstance(stopped[0], StoreClosed)


async def test_waiting_for_a_result_on_a_closed_store_ends(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    cluster = Cluster(store, poll_interval=0.1)
    run_id = await cluster.submit(Echo, "t1", "nobody serves this")  # no node runs it
    waited: list[BaseException] = []

    async def wait() -> None:
        try:
            await cluster.result(run_id)
        except StoreClosed as exc:
            waited.append(exc)

    with trio.fail_after(30):  # a hang guard: a closed store stays closed
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.3)  # it found the run and waits
            await store.aclose()
    assert len(waited) == 1


# --- a lease lost mid-run: the run goes back to the queue, and is resumed --------------


handed_over: list[str] = []


@satsuma.tool
def hand_over(ctx: satsuma.ToolContext) -> str:
    """Another owner takes this agent (as a takeover writes it) while the call runs."""
    handed_over.append("ran")
    with psycopg.connect(ctx.extra["dsn"], autocommit=True) as db:
        db.execute(
            "UPDATE leases SET owner_id = 'another node', epoch = epoch + 1 WHERE agent_id = 't1'"
        )
    return "handed over"


class Taker(satsuma.Agent):
    name = "taker"
    tools = [hand_over]


def take_reply(request: satsuma.ModelRequest) -> Reply | str:
    last = request.messages[-1]
    if any(block.get("type") == "tool_result" for block in last.content):
        return "done"
    return Reply(tool_calls=[ToolCall("toolu_take", "hand_over", {})])


async def test_a_run_whose_lease_was_lost_goes_back_to_the_queue_and_is_resumed(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(
            store,
            agents=[Taker],
            name="n1",
            model=FunctionModel(take_reply),
            context={"dsn": postgres_dsn},
            poll_interval=0.2,
        )
        await nursery.start(node.serve)
        cluster = Cluster(store, poll_interval=0.2)
        with trio.fail_after(30):
            result = await cluster.run(Taker, "t1", "go")
        [queued] = await cluster.runs("t1")
        nursery.cancel_scope.cancel()
    # Not failed: its second attempt resumed it from the journal, where the call that
    # ran under the lost lease is in doubt (its outcome could not be written): not run
    # again, since it is not idempotent.
    assert result.status == "completed"
    assert result.output == "done"
    assert queued.attempts == 2
    assert handed_over == ["ran"]
