"""A paused cluster run resumed with its decisions (``Cluster.resume``, the node's decided
path) whose attempt loses one PostgreSQL connection mid-commit while the database stays
up (issue 36): the node hands the run back, and the next attempt completes it. Each
call is answered once, the decisions apply once (the approved call, not idempotent,
runs at most once; the denied one is answered denied; the edited one, idempotent, runs
with its edit) and no store-error text reaches the history.

The connection is lost at three points of the decided path: the claim's COMMIT (the
run taken up with its decisions), the COMMIT of the step that journals the decided
calls as started (the claim committed, no call ran), and the COMMIT of the step that
journals their outcomes (the approved call ran). A deferred trigger, installed once the
run has paused, terminates the backend from inside that COMMIT, once: the server did
not write the transaction, and the node sees what it would for a COMMIT whose answer
was lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, Reply, check_conversation

paid: list[tuple[str, int]] = []
refunded: list[tuple[str, int]] = []


@satsuma.tool(requires_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    paid.append((to, amount))
    return f"paid {amount} to {to}"


@satsuma.tool(requires_approval=True, idempotent=True)
async def refund(to: str, amount: int) -> str:
    """Refund someone (once per person, however often asked)."""
    refunded.append((to, amount))
    return f"refunded {amount} to {to}"


def payer(request: satsuma.ModelRequest) -> str | Reply:
    last = request.messages[-1]
    if last.role == "user" and last.text:
        return Reply(
            tool_calls=[
                ("pay", {"to": "bob", "amount": 10}),
                ("pay", {"to": "carol", "amount": 5}),
                ("refund", {"to": "dave", "amount": 4}),
            ]
        )
    return "done"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay, refund]


# Once: the first transaction that fires it at its COMMIT loses its connection.
_LOSE_ONE_COMMIT = """
CREATE SEQUENCE lost_commits;
CREATE FUNCTION lose_commit() RETURNS trigger AS $$
BEGIN
    IF nextval('lost_commits') = 1 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
        PERFORM pg_sleep(5);  -- the termination comes first
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER lose_commit AFTER {events} ON {table}
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose_commit();
"""


@asynccontextmanager
async def a_node(store: PostgresStore) -> AsyncIterator[Node]:
    async with trio.open_nursery() as nursery:
        node = Node(store, agents=[Payer], model=FunctionModel(payer), poll_interval=0.5)
        await nursery.start(node.serve)
        yield node
        nursery.cancel_scope.cancel()


async def decided_with_a_lost_commit(
    dsn: str, agent_id: str, events: str, table: str
) -> tuple[satsuma.RunResult, list[dict[str, Any]], list[Any]]:
    """Pause a run, lose the first commit that fires the trigger on ``table`` once
    the run is resumed (approve bob's payment, deny carol's, refund dave 3 rather than
    4), and give the resumed
    run's result, the tool results of the conversation and its queue rows."""
    paid.clear()
    refunded.clear()
    async with PostgresStore(dsn) as store, a_node(store):
        cluster = Cluster(store)
        with trio.fail_after(30):
            paused = await cluster.run(Payer, agent_id, "Pay Bob 10 and Carol 5")
            assert paused.status == "awaiting_approval", paused.error
            bob, carol, dave = paused.pending
            assert paid == []
            with psycopg.connect(dsn, autocommit=True) as db:
                db.execute(_LOSE_ONE_COMMIT.format(events=events, table=table))
            try:
                await cluster.resume(
                    paused.run_id,
                    {
                        bob.id: satsuma.Approve(by="ops"),
                        carol.id: satsuma.Deny("not carol"),
                        dave.id: satsuma.Approve({"to": "dave", "amount": 3}),
                    },
                )
                result = await cluster.result(paused.run_id)
            finally:
                with psycopg.connect(dsn, autocommit=True) as db:
                    (fired,) = db.execute("SELECT is_called FROM lost_commits").fetchone() or (
                        False,
                    )
                    db.execute(
                        f"DROP TRIGGER lose_commit ON {table}; DROP FUNCTION lose_commit(); "
                        "DROP SEQUENCE lost_commits"
                    )
        assert fired, "no connection was lost: the test did not test"
        history = await store.load_messages(agent_id)
        check_conversation(history)
        queued = await cluster.runs(agent_id)
    results = [
        dict(block)
        for message in history
        for block in message.content
        if block.get("type") == "tool_result"
    ]
    assert [block["tool_use_id"] for block in results] == [bob.id, carol.id, dave.id], results
    assert "store error" not in repr(results), results
    assert results[1]["content"] == "Error: Denied: not carol", results
    assert results[2]["content"] == "refunded 3 to dave", results
    return result, results, queued


async def test_a_claim_lost_as_it_commits_is_claimed_again_and_the_call_runs_once(
    postgres_dsn: str,
) -> None:
    # The claim (the run's status, the decisions on its calls) did not commit: the node
    # hands the run back, and the next attempt claims it with the queued decisions.
    result, results, queued = await decided_with_a_lost_commit(
        postgres_dsn, "decided-claim", "UPDATE", "approvals"
    )
    assert (result.status, result.output) == ("completed", "done"), result.error
    assert paid == [("bob", 10)]
    assert refunded == [("dave", 3)]
    assert results[0]["content"] == "paid 10 to bob", results
    [run] = queued
    assert (run.status, run.attempts) == ("completed", 2)


async def test_decided_calls_lost_as_they_are_journaled_run_once_on_the_next_attempt(
    postgres_dsn: str,
) -> None:
    # The claim committed; the step journaling the decided calls as started did not,
    # and no call ran. The node takes the claim back (the run awaits approval again,
    # as before it): the next attempt claims it with the same decisions and runs the
    # approved call, rather than answering it "Interrupted" as a call in doubt.
    result, results, queued = await decided_with_a_lost_commit(
        postgres_dsn, "decided-journal", "INSERT OR UPDATE", "tool_calls"
    )
    assert (result.status, result.output) == ("completed", "done"), result.error
    assert paid == [("bob", 10)]
    assert refunded == [("dave", 3)]
    assert results[0]["content"] == "paid 10 to bob", results
    [run] = queued
    assert (run.status, run.attempts) == ("completed", 2)


async def test_decided_outcomes_lost_as_they_commit_are_not_run_again(
    postgres_dsn: str,
) -> None:
    # The approved call ran; the step journaling its outcome (with the results) did
    # not commit. It is in doubt and pay is not idempotent: the next attempt resumes
    # the run from its journal and answers it interrupted, with its decision, never
    # running it again; the denial stands, and the refund (idempotent) runs again with
    # its edit.
    result, results, queued = await decided_with_a_lost_commit(
        postgres_dsn, "decided-outcome", "INSERT OR UPDATE", "messages"
    )
    assert (result.status, result.output) == ("completed", "done"), result.error
    assert paid == [("bob", 10)]
    # The refund was in doubt too: idempotent, it ran again, with its edit.
    assert refunded == [("dave", 3), ("dave", 3)]
    bob = results[0]["content"]
    assert isinstance(bob, str) and bob.startswith("Error: Interrupted: this call was approved")
    [run] = queued
    assert (run.status, run.attempts) == ("completed", 2)
