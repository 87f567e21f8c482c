"""``open_local_runs``: how a server gets the runs of agents in this process, for as long
as a block lasts.

``async with open_local_runs([Support], store=store) as runs:`` opens a ``Supervisor``
(every served conversation is one of its agent children) and a nursery (every run is
driven by one of its tasks). Leaving the block cancels what still runs (each run ends
``cancelled`` with a valid history) and closes every agent. ``Server`` calls it inside
its own ``serve``; a test or a program may too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..agents import Agent
from ..models import Model
from ..store import MemoryStore, Store
from ..supervisor import Supervisor
from ._eventlog import DEFAULT_EVENT_LIMIT
from ._local import LocalRuns

__all__ = ["open_local_runs"]


@asynccontextmanager
async def open_local_runs(
    agents: Sequence[type[Agent[Any]]],
    *,
    store: Store | None = None,
    model: Model | Mapping[str, Model] | None = None,
    idle_seconds: float = 300.0,
    retention_seconds: float = 600.0,
    event_limit: int = DEFAULT_EVENT_LIMIT,
) -> AsyncIterator[LocalRuns]:
    """The runs of ``agents`` in this process, for as long as the block lasts.

    Args:
        agents: The served classes, each by its ``Agent.name`` (unique, without ``/``).
        store: An open SQLiteStore or MemoryStore; by default a MemoryStore of this
            block's own (runs awaiting approval need a store).
        model: The model every agent uses, or one per agent name (tests pass
            ScriptedModels); by default each class's own.
        idle_seconds: A conversation with no run for this long has its agent closed
            (opened again on its next use).
        retention_seconds: How long a run's events stay in memory once it ended or
            paused; past it ``events`` answers from the store (its end only).
        event_limit: Events kept in memory per run (see ``EventLog``).
    """
    if idle_seconds <= 0 or retention_seconds <= 0:
        raise ValueError("idle_seconds and retention_seconds must be positive")
    async with (
        _store_or_memory(store) as opened,
        Supervisor() as supervisor,
        trio.open_nursery() as nursery,
    ):
        runs = LocalRuns(
            agents,
            store=opened,
            supervisor=supervisor,
            nursery=nursery,
            model=model,
            idle_seconds=idle_seconds,
            retention_seconds=retention_seconds,
            event_limit=event_limit,
        )
        nursery.start_soon(runs.close_idle_agents)
        try:
            yield runs
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def _store_or_memory(store: Store | None) -> AsyncIterator[Store]:
    if store is not None:
        yield store
        return
    async with MemoryStore() as memory:
        yield memory
