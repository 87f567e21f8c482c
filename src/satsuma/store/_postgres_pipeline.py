"""A PostgresStore write in one round trip: ``BEGIN``, the lease check, the write's
statements and ``COMMIT`` go out together in psycopg's pipeline, and the answers come
back together.

The lease check is what made a write wait for the server halfway: its row had to be read
before ``COMMIT`` was sent. Here the server refuses by itself: the check divides by the
number of lease rows that say the write's lease is current, so a lease that is no longer
current fails the check with ``division_by_zero``, the server skips every statement after
it up to the pipeline's end (``COMMIT`` included) and nothing is written; ``settle`` then
reads the row to say who holds the agent now. The row is still locked ``FOR SHARE`` by a
check that passes, so a takeover (``FOR UPDATE``) waits for the write to commit, and a
write after a takeover sees the new epoch, as before.

A write's own check (a tail past the conversation's end) fails its statement the same
way, with its text (``_dialect.REFUSED``): ``settle`` makes that the StoreError.

A connection lost before any answer came back had its write never run: the server sends
a pipeline's answers when it reaches its end (or sooner, with an error: a backend that is
terminated, by a restart or ``pg_terminate_backend``, sends what it has, answers
included, as it goes), so a write it committed has its answers on the way. That is what
lets a call on a pooled connection that broke while idle run again on a new one, as
when ``BEGIN`` had a round trip of its own. Only a backend killed outright (SIGKILL, a
crash) in the instant between its ``COMMIT`` and the pipeline's end could have committed
unanswered; the call is then run again once, which satsuma's agent writes bear (they
write the same rows again) and a run's start refuses (its run id is taken).

A write of a conversation under a lease (``_batched.TailWrite``) has the agent's lock
taken in the check's statement (one statement fewer), and is told so.

A write whose own code raises (a refusal of its own, a row that does not decode) has
``ROLLBACK`` sent in place of ``COMMIT``. A statement of the write that needs an answer
before the rest is sent (``fetchone``) costs one round trip more, inside the same
transaction.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .._exceptions import StoreError
from ._batched import TailWrite
from ._dialect import POSTGRES, REFUSED
from ._lease import LEASE_ROW, Lease, lease_lost

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

__all__ = ["pipelined", "settle", "unanswered"]

# lease_holds's rule (the row's holder and epoch are the lease's), in SQL. One row when
# the lease is current (1 / 1), none otherwise: 1 / 0, which PostgreSQL cannot fold at
# planning time (count(*) is the rows'), fails the statement and with it the
# transaction. FOR SHARE: see the module's notes.
_CHECK: Final = (
    "SELECT 1 / count(*) FROM (SELECT 1 FROM leases WHERE agent_id = %s AND owner_id = %s "
    "AND epoch = %s FOR SHARE) AS current_lease"
)
# The check, and the agent's lock of a write of its conversation (as POSTGRES.agent_lock).
_CHECK_AND_LOCK: Final = (
    "SELECT 1 / count(*), pg_advisory_xact_lock(hashtextextended(%s, 0)) FROM (SELECT 1 "
    "FROM leases WHERE agent_id = %s AND owner_id = %s AND epoch = %s FOR SHARE) "
    "AS current_lease"
)
_LEASE_ROW: Final = POSTGRES.sql(LEASE_ROW)
# PostgreSQL's message for a text that is no integer quotes the text.
_REFUSAL: Final = re.compile('"' + re.escape(REFUSED) + '(.*)"$')


def pipelined(
    db: psycopg.Connection[Any], work: Callable[[psycopg.Connection[Any]], T], lease: Lease | None
) -> T:
    """Send ``lease``'s check (a write under a lease), ``work``'s statements and ``COMMIT``
    after the caller's ``BEGIN``, in the pipeline it opened (its end sends them and reads
    every answer); ``work``'s result. Should ``work`` raise, ``ROLLBACK`` goes in place of
    ``COMMIT`` (a statement the server failed already skips it: ``settle``)."""
    import psycopg

    run: Callable[[psycopg.Connection[Any]], T] = work
    if lease is None:
        pass
    elif POSTGRES.batches and isinstance(work, TailWrite) and work.agent_id == lease.agent_id:
        checked = (lease.agent_id, lease.agent_id, lease.owner.owner_id, lease.epoch)
        db.execute(_CHECK_AND_LOCK, checked)
        run = work.held
    else:
        db.execute(_CHECK, (lease.agent_id, lease.owner.owner_id, lease.epoch))
    try:
        result = run(db)
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


def unanswered(began: psycopg.Cursor[Any] | None) -> bool:
    """Whether the server answered nothing of a write whose ``BEGIN`` is ``began`` (see the
    module's notes: then it never ran the write)."""
    return began is not None and began.pgresult is None


def settle(
    db: psycopg.Connection[Any], where: str, lease: Lease | None, exc: psycopg.Error
) -> StoreError | None:
    """After ``exc`` failed a call, out of its pipeline: end a transaction the failure
    left open (so that the connection can go back to the pool), unless the connection is
    lost; then the error to raise when ``exc`` is a refusal: LeaseLost for a refused
    lease check (the lease row read now: who holds the agent), the StoreError that a
    statement refusing by itself says (``_dialect.REFUSED``); None for any other."""
    import psycopg
    from psycopg import errors
    from psycopg.pq import TransactionStatus

    if db.broken or db.closed:
        return None
    if db.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            db.execute("ROLLBACK")
    if isinstance(exc, errors.InvalidTextRepresentation):
        said = _REFUSAL.search(exc.diag.message_primary or "")
        if said is not None:
            return StoreError(where, said.group(1))
    if lease is None or not isinstance(exc, errors.DivisionByZero):
        return None
    try:
        row = db.execute(_LEASE_ROW, (lease.agent_id,)).fetchone()
    except psycopg.Error:
        row = None  # refused all the same
    return lease_lost(where, lease, row)
