"""``load_agent``: what an agent reads when it opens, under the lease it has just taken:
its conversation, and its runs after those still ``running`` were marked
``interrupted`` (no one runs them now: the lease is the opener's). One transaction on
satsuma's SQL stores, whose statements go out together (on PostgreSQL one round trip
for them and one for ``COMMIT``, where the three calls took one each); on any other
``Store``, ``load_messages``, ``mark_interrupted`` and ``runs``, one after the other, as
agents always called them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol, cast

import attrs

from .._messages import Message
from ._base import Store
from ._dialect import POSTGRES, Connection, Dialect
from ._lease import Lease
from ._records import RunRecord
from ._rows import message, run_record

__all__ = ["Loaded", "load_agent", "load_sent", "load_sql"]


@attrs.frozen
class Loaded:
    """An agent's state as it opens: its conversation, oldest first, and every run of
    its, oldest first (none ``running``: those were marked ``interrupted``)."""

    messages: tuple[Message, ...]
    runs: tuple[RunRecord, ...]


async def load_agent(store: Store, agent_id: str, *, lease: Lease | None) -> Loaded:
    """Read ``agent_id``'s conversation and runs, marking its running runs interrupted
    under ``lease`` (see the module's notes).

    Raises:
        StoreError: it could not be read or written (``LeaseLost``: another owner has
            taken the agent).
    """
    if _at_once(type(store)):
        return await cast(_AtOnce, store).load_agent(agent_id, lease=lease)
    messages = await store.load_messages(agent_id)
    await store.mark_interrupted(agent_id, lease=lease)
    runs = await store.runs(agent_id)
    return Loaded(messages=tuple(messages), runs=tuple(runs))


_MESSAGES: Final = "SELECT seq, role, content FROM messages WHERE agent_id = ? ORDER BY seq"
_INTERRUPT: Final = (
    "UPDATE runs SET status = 'interrupted' WHERE agent_id = ? AND status = 'running'"
)
_RUNS: Final = "SELECT {run_columns} FROM runs WHERE agent_id = ? ORDER BY started_at, {added}"


def load_sql(db: Connection, dialect: Dialect, agent_id: str) -> Loaded:
    """``load_agent``'s statements, inside the caller's transaction: all sent before any
    answer is read (PostgreSQL's pipeline sends them in one go)."""
    if dialect is POSTGRES:
        # The load changes nothing, or marks runs interrupted that a crash of the server
        # would leave running again for the next load to mark; yet its lease check locks
        # the lease row (FOR SHARE), which made its COMMIT wait for a flush of the WAL
        # (an fsync: most of its time). Not waited for: the agent's first write after it
        # waits for its own flush, which carries this one (the WAL is flushed in order).
        db.execute("SET LOCAL synchronous_commit = off")
    return load_sent(db, dialect, agent_id)()


def load_sent(db: Connection, dialect: Dialect, agent_id: str) -> Callable[[], Loaded]:
    """``load_agent``'s statements, sent in the caller's transaction; what reads their
    answers (on PostgreSQL, call it after the transaction's COMMIT: its answers came
    back with it, and a read before would wait for them halfway)."""
    sql = dialect.sql
    messages = db.execute(sql(_MESSAGES), (agent_id,))
    db.execute(sql(_INTERRUPT), (agent_id,))
    runs = db.execute(sql(_RUNS), (agent_id,))

    def read() -> Loaded:
        rows = messages.fetchall()
        return Loaded(
            messages=tuple(
                message(agent_id, seq, expected, role, content)
                for expected, (seq, role, content) in enumerate(rows)
            ),
            runs=tuple(run_record(row) for row in runs.fetchall()),
        )

    return read


class _AtOnce(Protocol):
    """A store of satsuma's with a ``load_agent`` of its own (SQLStore, MemoryStore)."""

    async def load_agent(self, agent_id: str, *, lease: Lease | None) -> Loaded: ...


# The calls a load is made of: a subclass of a store that overrides one of them (to
# watch it, or to fail it in a test) has them called one by one, so that its own
# method runs, unless it overrides load_agent too.
_SINGLE_CALLS: Final = ("load_messages", "mark_interrupted", "runs")
_AT_ONCE: dict[type, bool] = {}


def _at_once(kind: type) -> bool:
    try:
        return _AT_ONCE[kind]
    except KeyError:
        owner = next((klass for klass in kind.__mro__ if "load_agent" in vars(klass)), None)
        found = _AT_ONCE[kind] = owner is not None and all(
            getattr(kind, name) is getattr(owner, name) for name in _SINGLE_CALLS
        )
        return found
