"""The budgets' ledgers in every store: a reservation that fits is held and one that does
not is refused whole; settling charges the actual cost; a hold left by a process that
died is given back once it expires; a prune removes the day ledgers of days that ended
and the expired holds, never a live one; and on PostgreSQL two stores (two nodes) spending one
agent's daily budget at once never promise it beyond its limit."""

from __future__ import annotations

import datetime
import math
import time
from datetime import timedelta
from pathlib import Path

import trio

from satsuma.store import (
    Balance,
    Charge,
    Hold,
    PostgresStore,
    Shortfall,
    SQLiteStore,
    Store,
    ledgers_of,
)

NOW = 1_800_000_000.0
LATER = NOW + 3600
DAY = 86_400.0


async def test_a_reservation_that_fits_is_held_and_settled_to_its_actual_cost(
    store: Store,
) -> None:
    ledgers = ledgers_of(store)
    charges = [Charge(ledger="agent:a", limit=10.0), Charge(ledger="day:a:2027-01-15", limit=4.0)]
    hold = await ledgers.reserve(charges, 3.0, hold_id="h1", now=NOW, expires_at=LATER)
    assert isinstance(hold, Hold)
    assert hold.ledgers == ("agent:a", "day:a:2027-01-15")
    assert await ledgers.balance("agent:a") == Balance(spent=0.0, reserved=3.0)

    # 3 held of the day's 4: one more of 2 does not fit, and holds nothing anywhere.
    refused = await ledgers.reserve(charges, 2.0, hold_id="h2", now=NOW, expires_at=LATER)
    assert refused == Shortfall(ledger="day:a:2027-01-15", limit=4.0, spent=0.0, reserved=3.0)
    assert await ledgers.balance("agent:a") == Balance(spent=0.0, reserved=3.0)

    changed = await ledgers.settle(hold, 1.25)
    assert changed == {"agent:a": (0.0, 1.25), "day:a:2027-01-15": (0.0, 1.25)}
    assert await ledgers.balance("day:a:2027-01-15") == Balance(spent=1.25, reserved=0.0)
    # Now 2 fits (1.25 + 2 <= 4); a ledger never charged reads as empty.
    assert isinstance(
        await ledgers.reserve(charges, 2.0, hold_id="h3", now=NOW, expires_at=LATER), Hold
    )
    assert await ledgers.balance("agent:b") == Balance()


async def test_a_hold_never_settled_is_given_back_once_it_expires(store: Store) -> None:
    ledgers = ledgers_of(store)
    charges = [Charge(ledger="agent:a", limit=5.0)]
    left = await ledgers.reserve(charges, 4.0, hold_id="dead", now=NOW, expires_at=NOW + 900)
    assert isinstance(left, Hold)
    # Before the expiry it still holds its 4.
    early = await ledgers.reserve(charges, 2.0, hold_id="h", now=NOW + 899, expires_at=LATER)
    assert isinstance(early, Shortfall) and early.reserved == 4.0
    # After it, the next reservation gives it back and fits.
    late = await ledgers.reserve(charges, 2.0, hold_id="h", now=NOW + 901, expires_at=LATER)
    assert isinstance(late, Hold)
    assert await ledgers.balance("agent:a") == Balance(spent=0.0, reserved=2.0)
    # A settlement after its hold expired still charges what the call cost.
    await ledgers.settle(left, 1.5)
    assert await ledgers.balance("agent:a") == Balance(spent=1.5, reserved=2.0)


async def test_a_crash_between_reserve_and_settle_leaks_nothing_on_a_sqlite_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledgers.db"
    charges = [Charge(ledger="agent:a", limit=1.0)]
    async with SQLiteStore(path) as first:
        held = await ledgers_of(first).reserve(
            charges, 0.9, hold_id="crashed", now=NOW, expires_at=NOW + 900
        )
        assert isinstance(held, Hold)
        # The process "dies" here: the store is closed, the hold never settled.
    async with SQLiteStore(path) as second:
        ledgers = ledgers_of(second)
        assert await ledgers.balance("agent:a") == Balance(spent=0.0, reserved=0.9)
        blocked = await ledgers.reserve(charges, 0.5, hold_id="x", now=NOW + 60, expires_at=LATER)
        assert isinstance(blocked, Shortfall)
        after = await ledgers.reserve(charges, 0.5, hold_id="x", now=NOW + 901, expires_at=LATER)
        assert isinstance(after, Hold)
        assert await ledgers.balance("agent:a") == Balance(spent=0.0, reserved=0.5)


async def _spend(
    store: PostgresStore, limit: float, estimate: float, cost: float, tally: list[float]
) -> None:
    """Reserve and settle calls on one agent's day until the ledger refuses one."""
    ledgers = ledgers_of(store)
    charges = [Charge(ledger="day:shared:2027-01-15", limit=limit)]
    number = 0
    while True:
        number += 1
        hold = await ledgers.reserve(
            charges, estimate, hold_id=f"{id(tally)}-{number}", now=NOW, expires_at=LATER
        )
        if isinstance(hold, Shortfall):
            return
        await trio.lowlevel.checkpoint()
        await ledgers.settle(hold, cost)
        tally.append(cost)


