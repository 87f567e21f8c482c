"""What the console's pages read, and where from: the server's ``Runs`` (runs, events,
approvals), its store (pages of conversations, usage, decisions: cut in SQL, never every
run), its supervisor (the tree) and, on PostgreSQL, the cluster's status.

The store and the supervisor are those the runs were opened with (``LocalRuns.store``,
``LocalRuns.supervisor``; ``ClusterRuns.store``). Runs of another kind (a test's own)
have neither: the pages that need them say so rather than fail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import trio

from ..store import (
    MemoryStore,
    MessagePage,
    PostgresStore,
    RunRecord,
    SQLiteStore,
    UsageTotal,
    conversation_page,
    latest_runs,
    message_page,
    page_runs,
    recent_decisions,
    usage_total,
)
from ..supervisor import Supervisor
from ._console_pages import TreeNode
from ._local import LocalRuns
from ._runs import Runs, RunView, UnknownAgent
from ._views import json_values, split_stored_id, stored_id

__all__ = ["ConsoleReads"]

# How long the run page waits for the events of a run in progress before it shows them.
_EVENTS_GRACE = 0.05
# An ended run's events are all stored: reading them never waits, but a page is not
# held past this if a store misbehaves.
_EVENTS_BOUND = 5.0
# At most this many runs of a class held in memory are looked through for a page's.
_HELD_BOUND = 100_000
# The tree shows this many open conversations; the rest are counted.
TREE_LIMIT = 200


def _view(record: RunRecord) -> RunView | None:
    """A stored run as the runs show it (None for an id no served class has)."""
    parts = split_stored_id(record.agent_id)
    if parts is None:
        return None
    return RunView(
        run_id=record.run_id,
        agent=parts[0],
        agent_id=parts[1],
        status=record.status,
        prompt=record.prompt,
        usage={
            "input_tokens": record.usage.input_tokens,
            "output_tokens": record.usage.output_tokens,
            "cost_usd": record.usage.cost_usd,
        },
        started_at=record.started_at,
        ended_at=record.ended_at,
    )


def _what(child: object) -> str:
    if isinstance(child, type):
        return child.__qualname__
    return type(child).__qualname__


class ConsoleReads:
    """The reads behind the console's pages, over one server's runs."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    @property
    def store(self) -> Any | None:
        """The runs' store, when it is one of satsuma's."""
        store = getattr(self.runs, "store", None)
        return store if isinstance(store, MemoryStore | SQLiteStore | PostgresStore) else None

    @property
    def clustered(self) -> bool:
        """Whether the runs go through a cluster (a PostgresStore's)."""
        return isinstance(self.store, PostgresStore)

    @property
    def supervisor(self) -> Supervisor | None:
        """The supervisor of the runs' agents (None for a cluster's runs)."""
        found = getattr(self.runs, "supervisor", None)
        return found if isinstance(found, Supervisor) else None

    def prefixes(self, may_read: Callable[[str], bool]) -> list[str]:
        """The stored-id prefixes of the served classes the viewer reads."""
        return [stored_id(name, "") for name in self.runs.agents if may_read(name)]

    def tree(self, may_read: Callable[[str], bool]) -> tuple[TreeNode | None, int]:
        """The supervision tree of the conversations the viewer reads, and how many
        more are open than it shows."""
        root = self.supervisor
        if root is None:
            return None, 0
        shown: list[TreeNode] = []
        hidden = 0
        for info in root.which_children():
            parts = split_stored_id(info.id)
            if parts is not None and not may_read(parts[0]):
                continue
            if len(shown) >= TREE_LIMIT:
                hidden += 1
                continue
            shown.append(self._node(info))
        node = TreeNode(
            id="server",
            kind="supervisor",
            what="Supervisor",
            state="running",
            restarts=0,
            intensity=(root.recent_restarts, root.max_restarts, root.within),
            children=tuple(shown),
        )
        return node, hidden

    def _node(self, info: Any) -> TreeNode:
        child = info.child
        if isinstance(child, Supervisor):
            return TreeNode(
                id=info.id,
                kind="supervisor",
                what="Supervisor",
                state=info.state,
                restarts=info.restarts,
                intensity=(child.recent_restarts, child.max_restarts, child.within),
                children=tuple(self._node(inner) for inner in child.which_children()),
            )
        return TreeNode(
            id=info.id, kind=info.kind, what=_what(child), state=info.state, restarts=info.restarts
        )

    async def latest(
        self,
        may_read: Callable[[str], bool],
        limit: int = 20,
        conversation: tuple[str, str] | None = None,
    ) -> list[RunView]:
        """The latest runs the viewer reads (of one ``conversation``, its name and id,
        when given): the store's when there is one (every run it keeps, read a page at a
        time), else those the runs hold."""
        store = self.store
        if store is None:
            if conversation is not None:
                return await self.runs.runs(*conversation, limit=limit)
            views = await self.runs.runs(limit=limit * 2)
            return [v for v in views if may_read(v.agent)][:limit]
        records = await latest_runs(
            store,
            under=self.prefixes(may_read),
            limit=limit,
            agent_id=stored_id(*conversation) if conversation is not None else None,
        )
        return [view for view in map(_view, records) if view is not None]

    async def messages(
        self, name: str, agent_id: str, start: int | None, limit: int
    ) -> tuple[int, list[dict[str, Any]], int]:
        """One page of a conversation (its latest ``limit`` messages without ``start``):
        where it starts, its messages as Messages API JSON, and how many there are. Read
        a page at a time from the store; whole from the runs without one."""
        store = self.store
        if store is None:
            every = await self.runs.messages(name, agent_id)
            first = max(len(every) - limit, 0) if start is None else start
            first = min(max(first, 0), max(len(every) - 1, 0))
            return first, every[first : first + limit], len(every)
        if name not in self.runs.agents:
            raise UnknownAgent(f"no agent named {name!r} is served")
        found: MessagePage = await message_page(
            store, stored_id(name, agent_id), start=start, limit=limit
        )
        shown = [{"role": m.role, "content": json_values(m.content)} for m in found.messages]
        return found.start, shown, found.total

    async def writers(self, name: str, agent_id: str, start: int, end: int) -> list[RunView]:
        """The runs that wrote the conversation's messages ``start`` to ``end``
        (excluded), from the store; none without one."""
        store = self.store
        if store is None:
            return []
        records = await page_runs(store, stored_id(name, agent_id), start=start, end=end)
        return [view for view in map(_view, records) if view is not None]

    async def conversations(
        self, may_read: Callable[[str], bool], search: str, page: int, size: int
    ) -> tuple[list[Any], int]:
        """One page of conversations (``ConversationSummary``) and how many there are."""
        store = self.store
        if store is None:
            return [], 0
        return await conversation_page(
            store, under=self.prefixes(may_read), search=search, limit=size, offset=page * size
        )

    async def usage(self, may_read: Callable[[str], bool]) -> dict[str, UsageTotal]:
        """Usage and cost of every stored run, by served class the viewer reads."""
        store = self.store
        if store is None:
            return {}
        return {
            name: await usage_total(store, under=[stored_id(name, "")])
            for name in self.runs.agents
            if may_read(name)
        }

    async def decided(self, may_read: Callable[[str], bool], limit: int = 20) -> list[Any]:
        """The calls decided lately, with their conversations' stored ids."""
        store = self.store
        if store is None:
            return []
        return await recent_decisions(store, under=self.prefixes(may_read), limit=limit)

    async def proposed(self, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The decisions taken already on calls of runs that still wait (on others), by
        run and call id."""
        store = self.store
        if store is None:
            return {}
        return {run_id: await store.proposed_decisions(run_id) for run_id in set(run_ids)}

    async def cluster(self) -> Any | None:
        """The cluster's status, or None without one."""
        store = self.store
        if not isinstance(store, PostgresStore):
            return None
        from ..store import cluster_status  # the cluster's modules load on first use

        return await cluster_status(store)

    async def journal(self, run_ids: Sequence[str]) -> dict[str, Any]:
        """The journal entries of these runs, by call id."""
        store = self.store
        if store is None:
            return {}
        found: dict[str, Any] = {}
        for run_id in run_ids:
            for entry in await store.calls(run_id):
                found[entry.tool_use_id] = entry
        return found

    async def events_so_far(self, run_id: str, *, waits: bool) -> list[tuple[int, Any]]:
        """The events a run has reported so far. The runs' stream of them stops at each
        pause for approval, so it is read again past each pause; a run in progress (or
        paused now) is read for a moment, and the page's script reads on."""
        got: list[tuple[int, Any]] = []
        with trio.move_on_after(_EVENTS_GRACE if waits else _EVENTS_BOUND):
            while True:
                before = len(got)
                events = self.runs.events(run_id, after=got[-1][0] if got else 0)
                try:
                    async for event in events:
                        got.append((event.id, event.data))
                finally:
                    close = getattr(events, "aclose", None)
                    if close is not None:
                        await close()
                last = got[-1][1] if got else {}
                result = last.get("result") or {}
                # Read on past a pause only: a run paused now has nothing past it (its
                # stream ends at once, and is not read again).
                if (
                    len(got) == before
                    or last.get("type") != "RunEnd"
                    or result.get("status") != "awaiting_approval"
                ):
                    break
        return got

    async def calls(self, runs: Sequence[RunView]) -> dict[str, Mapping[str, Any]]:
        """What the conversation page tells of each tool call, by call id: its outcome
        (``error_kind``, ``duration``) and decision from the runs' events while they are
        kept, and its state in the journal (``journal``: ``finished`` or ``in doubt``;
        the journal keeps no times, so a duration is known from events only)."""
        calls: dict[str, dict[str, Any]] = {}
        # A LocalRuns holds its runs' events in memory until their retention passes, and
        # lists those runs (of a class) without the store: the others' events are gone,
        # and asking for them would open their agents (reading whole conversations). A
        # cluster's runs read theirs from PostgreSQL while it keeps them.
        held: set[str] | None = None
        # The server's runs come wrapped (CappedRuns, its ``inner``).
        local = getattr(self.runs, "inner", self.runs)
        if isinstance(local, LocalRuns) and runs:
            views = await self.runs.runs(runs[0].agent, limit=_HELD_BOUND)
            held = {view.run_id for view in views}
        for view in runs:
            if not view.ended or (held is not None and view.run_id not in held):
                continue
            for _, data in await self.events_so_far(view.run_id, waits=False):
                call_id = str(data.get("tool_use_id"))
                if data.get("type") == "ToolCallEnd":
                    calls.setdefault(call_id, {}).update(data.get("outcome") or {})
                elif data.get("type") == "ApprovalDecided":
                    calls.setdefault(call_id, {})["decision"] = data
        for call_id, entry in (await self.journal([v.run_id for v in runs])).items():
            known = calls.setdefault(call_id, {})
            known["journal"] = "finished" if entry.finished else "in doubt"
            if entry.error_kind and not known.get("error_kind"):
                known["error_kind"] = entry.error_kind
        return dict(calls)
