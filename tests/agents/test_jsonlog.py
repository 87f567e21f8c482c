"""JsonLinesLog: one JSON object per event per line, for agents, tools and supervisors;
written by a thread of the log's own, so a slow or stuck file never blocks the caller; a
failing file is logged once and never fails a run; an event that cannot be serialised
still gets a line."""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import JsonLinesLog, TextDelta, event_to_json
from satsuma.agents._jsonlog import MAX_PENDING_LINES
from satsuma.testing import Reply, ScriptedModel


@satsuma.tool
async def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


class Echo(satsuma.Agent):
    name = "echo"
    tools = [shout]
    system = "You shout."


def script(*more: str) -> ScriptedModel:
    return ScriptedModel([Reply(tool_calls=[("shout", {"text": "hi"})]), "HI", *more])


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_a_run_is_written_one_event_per_line_in_the_cattrs_form(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    seen: list[Any] = []
    with JsonLinesLog(path) as log:
        async with satsuma.open_agent(Echo, model=script()) as agent:

            def both(event: Any) -> None:
                seen.append(event)
                log(event)

            result = await agent.run("shout hi", events=both)
    assert result.status == "completed"
    lines = read_lines(path)
    assert lines == [event_to_json(event) for event in seen]
    types = [line["type"] for line in lines]
    assert types[0] == "RunStart" and types[-1] == "RunEnd"
    assert {"ToolCallStart", "ToolCallEnd", "TurnEnd"} <= set(types)
    assert lines[-1]["result"]["output"] == "HI"
    assert log.closed


async def test_the_log_appends_and_is_usable_with_stream(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "earlier"}\n', encoding="utf-8")
    log = JsonLinesLog(path)
    async with satsuma.open_agent(Echo, model=script("again")) as agent:
        await agent.run("one", events=log)
        log.flush()  # waits for the writer thread: every line so far is on disk
        assert read_lines(path)[-1]["type"] == "RunEnd"
        async for event in agent.stream("two"):
            log(event)
    log.close()
    log.close()  # again: nothing happens
    types = [line["type"] for line in read_lines(path)]
    assert types[0] == "earlier"
    assert types.count("RunStart") == types.count("RunEnd") == 2
    assert types[-1] == "RunEnd"


async def test_supervisor_events_are_logged_too(autojump_clock: trio.abc.Clock) -> None:
    out = io.StringIO()
    log = JsonLinesLog(out)
    async with satsuma.Supervisor(events=log) as sup:
        await sup.start_child(Echo, id="echo", model=script())
    log.close()
    assert not out.closed  # a file object passed in stays its owner's
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["type"] for line in lines] == ["ChildStarted", "ChildExited"]
    assert lines[0]["child_id"] == "echo"
    assert lines[1]["reason"] == "shutdown"


def test_values_json_cannot_hold_are_written_as_their_repr() -> None:
    out = io.StringIO()
    outcome = satsuma.ToolOutcome(
        tool_use_id="t1",
        tool_name="x",
        content="ok",
        is_error=False,
        error_kind=None,
        details={"raw": b"\x00bytes", "when": object},
    )
    with JsonLinesLog(out) as log:
        log(satsuma.ToolCallEnd(tool_use_id="t1", tool_name="x", outcome=outcome))
    [line] = out.getvalue().splitlines()
    data = json.loads(line)
    assert data["type"] == "ToolCallEnd"
    assert data["outcome"]["details"]["raw"] == repr(b"\x00bytes")


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


async def test_a_failing_file_is_logged_once_and_never_fails_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = JsonLinesLog(_FullDisk())
    with caplog.at_level(logging.WARNING, logger="satsuma"):
        async with satsuma.open_agent(Echo, model=script()) as agent:
            result = await agent.run("shout hi", events=log)
        log.close()  # the writes fail on the writer thread; close waits for it
    assert result.status == "completed"
    [record] = [r for r in caplog.records if "JsonLinesLog" in r.getMessage()]
    assert record.name.startswith("satsuma")
    assert record.levelno == logging.ERROR
    assert "No space left on device" in record.getMessage()


async def test_a_closed_file_or_log_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handle = (tmp_path / "x.jsonl").open("a", encoding="utf-8")
    borrowed = JsonLinesLog(handle)
    handle.close()
    owned = JsonLinesLog(tmp_path / "y.jsonl")
    owned.close()
    event = satsuma.ToolCallStart(tool_use_id="t1", tool_name="x", input={})
    with caplog.at_level(logging.WARNING, logger="satsuma"):
        for log in (borrowed, owned):
            log(event)
            log(event)
        borrowed.close()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "closed" in messages[0] and "closed" in messages[1]
    assert (tmp_path / "y.jsonl").read_text(encoding="utf-8") == ""


def test_bad_targets_and_events_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="a path or a text file object"):
        JsonLinesLog(42)  # type: ignore[arg-type]
    with pytest.raises(OSError):
        JsonLinesLog(tmp_path / "missing-dir" / "x.jsonl")
    with JsonLinesLog(io.StringIO()) as log, pytest.raises(TypeError, match="attrs"):
        log({"type": "not an event"})


