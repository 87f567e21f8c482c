"""The cluster under failures: three node processes on one database run dozens of runs
of slow tools while one node is killed (SIGKILL) and another paused (SIGSTOP) at random
points (mid-tool, between turns, mid-commit). Every run ends once, in its conversation's
order; a non-idempotent call's side effect happens at most once, and a call in doubt is
answered "not re-run"; the paused node, resumed at the end, writes nothing.

The points are drawn from a seed printed at the start (shown when the test fails); run
it again with ``SATSUMA_CHAOS_SEED=<seed>`` to replay the same draw (the machine's timing
still varies)."""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import random
import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import trio

from satsuma.cluster import Cluster
from satsuma.cluster._listen import Listener
from satsuma.store import PostgresStore
from satsuma.store import _queue as queue
from satsuma.testing import check_conversation
from satsuma.tools import INTERRUPTED_TEXT

WORKER = Path(__file__).with_name("node_worker.py")

CONVERSATIONS = 8
RUNS_EACH = 4
LEASE_SECONDS = 1.0
TOOL_SECONDS = 0.15


def _worker_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_satsuma_node_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _worker_module()


def _snapshot(dsn: str) -> dict[str, Any]:
    """Every row of the conversations, runs, journal, leases and queue."""
    with psycopg.connect(dsn) as db:
        return {
            table: db.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
            for table, order in [
                ("messages", "agent_id, seq"),
                ("runs", "seq"),
                ("tool_calls", "position"),
                ("leases", "agent_id"),
                ("run_queue", "seq"),
            ]
        }


def _node_rows(dsn: str, pid: int) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as db:
        return db.execute(
            "SELECT node_id, heartbeat_at FROM nodes WHERE pid = %s", (pid,)
        ).fetchall()


def _show(*words: object) -> None:
    # pytest shows a failed test's output: the seed, to replay it, and the state it left.
    print(*words)  # noqa: T201


def _explain(dsn: str, nodes: list[Any]) -> None:
    """What the queue and the nodes were at when the test failed."""
    with psycopg.connect(dsn) as db:
        for row in db.execute(
            "SELECT run_id, agent_id, prompt, status, node_id, attempts FROM run_queue "
            "WHERE status NOT IN ('completed') OR attempts > 1 ORDER BY seq"
        ):
            _show("run", *row)
        for row in db.execute("SELECT node_id, name, pid, expires_at FROM nodes"):
            _show("node", *row)
        for row in db.execute("SELECT agent_id, owner_id, pid, epoch FROM leases"):
            _show("lease", *row)
    for node in nodes:
        _show(f"--- node {node.pid} stderr:\n{node.stderr.read_text()[-3000:]}")


async def _until(condition: Any) -> Any:
    """Poll a database condition (in a thread) until it gives something true."""
    while not (found := await trio.to_thread.run_sync(condition)):  # noqa: ASYNC110  (in the database)
        await trio.sleep(0.05)
    return found


async def _strike(
    node: Any, how: signal.Signals, calls: int, delay: float, struck: trio.Event
) -> None:
    """Send ``how`` to the node ``delay`` seconds after its ``calls``-th tool execution
    started: inside the tool, between turns, or in a commit."""
    await node.wait_for(lambda _: len(node.calls()) >= calls)
    await trio.sleep(delay)
    node.process.send_signal(how)
    struck.set()


