"""The lease rule of ``_lease`` on PostgreSQL: taking and renewing a lease on the
database's clock (the one every machine of a cluster shares). Each runs in one call of
PostgresStore's (a take also in a node's claim, ``_claim_take``); the check that a write under a lease sends in its pipeline is
``_postgres_pipeline``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .._exceptions import LeaseLost
from ._dialect import NOW, POSTGRES
from ._lease import LEASE_ROW, Lease, Owner, lease_lost, next_epoch

if TYPE_CHECKING:
    import psycopg

__all__ = ["renew", "take"]

_LEASE_ROW: Final = POSTGRES.sql(LEASE_ROW)


def take(
    db: psycopg.Connection[Any], where: str, agent_id: str, owner: Owner, seconds: float
) -> Lease:
    """Take the agent for ``owner`` (see ``Store.acquire_lease``): one round trip to read
    its row; the write is sent, not waited for (in a node's claim, ``_claim_take``, what
    follows goes with it).

    Raises:
        StoreError: another owner holds the agent (nothing of the take is written).
    """
    # A row first (epoch 0, no holder), so that two first takers queue on its lock.
    db.execute(
        "INSERT INTO leases (agent_id, owner_id, pid, host, process_start, epoch, "
        "expires_at) VALUES (%s, NULL, 0, '', '', 0, 0) ON CONFLICT (agent_id) DO NOTHING",
        (agent_id,),
    )
    row = db.execute(
        "SELECT owner_id, pid, host, process_start, epoch, expires_at, host_id, "
        f"{NOW} FROM leases WHERE agent_id = %s FOR UPDATE",
        (agent_id,),
    ).fetchone()
    assert row is not None  # inserted above, and never deleted
    now: float = row[-1]
    epoch = next_epoch(where, agent_id, owner, row[:-1], now=now)
    lease = Lease(agent_id=agent_id, owner=owner, epoch=epoch, expires_at=now + seconds)
    db.execute(
        "UPDATE leases SET owner_id = %s, pid = %s, host = %s, process_start = %s, "
        "epoch = %s, expires_at = %s, host_id = %s WHERE agent_id = %s",
        (
            owner.owner_id,
            owner.pid,
            owner.host,
            owner.process_start,
            lease.epoch,
            lease.expires_at,
            owner.host_id,
            agent_id,
        ),
    )
    return lease


def renew(db: psycopg.Connection[Any], where: str, lease: Lease, seconds: float) -> float:
    """Push the lease's expiry ``seconds`` past the database's now (one statement); its
    new expiry.

    Raises:
        LeaseLost: the lease is no longer the agent's current one.
    """
    row = db.execute(
        f"UPDATE leases SET expires_at = {NOW} + %s WHERE agent_id = %s "
        "AND owner_id = %s AND epoch = %s RETURNING expires_at",
        (seconds, lease.agent_id, lease.owner.owner_id, lease.epoch),
    ).fetchone()
    if row is None:
        raise _refusal(db, where, lease)
    expires_at: float = row[0]
    return expires_at


def _refusal(db: psycopg.Connection[Any], where: str, lease: Lease) -> LeaseLost:
    return lease_lost(where, lease, db.execute(_LEASE_ROW, (lease.agent_id,)).fetchone())
