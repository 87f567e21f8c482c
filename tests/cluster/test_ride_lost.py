"""A cluster run's step that carries its events (issue 36: ``_opening.take_ride``,
``_write_step``, ``cluster._recording``) and whose outcome is unknown: its connection is
lost as it commits (the server process of that connection is terminated from inside its
COMMIT, by a deferred trigger, once). The events it carried are never written twice:
the stream says they are missing (``EventsDropped``), and the run goes on to its end.

The trigger terminates the backend before the COMMIT completes, so the server did not
write the step; what the node sees is the same as for a COMMIT that went through and
whose answer was lost: answers of the transaction came back, then the connection
broke."""

from __future__ import annotations

import psycopg
import trio

import satsuma
from satsuma.cluster import Cluster, EventsDropped, Node
from satsuma.store import PostgresStore
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools import ToolCall

_LOSE_ONE_RIDE = """
CREATE SEQUENCE lost_rides;
CREATE FUNCTION mark_step() RETURNS trigger AS $$
BEGIN
    PERFORM set_config('satsuma_test.step', 'yes', true);
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER mark_step AFTER INSERT OR UPDATE ON tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION mark_step();
CREATE TRIGGER mark_step AFTER INSERT OR UPDATE ON messages
    FOR EACH STATEMENT EXECUTE FUNCTION mark_step();
CREATE FUNCTION lose_ride() RETURNS trigger AS $$
BEGIN
    IF current_setting('satsuma_test.step', true) = 'yes' AND nextval('lost_rides') = 1 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
        PERFORM pg_sleep(5);  -- the termination comes first
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER lose_ride AFTER INSERT ON run_events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose_ride();
"""


@satsuma.tool
async def pack(item: str) -> str:
    """Pack an item."""
    return f"packed {item}"


class Packer(satsuma.Agent):
    name = "packer"
    tools = [pack]


async def test_a_step_lost_as_it_commits_leaves_a_gap_in_its_events_never_a_repeat(
    postgres_dsn: str,
) -> None:
    script: list[Reply | str] = [
        Reply(tool_calls=[ToolCall("toolu_a", "pack", {"item": "kettle"})]),
        Reply(tool_calls=[ToolCall("toolu_b", "pack", {"item": "mug"})]),
        "Packed both.",
    ]
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(_LOSE_ONE_RIDE)
        node = Node(store, agents=[Packer], model=ScriptedModel(script), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(30):
            async with cluster.stream(Packer, "ride-lost", "pack them") as stream:
                events = [event async for event in stream]
        nursery.cancel_scope.cancel()
    names = [type(e).__name__ for e in events]
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        row = db.execute("SELECT last_value, is_called FROM lost_rides").fetchone()
    assert row is not None and row[1]  # a step carried events, and was lost
    # The events that step carried (the run's start among them) are a gap, said once
    # where they were; never written again by the flusher or the run's end.
    assert names[0] == "EventsDropped" and names.count("EventsDropped") == 1, names
    [dropped] = [e for e in events if isinstance(e, EventsDropped)]
    assert dropped.count >= 1
    # The run went on (handed back, resumed from its journal) to its end. Nothing of it
    # was committed (its first step was the one lost): the attempt that took it up
    # started it again, with a RunStart of its own, after the RunResumed.
    assert "RunResumed" in names and names[-1] == "RunEnd", names
    assert names.count("RunStart") == 1, names
    assert names.index("RunResumed") < names.index("RunStart"), names


async def test_a_run_whose_connection_is_lost_as_it_commits_is_resumed_and_completes(
    postgres_dsn: str,
) -> None:
    # The database stays up; one connection is lost. The run is not failed (the node
    # hands it back, docs/cluster.md): the next attempt resumes it from its journal, and
    # the conversation it goes on from holds no synthetic "store error" answers.
    script: list[Reply | str] = [
        Reply(tool_calls=[ToolCall("toolu_a", "pack", {"item": "kettle"})]),
        Reply(tool_calls=[ToolCall("toolu_b", "pack", {"item": "mug"})]),
        "Packed both.",
    ]
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            # The third event row: the step that journals toolu_a's outcome (its start's
            # step, with the run's start, was written).
            db.execute(_LOSE_ONE_RIDE.replace("= 1 THEN", "= 3 THEN"))
        node = Node(store, agents=[Packer], model=ScriptedModel(script), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(30):
            async with cluster.stream(Packer, "drop-resumed", "pack them") as stream:
                events = [event async for event in stream]
            [run_id] = {e.run_id for e in events if hasattr(e, "run_id")}
            result = await cluster.result(run_id)
        history = await store.load_messages("drop-resumed")
        nursery.cancel_scope.cancel()
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        row = db.execute("SELECT last_value, is_called FROM lost_rides").fetchone()
    assert row is not None and row[1]  # a connection was lost as it committed
    names = [type(e).__name__ for e in events]
    assert "RunResumed" in names, names
    assert result.status == "completed", (result.status, result.error)
    assert result.output == "Packed both."
    results = [
        block
        for message in history
        for block in message.content
        if block.get("type") == "tool_result"
    ]
    assert "store error" not in repr(results), results
    # Every call the model made has one answer. toolu_a was in doubt (its outcome's step
    # was lost) and pack is not idempotent: the resume answers it interrupted, as after
    # a node's death; the rest went on from the journal.
    assert [block["tool_use_id"] for block in results] == ["toolu_a", "toolu_b"], results
    assert "Interrupted" in repr(results[0]["content"]), results
    assert results[1]["content"] == "packed mug", results
