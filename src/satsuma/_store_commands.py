"""``satsuma store prune``: the retention policy applied from the command line, on a
SQLite file or a PostgreSQL database (``Store.prune``).

A mistake (a file that is not there, an unknown URL scheme, a database that cannot be
reached) is a ``CommandError``: one line, exit status 2. A store that fails part-way is
a StoreError (exit status 1); the batches deleted before it stay deleted.
"""

from __future__ import annotations

import re
import time
from typing import Final

import trio
from rich.console import Console

from ._command_error import CommandError
from ._exceptions import StoreError
from ._store_option import store_option
from ._terminal import say
from .store import SQLiteStore, Store

__all__ = ["parse_duration", "prune_store"]

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def _named(where: str) -> tuple[Store, str]:
    """The store ``--store`` names (read as every command reads it; a SQLite file must
    exist: pruning creates nothing), and where it is as a person reads it."""
    option = store_option(where)
    if not option.postgres and not option.path.is_file():
        raise CommandError(f"no such store: {option.shown}")
    return option.make(), option.shown


async def prune_store(
    where: str, older_than: float, *, conversations: bool, dry_run: bool, console: Console
) -> int:
    """Prune the store at ``where`` (a path or a URL) and print what went, by table."""
    store, location = _named(where)
    try:
        try:
            await store.open()
        except StoreError as error:
            raise CommandError(str(error)) from None
        report = await store.prune(
            older_than=older_than, conversations=conversations, dry_run=dry_run
        )
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
    cut = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report.cut))
    what = "ended runs and conversations idle" if conversations else "runs that ended"
    lines = [f"{location}: {what} before {cut}"]
    counts = report.counts()
    if isinstance(store, SQLiteStore):  # no queue, no events: a cluster's tables
        del counts["run_queue"], counts["run_events"]
    width = max(map(len, counts))
    lines += [f"  {table.ljust(width)}  {count}" for table, count in counts.items()]
    rows = sum(count for table, count in counts.items() if table != "conversations")
    verb = "would delete" if dry_run else "deleted"
    lines.append(
        f"{verb} {rows} row{'' if rows == 1 else 's'}"
        + (" (dry run: nothing was deleted)" if dry_run else "")
    )
    for line in lines:
        say(console, line)
    return 0


def parse_duration(text: str) -> float:
    """Seconds in a duration as a person writes it: ``30d``, ``12h``, ``90m``, ``45s``,
    ``2w``, or combined (``1d12h``).

    Raises:
        ValueError: it is not one.
    """
    cleaned = text.strip().lower()
    position = 0
    total = 0.0
    for match in _DURATION.finditer(cleaned):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not cleaned or position != len(cleaned):
        raise ValueError(f"not a duration: {text!r} (a number and a unit: 30d, 12h, 90m, 45s, 2w)")
    return total