async def test_runs_survive_a_killed_and_a_paused_node_each_once_and_in_order(
    postgres_dsn: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SATSUMA_CHAOS_SEED") or random.randrange(2**32))
    _show(f"chaos seed {seed} (SATSUMA_CHAOS_SEED={seed} replays this draw)")
    rng = random.Random(seed)
    killed_at = (rng.randint(1, 4), rng.uniform(0.0, 0.3))
    paused_at = (rng.randint(1, 4), rng.uniform(0.0, 0.3))
    victims = rng.sample(range(3), 2)
    _show(f"kill node {victims[0]} at {killed_at}, pause node {victims[1]} at {paused_at}")

    log = tmp_path / "effects.log"
    done: list[str] = []
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        await store.open()  # the schema, before the node processes race for it
        cluster = Cluster(store, poll_interval=0.5)
        # An end is told on one of two channels (the result's, or done's for a result
        # too long to carry): the run id is the payload's first word on both.
        listener = Listener(store, [queue.RESULT_CHANNEL, queue.DONE_CHANNEL])
        await listener.open()

        async def count_ends() -> None:
            while True:
                heard = await listener.wait(1.0)
                done.extend(payload.partition(" ")[0] for _, payload in heard)

        nodes = [
            await worker.NodeProcess.start(
                postgres_dsn, log, tmp_path, "clerk", f"n{i}", LEASE_SECONDS, TOOL_SECONDS
            )
            for i in range(3)
        ]
        killed, paused = nodes[victims[0]], nodes[victims[1]]
        try:
            for node in nodes:
                nursery.start_soon(node.pump)
            with trio.fail_after(60):
                for node in nodes:
                    await node.wait_for(lambda lines: any(x.startswith("READY") for x in lines))
                nursery.start_soon(count_ends)
                submitted: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
                for turn in range(RUNS_EACH):
                    for c in range(CONVERSATIONS):
                        agent_id, prompt = f"book-{c}", f"entry {c} {turn}"
                        run_id = await cluster.submit(worker.Clerk, agent_id, prompt)
                        submitted[agent_id].append((run_id, prompt))
                kill_struck, pause_struck = trio.Event(), trio.Event()
                nursery.start_soon(_strike, killed, signal.SIGKILL, *killed_at, kill_struck)
                nursery.start_soon(_strike, paused, signal.SIGSTOP, *paused_at, pause_struck)

                run_ids = [run_id for runs in submitted.values() for run_id, _ in runs]
                while True:
                    ended = await cluster.runs(status=queue.ENDED, limit=1000)
                    if len(ended) == len(run_ids):
                        break
                    await trio.sleep(0.1)
                await kill_struck.wait()
                await pause_struck.wait()
                results = {run_id: await cluster.result(run_id) for run_id in run_ids}
                [(stale_id, _)] = await trio.to_thread.run_sync(
                    _node_rows, postgres_dsn, paused.pid
                ) or [(None, None)]
                before = await trio.to_thread.run_sync(_snapshot, postgres_dsn)

                # The paused node goes on; it learns it was counted dead and joins again
                # under a new id; after two heartbeats of that one, it has had every
                # chance to write.
                paused.process.send_signal(signal.SIGCONT)
                for _ in range(3):
                    [(_, beat)] = await _until(
                        lambda: [
                            row
                            for row in _node_rows(postgres_dsn, paused.pid)
                            if row[0] != stale_id
                        ]
                    )
                    await _until(
                        lambda beat=beat: [
                            row for row in _node_rows(postgres_dsn, paused.pid) if row[1] > beat
                        ]
                    )
                after = await trio.to_thread.run_sync(_snapshot, postgres_dsn)
        except BaseException:
            _explain(postgres_dsn, nodes)
            raise
        finally:
            for node in nodes:
                await node.kill()
            nursery.cancel_scope.cancel()
    listener.close()

    # No process is left.
    for node in nodes:
        assert node.process.returncode is not None
        try:
            os.kill(node.pid, 0)
        except ProcessLookupError:
            pass
        else:
            raise AssertionError(f"node process {node.pid} is still there")

    # Every run ended once, completed, with its own answer.
    assert collections.Counter(done) == collections.Counter(run_ids)
    prompts = {run_id: prompt for runs in submitted.values() for run_id, prompt in runs}
    for run_id, result in results.items():
        if (result.status, result.output) != ("completed", f"done {prompts[run_id]}"):
            _explain(postgres_dsn, nodes)
            raise AssertionError(f"{result!r}")

    # The paused node wrote nothing once it went on: not into a conversation, a run
    # record, the journal or the queue. (Paused between claiming a run and opening its
    # agent, it may take the agent's lease, if no one holds it, and let it go again as
    # soon as it sees the run is no longer its: who holds each lease is unchanged.)
    assert {k: v for k, v in after.items() if k != "leases"} == {
        k: v for k, v in before.items() if k != "leases"
    }
    assert [row[:2] for row in after["leases"]] == [row[:2] for row in before["leases"]]
    assert "was counted dead" in paused.stderr.read_text()

    # Side effects: a non-idempotent call at most once, and run (once) unless it was
    # answered "not re-run"; an idempotent call at least once.
    effects = collections.Counter(
        (line.split()[0], line.split()[2]) for line in log.read_text().splitlines()
    )
    in_doubt = 0
    for agent_id, runs in submitted.items():
        history = before["messages"]
        messages = [
            {"role": role, "content": json.loads(content)}
            for a, _, role, content in history
            if a == agent_id
        ]
        check_conversation(messages)
        # In the order submitted, each once.
        asked = [
            block["text"]
            for message in messages
            if message["role"] == "user"
            for block in message["content"]
            if block.get("type") == "text"
        ]
        assert asked == [prompt for _, prompt in runs]
        for message in messages:
            for block in message["content"]:
                if block.get("type") != "tool_result":
                    continue
                call_id, answer = block["tool_use_id"], str(block["content"])
                tool = "fetch" if call_id.endswith("_fetch") else "record"
                if tool == "fetch":
                    assert answer.startswith("fetch ") and effects["fetch", call_id] >= 1
                elif INTERRUPTED_TEXT in answer:
                    in_doubt += 1
                    assert effects["record", call_id] <= 1
                else:
                    assert answer.startswith("record ") and effects["record", call_id] == 1
    assert all(count == 1 for (tool, _), count in effects.items() if tool == "record"), effects
    _show(f"{len(run_ids)} runs, {in_doubt} call(s) in doubt answered 'not re-run'")
