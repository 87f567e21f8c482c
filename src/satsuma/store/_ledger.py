"""The money ledgers that budgets charge (``satsuma.Budget``): under each key (an agent,
an agent on one UTC day) what was spent, and what the model calls in flight hold:
reserved before a call, at its estimate, and settled to its actual cost after.

Every store keeps them. SQLiteStore and PostgresStore keep them in two tables of their
database (``budget_ledgers``, ``budget_holds``), so that every process and node on one
database charges the same ledgers; MemoryStore, and a store of the user's own, in this
process's memory (for the latter, budgets per agent then hold per process only: a
warning says so once). Agents without a store charge the process's ledgers (``None``).

A reservation is one conditional update per ledger (``... WHERE spent + reserved +
amount <= limit``), in one transaction with its hold rows. On PostgreSQL two nodes that
reserve at once take turns on the ledger's row lock, and the second re-reads the row
before its condition is judged (READ COMMITTED): a ledger is never promised beyond its
limit, and is overrun only by what calls in flight cost beyond their estimates. The
ledgers are locked in the order of their keys, so that two reservations never deadlock.

A hold expires (``expires_at``): a process killed between a call's reservation and its
settlement leaves its hold behind, and the next reservation on that ledger after the
expiry gives its amount back. A settlement that comes after its hold expired still
charges the actual cost: money is only ever left uncounted for a call whose process
died during it.
"""

from __future__ import annotations

import abc
import logging
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import attrs

from ._dialect import POSTGRES, SQLITE, Connection, Dialect
from ._ledger_expiry import changed, day_ended, give_back
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._sql import SQLStore

__all__ = ["Balance", "Charge", "Hold", "Ledgers", "Shortfall", "ledgers_of"]

logger = logging.getLogger("satsuma.store")


@attrs.frozen(kw_only=True)
class Charge:
    """A ledger a reservation charges, and the most it may hold (USD)."""

    ledger: str
    limit: float


@attrs.frozen(kw_only=True)
class Hold:
    """A reservation made: ``amount`` held on each of ``ledgers`` until settled."""

    hold_id: str
    ledgers: tuple[str, ...]
    amount: float


@attrs.frozen(kw_only=True)
class Shortfall:
    """A reservation refused: the first ledger without room for it, as it stood."""

    ledger: str
    limit: float
    spent: float
    reserved: float


@attrs.frozen(kw_only=True)
class Balance:
    """A ledger as it stands: settled spending, and what calls in flight hold (USD)."""

    spent: float = 0.0
    reserved: float = 0.0


class Ledgers(abc.ABC):
    """The ledgers of one store."""

    # True for ledgers whose calls never suspend (in memory).
    in_memory: ClassVar[bool] = False

    @abc.abstractmethod
    async def reserve(
        self,
        charges: Sequence[Charge],
        amount: float,
        *,
        hold_id: str,
        now: float,
        expires_at: float,
    ) -> Hold | Shortfall:
        """Hold ``amount`` on every ledger of ``charges`` if each has room for it under its
        limit (expired holds given back first), or on none.

        Raises:
            StoreError: the store could not be read or written; nothing is held.
        """

    @abc.abstractmethod
    async def settle(self, hold: Hold, cost: float) -> dict[str, tuple[float, float]]:
        """Give the hold back and charge ``cost`` (0: a call that cost nothing) on each of
        its ledgers; each ledger's spending before and after.

        Raises:
            StoreError: the store could not be written; the hold stays until it expires.
        """

    @abc.abstractmethod
    async def balance(self, ledger: str) -> Balance:
        """The ledger as it stands (empty for a ledger never charged)."""


# --- in memory ------------------------------------------------------------------------


