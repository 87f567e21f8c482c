"""What a node's event recording costs a cluster run in Python calls, counted exactly
(``sys.setprofile`` on every thread), beside what it asks of PostgreSQL (``_store_counts``),
and what the cluster itself adds to the same run in one process (open_agent + run on
PostgreSQL), by file.

A run of the cluster benchmark's agent (two tool calls at once, then the answer), one
after another, its caller, its node and the loopback model server all in this process,
once with the node's default ``EventLog`` and once with ``event_log=None``; the calls
that recording adds are grouped by where they run: the streamed model answer (a run
that records its events listens to the text as it comes, so the node asks for a stream:
the HTTP read on the node and the write on the model server), the recording and its
store writes, and trio's scheduling. Exact counts hold on a busy machine, where CPU
times do not::

    python benchmarks/_cluster_calls.py [--runs N] [--tool-ms MS]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from types import FrameType
from typing import Any

import trio
from _cluster_agent import Courier, respond, ship
from _cluster_latency import cluster_run, in_process_run
from _store_counts import count
from postgres_store import database, embedded_server

from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import MessagesServer

# Where a function's file lies, to the group its calls count in (the first that matches).
_GROUPS = (
    ("the recording and its store writes", ("cluster/", "store/", "cattrs/", "agents/_jsonlog")),
    ("the recording and its store writes", ("agents/_events", "psycopg/", "json/", "types/")),
    ("the streamed answer (node and model server)", ("h11/", "httpx", "httpcore", "anthropic/")),
    ("the streamed answer (node and model server)", ("trio/_socket", "trio/_highlevel")),
    ("the streamed answer (node and model server)", ("testing/", "models/", "contextlib")),
    ("the streamed answer (node and model server)", ("_core/_io_epoll",)),
    ("the agent's events, made and handed on", ("agents/", "tools/", "attr/")),
)


class _Profile:
    """Python calls, by function, while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.calls: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.on and event == "call":
            code = frame.f_code
            # The file's folder and name: the groups' keys (``_GROUPS``).
            self.calls["/".join(code.co_filename.rsplit("/", 2)[-2:]), code.co_name] += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        threading.setprofile(self)
        sys.setprofile(self)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)


def _group(file: str) -> str:
    for name, parts in _GROUPS:
        if any(part in file for part in parts):
            return name
    return "trio's scheduling and the rest"


async def _measure(dsn: str, runs: int, prompt: str, profile: _Profile) -> None:
    import anthropic  # noqa: F401  # imported before counting (a node imports it once)

    async with MessagesServer(then=respond, keep_requests=0) as server:
        os.environ["ANTHROPIC_BASE_URL"] = server.base_url
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        figures: dict[bool | None, tuple[dict[str, float], Counter[tuple[str, str]]]] = {}
        # The floor: the same runs in this process, open_agent + run on PostgreSQL.
        async with PostgresStore(dsn) as store:
            counts = count(store)
            for index in range(2):
                await in_process_run(store, f"calls-warm-one-{index}", prompt)
            counts.reset()
            profile.calls.clear()
            profile.on = True
            for index in range(runs):
                await in_process_run(store, f"calls-one-{index}", prompt)
            profile.on = False
            figures[None] = counts.per(runs), Counter(profile.calls)
        for recorded in (True, False):
            options: dict[str, Any] = {} if recorded else {"event_log": None}
            async with (
                PostgresStore(dsn) as caller_store,
                PostgresStore(dsn) as node_store,
                trio.open_nursery() as nursery,
            ):
                counts = count(node_store)
                await nursery.start(Node(node_store, agents=[Courier], **options).serve)
                cluster = Cluster(caller_store)
                for index in range(2):
                    await cluster_run(cluster, f"calls-warm-{recorded}-{index}", prompt)
                await trio.sleep(0.2)  # the node's last writes of the warm-up
                counts.reset()
                profile.calls.clear()
                profile.on = True
                for index in range(runs):
                    await cluster_run(cluster, f"calls-{recorded}-{index}", prompt)
                await trio.sleep(0.2)
                profile.on = False
                figures[recorded] = counts.per(runs), Counter(profile.calls)
                nursery.cancel_scope.cancel()
    print(f"Python calls per cluster run ({runs} runs; caller, node and model in one process)")
    print(f"{'':22} {'calls':>8} {'txns':>5} {'stmts':>6} {'notifies':>8}")
    rows: tuple[tuple[bool | None, str], ...] = (
        (True, "EventLog()"),
        (False, "event_log=None"),
        (None, "one process (floor)"),
    )
    for recorded, label in rows:
        store_counts, calls = figures[recorded]
        print(
            f"{label:22} {sum(calls.values()) / runs:8.0f} {store_counts['transactions']:5.1f}"
            f" {store_counts['statements']:6.1f} {store_counts['notifies']:8.1f}"
        )
    extra = figures[True][1].copy()
    extra.subtract(figures[False][1])
    groups: Counter[str] = Counter()
    for (file, _), calls_ in extra.items():
        groups[_group(file)] += calls_
    print("what recording adds, by where it runs (calls per run):")
    for name, calls_ in groups.most_common():
        print(f"  {calls_ / runs:8.0f}  {name}")
    print("its 15 largest functions (calls per run):")
    for (file, function), calls_ in extra.most_common(15):
        print(f"  {calls_ / runs:8.0f}  {file}:{function}")
    beyond = figures[False][1].copy()
    beyond.subtract(figures[None][1])
    print("what a cluster run without events adds to one process's, by file (calls per run):")
    files: Counter[str] = Counter()
    for (file, _), calls_ in beyond.items():
        files[file] += calls_
    for file, calls_ in files.most_common(20):
        print(f"  {calls_ / runs:8.0f}  {file}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dsn", help="an admin DSN (default: an embedded server)")
    parser.add_argument("--runs", type=int, default=10, help="runs counted per side")
    parser.add_argument("--tool-ms", type=float, default=50.0, help="each tool call's sleep")
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    profile = _Profile()
    with contextlib.ExitStack() as stack:
        admin = options.dsn or stack.enter_context(embedded_server())
        dsn = stack.enter_context(database(admin))
        with profile.installed():
            trio.run(_measure, dsn, options.runs, ship(options.tool_ms / 1000), profile)


if __name__ == "__main__":
    main(sys.argv[1:])
