"""Reading many runs a page at a time, for the console (``satsuma.serve``'s pages): the
conversations of a store with their latest run and what their runs used, the latest
runs, the usage and cost of a class, the decisions taken lately, and one page of a long
conversation's messages with the runs that wrote them.

Each read is a few statements whose work is done by the database (grouped, summed,
sorted and cut to one page in SQL), so a page of a store holding thousands of runs
never loads them all. Read-only, and apart from ``_sql`` on purpose: it reads the
tables that the agents write, through the store's ``read`` (as the cluster's status
does). A MemoryStore is read from its own dictionaries, in the same order.

Which conversations a read covers is given by the prefixes of their stored ids
(``"support/"``: every conversation of the served class ``support``), so a viewer
sees only the classes their token reaches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._messages import Message, Usage
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._records import ApprovalRecord, RunRecord
from ._rows import APPROVAL_COLUMNS, RUN_COLUMNS, approval_record, message, run_record

if TYPE_CHECKING:
    from ._sql import SQLStore

__all__ = [
    "ConversationSummary",
    "MessagePage",
    "UsageTotal",
    "conversation_page",
    "latest_runs",
    "message_page",
    "page_runs",
    "recent_decisions",
    "usage_total",
]


@attrs.frozen(kw_only=True)
class ConversationSummary:
    """One conversation (stored agent id) and its runs, summed.

    Attributes:
        agent_id: The stored agent id.
        runs: How many runs it has.
        latest: Its latest run.
        usage: What its runs used, summed; ``cost_usd`` sums the runs whose cost is
            known (None when none is).
        unpriced: How many of its runs have no known cost.
    """

    agent_id: str
    runs: int
    latest: RunRecord
    usage: Usage
    unpriced: int


@attrs.frozen(kw_only=True)
class UsageTotal:
    """What the runs of some conversations used, summed.

    Attributes:
        runs: How many runs.
        usage: Their tokens, and the sum of the costs that are known.
        unpriced: How many runs have no known cost (their tokens are counted, their
            cost is not: a total over them is a lower bound).
    """

    runs: int
    usage: Usage
    unpriced: int


@attrs.frozen(kw_only=True)
class MessagePage:
    """Some consecutive messages of one conversation.

    Attributes:
        start: The position of the first (0 for the conversation's first message).
        messages: The messages, in order, from ``start`` on.
        total: How many messages the conversation has.
    """

    start: int
    messages: tuple[Message, ...]
    total: int


# The usage column holds a JSON array: input, output, cache writes, cache reads, cost
# (null when unknown; absent in rows written before satsuma priced calls).
_SQLITE_USAGE: Final = tuple(f"json_extract(usage, '$[{i}]')" for i in range(5))
_POSTGRES_USAGE: Final = (
    *(f"(usage::jsonb->>{i})::bigint" for i in range(4)),
    "(usage::jsonb->>4)::double precision",
)


def _mark(store: SQLStore) -> str:
    """A parameter's marker in the store's driver."""
    return "%s" if isinstance(store, PostgresStore) else "?"


def _sums(store: SQLStore) -> str:
    """The summed usage columns of a grouped read: tokens, cost, unpriced runs."""
    fields = _POSTGRES_USAGE if isinstance(store, PostgresStore) else _SQLITE_USAGE
    tokens = ", ".join(f"SUM({field})" for field in fields[:4])
    cost = fields[4]
    return f"{tokens}, SUM({cost}), SUM(CASE WHEN {cost} IS NULL THEN 1 ELSE 0 END)"


def _escaped(text: str) -> str:
    """``text`` matched literally by LIKE (with ``ESCAPE '!'``)."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _where(store: SQLStore, under: Sequence[str], search: str) -> tuple[str, list[Any]]:
    mark = _mark(store)
    if not under:
        return "1 = 0", []
    clauses = " OR ".join(f"agent_id LIKE {mark} ESCAPE '!'" for _ in under)
    params: list[Any] = [_escaped(prefix) + "%" for prefix in under]
    where = f"({clauses})"
    if search:
        where += f" AND agent_id LIKE {mark} ESCAPE '!'"
        params.append("%" + _escaped(search) + "%")
    return where, params


def _usage(row: Sequence[Any]) -> tuple[Usage, int]:
    """The usage and unpriced count from a row's last six sums."""
    a, b, c, d, cost, unpriced = row[-6:]
    return (
        Usage(
            input_tokens=int(a or 0),
            output_tokens=int(b or 0),
            cache_creation_input_tokens=int(c or 0),
            cache_read_input_tokens=int(d or 0),
            cost_usd=float(cost) if cost is not None else None,
        ),
        int(unpriced or 0),
    )


def _summed(records: Sequence[RunRecord]) -> tuple[Usage, int]:
    # A sum of Usage is unknown once one cost is: here the known costs are summed and
    # the runs without one counted, as the SQL reads do.
    costs = [r.usage.cost_usd for r in records if r.usage.cost_usd is not None]
    usage = Usage(
        input_tokens=sum(r.usage.input_tokens for r in records),
        output_tokens=sum(r.usage.output_tokens for r in records),
        cache_creation_input_tokens=sum(r.usage.cache_creation_input_tokens for r in records),
        cache_read_input_tokens=sum(r.usage.cache_read_input_tokens for r in records),
        cost_usd=sum(costs) if costs else None,
    )
    return usage, len(records) - len(costs)


def _memory_runs(store: MemoryStore, under: Sequence[str], search: str) -> list[RunRecord]:
    # The store room's own dictionary: a MemoryStore has no SQL to ask.
    return [
        record
        for record in store.held_runs.values()
        if record.agent_id.startswith(tuple(under)) and search in record.agent_id
    ]


async def conversation_page(
    store: Any, *, under: Sequence[str], search: str = "", limit: int = 50, offset: int = 0
) -> tuple[list[ConversationSummary], int]:
    """One page of conversations, the latest active first, and how many there are.

    Args:
        store: A MemoryStore, SQLiteStore or PostgresStore.
        under: Prefixes of the stored ids to cover (each served class's ``"name/"``).
        search: Only conversations whose stored id contains this text.
        limit: At most this many.
        offset: After skipping this many.
    """
    if isinstance(store, MemoryStore):
        await trio.lowlevel.checkpoint()
        by_id: dict[str, list[RunRecord]] = {}
        for record in _memory_runs(store, under, search):
            by_id.setdefault(record.agent_id, []).append(record)
        ordered = sorted(
            by_id.items(), key=lambda item: (-max(r.started_at for r in item[1]), item[0])
        )
        page = []
        for agent_id, records in ordered[offset : offset + limit]:
            usage, unpriced = _summed(records)
            latest = max(records, key=lambda r: r.started_at)
            page.append(
                ConversationSummary(
                    agent_id=agent_id,
                    runs=len(records),
                    latest=latest,
                    usage=usage,
                    unpriced=unpriced,
                )
            )
        return page, len(by_id)
    where, params = _where(store, under, search)
    mark = _mark(store)

    def work(db: Any) -> tuple[list[ConversationSummary], int]:
        # The page's ids first, from the (agent_id, started_at) index alone; only then
        # the sums, over those conversations' runs: never over every run.
        (total,) = db.execute(
            f"SELECT COUNT(DISTINCT agent_id) FROM runs WHERE {where}", params
        ).fetchone()
        ids = [
            row[0]
            for row in db.execute(
                f"SELECT agent_id FROM runs WHERE {where} GROUP BY agent_id "
                f"ORDER BY MAX(started_at) DESC, agent_id LIMIT {mark} OFFSET {mark}",
                [*params, max(limit, 0), max(offset, 0)],
            ).fetchall()
        ]
        if not ids:
            return [], int(total)
        marks = ", ".join(mark for _ in ids)
        sums = {
            row[0]: row
            for row in db.execute(
                f"SELECT agent_id, COUNT(*), {_sums(store)} FROM runs "
                f"WHERE agent_id IN ({marks}) GROUP BY agent_id",
                ids,
            ).fetchall()
        }
        latest: dict[str, RunRecord] = {}
        for found in db.execute(
            f"SELECT {RUN_COLUMNS} FROM runs AS r WHERE agent_id IN ({marks}) AND "
            "started_at = (SELECT MAX(started_at) FROM runs WHERE agent_id = r.agent_id)",
            ids,
        ).fetchall():
            latest[found[1]] = run_record(found)
        page = []
        for agent_id in ids:
            usage, unpriced = _usage(sums[agent_id])
            page.append(
                ConversationSummary(
                    agent_id=agent_id,
                    runs=int(sums[agent_id][1]),
                    latest=latest[agent_id],
                    usage=usage,
                    unpriced=unpriced,
                )
            )
        return page, int(total)

    result: tuple[list[ConversationSummary], int] = await store.read(work)
    return result


async def latest_runs(
    store: Any, *, under: Sequence[str], limit: int = 20, agent_id: str | None = None
) -> list[RunRecord]:
    """The latest runs of the conversations under ``under`` (of the one conversation
    ``agent_id`` when given: read from its index), newest first."""
    if isinstance(store, MemoryStore):
        await trio.lowlevel.checkpoint()
        found = _memory_runs(store, under, "")
        if agent_id is not None:
            found = [record for record in found if record.agent_id == agent_id]
        return sorted(found, key=lambda r: r.started_at, reverse=True)[: max(limit, 0)]
    where, params = _where(store, under, "")
    mark = _mark(store)
    if agent_id is not None:
        where, params = f"agent_id = {mark}", [agent_id]

    def work(db: Any) -> list[RunRecord]:
        rows = db.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE {where} ORDER BY started_at DESC LIMIT {mark}",
            [*params, max(limit, 0)],
        ).fetchall()
        return [run_record(row) for row in rows]

    result: list[RunRecord] = await store.read(work)
    return result