@attrs.define(eq=False)
class _MemoryLedgers(Ledgers):
    """Ledgers in this process's memory. Their calls never suspend (no checkpoint: they
    are awaited around every model call of a budgeted agent, where a trio checkpoint
    costs several microseconds, and the model call checkpoints anyway), so each runs
    whole, as a transaction would, and a cancelled run's settlement needs no shield."""

    in_memory: ClassVar[bool] = True

    _ledgers: dict[str, list[float]] = attrs.Factory(dict)  # ledger -> [spent, reserved]
    # (hold_id, ledger) -> (amount, expires_at)
    _holds: dict[tuple[str, str], tuple[float, float]] = attrs.Factory(dict)

    async def reserve(
        self,
        charges: Sequence[Charge],
        amount: float,
        *,
        hold_id: str,
        now: float,
        expires_at: float,
    ) -> Hold | Shortfall:
        for key, (held, expiry) in list(self._holds.items()):
            if expiry < now and key[1] in self._ledgers:
                del self._holds[key]
                self._ledgers[key[1]][1] -= held
        for charge in charges:
            spent, reserved = self._ledgers.get(charge.ledger, (0.0, 0.0))
            if spent + reserved + amount > charge.limit:
                return Shortfall(
                    ledger=charge.ledger, limit=charge.limit, spent=spent, reserved=reserved
                )
        for charge in charges:
            self._ledgers.setdefault(charge.ledger, [0.0, 0.0])[1] += amount
            self._holds[hold_id, charge.ledger] = (amount, expires_at)
        return Hold(hold_id=hold_id, ledgers=tuple(c.ledger for c in charges), amount=amount)

    async def settle(self, hold: Hold, cost: float) -> dict[str, tuple[float, float]]:
        changed = {}
        for ledger in hold.ledgers:
            row = self._ledgers.setdefault(ledger, [0.0, 0.0])
            if self._holds.pop((hold.hold_id, ledger), None) is not None:
                row[1] -= hold.amount
            changed[ledger] = (row[0], row[0] + cost)
            row[0] += cost
        return changed

    async def balance(self, ledger: str) -> Balance:
        spent, reserved = self._ledgers.get(ledger, (0.0, 0.0))
        return Balance(spent=spent, reserved=reserved)

    def prune(self, day: str, now: float, *, dry_run: bool) -> tuple[int, int]:
        """``Store.prune`` of these ledgers: the holds expired before ``now`` and the day
        ledgers of days before ``day`` that no live hold is on; how many of each went
        (or would go)."""
        expired = [key for key, (_, expiry) in self._holds.items() if expiry < now]
        live = {ledger for (_, ledger), (_, expiry) in self._holds.items() if expiry >= now}
        ended = [k for k in self._ledgers if day_ended(k, day) and k not in live]
        if not dry_run:
            for key in expired:
                held, _ = self._holds.pop(key)
                if key[1] in self._ledgers:
                    self._ledgers[key[1]][1] -= held
            for ledger in ended:
                del self._ledgers[ledger]
        return len(ended), len(expired)


# --- in the database ------------------------------------------------------------------

_CREATE: Final = "INSERT INTO budget_ledgers (ledger) VALUES (?) ON CONFLICT (ledger) DO NOTHING"
_DROP_HOLD: Final = "DELETE FROM budget_holds WHERE hold_id = ? AND ledger = ?"
_UNRESERVE: Final = "UPDATE budget_ledgers SET reserved = reserved - ? WHERE ledger = ?"
_RESERVE: Final = (
    "UPDATE budget_ledgers SET reserved = reserved + ? WHERE ledger = ? "
    "AND spent + reserved + ? <= ?"
)
_HOLD: Final = "INSERT INTO budget_holds (hold_id, ledger, amount, expires_at) VALUES (?, ?, ?, ?)"
_SETTLE: Final = (
    "UPDATE budget_ledgers SET spent = spent + ?, reserved = reserved - ? WHERE ledger = ?"
)
_BALANCE: Final = "SELECT spent, reserved FROM budget_ledgers WHERE ledger = ?"


