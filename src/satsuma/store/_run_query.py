"""``Store.find_runs``: run records across conversations, chosen by agent class,
conversation, status and start time, the newest so many: what an evaluation takes its
cases from (``satsuma.evals.Dataset.from_store``).

The choice is one frozen value (``RunQuery``), checked once (``BaseStore.find_runs``);
each store reads it its own way: MemoryStore in Python (``matches``), the SQL stores with
one statement (``sql_find_runs``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, get_args

import attrs

from ._dialect import Dialect
from ._records import RunRecord, RunRecordStatus
from ._rows import run_record

__all__ = ["RunQuery", "chosen", "sql_find_runs"]

_STATUSES = frozenset(get_args(RunRecordStatus))


@attrs.frozen(kw_only=True)
class RunQuery:
    """Which runs ``find_runs`` reads (None: any)."""

    agent: str | None = None
    agent_id: str | None = None
    status: RunRecordStatus | None = None
    since: float | None = None
    limit: int | None = None

    @classmethod
    def checked(
        cls,
        agent: object,
        agent_id: object,
        status: object,
        since: object,
        limit: object,
    ) -> RunQuery:
        """The query, each argument checked.

        Raises:
            ValueError: an argument that is not what it should be, named.
        """
        for name, value in (("agent", agent), ("agent_id", agent_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty str or None, got: {value!r}")
        if status is not None and status not in _STATUSES:
            raise ValueError(f"status must be one of {sorted(_STATUSES)} or None, got: {status!r}")
        if since is not None and (
            isinstance(since, bool)
            or not isinstance(since, (int, float))
            or not math.isfinite(since)
        ):
            raise ValueError(f"since must be seconds since the epoch or None, got: {since!r}")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"limit must be an int >= 1 or None, got: {limit!r}")
        return cls(
            agent=agent,  # type: ignore[arg-type]
            agent_id=agent_id,  # type: ignore[arg-type]
            status=status,  # type: ignore[arg-type]
            since=float(since) if since is not None else None,
            limit=limit,
        )

    def matches(self, record: RunRecord) -> bool:
        """Whether ``record`` is one the query chooses (before ``limit``)."""
        return (
            (self.agent is None or record.agent == self.agent)
            and (self.agent_id is None or record.agent_id == self.agent_id)
            and (self.status is None or record.status == self.status)
            and (self.since is None or record.started_at >= self.since)
        )


def chosen(query: RunQuery, records: list[RunRecord]) -> list[RunRecord]:
    """The records ``query`` chooses of ``records`` (in the order they were added),
    oldest first, the newest ``limit``."""
    picked = [r for r in records if query.matches(r)]
    # Stable: runs that started in the same instant stay in the order they were added.
    picked.sort(key=lambda r: r.started_at)
    return picked[-query.limit :] if query.limit is not None else picked


async def sql_find_runs(
    read: Callable[[Callable[[Any], list[Any]]], Awaitable[list[Any]]],
    dialect: Dialect,
    query: RunQuery,
) -> list[RunRecord]:
    """``find_runs`` on SQLite or PostgreSQL: one statement, through the store's ``read``
    (``SQLStore.read``) in its ``dialect``."""
    where: list[str] = []
    params: list[object] = []
    for column, value in (
        ("agent", query.agent),
        ("agent_id", query.agent_id),
        ("status", query.status),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if query.since is not None:
        where.append("started_at >= ?")
        params.append(query.since)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    # The newest `limit` (by start, then as added), read back oldest first.
    inner = (
        f"SELECT {{run_columns}}, {{added}} AS added_order FROM runs{condition} "
        "ORDER BY started_at DESC, {added} DESC"
    )
    if query.limit is not None:
        inner += " LIMIT ?"
        params.append(query.limit)
    template = f"SELECT {{run_columns}} FROM ({inner}) AS chosen ORDER BY started_at, added_order"
    statement = dialect.sql(template)
    rows = await read(lambda db: db.execute(statement, tuple(params)).fetchall())
    return [run_record(tuple(row)) for row in rows]
