"""SQLiteStore: the Store interface on a SQLite file (stdlib sqlite3, WAL mode).

One connection, used by one worker thread at a time (a capacity limiter of 1): every
database call runs off the trio thread, writes never contend with each other, and so no
caller ever sees "database is locked". Each Store call is one transaction.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from os import PathLike, fspath
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, final

import attrs
import trio

from .._exceptions import LeaseLost, StoreClosed, StoreError, StoreUnavailable, StoreUnreadable
from .._messages import Message, Usage
from ._lease import Lease, Owner, hold, holder_gone, let_go, owner_text
from ._records import (
    ApprovalDecision,
    ApprovalRecord,
    JournalEntry,
    PendingApproval,
    RunRecord,
    RunRecordStatus,
)
from ._retention import LIVE_STATUSES, PRUNE_BATCH, PruneReport, cut_before
from ._rows import APPROVAL_COLUMNS as _APPROVAL_COLUMNS
from ._rows import RUN_COLUMNS as _RUN_COLUMNS
from ._rows import Damaged as _Damaged
from ._rows import approval_record as _approval_record
from ._rows import decision_values as _decision_values
from ._rows import journal_entry as _journal_entry
from ._rows import message as _message
from ._rows import pending_approval as _pending_approval
from ._rows import run_record as _run
from ._rows import usage_json as _usage_json

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

T = TypeVar("T")

# Each entry moves the schema from the previous version to its own; never edit one that
# has shipped, add the next.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        """CREATE TABLE messages (
            agent_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            PRIMARY KEY (agent_id, seq)
        )""",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            agent_id TEXT NOT NULL,
            status TEXT NOT NULL,
            prompt TEXT NOT NULL,
            started_at REAL NOT NULL,
            ended_at REAL,
            usage TEXT NOT NULL,
            error TEXT
        )""",
        "CREATE INDEX runs_by_agent ON runs (agent_id, started_at)",
        """CREATE TABLE tool_calls (
            run_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            tool_name TEXT NOT NULL,
            input TEXT NOT NULL,
            finished INTEGER NOT NULL DEFAULT 0,
            content TEXT,
            is_error INTEGER NOT NULL DEFAULT 0,
            error_kind TEXT,
            PRIMARY KEY (run_id, tool_use_id)
        )""",
    ),
    2: (
        # Where each run's prompt is in the conversation (NULL for older runs).
        "ALTER TABLE runs ADD COLUMN position INTEGER",
        # Who owns each agent (see _lease.py). A released lease keeps its row, so that
        # the epoch only ever grows.
        """CREATE TABLE leases (
            agent_id TEXT PRIMARY KEY,
            owner_id TEXT,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            process_start TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            expires_at REAL NOT NULL
        )""",
    ),
    3: (
        # The calls a run paused on, waiting for a person's decision (the run's status
        # is then awaiting_approval). Replaced each time the run pauses again.
        """CREATE TABLE approvals (
            run_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            tool_name TEXT NOT NULL,
            input TEXT NOT NULL,
            reason TEXT NOT NULL,
            PRIMARY KEY (run_id, tool_use_id)
        )""",
    ),
    4: (
        # What was decided on each call when its run was resumed (NULL while undecided):
        # verdict approved, edited or denied; the edited input (JSON); the denial's
        # reason; who decided, if the decision said; when. Decided rows are kept when the
        # run pauses again, as the record of who approved what.
        "ALTER TABLE approvals ADD COLUMN verdict TEXT",
        "ALTER TABLE approvals ADD COLUMN decided_input TEXT",
        "ALTER TABLE approvals ADD COLUMN denial_reason TEXT",
        "ALTER TABLE approvals ADD COLUMN decided_by TEXT",
        "ALTER TABLE approvals ADD COLUMN decided_at REAL",
    ),
    5: (
        # Where the holder's pid means its process: boot id and PID namespace (see
        # _lease.py); '' for a holder recorded before, which is judged by expiry.
        "ALTER TABLE leases ADD COLUMN host_id TEXT NOT NULL DEFAULT ''",
    ),
}
SCHEMA_VERSION: Final = max(_MIGRATIONS)


