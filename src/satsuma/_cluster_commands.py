"""``satsuma node`` and ``satsuma cluster status``: a cluster's node, and a look at the
cluster (its nodes, leases, queue, runs in flight and table sizes), from the command
line.

Every mistake a user can make here (a store that is not PostgreSQL, a database that
cannot be reached, psycopg not installed, a bad setting) is a ``CommandError`` with one
line of explanation; cli.py prints it without a traceback.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Sequence
from typing import IO, Any

import trio
from rich.console import Console

from ._command_error import CommandError
from ._commands import FAKE_MODEL, RunOptions, check_key, tools_context
from ._exceptions import StoreError
from ._store_option import POSTGRES_SCHEMES, store_option, url_scheme
from ._terminal import say as say_on
from ._terminal import visible
from .agents import Agent, internal
from .cluster import Node
from .models import AnthropicModel, Model
from .store import QUEUE_STATUSES, ClusterStatus, PostgresStore, cluster_status
from .supervisor import Backoff, ChildCrashed, ChildRestarted, Supervisor, SupervisorEvent
from .testing import FakeModel

__all__ = ["cluster_store", "serve_node", "show_status"]

# The node's own stop is bounded: its runs get drain_timeout, then handing back what is
# left and leaving the node table are each bounded by 5 s (the Node's _STOP_WRITE_SECONDS).
_STOP_MARGIN = 10.0
# A node that crashes (the database went away, say) is started again after a backoff
# that grows to 10 s. At that pace the supervisor never gives up (the backoff keeps the
# restarts within any minute at 9 at most, under the limit of 10), so a node outlives an
# outage of any length.
_BACKOFF = Backoff(base=0.5, cap=10.0)
_MAX_RESTARTS = 10
_WITHIN = 60.0


def cluster_store(url: str) -> PostgresStore:
    """The PostgresStore ``--store`` names (not yet connected).

    Raises:
        CommandError: not a postgresql:// URL, not a connection string, or psycopg is
            not installed.
    """
    # The --store of run, chat, runs and resume, read by the same rules; a cluster
    # takes only the PostgreSQL half of them.
    scheme = url_scheme(url)
    if scheme not in POSTGRES_SCHEMES:
        # The URL of another database may hold a password: show only its scheme.
        given = f"a {scheme}:// URL" if scheme is not None else repr(url)
        raise CommandError(
            f"--store must be a PostgreSQL database (postgresql://USER@HOST/DBNAME), got "
            f"{given}: a cluster shares its agents through PostgreSQL"
        )
    store = store_option(url).make()
    assert isinstance(store, PostgresStore)
    return store


async def _open(store: PostgresStore) -> None:
    try:
        await store.open()
    except StoreError as error:
        raise CommandError(str(error)) from None


async def _close(store: PostgresStore, model: Model | None = None) -> None:
    with trio.CancelScope(shield=True):
        if isinstance(model, AnthropicModel):
            await model.aclose()
        await store.aclose()


# --- node ------------------------------------------------------------------------------


async def serve_node(
    agents: Sequence[type[Agent]],
    targets: Sequence[str],
    store: PostgresStore,
    options: RunOptions,
    settings: dict[str, Any],
    *,
    console: Console,
    errors: Console,
) -> int:
    """Run a Node serving ``agents`` (named by ``targets``) on ``store`` (from
    ``cluster_store``, closed here) under a Supervisor until SIGTERM or SIGINT, which
    drain it; return the exit status (0). A crash of the node and its restart are one
    line each on ``errors``.

    ``settings`` are the Node's keyword arguments given on the command line (name,
    max_agents, max_runs, lease_seconds, drain_timeout, poll_interval).
    """
    model: Model | None = None
    try:
        context = tools_context(options)
        if options.model == FAKE_MODEL:
            model = FakeModel()
        else:
            check_key()
            model = AnthropicModel()  # one client, one connection pool, for every agent
        await _open(store)
        try:
            node = Node(store, agents, model=model, context=context, **settings)
        except ValueError as error:
            raise CommandError(str(error)) from None
        served = ", ".join(
            f"{visible(internal.spec_of(agent).name)} ({visible(target)})"
            for agent, target in zip(agents, targets, strict=True)
        )

        def say(text: str, where: Console = console) -> None:
            say_on(where, f"satsuma node {visible(node.name)}: {visible(text)}")

        def report(event: SupervisorEvent) -> None:
            if isinstance(event, ChildCrashed):
                first = event.error.splitlines()[0] if event.error else ""
                say(f"crashed: {first}", errors)
            elif isinstance(event, ChildRestarted):
                say(f"restarted (after {event.delay:g}s)", errors)

        # Received from here on: a signal during the drain below does not cut it short
        # (it is bounded by --drain-timeout and the writes of handing runs back).
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with Supervisor(
                name=f"node {node.name}",
                max_restarts=_MAX_RESTARTS,
                within=_WITHIN,
                backoff=_BACKOFF,
                events=report,
            ) as supervisor:
                await supervisor.start_child(
                    node, id="node", shutdown_timeout=node.drain_timeout + _STOP_MARGIN
                )
                say(
                    f"serving {served} on {store.location} (up to {node.max_runs} runs at "
                    f"once, lease {node.lease_seconds:g}s); SIGTERM or Ctrl-C drains it"
                )
                async for received in signals:
                    left = len(node.in_flight)
                    say(
                        f"{signal.Signals(received).name}: draining, {left} run"
                        f"{'' if left == 1 else 's'} in flight (up to {node.drain_timeout:g}s "
                        "to end, then handed back to the queue)"
                    )
                    break
        say("stopped")
        return 0
    finally:
        await _close(store, model)


# --- cluster status --------------------------------------------------------------------


async def show_status(
    url: str, *, limit: int, console: Console, json_out: IO[str] | None = None
) -> int:
    """Print the cluster's nodes, leases, queue and runs in flight: as text on
    ``console``, or, with ``json_out``, as one JSON object written there."""
    store = cluster_store(url)
    try:
        await _open(store)
        try:
            status = await cluster_status(store, limit=limit)
        except StoreError as error:
            raise CommandError(str(error)) from None
    finally:
        await _close(store)
    if json_out is not None:
        json_out.write(json.dumps(status_json(status, store.location)) + "\n")
        json_out.flush()
        return 0
    for line in status_lines(status, store.location, limit):
        say_on(console, line)
    return 0


def status_json(status: ClusterStatus, location: str) -> dict[str, Any]:
    """The status as ``--json`` prints it; seconds are rounded to milliseconds."""
    return {
        "store": location,
        "nodes": [
            {
                "node_id": node.node_id,
                "name": node.name,
                "host": node.host,
                "pid": node.pid,
                "agents": list(node.agents),
                "alive": node.alive,
                "heartbeat_age": round(node.heartbeat_age, 3),
                "expires_in": round(node.expires_in, 3),
                "runs_in_flight": node.in_flight,
            }
            for node in status.nodes
        ],
        "leases_held": status.leases_held,
        "leases": [
            {
                "agent_id": lease.agent_id,
                "owner_id": lease.owner_id,
                "node": lease.node,
                "host": lease.host,
                "pid": lease.pid,
                "epoch": lease.epoch,
                "expires_in": round(lease.expires_in, 3),
            }
            for lease in status.leases
        ],
        "queue": status.queue,
        "runs_in_flight_count": status.in_flight_count,
        "runs_in_flight": [
            {
                "run_id": run.run_id,
                "agent_name": run.agent_name,
                "agent_id": run.agent_id,
                "status": run.status,
                "node_id": run.node_id,
                "node": run.node,
                "attempts": run.attempts,
                "claimed_age": None if run.claimed_age is None else round(run.claimed_age, 3),
                "cancel_requested": run.cancel_requested,
            }
            for run in status.in_flight
        ],
        "tables": [
            {"name": table.name, "rows": table.rows, "bytes": table.bytes}
            for table in status.tables
        ],
    }


def status_lines(status: ClusterStatus, location: str, limit: int) -> list[str]:
    """The status as text: a heading and an aligned table per part. Every name, id and
    host in it comes from the database that nodes share, made ``visible`` in ``_table``."""
    lines = [f"cluster on {visible(location)}"]
    alive = sum(node.alive for node in status.nodes)
    lines.append(f"nodes: {alive} alive, {len(status.nodes) - alive} expired")
    lines.extend(
        _table(
            ("NODE", "STATE", "HEARTBEAT", "RUNS", "HOST", "PID", "SERVES"),
            [
                (
                    node.name,
                    "alive" if node.alive else "expired",
                    f"{node.heartbeat_age:.1f}s ago",
                    str(node.in_flight),
                    node.host,
                    str(node.pid),
                    ", ".join(node.agents),
                )
                for node in status.nodes
            ],
        )
    )
    lines.append(f"leases: {status.leases_held} held")
    lines.extend(
        _table(
            ("AGENT_ID", "OWNER", "EPOCH", "EXPIRES"),
            [
                (
                    lease.agent_id,
                    lease.node or f"{lease.host}:{lease.pid}",
                    str(lease.epoch),
                    _expiry(lease.expires_in),
                )
                for lease in status.leases
            ],
        )
    )
    lines.extend(_more(status.leases_held, len(status.leases), limit))
    depth = sum(counts["queued"] for counts in status.queue.values())
    lines.append(f"queue: {depth} queued")
    lines.extend(
        _table(
            ("AGENT", *(name.upper() for name in QUEUE_STATUSES)),
            [
                (agent, *(str(counts[name]) for name in QUEUE_STATUSES))
                for agent, counts in status.queue.items()
            ],
        )
    )
    lines.append(f"runs in flight: {status.in_flight_count}")
    lines.extend(
        _table(
            ("RUN", "AGENT", "AGENT_ID", "STATUS", "NODE", "ATTEMPTS", "CLAIMED"),
            [
                (
                    run.run_id,
                    run.agent_name,
                    run.agent_id,
                    run.status + (" (cancelling)" if run.cancel_requested else ""),
                    run.node or "(gone)",
                    str(run.attempts),
                    "" if run.claimed_age is None else f"{run.claimed_age:.1f}s ago",
                )
                for run in status.in_flight
            ],
        )
    )
    lines.extend(_more(status.in_flight_count, len(status.in_flight), limit))
    total = sum(table.bytes for table in status.tables)
    lines.append(f"tables: {_size(total)} (satsuma store prune deletes ended runs)")
    lines.extend(
        _table(
            ("TABLE", "ROWS", "SIZE"),
            [(table.name, str(table.rows), _size(table.bytes)) for table in status.tables],
        )
    )
    return lines


def _size(count: int) -> str:
    """Bytes as a person reads them: 8.0 kB, 1.2 MB (powers of 1000, as df -H)."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def _expiry(seconds: float) -> str:
    return f"in {seconds:.1f}s" if seconds > 0 else f"expired {-seconds:.1f}s ago"


def _more(total: int, shown: int, limit: int) -> list[str]:
    return [f"  ... and {total - shown} more (--limit {limit})"] if total > shown else []


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns aligned, two spaces apart, indented; nothing for no rows. Each cell is
    made ``visible`` (one line) before the columns are measured."""
    if not rows:
        return []
    rows = [[visible(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return [
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
