"""Conversation summaries: what ``satsuma.Compaction`` made of a conversation's older
messages, kept beside the full conversation (which stays as it was).

A summary stands for the messages before ``through``: the agent sends it, then the
messages from ``through`` on. It is only true of those messages, so a write that
changes the conversation before ``through`` (a reset, a roll-back) deletes it in the
same transaction (``drop_past``, called by each store's ``write_tail``). Summaries are
rows of the ``summaries`` table (SQLite migration 8, PostgreSQL 10), one per
``(agent_id, through)``; MemoryStore keeps them in a dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs

from .._exceptions import StoreError
from ._dialect import Connection, Dialect
from ._lease import Lease

__all__ = ["Summary", "SummaryMethods", "drop_past", "summaries_table"]

T = TypeVar("T")


# through: the summary stands for messages[:through]. text: the summary. model: the model
# id that wrote it. created_at: seconds since the epoch.
def summaries_table(real: str) -> str:
    """The table's statement, with the database's name for a float (``real``)."""
    return f"""CREATE TABLE summaries (
            agent_id TEXT NOT NULL,
            through INTEGER NOT NULL,
            text TEXT NOT NULL,
            model TEXT NOT NULL,
            created_at {real} NOT NULL,
            PRIMARY KEY (agent_id, through)
        )"""


def _through(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Summary.through must be a positive integer, got: {value!r}")


@attrs.frozen(kw_only=True)
class Summary:
    """One summary of a conversation's older messages (``satsuma.Compaction``'s).

    Attributes:
        agent_id: The conversation's agent.
        through: The summary stands for the messages before this position; the agent
            sends it, then the messages from here on.
        text: The summary.
        model: The model id that wrote it.
        created_at: When it was made (seconds since the epoch).
    """

    agent_id: str
    through: int = attrs.field(validator=_through)
    text: str
    model: str
    created_at: float


def drop_past(db: Connection, dialect: Dialect, agent_id: str, start: int) -> None:
    """Delete the agent's summaries of messages from ``start`` on (the conversation is
    rewritten from there, so they no longer say what it holds)."""
    db.execute(
        dialect.sql("DELETE FROM summaries WHERE agent_id = ? AND through > ?"), (agent_id, start)
    )


class SummaryMethods:
    """``Store.add_summary`` and ``Store.summaries`` for the two SQL stores (SQLStore
    inherits them)."""

    _dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # SQLStore's

        @property
        def _where(self) -> str: ...

        async def _call(
            self, work: Callable[[Any], T], lease: Lease | None = None, *, transaction: bool = True
        ) -> T: ...

    async def add_summary(self, summary: Summary, *, lease: Lease | None = None) -> None:
        """See ``Store.add_summary``."""
        sql = self._dialect.sql
        where = self._where

        def work(db: Connection) -> None:
            if self._dialect.agent_lock is not None:
                db.execute(sql(self._dialect.agent_lock), (summary.agent_id,))
            row = db.execute(
                sql("SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE agent_id = ?"),
                (summary.agent_id,),
            ).fetchone()
            count = row[0] if row else 0
            if summary.through > count:
                raise StoreError(
                    where,
                    f"a summary through message {summary.through} of agent "
                    f"{summary.agent_id!r}, whose conversation has {count} messages",
                )
            db.execute(
                sql(
                    "INSERT INTO summaries (agent_id, through, text, model, created_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent_id, through) DO UPDATE SET "
                    "text = excluded.text, model = excluded.model, "
                    "created_at = excluded.created_at"
                ),
                (
                    summary.agent_id,
                    summary.through,
                    summary.text,
                    summary.model,
                    summary.created_at,
                ),
            )

        await self._call(work, lease)

    async def summaries(self, agent_id: str) -> list[Summary]:
        """See ``Store.summaries``."""

        def work(db: Connection) -> list[Summary]:
            rows = db.execute(
                self._dialect.sql(
                    "SELECT through, text, model, created_at FROM summaries "
                    "WHERE agent_id = ? ORDER BY through"
                ),
                (agent_id,),
            ).fetchall()
            return [
                Summary(agent_id=agent_id, through=through, text=text, model=model, created_at=at)
                for through, text, model, at in rows
            ]

        return await self._call(work, transaction=False)
