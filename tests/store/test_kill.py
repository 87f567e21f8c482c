"""The kill test: a worker process (kill_worker.py) runs an agent on a SQLite store; the
test kills it with SIGKILL at random points (in a model call, in a tool, between), starts
it again (it resumes the interrupted run), and after every kill checks the store and the
side-effect log:

- the stored conversation is valid (every tool_use answered exactly once), except that it
  may end with an assistant message whose calls were never answered (a kill mid-tool);
- no committed message is missing: the stored conversation starts with the one stored at
  the previous check, message for message (a run's prompt is rolled back only inside a
  process that sees the run fail; a SIGKILL never runs that code, and a resumed run never
  rolls back);
- no non-idempotent call ran twice: each ``charge`` appears at most once in the log, and
  only for a call the conversation holds and the journal marked as started.

Then a last worker runs to the end without a kill and the end state is checked.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

from satsuma import Message
from satsuma.store import JournalEntry, RunRecord, SQLiteStore
from satsuma.testing import check_conversation
from satsuma.tools import INTERRUPTED_TEXT

WORKER = Path(__file__).with_name("kill_worker.py")
AGENT_ID = "kill-agent"  # as in kill_worker.py
STEPS = 4  # as in kill_worker.py
KILLS = 100
ENDLESS = 1_000_000  # a target no worker reaches before it is killed


@attrs.define(eq=False)
class ForkServer:
    """kill_worker.py --fork-server: it forks each worker after its imports are done, so
    a worker starts in milliseconds (a fresh interpreter takes most of a second)."""

    process: trio.Process
    stderr_path: Path
    buffer: bytearray = attrs.Factory(bytearray)

    @classmethod
    async def start(cls, tmp_path: Path) -> ForkServer:
        stderr_path = tmp_path / "workers.err"
        with stderr_path.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                [sys.executable, str(WORKER), "--fork-server"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        server = cls(process, stderr_path)
        with trio.fail_after(30):
            assert await server.line() == "LOADED"
        return server

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    async def line(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some()
            if not chunk:
                raise AssertionError(f"the fork server ended:\n{self.stderr()}")
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer[:] = rest
        return line.decode()

    async def fork(self, tmp_path: Path, target: int, out: Path) -> int:
        """Start a worker; its pid."""
        assert self.process.stdin is not None
        db, log = tmp_path / "kill.db", tmp_path / "side_effects.log"
        await self.process.stdin.send_all(f"{db} {log} {target} {out}\n".encode())
        with trio.fail_after(10):
            word, pid = (await self.line()).split()
        assert word == "PID"
        return int(pid)

    async def exit_code(self, pid: int) -> int:
        """Wait for the worker's end; its exit code (negative: the signal that ended it)."""
        with trio.fail_after(10):
            word, ended, code = (await self.line()).split()
        assert (word, int(ended)) == ("EXIT", pid)
        return int(code)

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            if self.process.stdin is not None:
                await self.process.stdin.aclose()  # it stops when its stdin ends
            with trio.move_on_after(5):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
            if self.process.stdout is not None:
                await self.process.stdout.aclose()


def where(lines: list[str]) -> str:
    """Where a worker was when it died, from its progress lines."""
    ready = model = False
    tools: set[str] = set()
    for line in lines:
        word, *rest = line.split()
        if word == "READY":
            ready = True
        elif word == "model+":
            model = True
        elif word == "model-":
            model = False
        elif word == "tool+":
            tools.add(rest[1])
        elif word == "tool-":
            tools.discard(rest[1])
    if not ready:
        return "starting"
    if tools:
        return "in a tool"
    if model:
        return "in a model call"
    return "between"


@attrs.frozen
class State:
    messages: list[Message]
    journal: dict[str, JournalEntry]
    statuses: list[str]
    runs: list[RunRecord]
    log: list[tuple[str, str, int, int]]  # (tool, tool_use_id, task, step)


async def read_state(tmp_path: Path) -> State:
    async with SQLiteStore(tmp_path / "kill.db") as store:
        messages = await store.load_messages(AGENT_ID)
        runs = await store.runs(AGENT_ID)
        journal = {e.tool_use_id: e for run in runs for e in await store.calls(run.run_id)}
    log_path = tmp_path / "side_effects.log"
    text = log_path.read_text() if log_path.exists() else ""
    log = []
    for line in text.splitlines(keepends=True):
        assert line.endswith("\n"), f"a torn line in the side-effect log: {line!r}"
        tool, tool_use_id, task, step = line.split()
        log.append((tool, tool_use_id, int(task), int(step)))
    return State(messages, journal, [run.status for run in runs], runs, log)