async def usage_total(store: Any, *, under: Sequence[str]) -> UsageTotal:
    """What every run of the conversations under ``under`` used, summed."""
    if isinstance(store, MemoryStore):
        await trio.lowlevel.checkpoint()
        found = _memory_runs(store, under, "")
        usage, unpriced = _summed(found)
        return UsageTotal(runs=len(found), usage=usage, unpriced=unpriced)
    where, params = _where(store, under, "")

    def work(db: Any) -> UsageTotal:
        row = db.execute(f"SELECT COUNT(*), {_sums(store)} FROM runs WHERE {where}", params)
        values = row.fetchone()
        usage, unpriced = _usage(values)
        return UsageTotal(runs=int(values[0]), usage=usage, unpriced=unpriced)

    result: UsageTotal = await store.read(work)
    return result


async def recent_decisions(
    store: Any, *, under: Sequence[str], limit: int = 20
) -> list[tuple[str, ApprovalRecord]]:
    """The calls decided lately (their runs resumed with the decision), the latest first,
    each with its conversation's stored id."""
    if isinstance(store, MemoryStore):
        await trio.lowlevel.checkpoint()
        decided = []
        for run_id, records in store.held_approvals.items():
            run = store.held_runs.get(run_id)
            if run is None or not run.agent_id.startswith(tuple(under)):
                continue
            decided += [(run.agent_id, r) for r in records if r.decision is not None]
        decided.sort(key=lambda item: item[1].decision.decided_at, reverse=True)  # type: ignore[union-attr]
        return decided[: max(limit, 0)]
    where, params = _where(store, under, "")
    mark = _mark(store)
    columns = ", ".join(f"a.{column.strip()}" for column in APPROVAL_COLUMNS.split(","))

    def work(db: Any) -> list[tuple[str, ApprovalRecord]]:
        rows = db.execute(
            f"SELECT r.agent_id, a.run_id, {columns} FROM approvals AS a JOIN "
            f"(SELECT run_id, agent_id FROM runs WHERE {where}) AS r ON r.run_id = a.run_id "
            f"WHERE a.verdict IS NOT NULL ORDER BY a.decided_at DESC LIMIT {mark}",
            [*params, max(limit, 0)],
        ).fetchall()
        return [(row[0], approval_record(row[1], tuple(row[2:]))) for row in rows]

    result: list[tuple[str, ApprovalRecord]] = await store.read(work)
    return result


