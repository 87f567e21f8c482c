"""A batch of a run's events sends the trim of a run past its cap only when it may take
the run there (issue 36): the node knows what the run stores after each of its batches,
so that a run under its cap, nearly every run, costs one statement a batch, not two;
and a run that passes its cap is trimmed all the same."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import trio

import satsuma
from satsuma.cluster import Cluster, EventLog, Node
from satsuma.cluster._events import encode_event
from satsuma.store import PostgresStore
from satsuma.store import _queue as queue
from satsuma.store import _run_events as run_events
from satsuma.store._run_events import KIND_OTHER, EventPage, Stored, read_events, write_batch
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools import ToolCall, ToolCallStart


class _Counted:
    """A psycopg connection that counts the statements sent through it."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db = db
        self.statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self.db.execute(*args, **kwargs)


def _event(run_id: str, index: int) -> tuple[int, str]:
    # Quotes, a backslash, braces, a comma and non-ASCII: stored as they were written.
    tricky = {"n": index, "text": 'say "hi" \\ {a,b} é ✓'}
    start = ToolCallStart(tool_use_id=f"toolu_{index}", tool_name="pack", input=tricky)
    return KIND_OTHER, encode_event(start)


async def test_a_batch_known_to_stay_under_the_cap_sends_no_trim_and_one_past_it_does(
    postgres_dsn: str,
) -> None:
    limits = {"max_events": 10, "max_bytes": 100_000}
    async with PostgresStore(postgres_dsn) as store:
        await queue.register_node(
            store, "node-1", name="node-1", host="test", pid=1, agents=["shop"], lease_seconds=600
        )
        await queue.enqueue(store, "run_t", "shop", "trimmed", "hi")
        run = await queue.claim(store, "node-1", ["shop"])
        assert run is not None

    def batch(db: _Counted, indexes: range, stored: Stored | None) -> Stored | None:
        entries = [_event("run_t", i) for i in indexes]
        sent = write_batch(db, "run_t", entries, **limits, held_by="node-1", stored=stored)  # type: ignore[arg-type]
        db.db.commit()
        return sent.stored()

    with psycopg.connect(postgres_dsn) as conn:
        db = _Counted(conn)
        # Nothing known: the trim goes with the batch.
        first = batch(db, range(3), None)
        assert db.statements == 2
        sizes = [len(_event("run_t", i)[1].encode()) for i in range(12)]
        assert first == Stored(3, sum(sizes[:3]))
        # Known, and 3 + 4 events stay under 10: no trim.
        second = batch(db, range(3, 7), first)
        assert db.statements == 3
        assert second == Stored(7, sum(sizes[:7]))
        # 7 + 5 passes 10: the trim goes, down to nine tenths of the cap.
        third = batch(db, range(7, 12), second)
        assert db.statements == 5
        assert third == Stored(12, sum(sizes))  # as the batch left it, before the trim
        # Another node's batch: nothing written, nothing stored known.
        entries = [_event("run_t", 12)]
        other = write_batch(db, "run_t", entries, **limits, held_by="node-2", stored=third)  # type: ignore[arg-type]
        conn.commit()
        assert other.stored() is None and not other.held()

        # A batch of lost events alone (no event text: an empty array) counts its seqs.
        lost = write_batch(db, "run_t", [2], **limits, held_by="node-1", stored=third)  # type: ignore[arg-type]
        conn.commit()
        assert lost.stored() == Stored(9, sum(sizes[3:]))  # the trim's, plus nothing

    async with PostgresStore(postgres_dsn) as store:
        page = await read_events(store, "run_t", 0, 100)
    assert page is not None
    assert page.next_seq == 14
    assert [seq for seq, _ in page.events] == list(range(3, 12))  # 9 kept: the newest
    assert [text for _, text in page.events] == [_event("run_t", i)[1] for i in range(3, 12)]


@satsuma.tool
async def pack(item: str) -> str:
    """Pack an item."""
    await trio.sleep(0.05)  # long enough for the flusher to write the calls' starts
    return f"packed {item}"


class Packer(satsuma.Agent):
    name = "trim_packer"
    tools = [pack]


def _script() -> list[Reply | str]:
    return [
        Reply(
            tool_calls=[
                ToolCall("toolu_a", "pack", {"item": "kettle"}),
                ToolCall("toolu_b", "pack", {"item": "mug"}),
            ]
        ),
        "Packed both.",
    ]


async def _run(postgres_dsn: str, agent_id: str, log: EventLog) -> tuple[list[str], EventPage]:
    """A two-call run on a node: the live stream's events, and what the run stores."""
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(
            store, agents=[Packer], model=ScriptedModel(_script()), event_log=log, poll_interval=0.5
        )
        await nursery.start(node.serve)
        cluster = Cluster(store)
        with trio.fail_after(20):
            async with cluster.stream(Packer, agent_id, "pack them") as stream:
                names = [type(e).__name__ async for e in stream]
                run_id = stream.run_id
        page = await read_events(store, run_id, 0, 1000)
        nursery.cancel_scope.cancel()
    assert page is not None
    return names, page


async def test_a_run_under_its_cap_sends_the_trim_with_its_first_batch_only(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[str] = []
    prune = run_events.prune

    def counted(db: Any, run_id: str, *args: Any, **kwargs: Any) -> None:
        trims.append(run_id)
        prune(db, run_id, *args, **kwargs)

    monkeypatch.setattr(run_events, "prune", counted)
    names, page = await _run(postgres_dsn, "trim-under", EventLog())
    # Every event there, in order (merged deltas once), none missed: seqs without gaps.
    assert names[0] == "RunStart" and names[-1] == "RunEnd"
    assert names.count("ToolCallStart") == names.count("ToolCallEnd") == 2
    assert "EventsDropped" not in names
    # All but the RunEnd (the queue's) are stored, seqs without gaps.
    assert (
        [seq for seq, _ in page.events] == list(range(len(names) - 1)) == list(range(page.next_seq))
    )
    # The batches after the first knew what the run stored (several batches: the
    # calls' starts and ends, the run's end).
    assert len(trims) == 1


async def test_a_run_that_passes_its_cap_in_a_later_batch_is_trimmed(
    postgres_dsn: str,
) -> None:
    names, page = await _run(postgres_dsn, "trim-over", EventLog(max_events=5))
    # The stream may have read some before they went: those it missed, it says.
    assert names[0] in ("RunStart", "EventsDropped") and names[-1] == "RunEnd"
    # 8 events (RunStart, TurnEnd, the calls' starts and ends, the answer's text and
    # TurnEnd), past 5 after the first batch (RunStart, TurnEnd): what the run stores
    # was trimmed to nine tenths of the cap: 4, the text delta (6) first, then the oldest.
    assert page.next_seq == 8
    assert [seq for seq, _ in page.events] == [3, 4, 5, 7]
