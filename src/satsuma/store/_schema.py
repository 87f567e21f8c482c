"""The two schemas, SQLite's and PostgreSQL's, as the migrations that build them, and the
one procedure that brings a database up to date (``upgrade``).

Each history moves its schema from one version to the next; never edit an entry that has
shipped, add the next. The two histories differ (PostgreSQL's has the cluster's tables;
their newest versions are the two ``*_SCHEMA_VERSION`` below), but a table that is the same in both is written once, below,
so that the stores read and write the same columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._exceptions import StoreUnreadable
from ._summaries import summaries_table

__all__ = [
    "POSTGRES_MIGRATIONS",
    "POSTGRES_SCHEMA_VERSION",
    "SQLITE_MIGRATIONS",
    "SQLITE_SCHEMA_VERSION",
    "upgrade",
]

# A conversation: one row per message, in order (seq from 0). JSON is kept as text, never
# jsonb, which reorders keys (see _rows.py).
MESSAGES: Final = """CREATE TABLE messages (
            agent_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            PRIMARY KEY (agent_id, seq)
        )"""

# The calls a run paused on, waiting for a person's decision (the run's status is then
# awaiting_approval). Replaced each time the run pauses again.
APPROVALS: Final = """CREATE TABLE approvals (
            run_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            tool_name TEXT NOT NULL,
            input TEXT NOT NULL,
            reason TEXT NOT NULL,
            PRIMARY KEY (run_id, tool_use_id)
        )"""

# Where the holder's pid means its process: boot id and PID namespace (see _lease.py); ''
# for a holder recorded before, which is judged by expiry.
HOST_ID: Final = "ALTER TABLE leases ADD COLUMN host_id TEXT NOT NULL DEFAULT ''"

# A decision taken on one call of a paused run ahead of the run's resume (a service
# deciding one call at a time, Store.propose_decision): JSON, NULL until taken.
PROPOSED: Final = "ALTER TABLE approvals ADD COLUMN proposed TEXT"

# The agent class each run belongs to (Agent.name), what evals select runs by
# (Dataset.from_store(agent=...)); NULL for runs recorded before, matched by agent_id only.
RUN_AGENT: Final = (
    "ALTER TABLE runs ADD COLUMN agent TEXT",
    "CREATE INDEX runs_by_class ON runs (agent, started_at)",
)
# The budgets' ledgers (satsuma.Budget, _ledger.py): per key (an agent, an agent on a
# UTC day) the USD settled and the USD held by model calls in flight; and each call's
# holds, given back when settled or, left by a process that died, once expired.
LEDGERS: Final = """CREATE TABLE budget_ledgers (
            ledger TEXT PRIMARY KEY,
            spent {real} NOT NULL DEFAULT 0,
            reserved {real} NOT NULL DEFAULT 0
        )"""
HOLDS: Final = """CREATE TABLE budget_holds (
            hold_id TEXT NOT NULL,
            ledger TEXT NOT NULL,
            amount {real} NOT NULL,
            expires_at {real} NOT NULL,
            PRIMARY KEY (ledger, hold_id)
        )"""

# SQLite's: each entry moves the schema from the previous version to its own.
SQLITE_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        MESSAGES,
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
    3: (APPROVALS,),
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
    5: (HOST_ID,),
    6: (PROPOSED,),
    7: RUN_AGENT,
    # Compaction's summaries of older messages (_summaries.py).
    8: (summaries_table("REAL"),),
    # Budgets' ledgers and holds (_ledger.py).
    9: (LEDGERS.format(real="REAL"), HOLDS.format(real="REAL")),
}
SQLITE_SCHEMA_VERSION: Final = max(SQLITE_MIGRATIONS)

# PostgreSQL's, the same way. A cluster (issue 19) adds its own tables and columns (the
# runs a node queues and claims, nodes) as later versions: runs.status is free text, a
# run's position may be NULL, and the lease row already has owner, epoch and expiry.
POSTGRES_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        MESSAGES,
        # seq: the order runs were added in (SQLite's rowid), for runs that started in
        # the same instant.
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            seq BIGINT GENERATED ALWAYS AS IDENTITY,
            agent_id TEXT NOT NULL,
            status TEXT NOT NULL,
            prompt TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            ended_at DOUBLE PRECISION,
            usage TEXT NOT NULL,
            error TEXT,
            position INTEGER
        )""",
        "CREATE INDEX runs_by_agent ON runs (agent_id, started_at, seq)",
        # position: a sequence, not a count of the run's calls as in SQLite, where
        # transactions take turns; here two calls of one turn start at the same time.
        """CREATE TABLE tool_calls (
            run_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            position BIGINT GENERATED ALWAYS AS IDENTITY,
            tool_name TEXT NOT NULL,
            input TEXT NOT NULL,
            finished BOOLEAN NOT NULL DEFAULT false,
            content TEXT,
            is_error BOOLEAN NOT NULL DEFAULT false,
            error_kind TEXT,
            PRIMARY KEY (run_id, tool_use_id)
        )""",
        # Who owns each agent (see _lease.py). A released lease keeps its row, so that
        # the epoch only ever grows. expires_at is on the database's clock, the one
        # clock every machine of a cluster shares.
        """CREATE TABLE leases (
            agent_id TEXT PRIMARY KEY,
            owner_id TEXT,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            process_start TEXT NOT NULL,
            epoch BIGINT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        )""",
    ),
    # The cluster (satsuma.cluster): the queue of runs that nodes claim, and the nodes.
    2: (
        # status: queued, claimed, running, completed, failed, cancelled. node_id: the
        # node that claimed it, while claimed or running. result: the RunResult as JSON
        # text, once ended. available_at: not claimed before (a run handed back because
        # its agent was still held elsewhere waits a little). Times on the database's
        # clock, seconds since the epoch.
        """CREATE TABLE run_queue (
            run_id TEXT PRIMARY KEY,
            seq BIGINT GENERATED ALWAYS AS IDENTITY,
            agent_name TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            prompt TEXT NOT NULL,
            status TEXT NOT NULL,
            node_id TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            cancel_requested BOOLEAN NOT NULL DEFAULT false,
            submitted_at DOUBLE PRECISION NOT NULL,
            available_at DOUBLE PRECISION NOT NULL,
            claimed_at DOUBLE PRECISION,
            ended_at DOUBLE PRECISION,
            result TEXT,
            error TEXT
        )""",
        "CREATE INDEX run_queue_queued ON run_queue (seq) WHERE status = 'queued'",
        "CREATE INDEX run_queue_by_agent ON run_queue (agent_id, seq)",
        # At most one run of a conversation in flight, whatever the claiming query does.
        "CREATE UNIQUE INDEX run_queue_one_in_flight ON run_queue (agent_id) "
        "WHERE status IN ('claimed', 'running')",
        "CREATE INDEX run_queue_by_node ON run_queue (node_id) "
        "WHERE status IN ('claimed', 'running')",
        # agents: the Agent names it serves, as a JSON list.
        """CREATE TABLE nodes (
            node_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            agents TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            draining BOOLEAN NOT NULL DEFAULT false
        )""",
    ),
    3: (APPROVALS,),
    # The events of queued runs, recorded by the node that runs them for the clients
    # that watch (satsuma.cluster, _run_events.py). seq: the event's place in its run's
    # stream, from 0; a missing seq is an event dropped (the run passed its cap, or the
    # write failed). kind: which go first when the run passes its cap (0 text deltas,
    # 1 progress and updates, 2 the rest). size: the event's bytes. event: JSON text.
    4: (
        """CREATE TABLE run_events (
            run_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            kind SMALLINT NOT NULL,
            size INTEGER NOT NULL,
            event TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        # One row per run with events: the next seq, what is stored (for the cap), how
        # many were dropped. Its lock orders the writers of one run.
        """CREATE TABLE run_event_streams (
            run_id TEXT PRIMARY KEY,
            next_seq BIGINT NOT NULL DEFAULT 0,
            stored_events INTEGER NOT NULL DEFAULT 0,
            stored_bytes BIGINT NOT NULL DEFAULT 0,
            dropped BIGINT NOT NULL DEFAULT 0,
            updated_at DOUBLE PRECISION NOT NULL
        )""",
    ),
    # What was decided on each call a run paused on, when the run was resumed (NULL
    # while undecided): verdict approved, edited or denied; the edited input (JSON
    # text); the denial's reason; who decided, if the decision said; when. Decided rows
    # are kept when the run pauses again, as the record of who approved what.
    5: (
        "ALTER TABLE approvals ADD COLUMN verdict TEXT, ADD COLUMN decided_input TEXT, "
        "ADD COLUMN denial_reason TEXT, ADD COLUMN decided_by TEXT, "
        "ADD COLUMN decided_at DOUBLE PRECISION",
    ),
    6: (HOST_ID,),
    # The decisions a paused queued run is resumed with (Cluster.resume): JSON text,
    # kept on the row until a node has taken them to the agent, so that a node that
    # dies before then leaves them to the next.
    7: ("ALTER TABLE run_queue ADD COLUMN decisions TEXT",),
    8: (PROPOSED,),
    9: RUN_AGENT,
    # Compaction's summaries of older messages (_summaries.py).
    10: (summaries_table("DOUBLE PRECISION"),),
    # Budgets' ledgers and holds (_ledger.py).
    11: (LEDGERS.format(real="DOUBLE PRECISION"), HOLDS.format(real="DOUBLE PRECISION")),
    # Someone streams the run's events: its node asks the model for answers as they are
    # written (Cluster.stream, submit(watched=True), a stream opened while in flight).
    12: ("ALTER TABLE run_queue ADD COLUMN watched BOOLEAN NOT NULL DEFAULT false",),
}
POSTGRES_SCHEMA_VERSION: Final = max(POSTGRES_MIGRATIONS)


def upgrade(db: Any, where: str, migrations: Mapping[int, tuple[str, ...]], insert: str) -> None:
    """Bring the schema of ``db`` (in a transaction that holds it, its ``satsuma_schema``
    table made) up to the newest version of ``migrations``; ``insert`` records a version
    (the dialect's ``INSERT INTO satsuma_schema (version) VALUES (?)``).

    Raises:
        StoreUnreadable: the database's schema is newer than this satsuma knows.
    """
    latest = max(migrations)
    row = db.execute("SELECT max(version) FROM satsuma_schema").fetchone()
    current = (row[0] if row else None) or 0
    if current > latest:
        raise StoreUnreadable(
            where,
            f"its schema is version {current}, newer than this satsuma knows "
            f"({latest}); upgrade satsuma to use it",
        )
    for version in range(current + 1, latest + 1):
        for statement in migrations[version]:
            db.execute(statement)
        db.execute(insert, (version,))