@attrs.frozen(eq=False)
class _SQLLedgers(Ledgers):
    """Ledgers in the tables of a SQLiteStore's or PostgresStore's database."""

    store: SQLStore
    dialect: Dialect

    def _changed(self, db: Connection, template: str, params: tuple[Any, ...]) -> bool:
        return changed(db, self.dialect, template, params)

    async def reserve(
        self,
        charges: Sequence[Charge],
        amount: float,
        *,
        hold_id: str,
        now: float,
        expires_at: float,
    ) -> Hold | Shortfall:
        sql = self.dialect.sql
        ordered = sorted(charges, key=lambda charge: charge.ledger)

        def work(db: Connection) -> Hold | Shortfall:
            for charge in ordered:
                db.execute(sql(_CREATE), (charge.ledger,))
                give_back(db, self.dialect, charge.ledger, now)
            taken: list[str] = []
            for charge in ordered:
                params = (amount, charge.ledger, amount, charge.limit)
                if not self._changed(db, _RESERVE, params):
                    for ledger in taken:  # none held, the transaction still commits
                        db.execute(sql(_UNRESERVE), (amount, ledger))
                    spent, reserved = db.execute(sql(_BALANCE), (charge.ledger,)).fetchone()
                    return Shortfall(
                        ledger=charge.ledger, limit=charge.limit, spent=spent, reserved=reserved
                    )
                taken.append(charge.ledger)
                db.execute(sql(_HOLD), (hold_id, charge.ledger, amount, expires_at))
            return Hold(hold_id=hold_id, ledgers=tuple(c.ledger for c in charges), amount=amount)

        return await self.store.transaction(work)

    async def settle(self, hold: Hold, cost: float) -> dict[str, tuple[float, float]]:
        sql = self.dialect.sql

        def work(db: Connection) -> dict[str, tuple[float, float]]:
            changed = {}
            for ledger in sorted(hold.ledgers):
                db.execute(sql(_CREATE), (ledger,))
                held = self._changed(db, _DROP_HOLD, (hold.hold_id, ledger))
                db.execute(sql(_SETTLE), (cost, hold.amount if held else 0.0, ledger))
                # The row is this transaction's (locked, or SQLite's one writer) until it
                # commits: what it reads is what its update made.
                spent = db.execute(sql(_BALANCE), (ledger,)).fetchone()[0]
                changed[ledger] = (spent - cost, spent)
            return changed

        return await self.store.transaction(work)

    async def balance(self, ledger: str) -> Balance:
        def work(db: Connection) -> Balance:
            row = db.execute(self.dialect.sql(_BALANCE), (ledger,)).fetchone()
            return Balance() if row is None else Balance(spent=row[0], reserved=row[1])

        return await self.store.read(work)


# The ledgers kept in memory, per store of the user's (a MemoryStore keeps its own), and the
# process's own for agents without a store.
_IN_MEMORY: Final[weakref.WeakKeyDictionary[object, _MemoryLedgers]] = weakref.WeakKeyDictionary()
_PINNED: Final[dict[int, tuple[object, _MemoryLedgers]]] = {}
_PROCESS: Final = _MemoryLedgers()


def ledgers_of(store: object | None) -> Ledgers:
    """The ledgers of ``store`` (None: this process's, for agents without a store)."""
    if store is None:
        return _PROCESS
    if isinstance(store, SQLStore):
        return _SQLLedgers(store, POSTGRES if isinstance(store, PostgresStore) else SQLITE)
    if isinstance(store, MemoryStore):  # kept on the store, which prunes them
        kept = store.kept_ledgers(_MemoryLedgers)
        assert isinstance(kept, _MemoryLedgers)  # only this function makes them
        return kept
    try:
        ledgers = _IN_MEMORY.get(store)
    except TypeError:  # a store of the user's that cannot be weakly referenced
        ledgers = _PINNED.get(id(store), (None, None))[1]
    if ledgers is None:
        logger.warning(
            "%r keeps no budget ledgers: budgets per agent are counted in this "
            "process's memory, and hold per process only",
            store,
        )
        ledgers = _MemoryLedgers()
        try:
            _IN_MEMORY[store] = ledgers
        except TypeError:
            _PINNED[id(store)] = (store, ledgers)
    return ledgers
