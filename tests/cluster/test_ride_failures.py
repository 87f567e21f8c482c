"""A cluster run's events that ride in its agent's steps (issue 36: ``_opening.take_ride``,
``_write_step``, ``cluster._recording``), when the step that carries them is refused for
them: the step is written again without them, the run goes on and completes with its
conversation stored, and its events are written by their own transactions after all:
the stream has every one, once, in order, and no gap.

The refusal is the server's: a deferred trigger on ``run_events`` fails the COMMIT of any
transaction that also wrote the agent's journal or conversation, which is a step's and
never a transaction of events alone."""

from __future__ import annotations

import psycopg
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools import ToolCall

_REFUSE_RIDES = """
CREATE SEQUENCE refused_rides;
CREATE FUNCTION mark_step() RETURNS trigger AS $$
BEGIN
    PERFORM set_config('satsuma_test.step', 'yes', true);
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER mark_step AFTER INSERT OR UPDATE ON tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION mark_step();
CREATE TRIGGER mark_step AFTER INSERT OR UPDATE ON messages
    FOR EACH STATEMENT EXECUTE FUNCTION mark_step();
CREATE FUNCTION refuse_ride() RETURNS trigger AS $$
BEGIN
    IF current_setting('satsuma_test.step', true) = 'yes' THEN
        PERFORM nextval('refused_rides');
        RAISE EXCEPTION 'events in a step are refused by this test';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER refuse_ride AFTER INSERT ON run_events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_ride();
"""


@satsuma.tool
async def pack(item: str) -> str:
    """Pack an item."""
    return f"packed {item}"


class Packer(satsuma.Agent):
    name = "packer"
    tools = [pack]


def _script() -> list[Reply | str]:
    return [
        Reply(
            tool_calls=[
                ToolCall("toolu_a", "pack", {"item": "kettle"}),
                ToolCall("toolu_b", "pack", {"item": "mug"}),
            ]
        ),
        Reply(tool_calls=[ToolCall("toolu_c", "pack", {"item": "tray"})]),
        "Packed all three.",
    ]


async def test_a_step_refused_for_its_events_is_written_without_them_and_they_follow(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        # The same run in one process: the events a stream of it must give.
        async with satsuma.open_agent(
            Packer, model=ScriptedModel(_script()), store=store, agent_id="ride-local"
        ) as agent:
            local = [type(e).__name__ async for e in agent.stream("pack them")]
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(_REFUSE_RIDES)
        node = Node(store, agents=[Packer], model=ScriptedModel(_script()), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(20):
            async with cluster.stream(Packer, "ride-refused", "pack them") as stream:
                events = [event async for event in stream]
        nursery.cancel_scope.cancel()
        remote = [type(e).__name__ for e in events]
        # The run completed, and its conversation is stored whole.
        assert remote[-1] == "RunEnd" and events[-1].result.status == "completed"
        assert events[-1].result.output == "Packed all three."
        messages = await store.load_messages("ride-refused")
        assert [m.role for m in messages] == ["user", "assistant", "user"] * 2 + ["assistant"]
        runs = await cluster.runs("ride-refused")
        assert [run.attempts for run in runs] == [1]
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        row = db.execute("SELECT last_value, is_called FROM refused_rides").fetchone()
    assert row is not None and row[1] and row[0] >= 1  # steps did carry events, refused
    # Every event, once, in order: no gap (the refused ones were put back and written
    # by their own transaction), no repeat. Consecutive text deltas arrive merged.
    assert "EventsDropped" not in remote
    assert remote == [
        name for i, name in enumerate(local) if local[i - 1 : i] != [name] or name != "TextDelta"
    ]
    assert remote.count("ToolCallStart") == remote.count("ToolCallEnd") == 3
