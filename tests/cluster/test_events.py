"""The events of a queued run reach the process that submitted it, through the database:
in order, the same as a local run's, ending with the run however it ends, bounded by the
node's cap (with a marker where events are missing), replayed after the end, and across
a takeover by another node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio

import satsuma
from satsuma.agents import RunEnd, RunStart, TextDelta, TurnEnd
from satsuma.cluster import (
    Cluster,
    ClusterEvent,
    EventStream,
    Node,
)
from satsuma.store import PostgresStore
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools import ToolCall, ToolCallEnd, ToolCallStart, ToolProgress


@satsuma.tool
async def lookup(ctx: satsuma.ToolContext, order: str) -> str:
    """Look an order up."""
    ctx.progress(f"looking {order} up")
    return f"order {order} ships tomorrow"


class Shop(satsuma.Agent):
    name = "shop"
    tools = [lookup]


def shop_script() -> list[Reply | str]:
    return [
        Reply(
            text="Let me look that order up.",
            tool_calls=[ToolCall("toolu_1", "lookup", {"order": "A7"})],
        ),
        "Your order A7 ships tomorrow.",
    ]


def shape(events: Sequence[object]) -> list[str]:
    """The events' class names, consecutive text deltas counted once (a node stores them
    merged)."""
    names: list[str] = []
    for event in events:
        name = type(event).__name__
        if not (name == "TextDelta" and names and names[-1] == "TextDelta"):
            names.append(name)
    return names


def text_of(events: Sequence[object]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def collect(stream: EventStream) -> list[ClusterEvent]:
    async with stream:
        return [event async for event in stream]


def shop_node(store: PostgresStore, model: satsuma.Model, **options: object) -> Node:
    return Node(store, agents=[Shop], name="n1", model=model, poll_interval=0.5, **options)  # type: ignore[arg-type]


async def test_a_remote_runs_events_arrive_in_order_as_a_local_run_yields_them(
    postgres_dsn: str,
) -> None:
    async with satsuma.open_agent(Shop, model=ScriptedModel(shop_script())) as agent:
        local = [event async for event in agent.stream("Where is A7?")]

    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        await nursery.start(shop_node(store, ScriptedModel(shop_script())).serve)
        cluster = Cluster(store)
        stream = cluster.stream(Shop, "ticket-1", "Where is A7?")
        with trio.fail_after(20):
            remote = await collect(stream)
        nursery.cancel_scope.cancel()

    assert shape(remote) == shape(local)
    assert shape(remote) == [
        "RunStart",
        "TextDelta",
        "TurnEnd",
        "ToolCallStart",
        "ToolProgress",
        "ToolCallEnd",
        "TextDelta",
        "TurnEnd",
        "RunEnd",
    ]
    assert {e.run_id for e in remote} == {stream.run_id}
    # The same content, decoded back into the same classes.
    assert text_of(remote) == text_of(local)
    for kind in (RunStart, ToolCallStart, ToolProgress, TurnEnd):
        mine = [e for e in remote if isinstance(e, kind)]
        theirs = [e for e in local if isinstance(e, kind)]
        assert [_without_ids(e) for e in mine] == [_without_ids(e) for e in theirs]
    [end_remote] = [e for e in remote if isinstance(e, ToolCallEnd)]
    [end_local] = [e for e in local if isinstance(e, ToolCallEnd)]
    assert end_remote.outcome.content == end_local.outcome.content == "order A7 ships tomorrow"
    last = remote[-1]
    assert isinstance(last, RunEnd) and isinstance(local[-1], RunEnd)
    assert last.result.status == local[-1].result.status == "completed"
    assert last.result.output == "Your order A7 ships tomorrow."
    assert last.iteration == local[-1].iteration == 2
    # The stream ended at the end of what the node recorded.
    # Its position is past every event the node recorded (all but RunEnd, the queue's).
    assert stream.position == len(remote) - 1


def _without_ids(event: Any) -> object:
    return attrs.evolve(event, run_id="", agent="")
