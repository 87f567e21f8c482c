"""The store under hostile conditions (issue 16, items 5, 6, 7 and 14): rows that do not
decode, a run whose end could not be written, two owners of one agent, and a process
killed between a prompt and its run record."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma.store import MemoryStore, Owner, RunRecord, SQLiteStore, Store
from satsuma.store._lease import _host_id
from satsuma.testing import FunctionModel, ScriptedModel, check_conversation

WORKER = Path(__file__).with_name("prompt_worker.py")
POISON = "DROP ALL TABLES (poison prompt)"


class Assistant(satsuma.Agent):
    name = "assistant"


def texts_sent(model: FunctionModel) -> list[str]:
    """Every text block of every message the model was sent."""
    return [
        block["text"]
        for request in model.requests
        for message in request.messages
        for block in message.content
        if block.get("type") == "text"
    ]


def recording_model(answer: str = "Sunny.") -> FunctionModel:
    async def reply(request: satsuma.ModelRequest) -> str:
        await trio.lowlevel.checkpoint()
        return answer

    return FunctionModel(reply)


# --- 5: rows that do not decode --------------------------------------------------------


async def stored_conversation(path: Path, agent_id: str = "a") -> None:
    async with (
        SQLiteStore(path) as store,
        satsuma.open_agent(
            Assistant, model=ScriptedModel(["one", "two"]), store=store, agent_id=agent_id
        ) as agent,
    ):
        await agent.run("first")
        await agent.run("second")


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("UPDATE messages SET content = '{not json' WHERE seq = 1", "message 1 of agent 'a'"),
        ("UPDATE messages SET content = '\"hi\"' WHERE seq = 2", "message 2 of agent 'a'"),
        ("UPDATE messages SET content = '[1, 2]' WHERE seq = 0", "message 0 of agent 'a'"),
        ("UPDATE messages SET role = 'system' WHERE seq = 3", "message 3 of agent 'a'"),
        ("DELETE FROM messages WHERE seq = 1", "message 1 of agent 'a' is missing"),
        ("UPDATE runs SET usage = '[1, 2]' WHERE prompt = 'second'", "run '"),
        ("UPDATE runs SET usage = 'nope' WHERE prompt = 'first'", "run '"),
        ("UPDATE runs SET usage = '[1, 2, 3, \"x\"]' WHERE prompt = 'first'", "run '"),
        ("UPDATE runs SET usage = '[1, 2, 3, 4, -0.5]' WHERE prompt = 'first'", "run '"),
        ("UPDATE runs SET usage = '[1, 2, 3, 4, \"x\"]' WHERE prompt = 'first'", "run '"),
        ("UPDATE runs SET usage = '[1, 2, 3, 4, 0.5, 6, 7]' WHERE prompt = 'first'", "run '"),
        ("UPDATE runs SET usage = '[1, 2, 3, 4, 0.5, -6]' WHERE prompt = 'first'", "run '"),
        ("UPDATE runs SET status = 'weird' WHERE prompt = 'first'", "run '"),
    ],
)
async def test_a_row_that_does_not_decode_stops_the_agent_with_a_store_error(
    tmp_path: Path, damage: str, named: str
) -> None:
    path = tmp_path / "s.db"
    await stored_conversation(path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(damage)
    model = recording_model()
    async with SQLiteStore(path) as store:
        with pytest.raises(satsuma.StoreError) as caught:
            async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a"):
                raise AssertionError("the agent must not start on a damaged history")
        assert named in str(caught.value)
        assert "agent 'a'" in str(caught.value)
        assert "nothing was guessed" in str(caught.value)
        # Nothing was sent, and nothing was written over the damage.
        assert model.requests == []
        with contextlib.closing(sqlite3.connect(path)) as db:
            assert db.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone() == (
                0,
            )
    # Another agent of the same file is not affected.
    async with (
        SQLiteStore(path) as store,
        satsuma.open_agent(Assistant, model=model, store=store, agent_id="b") as other,
    ):
        assert (await other.run("hi")).output == "Sunny."


async def test_a_journal_row_that_does_not_decode_names_the_call_and_the_run(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        await store.start_run(
            RunRecord(run_id="r1", agent_id="a", status="running", prompt="p", started_at=1.0)
        )
        await store.call_started("r1", "toolu_1", "charge", {"amount": 3})
        await store.call_finished("r1", "toolu_1", content="ok", is_error=False, error_kind=None)
    for column in ("input", "content"):
        with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db, db:
            db.execute(f"UPDATE tool_calls SET {column} = '[oops'")
        async with SQLiteStore(tmp_path / "s.db") as store:
            with pytest.raises(satsuma.StoreError, match=r"call 'toolu_1' of run 'r1'"):
                await store.calls("r1")


# --- 6: a run whose end could not be written ------------------------------------------


class LosesEnds:
    """A store whose end_run fails (as a full disk would) ``failures`` times (None: for
    ever); with ``sticky``, also every later time for a run whose end failed once."""

    def __init__(self, inner: Store, failures: int | None = None, *, sticky: bool = False) -> None:
        self.inner = inner
        self.failures = failures
        self.sticky = sticky
        self.failed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def end_run(self, run_id: str, **kwargs: Any) -> None:
        again = self.sticky and run_id in self.failed
        if again or self.failures is None or self.failures > 0:
            if self.failures is not None and not again:
                self.failures -= 1
            self.failed.append(run_id)
            raise satsuma.StoreError("test", "disk full")
        await self.inner.end_run(run_id, **kwargs)


async def test_a_run_whose_end_was_lost_is_resumed_with_its_own_output(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as sqlite:
        # The first run's end cannot be written, nor tried again before the second run.
        flaky: Any = LosesEnds(sqlite, failures=1, sticky=True)
        async with satsuma.open_agent(
            Assistant,
            model=ScriptedModel(["answer one", "answer two"]),
            store=flaky,
            agent_id="a",
        ) as agent:
            first = await agent.run("one")
            second = await agent.run("two")
        assert first.status == second.status == "completed"
        assert set(flaky.failed) == {first.run_id}
    # The process "stopped" before the first run's end could be written: on the next
    # open it is interrupted, and resuming it gives its own answer, not the last one.
    async with SQLiteStore(path) as store:
        model = recording_model("never asked")
        async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as agent:
            records = {r.run_id: r for r in await store.runs("a")}
            assert records[first.run_id].status == "interrupted"
            assert records[second.run_id].status == "completed"
            resumed = await agent.resume(first.run_id)
        assert resumed.status == "completed"
        assert resumed.output == "answer one"
        assert model.requests == []
        record = await store.get_run(first.run_id)
        assert record is not None and record.status == "completed"
        check_conversation(await store.load_messages("a"))


async def test_a_lost_end_is_written_before_the_next_run_starts(store: Store) -> None:
    flaky: Any = LosesEnds(store, failures=1)
    async with satsuma.open_agent(
        Assistant, model=ScriptedModel(["a1", "a2"]), store=flaky, agent_id="a"
    ) as agent:
        first = await agent.run("one")
        record = await store.get_run(first.run_id)
        assert record is not None and record.status == "running"  # not written yet
        await agent.run("two")
    records = await store.runs("a")
    assert [(r.prompt, r.status) for r in records] == [("one", "completed"), ("two", "completed")]


async def test_a_run_without_an_answer_that_a_later_run_went_past_cannot_be_resumed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"

    async def reply(request: satsuma.ModelRequest) -> str:
        await trio.lowlevel.checkpoint()
        if request.messages[-1].text == "crash":
            raise satsuma.ModelError("overloaded")  # the run fails; the agent goes on
        return "fine"

    async with SQLiteStore(path) as sqlite:
        flaky: Any = LosesEnds(sqlite, failures=1, sticky=True)
        async with satsuma.open_agent(
            Assistant, model=FunctionModel(reply), store=flaky, agent_id="a"
        ) as agent:
            failed = await agent.run("crash")
            assert failed.status == "failed"
            assert (await agent.run("later")).output == "fine"
    async with (
        SQLiteStore(path) as store,
        satsuma.open_agent(Assistant, model=FunctionModel(reply), store=store, agent_id="a") as a,
    ):
        with pytest.raises(ValueError, match="a later run went past it before it had an answer"):
            await a.resume(failed.run_id)
        assert [m.text for m in a.history] == ["later", "fine"]


# --- 7: one owner per agent --------------------------------------------------------------


async def test_a_second_opener_in_the_same_process_is_refused(store: Store) -> None:
    async with satsuma.open_agent(
        Assistant, model=ScriptedModel(["x"]), store=store, agent_id="a"
    ) as first:
        with pytest.raises(satsuma.StoreError) as caught:
            async with satsuma.open_agent(
                Assistant, model=ScriptedModel([]), store=store, agent_id="a"
            ):
                raise AssertionError("two owners of one agent")
        text = str(caught.value)
        assert f"agent 'a' is already open in process {os.getpid()}" in text
        assert socket.gethostname() in text and "(this process)" in text
        assert (await first.run("still mine")).output == "x"
        # Another id is free.
        async with satsuma.open_agent(
            Assistant, model=ScriptedModel(["y"]), store=store, agent_id="b"
        ) as other:
            assert (await other.run("hi")).output == "y"
    # Closed: it can be opened again.
    async with satsuma.open_agent(
        Assistant, model=ScriptedModel(["z"]), store=store, agent_id="a"
    ) as again:
        assert (await again.run("back")).output == "z"


async def start_worker(db: Path, where: str, prompt: str = POISON) -> trio.Process:
    """Start prompt_worker.py and wait until it stands at ``where``."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), str(db), "a", prompt, where],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(60):
        while f"AT {where}\n".encode() not in seen:
            chunk = await process.stdout.receive_some()
            if not chunk:
                assert process.stderr is not None
                errors = await process.stderr.receive_some()
                raise AssertionError(f"the worker ended: {errors.decode()}")
            seen += chunk
    return process


