"""Which of a cluster run's transactions wait for their flush to disk (issue 36): the
claim is made with the agent's take, the run's start and the agent's load, in one
transaction that waits for its flush, as the take always did (a lease must not be lost
to a crash of the server after its holder has written under it); the submit, the
agent's steps and the run's end wait too: none of a run's writes skips the wait.

Seen by the server itself: triggers record, for every write to the queue, the leases,
the runs, the conversation and the journal, the ``synchronous_commit`` its transaction
had."""

from __future__ import annotations

import psycopg
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools import ToolCall

_LOG = """
CREATE TABLE durability_log (
    id BIGSERIAL PRIMARY KEY, tbl TEXT, op TEXT, status TEXT, query TEXT, setting TEXT
);
CREATE FUNCTION durability_queue() RETURNS trigger AS $$
BEGIN
    INSERT INTO durability_log (tbl, op, status, query, setting) VALUES (
        TG_TABLE_NAME, TG_OP, NEW.status, current_query(),
        current_setting('synchronous_commit'));
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE FUNCTION durability_statement() RETURNS trigger AS $$
BEGIN
    INSERT INTO durability_log (tbl, op, query, setting)
    VALUES (TG_TABLE_NAME, TG_OP, current_query(), current_setting('synchronous_commit'));
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER durability AFTER INSERT OR UPDATE ON run_queue
    FOR EACH ROW EXECUTE FUNCTION durability_queue();
CREATE TRIGGER durability AFTER INSERT OR UPDATE ON leases
    FOR EACH STATEMENT EXECUTE FUNCTION durability_statement();
CREATE TRIGGER durability AFTER INSERT OR UPDATE ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION durability_statement();
CREATE TRIGGER durability AFTER INSERT OR UPDATE ON messages
    FOR EACH STATEMENT EXECUTE FUNCTION durability_statement();
CREATE TRIGGER durability AFTER INSERT OR UPDATE ON tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION durability_statement();
"""


@satsuma.tool
async def pack(item: str) -> str:
    """Pack an item."""
    return f"packed {item}"


class Packer(satsuma.Agent):
    name = "packer"
    tools = [pack]


async def test_every_write_of_a_cluster_run_waits_for_its_flush(
    postgres_dsn: str,
) -> None:
    script: list[Reply | str] = [
        Reply(tool_calls=[ToolCall("toolu_a", "pack", {"item": "kettle"})]),
        "Packed.",
    ]
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(_LOG)
        node = Node(store, agents=[Packer], model=ScriptedModel(script), poll_interval=0.5)
        await nursery.start(node.serve)
        with trio.fail_after(20):
            result = await Cluster(store).run(Packer, "durable-1", "pack it")
        assert result.status == "completed" and result.output == "Packed."
        nursery.cancel_scope.cancel()
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        rows = db.execute(
            "SELECT tbl, op, status, query, setting FROM durability_log ORDER BY id"
        ).fetchall()
    off = [(tbl, op, status, query) for tbl, op, status, query, setting in rows if setting == "off"]
    on = [(tbl, op, status, query) for tbl, op, status, query, setting in rows if setting == "on"]
    assert len(off) + len(on) == len(rows)
    # The claim, with the agent's take and load, waits as the take always did.
    assert off == []
    kinds = {(tbl, op, status) for tbl, op, status, _ in on}
    assert any(tbl == "runs" and "interrupted" in query for tbl, _, _, query in on), on
    for kind in [
        ("run_queue", "INSERT", "queued"),  # the submit
        ("run_queue", "UPDATE", "claimed"),  # the claim ...
        ("leases", "INSERT", None),  # ... the take ...
        ("run_queue", "UPDATE", "running"),  # ... with the run's start
        ("runs", "UPDATE", None),  # ... and the load's marking of runs left running
        ("runs", "INSERT", None),  # the agent's steps
        ("messages", "INSERT", None),
        ("tool_calls", "INSERT", None),
        ("run_queue", "UPDATE", "completed"),  # the end
    ]:
        assert kind in kinds, (kind, on)