@final
class SQLiteStore:
    """A Store in a SQLite file.

    Args:
        path: The database file; its folder is created if needed.
        durability: ``"normal"`` (default: a committed change survives the process being
            killed, as SQLite's WAL mode with ``synchronous=NORMAL`` guarantees) or
            ``"full"`` (it also survives a power cut, at the cost of an fsync per commit).

    Raises:
        StoreError: (when first used) the file is corrupt or not a database, cannot be
            written, or has a schema newer than this satsuma knows.
    """

    def __init__(
        self, path: str | PathLike[str], *, durability: Literal["normal", "full"] = "normal"
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got: {durability!r}")
        self.path = Path(fspath(path))
        self._durability = durability
        self._connection: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._opening = trio.Lock()
        self._closed = False
        # Why the store closed itself (its file went away while open), or None.
        self._gone: str | None = None
        # (st_dev, st_ino) of the database file and of its -wal and -shm files, as the
        # store opened them (see _check_files).
        self._files: dict[str, tuple[int, int]] = {}
        # The path as it was when opened: a relative one must not name another file
        # after the process changes its working directory.
        self._opened_path = self.path

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file now (it is opened on first use otherwise), so that a bad file is
        reported at start."""
        async with self._opening:
            if self._closed or self._gone is not None:
                raise self._closed_error()
            if self._connection is not None:
                return
            self._connection = await trio.to_thread.run_sync(self._connect, limiter=self._limiter)

    async def aclose(self) -> None:
        """Close the file. Calls made after fail with StoreClosed."""
        async with self._opening:
            self._closed = True
            connection, self._connection = self._connection, None
            if connection is not None:
                await trio.to_thread.run_sync(connection.close, limiter=self._limiter)

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _connect(self) -> sqlite3.Connection:
        where = str(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(where, f"cannot create its folder: {exc.strerror or exc}") from exc
        try:
            connection = sqlite3.connect(
                where, isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.Error as exc:
            raise StoreError(where, f"cannot be opened: {exc}") from exc
        try:
            self._prepare(connection)
        except StoreError:
            connection.close()
            raise
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise _error(where, exc) from exc
        # The files as they are now, with the connection holding them: each call first
        # checks that the path still names them (see _check_files).
        self._opened_path = Path(os.path.abspath(where))
        self._files = _identities(self._opened_path)
        return connection

    def _prepare(self, connection: sqlite3.Connection) -> None:
        where = str(self.path)
        check = connection.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise StoreUnreadable(
                where, f"the database is corrupt (quick_check: {check and check[0]})"
            )
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StoreError(where, f"cannot use WAL mode (journal_mode stays {mode})")
        connection.execute(f"PRAGMA synchronous={self._durability.upper()}")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("BEGIN IMMEDIATE")  # also proves the file is writable
        try:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS satsuma_schema (version INTEGER NOT NULL)"
            )
            row = connection.execute("SELECT max(version) FROM satsuma_schema").fetchone()
            current = row[0] or 0
            if current > SCHEMA_VERSION:
                raise StoreUnreadable(
                    where,
                    f"its schema is version {current}, newer than this satsuma knows "
                    f"({SCHEMA_VERSION}); upgrade satsuma to use it",
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version]:
                    connection.execute(statement)
                connection.execute("INSERT INTO satsuma_schema (version) VALUES (?)", (version,))
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    async def _call(self, work: Callable[[sqlite3.Connection], T], lease: Lease | None = None) -> T:
        if self._connection is None:
            await self.open()

        def run() -> T:
            connection = self._connection
            if connection is None or self._gone is not None:
                raise self._closed_error()
            self._check_files(committed=False)
            try:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    if lease is not None:
                        self._check_lease(connection, lease)
                    result = work(connection)
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _error(str(self.path), exc) from exc
            except _Damaged as exc:
                raise StoreUnreadable(
                    str(self.path), f"{exc}; nothing was guessed in its place"
                ) from None
            self._check_files(committed=True)
            return result

        # Not abandoned on cancel: a transaction is short, and it either commits whole or
        # not at all; waiting for it keeps the connection in one piece.
        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    def _closed_error(self) -> StoreClosed:
        return StoreClosed(str(self.path), self._gone or "the store is closed")

    def _check_files(self, *, committed: bool) -> None:
        """Refuse to go on once the path no longer names the files the connection holds.

        SQLite keeps writing into a file that was deleted or replaced under it (into the
        inode it has open), so its commits "succeed" where no one will read them: the
        next process opens whatever is at the path. Checked before each transaction
        (nothing of it is written) and after its commit (then it went into the old
        file, and the caller is told so); three stats each time, about 8 µs a call
        (docs/persistence.md has the figure). The store then closes itself for good:
        which file holds the truth is a person's decision, not the store's.
        """
        changes = [
            f"{_NAMES[suffix]} was {'deleted or moved away' if now is None else 'replaced'}"
            for suffix, before in self._files.items()
            if (now := _identity(self._opened_path, suffix)) != before
        ]
        if not changes:
            return
        self._gone = (
            f"{', '.join(changes)} while the store had it open; the store refuses every "
            "call from now on rather than write where no one will read it (open the "
            "store again once you know which file holds the conversations)"
        )
        if committed:
            raise StoreClosed(
                str(self.path),
                f"{self._gone}. This change was committed into the file the store still "
                "had open, which is no longer the one at this path",
            )
        raise StoreClosed(str(self.path), f"{self._gone}. Nothing of this change was written")

    # --- ownership ----------------------------------------------------------------------

    def _check_lease(self, db: sqlite3.Connection, lease: Lease) -> None:
        row = db.execute(
            "SELECT owner_id, pid, host, process_start, epoch, host_id FROM leases "
            "WHERE agent_id = ?",
            (lease.agent_id,),
        ).fetchone()
        if row is not None and row[0] == lease.owner.owner_id and row[4] == lease.epoch:
            return
        if row is None or row[0] is None:
            now = "no one holds it now"
        else:
            holder = Owner(
                owner_id=row[0], pid=row[1], host=row[2], process_start=row[3], host_id=row[5]
            )
            now = f"{owner_text(holder)} holds it now (epoch {row[4]})"
        raise LeaseLost(
            str(self.path),
            f"agent {lease.agent_id!r}: a write under a lease it no longer has (epoch "
            f"{lease.epoch}) was refused; {now}",
        )

    async def acquire_lease(self, agent_id: str, owner: Owner, *, seconds: float) -> Lease:
        def work(db: sqlite3.Connection) -> Lease:
            row = db.execute(
                "SELECT owner_id, pid, host, process_start, epoch, expires_at, host_id "
                "FROM leases WHERE agent_id = ?",
                (agent_id,),
            ).fetchone()
            epoch = 1
            if row is not None:
                holder_id, pid, host, process_start, epoch, expires_at, host_id = row
                epoch += 1
                holder = Owner(
                    owner_id=holder_id or "",
                    pid=pid,
                    host=host,
                    process_start=process_start,
                    host_id=host_id,
                )
                if (
                    holder_id is not None
                    and holder_id != owner.owner_id
                    and not holder_gone(holder, expires_at)
                ):
                    raise StoreError(
                        str(self.path),
                        f"agent {agent_id!r} is already open in {owner_text(holder)}; an "
                        "agent has one owner at a time (close it there first, or use "
                        "another agent_id)",
                    )
            lease = Lease(
                agent_id=agent_id, owner=owner, epoch=epoch, expires_at=time.time() + seconds
            )
            db.execute(
                "INSERT INTO leases (agent_id, owner_id, pid, host, process_start, epoch, "
                "expires_at, host_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id) "
                "DO UPDATE SET owner_id = excluded.owner_id, pid = excluded.pid, "
                "host = excluded.host, process_start = excluded.process_start, "
                "epoch = excluded.epoch, expires_at = excluded.expires_at, "
                "host_id = excluded.host_id",
                (
                    agent_id,
                    owner.owner_id,
                    owner.pid,
                    owner.host,
                    owner.process_start,
                    epoch,
                    lease.expires_at,
                    owner.host_id,
                ),
            )
            return lease

        lease = await self._call(work)
        hold(owner)
        return lease

    async def renew_lease(self, lease: Lease, *, seconds: float) -> Lease:
        renewed = attrs.evolve(lease, expires_at=time.time() + seconds)

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE leases SET expires_at = ? WHERE agent_id = ?",
                (renewed.expires_at, lease.agent_id),
            )

        await self._call(work, lease)
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE leases SET owner_id = NULL WHERE agent_id = ? AND owner_id = ? "
                "AND epoch = ?",
                (lease.agent_id, lease.owner.owner_id, lease.epoch),
            )

        try:
            await self._call(work)
        finally:
            let_go(lease.owner)

    # --- conversations ------------------------------------------------------------------

    async def load_messages(self, agent_id: str) -> list[Message]:
        def work(db: sqlite3.Connection) -> list[Message]:
            rows = db.execute(
                "SELECT seq, role, content FROM messages WHERE agent_id = ? ORDER BY seq",
                (agent_id,),
            ).fetchall()
            return [
                _message(agent_id, seq, expected, role, content)
                for expected, (seq, role, content) in enumerate(rows)
            ]

        return await self._call(work)

    def _write_tail(
        self, db: sqlite3.Connection, agent_id: str, start: int, messages: Sequence[Message]
    ) -> None:
        # max(seq) walks the primary key's index; count(*) would read every row.
        count = db.execute(
            "SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE agent_id = ?", (agent_id,)
        ).fetchone()[0]
        if start > count:
            raise StoreError(
                str(self.path),
                f"write_tail at {start} past the end ({count}) of agent {agent_id!r}",
            )
        db.execute("DELETE FROM messages WHERE agent_id = ? AND seq >= ?", (agent_id, start))
        db.executemany(
            "INSERT INTO messages (agent_id, seq, role, content) VALUES (?, ?, ?, ?)",
            [
                (agent_id, start + offset, message.role, json.dumps(list(message.content)))
                for offset, message in enumerate(messages)
            ],
        )

    async def write_tail(
        self, agent_id: str, start: int, messages: Sequence[Message], *, lease: Lease | None = None
    ) -> None:
        await self._call(lambda db: self._write_tail(db, agent_id, start, messages), lease)

    # --- runs ---------------------------------------------------------------------------

    async def start_run(
        self,
        record: RunRecord,
        *,
        start: int | None = None,
        messages: Sequence[Message] = (),
        lease: Lease | None = None,
    ) -> None:
        def work(db: sqlite3.Connection) -> None:
            if start is not None:
                self._write_tail(db, record.agent_id, start, messages)
            db.execute(
                f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.run_id,
                    record.agent_id,
                    record.status,
                    record.prompt,
                    record.started_at,
                    record.ended_at,
                    _usage_json(record.usage),
                    record.error,
                    record.position,
                ),
            )

        await self._call(work, lease)

    async def end_run(
        self,
        run_id: str,
        *,
        status: RunRecordStatus,
        ended_at: float,
        usage: Usage,
        error: str | None,
        lease: Lease | None = None,
    ) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE runs SET status = ?, ended_at = ?, usage = ?, error = ? WHERE run_id = ?",
                (status, ended_at, _usage_json(usage), error, run_id),
            )

        await self._call(work, lease)

    async def runs(self, agent_id: str) -> list[RunRecord]:
        def work(db: sqlite3.Connection) -> list[RunRecord]:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE agent_id = ? ORDER BY started_at, rowid",
                (agent_id,),
            ).fetchall()
            return [_run(row) for row in rows]

        return await self._call(work)

    async def get_run(self, run_id: str) -> RunRecord | None:
        def work(db: sqlite3.Connection) -> RunRecord | None:
            row = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return _run(row) if row is not None else None

        return await self._call(work)

    async def mark_interrupted(
        self, agent_id: str, *, lease: Lease | None = None
    ) -> list[RunRecord]:
        def work(db: sqlite3.Connection) -> list[RunRecord]:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE agent_id = ? AND status = 'running' "
                "ORDER BY started_at, rowid",
                (agent_id,),
            ).fetchall()
            db.execute(
                "UPDATE runs SET status = 'interrupted' WHERE agent_id = ? AND status = 'running'",
                (agent_id,),
            )
            return [_run((*row[:2], "interrupted", *row[3:])) for row in rows]

        return await self._call(work, lease)

    # --- runs awaiting approval -----------------------------------------------------------

    async def pause_run(
        self,
        run_id: str,
        pending: Sequence[PendingApproval],
        *,
        usage: Usage,
        lease: Lease | None = None,
    ) -> None:
        calls = [(p.tool_use_id, p.tool_name, json.dumps(p.input), p.reason) for p in pending]

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE runs SET status = 'awaiting_approval', usage = ? WHERE run_id = ?",
                (_usage_json(usage), run_id),
            )
            db.execute("DELETE FROM approvals WHERE run_id = ? AND verdict IS NULL", (run_id,))
            # After the calls an earlier pause of the run asked about (decided, and kept).
            first = db.execute(
                "SELECT coalesce(max(position) + 1, 0) FROM approvals WHERE run_id = ?",
                (run_id,),
            ).fetchone()[0]
            db.executemany(
                "INSERT INTO approvals (run_id, tool_use_id, position, tool_name, input, reason) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, call[0], first + offset, *call[1:]) for offset, call in enumerate(calls)],
            )

        await self._call(work, lease)

    async def pending_calls(self, run_id: str) -> list[PendingApproval]:
        def work(db: sqlite3.Connection) -> list[PendingApproval]:
            rows = db.execute(
                "SELECT tool_use_id, tool_name, input, reason FROM approvals WHERE run_id = ? "
                "AND verdict IS NULL AND EXISTS (SELECT 1 FROM runs WHERE runs.run_id = ? "
                "AND runs.status = 'awaiting_approval') ORDER BY position",
                (run_id, run_id),
            ).fetchall()
            return [_pending_approval(run_id, row) for row in rows]

        return await self._call(work)

    async def runs_awaiting_approval(self, agent_id: str | None = None) -> list[RunRecord]:
        def work(db: sqlite3.Connection) -> list[RunRecord]:
            # Two statements, so that one agent's are found through its index.
            if agent_id is None:
                rows = db.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE status = 'awaiting_approval' "
                    "ORDER BY started_at, rowid"
                ).fetchall()
            else:
                rows = db.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE agent_id = ? "
                    "AND status = 'awaiting_approval' ORDER BY started_at, rowid",
                    (agent_id,),
                ).fetchall()
            return [_run(row) for row in rows]

        return await self._call(work)

    async def claim_paused_run(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, ApprovalDecision] | None = None,
        lease: Lease | None = None,
    ) -> bool:
        decided = [
            (*_decision_values(decision), run_id, call_id)
            for call_id, decision in (decisions or {}).items()
        ]

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE runs SET status = 'running' WHERE run_id = ? "
                "AND status = 'awaiting_approval'",
                (run_id,),
            )
            if cursor.rowcount != 1:
                return False
            db.executemany(
                "UPDATE approvals SET verdict = ?, decided_input = ?, denial_reason = ?, "
                "decided_by = ?, decided_at = ? WHERE run_id = ? AND tool_use_id = ? "
                "AND verdict IS NULL",
                decided,
            )
            return True

        return await self._call(work, lease)

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        def work(db: sqlite3.Connection) -> list[ApprovalRecord]:
            rows = db.execute(
                f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE run_id = ? ORDER BY position",
                (run_id,),
            ).fetchall()
            return [_approval_record(run_id, row) for row in rows]

        return await self._call(work)

    # --- the tool-call journal ------------------------------------------------------------

    async def call_started(
        self,
        run_id: str,
        tool_use_id: str,
        tool_name: str,
        input: Any,
        *,
        lease: Lease | None = None,
    ) -> None:
        encoded = json.dumps(input)

        def work(db: sqlite3.Connection) -> None:
            position = db.execute(
                "SELECT count(*) FROM tool_calls WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
            # A call run again (an idempotent one, on resume) keeps its place in the journal.
            db.execute(
                "INSERT INTO tool_calls (run_id, tool_use_id, position, tool_name, input) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, tool_use_id) DO UPDATE SET "
                "tool_name = excluded.tool_name, input = excluded.input, finished = 0, "
                "content = NULL, is_error = 0, error_kind = NULL",
                (run_id, tool_use_id, position, tool_name, encoded),
            )

        await self._call(work, lease)

    async def call_finished(
        self,
        run_id: str,
        tool_use_id: str,
        *,
        content: Any,
        is_error: bool,
        error_kind: str | None,
        lease: Lease | None = None,
    ) -> None:
        encoded = json.dumps(content)

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE tool_calls SET finished = 1, content = ?, is_error = ?, error_kind = ? "
                "WHERE run_id = ? AND tool_use_id = ?",
                (encoded, int(is_error), error_kind, run_id, tool_use_id),
            )

        await self._call(work, lease)

    async def calls(self, run_id: str) -> list[JournalEntry]:
        def work(db: sqlite3.Connection) -> list[JournalEntry]:
            rows = db.execute(
                "SELECT tool_use_id, tool_name, input, finished, content, is_error, error_kind "
                "FROM tool_calls WHERE run_id = ? ORDER BY position",
                (run_id,),
            ).fetchall()
            return [_journal_entry(run_id, row) for row in rows]

        return await self._call(work)

    # --- retention --------------------------------------------------------------------------

    async def prune(
        self,
        *,
        older_than: float | timedelta,
        conversations: bool = False,
        dry_run: bool = False,
    ) -> PruneReport:
        cut = cut_before(older_than)
        if dry_run:
            return await self._call(lambda db: _prune_counts(db, cut, conversations))
        # Batches walk the primary key (run_id, then agent_id) from where the last one
        # stopped: each is one short transaction, so an agent writing meanwhile waits
        # for one batch at most, and the whole prune reads each table once.
        report = PruneReport(dry_run=False, cut=cut)
        for step in (_prune_runs, _prune_conversations) if conversations else (_prune_runs,):
            after = ""
            while True:
                batch, after = await self._call(functools.partial(step, cut, after))
                report += batch
                if not after:
                    break
        return report


_NAMES: Final = {"": "the file", "-wal": "its -wal file", "-shm": "its -shm file"}


def _identity(path: Path, suffix: str) -> tuple[int, int] | None:
    try:
        found = os.stat(f"{path}{suffix}")
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


def _identities(path: Path) -> dict[str, tuple[int, int]]:
    """The database file and its -wal and -shm files, by (st_dev, st_ino). In WAL mode
    SQLite keeps the -wal and -shm files (the same ones) for as long as any
    connection has the database open; a new connection after one of them is deleted
    would make its own, and see none of what is in the old one."""
    found = {suffix: _identity(path, suffix) for suffix in _NAMES}
    return {suffix: identity for suffix, identity in found.items() if identity is not None}


# SQLite's primary result codes (sqlite3.Error.sqlite_errorcode & 0xFF).
_BUSY: Final = 5
_LOCKED: Final = 6
_CORRUPT: Final = 11
_NOTADB: Final = 26


def _error(where: str, exc: sqlite3.Error) -> StoreError:
    """The StoreError for one of SQLite's, of the class that says what the caller does
    next: wait (another connection held the lock for the whole busy timeout), have a
    person look at the file (corrupt, or not a database), or read the message."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = _explain(exc)
    if primary in (_BUSY, _LOCKED):
        return StoreUnavailable(where, text)
    lowered = str(exc).lower()
    if primary in (_CORRUPT, _NOTADB) or "not a database" in lowered or "malformed" in lowered:
        return StoreUnreadable(where, text)
    return StoreError(where, text)


def _explain(exc: sqlite3.Error) -> str:
    """A clear sentence for SQLite's errors a user can cause."""
    text = str(exc)
    lowered = text.lower()
    if "database is locked" in lowered or "database table is locked" in lowered:
        return (
            "another connection held the database's write lock for longer than the busy "
            f"timeout (30 s); nothing of this change was written ({text})"
        )
    if "not a database" in lowered or "malformed" in lowered:
        return f"the file is not a SQLite database, or is corrupt ({text})"
    if "readonly" in lowered or "read-only" in lowered or "unable to open" in lowered:
        return f"the file cannot be written ({text})"
    if "disk is full" in lowered or "disk i/o" in lowered:
        return f"the disk is full or failing; nothing of this change was written ({text})"
    return text


# --- retention (each runs in one transaction of SQLiteStore._call) ---------------------------

_LIVE: Final = ", ".join(f"'{status}'" for status in LIVE_STATUSES)


def _ended_before(runs: str) -> str:
    """A run (of the table or alias ``runs``) that Store.prune deletes: ended before the
    cut, the clause's one parameter."""
    return f"{runs}.status NOT IN ({_LIVE}) AND {runs}.ended_at IS NOT NULL AND {runs}.ended_at < ?"


_ENDED_BEFORE: Final = _ended_before("runs")
# An agent whose conversation prune(conversations=True) deletes: no run of its outlives
# the prune, and no process holds it (parameter: the cut).
_IDLE: Final = (
    "NOT EXISTS (SELECT 1 FROM runs r WHERE r.agent_id = m.agent_id "
    f"AND NOT ({_ended_before('r')})) "
    "AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.agent_id = m.agent_id "
    "AND l.owner_id IS NOT NULL)"
)


def _prune_counts(db: sqlite3.Connection, cut: float, conversations: bool) -> PruneReport:
    doomed = f"SELECT run_id FROM runs WHERE {_ENDED_BEFORE}"
    (runs,) = db.execute(f"SELECT count(*) FROM runs WHERE {_ENDED_BEFORE}", (cut,)).fetchone()
    (calls,) = db.execute(
        f"SELECT count(*) FROM tool_calls WHERE run_id IN ({doomed})", (cut,)
    ).fetchone()
    (approvals,) = db.execute(
        f"SELECT count(*) FROM approvals WHERE run_id IN ({doomed})", (cut,)
    ).fetchone()
    agents = messages = 0
    if conversations:
        agents, messages = db.execute(
            f"SELECT count(DISTINCT agent_id), count(*) FROM messages m WHERE {_IDLE}", (cut,)
        ).fetchone()
    return PruneReport(
        dry_run=True,
        cut=cut,
        runs=runs,
        tool_calls=calls,
        approvals=approvals,
        conversations=agents,
        messages=messages,
    )


def _prune_runs(cut: float, after: str, db: sqlite3.Connection) -> tuple[PruneReport, str]:
    """One batch of ended runs, and the run_id to go on after ("" when done)."""
    ids = [
        run_id
        for (run_id,) in db.execute(
            f"SELECT run_id FROM runs WHERE run_id > ? AND {_ENDED_BEFORE} ORDER BY run_id LIMIT ?",
            (after, cut, PRUNE_BATCH),
        )
    ]
    chosen = "IN (SELECT value FROM json_each(?))"
    listed = (json.dumps(ids),)
    report = PruneReport(
        dry_run=False,
        cut=cut,
        tool_calls=db.execute(f"DELETE FROM tool_calls WHERE run_id {chosen}", listed).rowcount,
        approvals=db.execute(f"DELETE FROM approvals WHERE run_id {chosen}", listed).rowcount,
        runs=db.execute(f"DELETE FROM runs WHERE run_id {chosen}", listed).rowcount,
    )
    return report, (ids[-1] if len(ids) == PRUNE_BATCH else "")


def _prune_conversations(cut: float, after: str, db: sqlite3.Connection) -> tuple[PruneReport, str]:
    """One batch of agents looked at, and the agent_id to go on after ("" when done)."""
    candidates = [
        agent_id
        for (agent_id,) in db.execute(
            "SELECT DISTINCT agent_id FROM messages WHERE agent_id > ? ORDER BY agent_id LIMIT ?",
            (after, PRUNE_BATCH),
        )
    ]
    idle = [
        agent_id
        for (agent_id,) in db.execute(
            f"SELECT m.agent_id FROM (SELECT value AS agent_id FROM json_each(?)) m WHERE {_IDLE}",
            (json.dumps(candidates), cut),
        )
    ]
    chosen = "IN (SELECT value FROM json_each(?))"
    listed = (json.dumps(idle),)
    messages = db.execute(f"DELETE FROM messages WHERE agent_id {chosen}", listed).rowcount
    # A released lease row (no holder) goes with the conversation. The next owner's
    # epoch starts again at 1, which lets no stale write in: a write is checked against
    # the holder's own id (unique to the opened agent) as well as the epoch.
    db.execute(f"DELETE FROM leases WHERE owner_id IS NULL AND agent_id {chosen}", listed)
    report = PruneReport(dry_run=False, cut=cut, conversations=len(idle), messages=messages)
    return report, (candidates[-1] if len(candidates) == PRUNE_BATCH else "")
