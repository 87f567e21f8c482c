"""A run paused awaiting approval survives the death of its process: a worker
(approval_worker.py) runs the agent until the run pauses, the test SIGKILLs it, then
opens the same store and agent here and resumes the run with decisions. The approved call
runs once, here; the call of the same turn that needed no decision ran once, there, and
is not run again; the denied call never runs and the model reads the person's reason.
Side effects are counted in a file that both processes append to."""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import trio

import satsuma
from satsuma import Approve, Deny
from satsuma.store import PostgresStore, SQLiteStore
from satsuma.testing import ScriptedModel, check_conversation

WORKER = Path(__file__).with_name("approval_worker.py")


def load_worker() -> ModuleType:
    """The worker's module, for its agent class and tools (the tests run with
    --import-mode=importlib, so a sibling file is not importable by name)."""
    spec = importlib.util.spec_from_file_location("satsuma_test_approval_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = load_worker()


async def pause_in_a_worker(db: str) -> tuple[trio.Process, str]:
    """Start the worker and wait until its run has paused (and says so); its run id."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), db, worker.effects],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        seen = b""
        with trio.fail_after(60):
            while b"\n" not in seen:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    errors = await process.stderr.receive_some()
                    raise AssertionError(f"the worker ended: {errors.decode(errors='replace')}")
                seen += chunk
        word, run_id = seen.decode().split()
        assert word == "PAUSED", seen
    except BaseException:
        await kill(process)  # never left running after the test
        raise
    return process, run_id


async def kill(process: trio.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGKILL)
    with trio.CancelScope(shield=True):
        await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


def open_store(db: str) -> SQLiteStore | PostgresStore:
    return PostgresStore(db) if worker.is_postgres(db) else SQLiteStore(db)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agents.db")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


async def test_a_run_paused_in_a_killed_process_is_resumed_in_another(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.log"
    monkeypatch.setattr(worker, "effects", str(effects))
    process, run_id = await pause_in_a_worker(db)
    try:
        # Paused, in the store, while its process still stands there.
        async with open_store(db) as store:
            (record,) = await store.runs(worker.AGENT_ID)
            assert (record.run_id, record.status) == (run_id, "awaiting_approval")
            pending = await store.pending_calls(run_id)
    finally:
        await kill(process)
    assert process.returncode == -signal.SIGKILL  # killed where it stood, nothing cleaned up
    assert [(p.tool_name, p.input) for p in pending] == [
        ("transfer", {"to": "bob", "amount": 10}),
        ("wire", {"to": "eve", "amount": 99}),
    ]
    assert effects.read_text().splitlines() == ["balance main"]  # ran before the pause

    transfer, wire = (p.tool_use_id for p in pending)
    model = ScriptedModel(["Paid Bob; Eve's wire was refused."])
    events: list[satsuma.AgentEvent] = []
    async with (
        open_store(db) as store,
        satsuma.open_agent(
            worker.Banker, model=model, store=store, agent_id=worker.AGENT_ID
        ) as agent,
    ):
        assert agent.interrupted == ()  # the kill did not turn the pause into an interruption
        decisions: dict[str, Approve | Deny] = {
            transfer: Approve(by="alice"),
            wire: Deny("not today", by="carol"),
        }
        result = await agent.resume(run_id, decisions=decisions, events=events.append)
        check_conversation(agent.history)
        (record,) = await store.runs(worker.AGENT_ID)
    assert (result.run_id, result.status, record.status) == (run_id, "completed", "completed")
    assert result.output == "Paid Bob; Eve's wire was refused."
    # Each side effect once: balance in the killed process, transfer here, wire never.
    assert effects.read_text().splitlines() == ["balance main", "transfer 10 to bob"]
    (request,) = model.requests
    answers = [b["content"] for b in request.messages[-1].content if b["type"] == "tool_result"]
    assert answers == ["main: 100", "sent 10 to bob", "Error: Denied: not today"]
    decided = {e.tool_name: e for e in events if isinstance(e, satsuma.ApprovalDecided)}
    assert {name: (e.approved, e.decided_by) for name, e in decided.items()} == {
        "transfer": (True, "alice"),
        "wire": (False, "carol"),
    }