async def test_two_postgres_nodes_spending_one_daily_budget_never_pass_it(
    postgres_dsn: str,
) -> None:
    # Two stores are two nodes' connections to one database; four runs on each spend at
    # once. Each call is estimated at 0.3 and costs 0.2: reservations never promise more
    # than the limit, so the spending stays within it.
    limit, estimate, cost = 10.0, 0.3, 0.2
    tallies: list[list[float]] = [[] for _ in range(8)]
    async with PostgresStore(postgres_dsn) as one, PostgresStore(postgres_dsn) as two:
        async with trio.open_nursery() as nursery:
            for number, tally in enumerate(tallies):
                nursery.start_soon(_spend, one if number % 2 else two, limit, estimate, cost, tally)
        balance = await ledgers_of(one).balance("day:shared:2027-01-15")
    spent = sum(sum(tally) for tally in tallies)
    assert math.isclose(balance.spent, spent)
    assert balance.reserved < 1e-9
    assert spent <= limit
    # Both nodes spent: the ledger was shared, not two per-process counts. (Per node, not
    # per run: one run of four may lose every race for the budget to the others.)
    assert sum(map(sum, tallies[0::2])) > 0 and sum(map(sum, tallies[1::2])) > 0
    # Nearly all of it: a refusal comes only when the estimate no longer fits.
    assert spent > limit - estimate - cost


async def test_the_ledger_tables_come_with_the_schema(tmp_path: Path, postgres_dsn: str) -> None:
    for store in (SQLiteStore(tmp_path / "s.db"), PostgresStore(postgres_dsn)):
        async with store:
            tables = await store.read(
                lambda db: db.execute(
                    "SELECT count(*) FROM budget_ledgers WHERE ledger = 'none'"
                ).fetchone()
            )
        assert tables == (0,)


def _day(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).date().isoformat()


async def test_prune_removes_ended_day_ledgers_and_expired_holds_and_nothing_live(
    store: Store,
) -> None:
    ledgers = ledgers_of(store)
    now = time.time()  # prune's cut is on the real clock
    old, older, later = _day(now - 3 * DAY), _day(now - 2 * DAY), _day(now + 60)
    spent = [f"day:a:{old}", f"day:b:{old}", f"day:a:{later}", "agent:a"]
    for ledger in spent:  # charged and settled: no hold left
        hold = await ledgers.reserve(
            [Charge(ledger=ledger, limit=10.0)], 1.0, hold_id="h", now=now, expires_at=now + 900
        )
        assert isinstance(hold, Hold)
        await ledgers.settle(hold, 0.5)
    # A call in flight on a day that ended (its hold live) keeps its ledger.
    live = [Charge(ledger=f"day:c:{older}", limit=10.0)]
    assert isinstance(
        await ledgers.reserve(live, 2.0, hold_id="live", now=now, expires_at=now + 900), Hold
    )
    # A process that died mid-call left a hold that expired a while ago.
    dead = [Charge(ledger="agent:d", limit=10.0)]
    assert isinstance(
        await ledgers.reserve(dead, 3.0, hold_id="dead", now=now - 1000, expires_at=now - 100),
        Hold,
    )

    dry = await store.prune(older_than=0, dry_run=True)
    assert (dry.budget_ledgers, dry.budget_holds) == (2, 1)
    assert await ledgers.balance(f"day:a:{old}") == Balance(spent=0.5)
    assert await ledgers.balance("agent:d") == Balance(reserved=3.0)
    # A cut five days ago: no day before its own ended, and the dead hold still goes.
    assert (await store.prune(older_than=timedelta(days=5), dry_run=True)).budget_ledgers == 0

    report = await store.prune(older_than=0)
    assert (report.budget_ledgers, report.budget_holds) == (2, 1)
    assert report.counts()["budget_ledgers"] == 2
    assert await ledgers.balance(f"day:a:{old}") == Balance()
    assert await ledgers.balance(f"day:b:{old}") == Balance()
    # Kept: the day not over, the lifetime ledger, the ledger a live hold is on, and
    # the dead hold's amount given back to its ledger.
    assert await ledgers.balance(f"day:a:{later}") == Balance(spent=0.5)
    assert await ledgers.balance("agent:a") == Balance(spent=0.5)
    assert await ledgers.balance(f"day:c:{older}") == Balance(reserved=2.0)
    assert await ledgers.balance("agent:d") == Balance()
    # The live hold still settles; nothing more goes at the next prune.
    await ledgers.settle(Hold(hold_id="live", ledgers=(live[0].ledger,), amount=2.0), 1.0)
    assert await ledgers.balance(f"day:c:{older}") == Balance(spent=1.0)
    again = await store.prune(older_than=0)
    assert (again.budget_ledgers, again.budget_holds) == (1, 0)  # day c, its hold gone