async def kill(process: trio.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


async def test_an_agent_held_by_another_process_is_refused_until_that_process_dies(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    worker = await start_worker(db, "model", "hello")
    try:
        async with SQLiteStore(db) as store:
            with pytest.raises(satsuma.StoreError) as caught:
                async with satsuma.open_agent(
                    Assistant, model=ScriptedModel([]), store=store, agent_id="a"
                ):
                    raise AssertionError("two owners of one agent")
            text = str(caught.value)
            assert f"process {worker.pid} on host {socket.gethostname()}" in text
            assert "(this process)" not in text
            # Nothing of the holder's was touched: its run is still running.
            assert [r.status for r in await store.runs("a")] == ["running"]
    finally:
        await kill(worker)
    # The holder died: its agent is free, and its run was interrupted.
    async with (
        SQLiteStore(db) as store,
        satsuma.open_agent(Assistant, model=ScriptedModel(["hi"]), store=store, agent_id="a"),
    ):
        assert [r.status for r in await store.runs("a")] == ["interrupted"]


def put_lease(db: Path, *, pid: int, host: str, process_start: str, expires_at: float) -> None:
    # A holder of this host is one of this PID namespace and boot too, as this satsuma
    # records it (tests/store/test_lease_host.py has the others).
    host_id = _host_id() if host == socket.gethostname() else ""
    with contextlib.closing(sqlite3.connect(db)) as raw, raw:
        raw.execute(
            "INSERT INTO leases (agent_id, owner_id, pid, host, process_start, epoch, "
            "expires_at, host_id) VALUES ('a', 'someone', ?, ?, ?, 7, ?, ?)",
            (pid, host, process_start, expires_at, host_id),
        )


def start_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    with open("/proc/sys/kernel/random/boot_id", "rb") as file:
        boot = file.read().strip().decode()
    return f"{boot}:{stat[stat.rindex(b')') + 2 :].split()[19].decode()}"


@pytest.mark.skipif(sys.platform != "linux", reason="process start times are read from /proc")
@pytest.mark.parametrize(
    ("holder", "taken"),
    [
        # Another host: alive while its lease has not expired.
        ({"pid": 1, "host": "elsewhere", "process_start": "", "expires_at": 1e12}, False),
        ({"pid": 1, "host": "elsewhere", "process_start": "", "expires_at": 1.0}, True),
        # This host: alive while its process is (whatever the expiry says).
        ({"pid": "parent", "host": "here", "process_start": "parent", "expires_at": 1.0}, False),
        # ... and its pid now belongs to another process: gone.
        ({"pid": "parent", "host": "here", "process_start": "x:1", "expires_at": 1e12}, True),
        ({"pid": "free", "host": "here", "process_start": "", "expires_at": 1e12}, True),
    ],
)
async def test_a_holder_that_is_gone_is_detected(
    tmp_path: Path, holder: dict[str, Any], taken: bool
) -> None:
    db = tmp_path / "s.db"
    async with SQLiteStore(db):
        pass
    pid = {"parent": os.getppid(), "free": 2**22 + 17}.get(holder["pid"], holder["pid"])
    if holder["pid"] == "free":
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    put_lease(
        db,
        pid=pid,
        host=socket.gethostname() if holder["host"] == "here" else holder["host"],
        process_start=start_of(pid)
        if holder["process_start"] == "parent"
        else holder["process_start"],
        expires_at=holder["expires_at"],
    )
    async with SQLiteStore(db) as store:
        if taken:
            lease = await store.acquire_lease("a", Owner.new(), seconds=30)
            assert lease.epoch == 8  # the epoch only grows
        else:
            with pytest.raises(satsuma.StoreError, match=f"already open in process {pid} on"):
                await store.acquire_lease("a", Owner.new(), seconds=30)


async def test_a_write_under_a_lease_taken_over_is_refused(store: Store) -> None:
    owner = Owner.new()
    old = await store.acquire_lease("a", owner, seconds=30)
    await store.write_tail("a", 0, [satsuma.Message.user("mine")], lease=old)
    # The same owner takes it again (a supervisor's restarted child): a new epoch.
    new = await store.acquire_lease("a", owner, seconds=30)
    assert new.epoch == old.epoch + 1
    for write in (
        store.write_tail("a", 0, [satsuma.Message.user("stale")], lease=old),
        store.start_run(
            RunRecord(run_id="r", agent_id="a", status="running", prompt="p", started_at=1.0),
            lease=old,
        ),
        store.call_started("r", "toolu_1", "t", {}, lease=old),
        store.renew_lease(old, seconds=30),
    ):
        with pytest.raises(satsuma.StoreError, match=r"epoch 1\) was refused"):
            await write
    assert [m.text for m in await store.load_messages("a")] == ["mine"]
    await store.release_lease(old)  # a stale release lets nothing go
    with pytest.raises(satsuma.StoreError, match="already open"):
        await store.acquire_lease("a", Owner.new(), seconds=30)
    await store.release_lease(new)
    taken = await store.acquire_lease("a", Owner.new(), seconds=30)
    assert taken.epoch == new.epoch + 1
    await store.release_lease(taken)


async def test_the_lease_is_renewed_while_the_agent_runs(autojump_clock: trio.abc.Clock) -> None:
    renewals: list[float] = []

    class Counting:
        def __init__(self, inner: Store) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        async def renew_lease(self, lease: Any, *, seconds: float) -> Any:
            renewals.append(trio.current_time())
            return await self.inner.renew_lease(lease, seconds=seconds)

    counting: Any = Counting(MemoryStore())
    async with satsuma.open_agent(Assistant, model=ScriptedModel([]), store=counting, agent_id="a"):
        start = trio.current_time()
        await trio.sleep(105)
    assert [round(t - start) for t in renewals] == [10 * n for n in range(1, 11)]


async def test_a_supervised_agent_restarted_keeps_its_lease(tmp_path: Path) -> None:
    crashes = 0

    async def reply(request: satsuma.ModelRequest) -> str:
        nonlocal crashes
        await trio.lowlevel.checkpoint()
        if request.messages[-1].text == "crash" and crashes == 0:
            crashes += 1
            raise RuntimeError("a bug in the model code")  # a crash: the child restarts
        return "ok"

    async with SQLiteStore(tmp_path / "s.db") as store, satsuma.Supervisor() as sup:
        agent = await sup.start_child(
            Assistant, model=FunctionModel(reply), store=store, agent_id="a"
        )
        with contextlib.suppress(Exception):
            await agent.run("crash")
        # The restarted incarnation owns the agent (a new epoch), and works.
        assert (await agent.run("after")).output == "ok"
        with pytest.raises(satsuma.StoreError, match="already open"):
            await store.acquire_lease("a", Owner.new(), seconds=30)


# --- 14: a prompt and its run record, in one transaction ---------------------------------


@pytest.mark.parametrize("where", ["start", "model"])
async def test_a_prompt_whose_run_never_went_on_is_never_sent_again(
    tmp_path: Path, where: str
) -> None:
    db = tmp_path / "s.db"
    # A first, answered exchange, then a process killed with the poison prompt.
    async with (
        SQLiteStore(db) as store,
        satsuma.open_agent(Assistant, model=ScriptedModel(["hi"]), store=store, agent_id="a") as a,
    ):
        await a.run("hello")
    worker = await start_worker(db, where)
    await kill(worker)
    async with SQLiteStore(db) as store:
        stored = [m.text for m in await store.load_messages("a")]
        runs = await store.runs("a")
        if where == "start":
            # Killed before the run record: neither the prompt nor the record is there.
            assert stored == ["hello", "hi"]
            assert [r.prompt for r in runs] == ["hello"]
        else:
            assert stored == ["hello", "hi", POISON]
            assert [(r.prompt, r.status) for r in runs] == [
                ("hello", "completed"),
                (POISON, "running"),
            ]
        model = recording_model()
        async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as a:
            result = await a.run("what's the weather?")
        assert result.output == "Sunny."
        assert POISON not in texts_sent(model)
        assert texts_sent(model) == ["hello", "hi", "what's the weather?"]
        messages = await store.load_messages("a")
        check_conversation(messages)
        assert POISON not in [m.text for m in messages]
        if where == "model":
            killed = next(r for r in await store.runs("a") if r.prompt == POISON)
            assert killed.status == "cancelled"


async def test_a_killed_run_that_is_resumed_sends_its_prompt(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    worker = await start_worker(db, "model")
    await kill(worker)
    async with SQLiteStore(db) as store:
        (record,) = await store.runs("a")
        model = recording_model("Done, carefully.")
        async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as a:
            result = await a.resume(record.run_id)
        assert result.status == "completed"
        assert texts_sent(model) == [POISON]
        check_conversation(await store.load_messages("a"))


async def test_a_prompt_left_without_a_run_by_an_older_satsuma_is_not_sent(
    store: Store,
) -> None:
    # What a kill between two transactions left behind before they were one.
    await store.write_tail(
        "a",
        0,
        [
            satsuma.Message.user("hello"),
            satsuma.Message(role="assistant", content=[{"type": "text", "text": "hi"}]),
            satsuma.Message.user(POISON),
        ],
    )
    model = recording_model()
    async with satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as a:
        await a.run("what's the weather?")
    assert texts_sent(model) == ["hello", "hi", "what's the weather?"]
    check_conversation(await store.load_messages("a"))


async def test_killed_at_random_points_around_the_start_no_prompt_is_orphaned(
    tmp_path: Path,
) -> None:
    # SIGKILL at random moments while a worker opens the agent and starts its run: after
    # each, every prompt stored has its run record, and the next run sends no prompt of
    # a run that did not go on.
    rng = random.Random(16)
    db = tmp_path / "s.db"
    for n in range(12):
        process = await trio.lowlevel.open_process(
            [sys.executable, str(WORKER), str(db), "a", f"{POISON} {n}", "model"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await trio.sleep(rng.uniform(0.3, 1.5))  # an interpreter starts in about a second
        await kill(process)
        async with SQLiteStore(db) as store:
            messages = await store.load_messages("a")
            runs = {r.position: r for r in await store.runs("a")}
            for index, message in enumerate(messages):
                if message.role == "user" and POISON in message.text:
                    assert index in runs and runs[index].prompt == message.text
        # Nothing of a killed run goes out with the next one.
        model = recording_model()
        async with (
            SQLiteStore(db) as store,
            satsuma.open_agent(Assistant, model=model, store=store, agent_id="a") as a,
        ):
            await a.run(f"question {n}")
        assert not [t for t in texts_sent(model) if POISON in t]
