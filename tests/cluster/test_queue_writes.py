"""The queue's writes that carry more than one thing each (issue 36: fewer transactions
per cluster run): a claim that says whether more runs wait, a start that says whether
the agent has a record of the run, and a run's end written with its last events, whose
NOTIFY wakes the nodes only when a run of its conversation waits."""

from __future__ import annotations

import psycopg
import trio

from satsuma import RunResult
from satsuma.agents import RunStart
from satsuma.cluster._events import decode_event, encode_event
from satsuma.cluster._results import encode_result
from satsuma.store import PostgresStore
from satsuma.store import _queue as queue
from satsuma.store._run_events import KIND_OTHER, read_events

LIMITS = {"max_events": 100, "max_bytes": 100_000}


async def _register(store: PostgresStore, node_id: str) -> None:
    await queue.register_node(
        store, node_id, name=node_id, host="test", pid=1, agents=["shop"], lease_seconds=600
    )


def _done(run_id: str) -> str:
    return encode_result(RunResult(run_id=run_id, output="done", status="completed"))


async def test_a_claim_says_whether_more_runs_wait(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        await queue.enqueue(store, "run_m1", "shop", "more-1", "hi")
        await queue.enqueue(store, "run_m2", "shop", "more-2", "hi")
        first = await queue.claim_next(store, "node-1", ["shop"])
        assert first.run is not None and first.run.run_id == "run_m1" and first.more
        second = await queue.claim_next(store, "node-1", ["shop"])
        assert second.run is not None and second.run.run_id == "run_m2" and not second.more
        nothing = await queue.claim_next(store, "node-1", ["shop"])
        assert nothing.run is None and not nothing.more
        # Another class's runs are not this node's business.
        await queue.enqueue(store, "run_m3", "other", "more-3", "hi")
        assert not (await queue.claim_next(store, "node-1", ["shop"])).more
        # A node counted dead (no row) claims nothing, and sees nothing waiting.
        await queue.enqueue(store, "run_m4", "shop", "more-4", "hi")
        dead = await queue.claim_next(store, "node-gone", ["shop"])
        assert dead.run is None and not dead.more


async def test_a_start_says_whether_the_agent_has_a_record_of_the_run(postgres_dsn: str) -> None:
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        await queue.enqueue(store, "run_s1", "shop", "start-1", "hi")
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        assert await queue.start_running(store, "run_s1", "node-2") is None  # not its run
        assert await queue.start_running(store, "run_s1", "node-1") is False  # no record yet
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute(
                "INSERT INTO runs (run_id, agent_id, prompt, status, started_at, position, usage) "
                "VALUES ('run_s1', 'start-1', 'hi', 'interrupted', 0, 0, '{}')"
            )
        assert await queue.start_running(store, "run_s1", "node-1") is True
        [listed] = await queue.listing(store, "start-1", (), 10)
        assert listed.status == "running"


async def test_a_runs_end_is_written_with_its_last_events_or_not_at_all(
    postgres_dsn: str,
) -> None:
    start = encode_event(RunStart(agent="shop", run_id="run_e1", iteration=0, prompt="hi"))
    last = queue.LastEvents([(KIND_OTHER, start), 2, (KIND_OTHER, start)], **LIMITS)
    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        await queue.enqueue(store, "run_e1", "shop", "end-1", "hi")
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None
        # Not the node's run: neither the end nor the events are written.
        refused = await queue.finish(
            store,
            run,
            "node-2",
            status="completed",
            result=_done("run_e1"),
            error=None,
            events=last,
        )
        assert not refused
        page = await read_events(store, "run_e1", 0, 10)
        assert page is not None and (page.ended, page.events, page.next_seq) == (False, (), 0)
        assert await queue.finish(
            store,
            run,
            "node-1",
            status="completed",
            result=_done("run_e1"),
            error=None,
            events=last,
        )
        page = await read_events(store, "run_e1", 0, 10)
    assert page is not None and page.ended
    # The two lost before they reached the database leave their seqs unused.
    assert [(seq, decode_event(text)) for seq, text in page.events] == [
        (0, decode_event(start)),
        (3, decode_event(start)),
    ]
    assert page.next_seq == 4


async def test_a_runs_end_wakes_the_nodes_only_when_its_conversation_has_a_run_waiting(
    postgres_dsn: str,
) -> None:
    def heard(db: psycopg.Connection[tuple[object, ...]]) -> list[tuple[str, str]]:
        # The NOTIFYs of one transaction arrive in the order they were sent, the run's
        # end (its result's) last: once it is heard, a wake-up of the nodes sent with it
        # was too.
        got: list[tuple[str, str]] = []
        for note in db.notifies(timeout=10):
            got.append((note.channel, note.payload))
            if note.channel in (queue.RESULT_CHANNEL, queue.DONE_CHANNEL):
                break
        return got

    async with PostgresStore(postgres_dsn) as store:
        await _register(store, "node-1")
        with psycopg.connect(postgres_dsn, autocommit=True) as listener:
            listener.execute(f"LISTEN {queue.DONE_CHANNEL}")
            listener.execute(f"LISTEN {queue.RESULT_CHANNEL}")
            listener.execute(f"LISTEN {queue.QUEUED_CHANNEL}")
            await queue.enqueue(store, "run_w1", "shop", "alone", "hi")
            await queue.enqueue(store, "run_w2", "shop", "pair", "first")
            await queue.enqueue(store, "run_w3", "shop", "pair", "second")
            queued = await trio.to_thread.run_sync(lambda: list(listener.notifies(timeout=0.5)))
            assert [n.channel for n in queued] == [queue.QUEUED_CHANNEL] * 3
            for run_id in ("run_w1", "run_w2"):
                run = await queue.claim(store, "node-1", ["shop"])
                assert run is not None and run.run_id == run_id
                assert await queue.finish(
                    store, run, "node-1", status="completed", result=_done(run_id), error=None
                )
                got = await trio.to_thread.run_sync(heard, listener)
                end = (queue.RESULT_CHANNEL, f"{run_id} 1 {_done(run_id)}")  # the end alone
                if run_id == "run_w1":  # no other run of its conversation waits
                    assert got == [end]
                else:  # run_w3 waited for run_w2: its turn has come
                    assert got == [(queue.QUEUED_CHANNEL, "shop"), end]
