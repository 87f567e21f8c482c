"""The cluster benchmark's section 1: one run after another, the raw queue's round trip
(the floor) and the runs themselves, in this process and through a cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable

import psycopg
from _cluster_agent import PING, Courier

import satsuma
from satsuma.cluster import Cluster
from satsuma.store import Store


def raw_round_trips(dsn: str, count: int) -> list[float]:
    """The floor of a queue in PostgreSQL: a hand-written one on psycopg, its worker in a
    thread; seconds per round trip."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute(
            "CREATE TABLE IF NOT EXISTS bench_queue (id BIGINT GENERATED ALWAYS AS IDENTITY "
            "PRIMARY KEY, status TEXT NOT NULL, prompt TEXT NOT NULL, result TEXT)"
        )
    stop = threading.Event()
    listening = threading.Event()

    def worker() -> None:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("LISTEN bench_new")
            listening.set()
            while not stop.is_set():
                # Read out first: the connection is not usable while notifies() iterates.
                if not list(db.notifies(timeout=0.2, stop_after=1)):
                    continue
                with db.transaction():
                    row = db.execute(
                        "UPDATE bench_queue SET status = 'claimed' WHERE id = (SELECT id "
                        "FROM bench_queue WHERE status = 'queued' ORDER BY id LIMIT 1 "
                        "FOR UPDATE SKIP LOCKED) RETURNING id, prompt"
                    ).fetchone()
                if row is None:
                    continue
                with db.transaction():
                    db.execute(
                        "UPDATE bench_queue SET status = 'done', result = %s WHERE id = %s",
                        ("pong", row[0]),
                    )
                    db.execute("SELECT pg_notify('bench_done', %s)", (str(row[0]),))

    thread = threading.Thread(target=worker)
    thread.start()
    listening.wait(10)
    samples: list[float] = []
    try:
        with (
            psycopg.connect(dsn, autocommit=True) as caller,
            psycopg.connect(dsn, autocommit=True) as listener,
        ):
            listener.execute("LISTEN bench_done")
            for _ in range(count + 1):  # the first warms the worker up
                started = time.perf_counter()
                with caller.transaction():
                    row = caller.execute(
                        "INSERT INTO bench_queue (status, prompt) VALUES ('queued', %s) "
                        "RETURNING id",
                        (PING,),
                    ).fetchone()
                    assert row is not None
                    caller.execute("SELECT pg_notify('bench_new', 'x')")
                heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
                if heard != [str(row[0])]:
                    raise SystemExit(f"the raw queue's worker did not answer: {heard}")
                result = caller.execute(
                    "SELECT result FROM bench_queue WHERE id = %s", (row[0],)
                ).fetchone()
                assert result == ("pong",)
                samples.append(time.perf_counter() - started)
    finally:
        stop.set()
        thread.join()
    return samples[1:]


def _ignore(_event: object) -> None:
    pass


async def in_process_run(store: Store, agent_id: str, prompt: str, *, heard: bool = False) -> None:
    async with satsuma.open_agent(Courier, store=store, agent_id=agent_id) as agent:
        result = await agent.run(prompt, events=_ignore if heard else None)
    if result.status != "completed":
        raise SystemExit(f"a run ended {result.status}: {result.error}")


async def cluster_run(cluster: Cluster, agent_id: str, prompt: str) -> None:
    result = await cluster.run(Courier, agent_id, prompt)
    if result.status != "completed":
        raise SystemExit(f"a cluster run ended {result.status}: {result.error}")


async def sequential(run: Callable[[str], Awaitable[None]], tag: str, count: int) -> list[float]:
    await run(f"{tag}-warm")
    samples = []
    for index in range(count):
        started = time.perf_counter()
        await run(f"{tag}-{index}")
        samples.append(time.perf_counter() - started)
    return samples
