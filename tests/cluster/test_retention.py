"""The cluster's share of the retention policy: an ended run leaves the queue (and its
events) after the nodes' ``result_retention``, its result is still read from the run
record, and ``Store.prune`` takes the queue rows and events of ended runs with the rest."""

from __future__ import annotations

import json
import os
import sys
from urllib.parse import quote

import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel

TABLES = ("run_queue", "run_events", "run_event_streams", "runs", "tool_calls", "messages")


class Echo(satsuma.Agent):
    name = "echo"


def echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


def rows(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as db:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}  # type: ignore[index]


async def test_an_ended_run_leaves_the_queue_and_its_result_is_still_read(
    postgres_dsn: str,
) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(
            store,
            agents=[Echo],
            model=FunctionModel(echo),
            poll_interval=0.5,
            result_retention=0.5,
        )
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(30):
            results = [await cluster.run(Echo, f"ticket-{n % 3}", f"hello {n}") for n in range(6)]
            assert rows(postgres_dsn)["runs"] == 6
            # The node deletes them by itself, with their events, about every half second.
            while rows(postgres_dsn)["run_queue"]:  # noqa: ASYNC110  (a node deletes them)
                await trio.sleep(0.1)
        assert rows(postgres_dsn) == {
            "run_queue": 0,
            "run_events": 0,
            "run_event_streams": 0,
            "runs": 6,
            "tool_calls": 0,
            "messages": 12,
        }
        assert await cluster.runs() == []
        for result in results:
            again = await cluster.result(result.run_id)
            assert (again.run_id, again.status, again.output) == (
                result.run_id,
                "completed",
                result.output,
            )
            assert again.messages == result.messages
            assert again.usage == result.usage
        with pytest.raises(ValueError, match="no run 'nope' in the cluster's queue"):
            await cluster.result("nope")
        nursery.cancel_scope.cancel()


async def test_prune_takes_the_queue_rows_and_events_of_ended_runs(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.5)
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(30):
            ended = [await cluster.run(Echo, f"t-{n}", f"hi {n}") for n in range(5)]
        # A run that never reached a node: cancelled while queued (no node serves it).
        queued_only = await cluster.submit(Other, "o-1", "never run")
        assert await cluster.cancel(queued_only) == "cancelled"
        waiting = await cluster.submit(Other, "o-2", "waits")
        before = rows(postgres_dsn)
        assert before["run_queue"] == 7
        assert before["run_events"] > 0
        assert before["run_event_streams"] == 5
        dry = await store.prune(older_than=0, dry_run=True)
        assert (dry.runs, dry.run_queue, dry.run_events) == (5, 6, before["run_events"])
        assert rows(postgres_dsn) == before
        report = await store.prune(older_than=0)
        assert report.counts() == dry.counts()
        assert rows(postgres_dsn) == {
            "run_queue": 1,  # the run still queued
            "run_events": 0,
            "run_event_streams": 0,
            "runs": 0,
            "tool_calls": 0,
            "messages": 10,  # conversations stay unless asked
        }
        assert [run.run_id for run in await cluster.runs()] == [waiting]
        with pytest.raises(ValueError, match="no run"):
            await cluster.result(ended[0].run_id)
        report = await store.prune(older_than=0, conversations=True)
        assert (report.conversations, report.messages) == (5, 10)
        nursery.cancel_scope.cancel()


class Other(satsuma.Agent):
    name = "other"


def url_of(dsn: str) -> str:
    """The fixture's connection string as a postgresql:// URL, the form --store takes."""
    params = conninfo_to_dict(dsn)
    user = quote(str(params.get("user", "")), safe="")
    port = f":{params['port']}" if params.get("port") else ""
    host = str(params.get("host") or "")
    dbname = quote(str(params.get("dbname", "")), safe="")
    if host.startswith("/"):
        return f"postgresql://{user}@{port}/{dbname}?host={quote(host, safe='/')}"
    return f"postgresql://{user}@{host}{port}/{dbname}"


async def satsuma_command(*args: str) -> tuple[int, str, str]:
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_status_shows_table_sizes_and_store_prune_empties_them(postgres_dsn: str) -> None:
    url = url_of(postgres_dsn)
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(store, agents=[Echo], model=FunctionModel(echo), poll_interval=0.5)
        await nursery.start(node.serve)
        with trio.fail_after(30):
            for n in range(4):
                await Cluster(store).run(Echo, f"t-{n}", f"hi {n}")
        nursery.cancel_scope.cancel()

    status, out, err = await satsuma_command("cluster", "status", "--store", url, "--json")
    assert (status, err) == (0, ""), err
    tables = {table["name"]: table for table in json.loads(out)["tables"]}
    assert list(tables) == [
        "messages",
        "runs",
        "tool_calls",
        "approvals",
        "leases",
        "run_queue",
        "run_events",
        "run_event_streams",
        "nodes",
    ]
    assert {name: table["rows"] for name, table in tables.items()} == {
        "messages": 8,
        "runs": 4,
        "tool_calls": 0,
        "approvals": 0,
        "leases": 4,
        "run_queue": 4,
        "run_events": tables["run_events"]["rows"],
        "run_event_streams": 4,
        "nodes": 0,
    }
    assert tables["run_events"]["rows"] >= 8  # each run's start and end at least
    assert all(table["bytes"] > 0 for table in tables.values())  # each has its index

    status, out, err = await satsuma_command("cluster", "status", "--store", url)
    assert (status, err) == (0, ""), err
    lines = out.splitlines()
    [heading] = [line for line in lines if line.startswith("tables: ")]
    assert heading.endswith(" (satsuma store prune deletes ended runs)")
    assert lines[lines.index(heading) + 1].split() == ["TABLE", "ROWS", "SIZE"]
    [queue_row] = [line for line in lines if line.startswith("  run_queue ")]
    assert queue_row.split()[1] == "4"

    status, out, err = await satsuma_command("store", "prune", "--store", url, "--older-than", "0s")
    assert (status, err) == (0, ""), err
    printed = out.splitlines()
    assert printed[0].startswith(f"{store.location}: runs that ended before ")
    events = tables["run_events"]["rows"]
    assert printed[1:] == [
        "  runs            4",
        "  tool_calls      0",
        "  approvals       0",
        "  run_queue       4",
        f"  run_events      {events}",
        "  conversations   0",
        "  messages        0",
        "  budget_ledgers  0",
        "  budget_holds    0",
        f"deleted {8 + events} rows",
    ]
    status, out, err = await satsuma_command("cluster", "status", "--store", url, "--json")
    rows_now = {table["name"]: table["rows"] for table in json.loads(out)["tables"]}
    assert rows_now == {**dict.fromkeys(rows_now, 0), "messages": 8, "leases": 4}