async def message_page(
    store: Any, agent_id: str, *, start: int | None = None, limit: int = 50
) -> MessagePage:
    """At most ``limit`` messages of the conversation ``agent_id`` from position
    ``start`` on (its latest ``limit`` when ``start`` is None), reading only those rows
    (the messages' primary key is the conversation and the position).

    Raises:
        StoreUnreadable: A message of the page is damaged or missing.
    """
    limit = max(limit, 1)
    if isinstance(store, MemoryStore):
        await trio.lowlevel.checkpoint()
        stored = store.held_messages.get(agent_id, [])
        first = _first(start, len(stored), limit)
        return MessagePage(
            start=first, messages=tuple(stored[first : first + limit]), total=len(stored)
        )
    mark = _mark(store)

    def work(db: Any) -> MessagePage:
        # max(seq) walks the key's index, as the store's own writes do; count(*) would
        # read every row of the conversation.
        (total,) = db.execute(
            f"SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE agent_id = {mark}",
            [agent_id],
        ).fetchone()
        first = _first(start, int(total), limit)
        rows = db.execute(
            f"SELECT seq, role, content FROM messages WHERE agent_id = {mark} AND "
            f"seq >= {mark} AND seq < {mark} ORDER BY seq",
            [agent_id, first, first + limit],
        ).fetchall()
        found = tuple(
            message(agent_id, seq, first + place, role, content)
            for place, (seq, role, content) in enumerate(rows)
        )
        return MessagePage(start=first, messages=found, total=int(total))

    result: MessagePage = await store.read(work)
    return result


def _first(start: int | None, total: int, limit: int) -> int:
    """Where a page starts: its latest messages without ``start``; never past the end."""
    if start is None:
        return max(total - limit, 0)
    return min(max(start, 0), max(total - 1, 0))


async def page_runs(store: Any, agent_id: str, *, start: int, end: int) -> list[RunRecord]:
    """The runs of the conversation ``agent_id`` that wrote its messages from position
    ``start`` to ``end`` (excluded): those whose prompt is among them, and the one
    whose prompt came last before them. In the conversation's order. Runs stored
    without a position (before satsuma kept one) are not found."""
    if isinstance(store, MemoryStore):
        await trio.lowlevel.checkpoint()
        placed = sorted(
            (
                r
                for r in store.held_runs.values()
                if r.agent_id == agent_id and r.position is not None
            ),
            key=lambda r: (r.position, r.started_at),
        )
        before = [r.position for r in placed if r.position is not None and r.position <= start]
        low = max(before) if before else start
        return [r for r in placed if r.position is not None and low <= r.position < end]
    mark = _mark(store)

    def work(db: Any) -> list[RunRecord]:
        rows = db.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE agent_id = {mark} AND position < {mark} "
            "AND position >= coalesce((SELECT max(position) FROM runs WHERE "
            f"agent_id = {mark} AND position <= {mark}), {mark}) ORDER BY position, started_at",
            [agent_id, end, agent_id, start, start],
        ).fetchall()
        return [run_record(row) for row in rows]

    result: list[RunRecord] = await store.read(work)
    return result