def start(n: int) -> satsuma.ToolCallStart:
    return satsuma.ToolCallStart(tool_use_id=f"t{n}", tool_name="x", input={"n": n})


class _StuckFile(io.StringIO):
    """A file whose writes wait until the test lets them through, and that refuses to be
    written on the thread that calls the log."""

    def __init__(self) -> None:
        super().__init__()
        self.callers_thread = threading.get_ident()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.writes = 0
        self.flushes = 0

    def write(self, text: str) -> int:
        if threading.get_ident() == self.callers_thread:
            raise AssertionError("JsonLinesLog wrote on its caller's thread")
        self.entered.set()
        if not self.release.wait(60):  # a guard against hanging the suite, not a timing
            raise AssertionError("the test never released the file")
        self.writes += 1
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def ids(text: str) -> list[str]:
    return [json.loads(line)["tool_use_id"] for line in text.splitlines()]


async def test_a_file_that_blocks_never_blocks_the_trio_thread() -> None:
    stuck = _StuckFile()
    log = JsonLinesLog(stuck)
    try:
        log(start(0))
        assert await trio.to_thread.run_sync(stuck.entered.wait, 60)  # the writer is stuck
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            for _ in range(20):
                ticks += 1
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            for n in range(1, 200):
                log(start(n))  # returns at once, with the file still stuck
                await trio.lowlevel.checkpoint()
        assert ticks == 20
        assert stuck.getvalue() == ""
    finally:
        stuck.release.set()
    log.close()
    assert ids(stuck.getvalue()) == [f"t{n}" for n in range(200)]
    # The first line alone, then the 199 that queued behind it: one write and one flush
    # per batch, and a last flush at close.
    assert (stuck.writes, stuck.flushes) == (2, 3)
    assert not stuck.closed  # the caller's file stays open


async def test_a_writer_far_behind_drops_newer_events_counts_them_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stuck = _StuckFile()
    log = JsonLinesLog(stuck)
    with caplog.at_level(logging.WARNING, logger="satsuma.agents"):
        try:
            log(start(0))
            assert await trio.to_thread.run_sync(stuck.entered.wait, 60)
            for n in range(1, MAX_PENDING_LINES + 8):
                log(start(n))
            assert log.dropped == 7
        finally:
            stuck.release.set()
        log.close()
    assert ids(stuck.getvalue()) == [f"t{n}" for n in range(MAX_PENDING_LINES + 1)]
    [message] = [r.getMessage() for r in caplog.records if r.name == "satsuma.agents"]
    assert f"{MAX_PENDING_LINES} lines behind" in message
    assert log.dropped == 7


async def test_an_agent_run_completes_while_the_logs_file_is_stuck() -> None:
    stuck = _StuckFile()
    log = JsonLinesLog(stuck)
    seen: list[Any] = []

    def both(event: Any) -> None:
        seen.append(event)
        log(event)

    try:
        async with satsuma.open_agent(Echo, model=script()) as agent:
            result = await agent.run("shout hi", events=both)
        assert result.status == "completed"
        assert stuck.getvalue() == ""  # nothing written yet: the file is still stuck
    finally:
        stuck.release.set()
    log.close()
    lines = [json.loads(line) for line in stuck.getvalue().splitlines()]
    assert lines == [event_to_json(event) for event in seen]
    assert lines[-1]["type"] == "RunEnd"


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread not in before]