def tool_uses(messages: list[Message]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for message in messages:
        for block in message.content:
            if block.get("type") == "tool_use":
                assert block["id"] not in found, f"tool_use id {block['id']} used twice"
                found[block["id"]] = dict(block)
    return found


def tool_results(messages: list[Message]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for message in messages:
        for block in message.content:
            if block.get("type") == "tool_result":
                assert block["tool_use_id"] not in found, f"{block['tool_use_id']} answered twice"
                found[block["tool_use_id"]] = block["content"]
    return found


def result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


def check_state(state: State, previous: list[Message]) -> Counter[str]:
    """The checks after each kill; returns counts of how the charges were answered."""
    messages = state.messages
    # (1) A valid conversation, but for calls a kill left without an answer at its end.
    last = messages[-1] if messages else None
    dangling = last is not None and last.role == "assistant" and bool(last.tool_uses)
    check_conversation(messages[:-1] if dangling else messages)
    uses = tool_uses(messages)
    results = tool_results(messages)
    assert set(results) <= set(uses)
    # (2) Nothing committed is lost or changed: the previous state is a prefix, message
    # for message. (A prompt is stored with its run record in one transaction, so no
    # prompt is ever left without its run for the next prompt to be joined to.)
    assert len(messages) >= len(previous), "committed messages went missing"
    assert messages[: len(previous)] == previous, "a committed message changed"
    # Each prompt in the conversation has its run record, which knows where it is.
    positions = {run.position: run for run in state.runs}
    for index, message in enumerate(messages):
        if any(
            block.get("type") == "text" and block.get("text", "").startswith("do task ")
            for block in message.content
        ):
            run = positions.get(index)
            assert run is not None, f"the prompt at {index} has no run record"
            assert message.text == run.prompt, (index, message.text, run.prompt)
    # At most one run is left unfinished (the one the next worker resumes).
    assert sum(status in ("running", "interrupted") for status in state.statuses) <= 1
    # A call's answer is its journaled outcome when the journal has one.
    for tool_use_id, content in results.items():
        entry = state.journal.get(tool_use_id)
        if entry is not None and entry.finished:
            assert content == entry.content, f"{tool_use_id}: answer differs from the journal"
    # (3) No non-idempotent call ran twice, and none ran before it was committed and
    # journaled as started.
    charges = Counter(tool_use_id for tool, tool_use_id, _, _ in state.log if tool == "charge")
    twice = {tool_use_id: n for tool_use_id, n in charges.items() if n > 1}
    assert not twice, f"non-idempotent calls ran more than once: {twice}"
    ran = {tool_use_id for _, tool_use_id, _, _ in state.log}
    assert ran <= set(uses), f"calls ran that the conversation lacks: {ran - set(uses)}"
    assert ran <= set(state.journal), f"calls ran unjournaled: {ran - set(state.journal)}"
    answers: Counter[str] = Counter()
    for tool_use_id, block in uses.items():
        if block["name"] != "charge" or tool_use_id not in results:
            continue
        text = result_text(results[tool_use_id])
        if text == INTERRUPTED_TEXT:
            # Killed mid-call: it may have had its effect (once) or not; never re-run.
            answers["interrupted, had run" if charges[tool_use_id] else "interrupted, had not"] += 1
        else:
            task, step = block["input"]["task"], block["input"]["step"]
            assert text == f"charged {task}.{step}", text
            assert charges[tool_use_id] == 1, f"{tool_use_id} answered a success it never had"
            answers["succeeded"] += 1
    return answers


async def test_sigkill_at_random_points_loses_nothing_and_repeats_no_side_effect(
    tmp_path: Path,
) -> None:
    rng = random.Random(1234)
    landed: Counter[str] = Counter()
    previous: list[Message] = []
    server = await ForkServer.start(tmp_path)
    pid: int | None = None
    try:
        for kill in range(KILLS):
            out = tmp_path / f"worker-{kill}.out"
            pid = await server.fork(tmp_path, ENDLESS, out)
            await trio.sleep(rng.uniform(0.01, 0.3))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            code = await server.exit_code(pid)
            pid = None
            assert code == -signal.SIGKILL, f"worker {kill} ended by itself:\n{server.stderr()}"
            # A worker killed before it opened its progress file (a busy machine can
            # leave a fresh fork unscheduled past the sleep) was still starting.
            lines = out.read_text().splitlines() if out.exists() else []
            landed[where(lines)] += 1
            if any(line.startswith("resume") for line in lines):
                landed["(resumed a run)"] += 1
            state = await read_state(tmp_path)
            check_state(state, previous)
            previous = state.messages
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await server.close()

    # A last worker, a fresh process, goes to the end: the task in progress, and one more.
    done = sum(1 for m in previous if m.role == "assistant" and m.text.endswith(" done"))
    target = done + 2
    db, log = tmp_path / "kill.db", tmp_path / "side_effects.log"
    with trio.fail_after(30):
        final = await trio.run_process(
            [sys.executable, str(WORKER), str(db), str(log), str(target)],
            stdin=b"GO\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert final.returncode == 0, final.stderr.decode()
    assert final.stdout.decode().splitlines()[-1] == "DONE"
    state = await read_state(tmp_path)
    answers = check_state(state, previous)

    messages = state.messages
    check_conversation(messages)  # nothing left unanswered
    assert messages[-1].role == "assistant"
    assert messages[-1].text == f"task {target} done"
    assert set(state.statuses) == {"completed"}
    uses = tool_uses(messages)
    assert set(tool_results(messages)) == set(uses)
    # Each task asked for each of its steps once, and each step's charge is in the log
    # at most once (exactly once when it answered a success: check_state).
    steps = sorted(
        (b["input"]["task"], b["input"]["step"]) for b in uses.values() if b["name"] == "charge"
    )
    assert steps == [(task, step) for task in range(1, target + 1) for step in range(STEPS)]
    logged = sorted((task, step) for tool, _, task, step in state.log if tool == "charge")
    assert len(logged) == len(set(logged))
    assert answers["succeeded"] + answers["interrupted, had run"] == len(logged)
    assert (
        sum(landed[where] for where in ("starting", "in a tool", "in a model call", "between"))
        == KILLS
    )
    assert landed["in a tool"] and landed["in a model call"] and landed["between"]
    sys.stdout.write(f"\nkills: {dict(landed)}; tasks: {target}; charges: {dict(answers)}\n")
