"""Failover across processes: a node in another process is killed (SIGKILL) in the middle
of a tool call; a node of this process takes the run over when the dead node's heartbeat
has expired, and resumes it from the tool-call journal: the finished idempotent call is
not run again, the call in doubt (not idempotent) is answered ``Interrupted`` and never
run twice."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import psycopg
import trio

from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel, check_conversation
from satsuma.tools import INTERRUPTED_TEXT

WORKER = Path(__file__).with_name("node_worker.py")


def _worker_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_satsuma_node_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _worker_module()


def _expiries(dsn: str, pid: int) -> list[tuple[float]]:
    with psycopg.connect(dsn) as db:
        return db.execute("SELECT expires_at FROM nodes WHERE pid = %s", (pid,)).fetchall()


async def _line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> str:
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError("the node process ended")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


async def test_a_run_whose_node_is_killed_mid_tool_completes_on_another_node_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    async with PostgresStore(postgres_dsn) as store:
        await store.open()  # the schema, before the node process and the client race
        cluster = Cluster(store)
        with (tmp_path / "node.err").open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                [sys.executable, str(WORKER), postgres_dsn, str(log)],
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        assert process.stdout is not None
        buffer = bytearray()
        try:
            with trio.fail_after(30):
                assert (await _line(process.stdout, buffer)).startswith("READY")
                run_id = await cluster.submit(worker.Payer, "customer-7", "pay 10 EUR")
                assert await _line(process.stdout, buffer) == "CHARGED toolu_charge"
                # lookup, done at once, is journaled; charge is in its sleep.
                while not any(e.finished for e in await store.calls(run_id)):  # noqa: ASYNC110  (in the database)
                    await trio.sleep(0.02)
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        [claimed] = await cluster.runs("customer-7")
        assert claimed.status == "running"
        # The dead node's row, as its last heartbeat left it (no live node swept it yet).
        [(expired_at,)] = await trio.to_thread.run_sync(_expiries, postgres_dsn, process.pid)

        node = Node(
            store,
            agents=[worker.Payer],
            name="survivor",
            model=FunctionModel(worker.reply),
            context={"log": str(log)},
            lease_seconds=1.5,
            poll_interval=0.2,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(node.serve)
            started = trio.current_time()
            with trio.fail_after(15):
                result = await cluster.result(run_id)
            took = trio.current_time() - started
            nursery.cancel_scope.cancel()

    assert result.status == "completed"
    assert result.output == "paid"
    # Taken over once the dead node's row expired (1.5 s) and a heartbeat (every 0.5 s)
    # saw it.
    assert took < 1.5 + 0.5 + 2.0
    # Each call's side effect once: lookup's journaled outcome was reused, charge (in
    # doubt, not idempotent) was not run again.
    effects = sorted(log.read_text().splitlines())
    assert effects == ["charge toolu_charge 10", "lookup toolu_lookup 10"]
    async with PostgresStore(postgres_dsn) as reader:
        [run] = await Cluster(reader).runs("customer-7")
        history = await reader.load_messages("customer-7")
    assert (run.status, run.attempts) == ("completed", 2)
    # The takeover's order, on the database's clock: the run was claimed again only
    # after the dead node's row had expired (and it was, once it had).
    assert run.claimed_at is not None and run.claimed_at > expired_at
    check_conversation(history)
    answers = {
        block["tool_use_id"]: block["content"]
        for message in history
        for block in message.content
        if block.get("type") == "tool_result"
    }
    assert answers["toolu_lookup"] == "balance 100"
    assert INTERRUPTED_TEXT in str(answers["toolu_charge"])