def test_close_writes_what_is_queued_and_ends_the_writer_thread(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    before = set(threading.enumerate())
    log = JsonLinesLog(path)
    [thread] = new_threads(before)
    assert thread.is_alive() and thread.daemon
    for n in range(500):
        log(start(n))
    log.close()
    assert not thread.is_alive()
    assert ids(path.read_text(encoding="utf-8")) == [f"t{n}" for n in range(500)]


def test_a_log_never_closed_writes_its_lines_and_ends_its_thread_once_collected(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    before = set(threading.enumerate())
    log = JsonLinesLog(path)
    [thread] = new_threads(before)
    log(start(1))
    del log  # the last reference: the log is collected at once
    thread.join(60)
    assert not thread.is_alive()
    assert ids(path.read_text(encoding="utf-8")) == ["t1"]


_AT_EXIT = """
import sys, threading
import satsuma
from satsuma.agents import _jsonlog

class Stuck:
    def write(self, text):
        threading.Event().wait()  # forever

    def flush(self):
        pass

if sys.argv[1] == "stuck":
    _jsonlog._EXIT_WAIT = 0.1  # the exit gives up on it after this
    log = satsuma.JsonLinesLog(Stuck())
else:
    log = satsuma.JsonLinesLog(sys.argv[1])
for n in range(1000):
    log(satsuma.ToolCallStart(tool_use_id=f"t{n}", tool_name="x", input={}))
"""


def exit_with_a_log_open(target: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _AT_EXIT, target], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_at_exit_a_log_never_closed_writes_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    # The exit waits for the writer to write what it holds (for up to 5 s, while 1,000
    # lines take milliseconds), and returns as soon as it has.
    exit_with_a_log_open(str(path))
    assert ids(path.read_text(encoding="utf-8")) == [f"t{n}" for n in range(1000)]


def test_at_exit_a_log_whose_file_is_stuck_does_not_hang_the_interpreter() -> None:
    exit_with_a_log_open("stuck")


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _cycle() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    ("details", "problem"),
    [
        ({"value": _deep(100_000)}, "RecursionError"),
        ({"value": _cycle()}, "RecursionError"),
        ({"x": _BadRepr()}, "RuntimeError: no repr for you"),
        # A TypeError from a real event is a serialisation failure, not a caller's mistake.
        ({(1, 2): "a tuple key"}, "TypeError: keys must be"),
    ],
    ids=["deep", "cycle", "bad-repr", "tuple-key"],
)
def test_an_event_that_cannot_be_serialised_gets_a_line_saying_so(
    details: Any, problem: str
) -> None:
    outcome = satsuma.ToolOutcome(
        tool_use_id="t1",
        tool_name="x",
        content="ok",
        is_error=False,
        error_kind=None,
        details=details,
    )
    out = io.StringIO()
    with JsonLinesLog(out) as log:
        log(satsuma.ToolCallEnd(tool_use_id="t1", tool_name="x", outcome=outcome))
        log(start(2))  # the log goes on
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["type"] == "ToolCallEnd"
    assert (first["tool_use_id"], first["tool_name"]) == ("t1", "x")
    assert "outcome" not in first
    assert first["unserialisable"].startswith("this event could not be written as JSON: ")
    assert problem in first["unserialisable"]
    assert second["tool_use_id"] == "t2"


def test_close_returns_within_its_bound_when_the_file_is_a_fifo_nobody_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real FIFO whose reader never reads: once the pipe is full the writer thread is
    stuck in write(2), where nothing can interrupt it. close() still returns, drops and
    counts what was queued behind the stuck write, and the thread ends by itself (closing
    the file) once the write goes through."""
    fifo = tmp_path / "events.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open, and never read (yet)
    try:
        before = set(threading.enumerate())
        log = JsonLinesLog(fifo)
        [thread] = new_threads(before)
        total = 0
        while not _pipe_full(reader):  # fill the pipe: the writer blocks in write(2)
            for _ in range(100):
                log(start(total))
                total += 1
            time.sleep(0.01)
            assert total < 100_000, "the pipe never filled"
        # Less than a page is free now: some 14 KB more cannot all fit, so the writer is
        # certain to be stuck in write(2) with lines unwritten when close gives up.
        for _ in range(200):
            log(start(total))
            total += 1
        closer = threading.Thread(target=log.close, kwargs={"timeout": 0.5}, daemon=True)
        with caplog.at_level(logging.WARNING, logger="satsuma.agents"):
            closer.start()
            closer.join(60)  # a bound that cannot flake; close itself waits 0.5 s
            returned = not closer.is_alive()
        assert thread.is_alive()  # still in write(2): close did not wait for it
    finally:
        # Read the FIFO to its end: the stuck write goes through, the thread closes its
        # end of the pipe (EOF here) and ends. A log that was never stopped gives no EOF:
        # reading also ends after 10 s without a byte, so that a failure cannot hang.
        chunks = []
        while select.select([reader], [], [], 10)[0]:
            chunk = os.read(reader, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(reader)
    assert returned, "close() hung on a FIFO nobody reads"
    thread.join(60)
    assert not thread.is_alive()
    written = ids(b"".join(chunks).decode())
    assert written == [f"t{n}" for n in range(len(written))]  # whole lines, in order
    assert len(written) + log.dropped == total  # every line written whole, or counted
    [message] = [r.getMessage() for r in caplog.records if r.name == "satsuma.agents"]
    assert "close gave up" in message and f"{log.dropped} queued lines are dropped" in message


def _pipe_full(fd: int) -> bool:
    """Whether the pipe holds all it can, give or take the unused tail of a page (the
    kernel fills pipe buffers page by page)."""
    waiting = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    capacity = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    return bool(waiting > capacity - os.sysconf("SC_PAGESIZE"))


def test_a_lone_surrogate_is_written_as_u_fffd_and_later_lines_are_kept(tmp_path: Path) -> None:
    """A model's streamed text or a tool's details may hold a lone surrogate, which the
    file's UTF-8 cannot encode: the writer failed on it and every later line was lost
    (issue 29, item 4's class)."""
    path = tmp_path / "log.jsonl"
    with satsuma.JsonLinesLog(path) as log:
        log(TextDelta(agent="a", run_id="r", iteration=1, text="x\ud800y"))
        log(TextDelta(agent="a", run_id="r", iteration=1, text="after"))
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["text"] for line in lines] == ["x\ufffdy", "after"]
