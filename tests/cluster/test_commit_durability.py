"""Which of a cluster run's transactions wait for their flush to disk (issue 36): the
claim, made with the agent's take, the run's start and the agent's load in one
transaction, commits with ``synchronous_commit = off``; the submit, the agent's first
write after the claim (the run's record, whose flush carries the claim's: the WAL is
flushed in order) and every later one, and the run's end, which a caller or a later
write relies on, wait.

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


async def test_only_the_claim_with_its_take_and_load_skips_the_wait_for_its_flush(
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
    # Asynchronous: the claim, with the lease's take (its row made, then written), the
    # run's start and the load's marking of runs left running: one transaction.
    assert [(tbl, op, status) for tbl, op, status, _ in off] == [
        ("run_queue", "UPDATE", "claimed"),
        ("leases", "INSERT", None),
        ("leases", "UPDATE", None),
        ("run_queue", "UPDATE", "running"),
        ("runs", "UPDATE", None),
    ], off
    assert "interrupted" in off[-1][3]
    # Synchronous: everything else, each of them there; right after the submit, the
    # agent's first write after the claim (its run's record, with the prompt).
    # (A conversation's tail on PostgreSQL is one INSERT ... ON CONFLICT statement, whose
    # statement-level triggers fire for UPDATE as well as INSERT.)
    assert on[1][:2] in {("runs", "INSERT"), ("messages", "INSERT"), ("messages", "UPDATE")}, on
    kinds = {(tbl, op, status) for tbl, op, status, _ in on}
    for kind in [
        ("run_queue", "INSERT", "queued"),  # the submit
        ("runs", "INSERT", None),  # the agent's steps
        ("messages", "INSERT", None),
        ("tool_calls", "INSERT", None),
        ("run_queue", "UPDATE", "completed"),  # the end
    ]:
        assert kind in kinds, (kind, on)
