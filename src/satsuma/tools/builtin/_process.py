"""Running a child process in its own process group, and leaving nothing of it behind.

The child is started in a new session, so it leads a process group that every process it
starts joins unless it leaves on purpose (``setsid``). When the child exits, when its time
is up, or when the call is cancelled, the whole group is stopped: SIGTERM, then SIGKILL
for whatever is still alive after a grace period. Output (stdout and stderr merged) is
kept as a head and a tail of bounded size, so a command printing gigabytes costs the
host a few hundred kilobytes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

__all__ = ["HeadTail", "ProcessResult", "run_in_group"]

_POLL: Final = 0.01  # seconds between looks at a group that is being stopped
_DRAIN_GRACE: Final = 1.0  # how long to wait for EOF from a process that left the group


@attrs.define(eq=False)
class HeadTail:
    """Keeps the first ``head`` and the last ``tail`` bytes of a stream.

    Attributes:
        total: Bytes seen in all.
    """

    head_limit: int
    tail_limit: int
    total: int = 0
    _head: bytearray = attrs.field(factory=bytearray)
    _tail: bytearray = attrs.field(factory=bytearray)

    def feed(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self.tail_limit > 0:
            self._tail += data
            # Trimmed in bulk, not per chunk: amortised O(1) per byte.
            if len(self._tail) > 2 * self.tail_limit:
                del self._tail[: -self.tail_limit]

    @property
    def head(self) -> bytes:
        return bytes(self._head)

    @property
    def tail(self) -> bytes:
        return bytes(self._tail[-self.tail_limit :]) if self.tail_limit > 0 else b""

    @property
    def omitted(self) -> int:
        """Bytes dropped from the middle."""
        return self.total - len(self._head) - len(self.tail)


@attrs.frozen(kw_only=True)
class ProcessResult:
    """How a process run ended.

    Attributes:
        pid: The child's pid, which is also its process group's id.
        returncode: Its exit status (negative: killed by that signal).
        timed_out: True if the time limit stopped it.
        output: The head and tail of its output.
    """

    pid: int
    returncode: int
    timed_out: bool
    output: HeadTail


async def run_in_group(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None,
    stdin: bytes | None = None,
    time_limit: float,
    grace: float,
    output: HeadTail,
) -> ProcessResult:
    """Run ``argv`` in a new process group; stop the group when the child exits, when
    ``time_limit`` seconds have passed, or when the caller is cancelled.

    Raises:
        OSError: the program could not be started.
    """
    process = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        # Subprocess's default, said here because it matters: no descriptor of the service
        # (a secrets file, a socket) reaches the child (issue 16, item 2).
        close_fds=True,
    )
    pgid = process.pid
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            drained = trio.Event()
            if stdin is not None:
                assert process.stdin is not None
                nursery.start_soon(_feed, process.stdin, stdin)
            assert process.stdout is not None
            nursery.start_soon(_drain, process.stdout, output, drained)
            with trio.move_on_after(time_limit) as timer:
                await process.wait()
            timed_out = timer.cancelled_caught
            # Background children, or the whole group on a timeout, go now.
            await stop_group(process, grace)
            # EOF comes when the last writer is gone; one that left the group on purpose
            # may hold the pipe for ever, so it gets a moment and no more.
            with trio.move_on_after(_DRAIN_GRACE):
                await drained.wait()
            nursery.cancel_scope.cancel()
    finally:
        # Cancelled, or anything else went wrong: the group still goes, within the grace.
        with trio.CancelScope(shield=True):
            await stop_group(process, grace)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    await stream.aclose()
            with trio.move_on_after(grace + 1.0):
                await process.wait()  # reaped already, unless it ended a moment ago
    returncode = process.returncode
    if returncode is None:  # a leader stuck in the kernel even past SIGKILL
        returncode = -signal.SIGKILL
    return ProcessResult(pid=pgid, returncode=returncode, timed_out=timed_out, output=output)


async def stop_group(process: trio.Process, grace: float) -> None:
    """SIGTERM to the process's group, SIGKILL after ``grace`` seconds for what is left,
    and the leader reaped."""
    pgid = process.pid
    if not await group_alive(process):
        return
    _signal_group(pgid, signal.SIGTERM)
    with trio.move_on_after(grace):
        await _wait_group_gone(process)
        return
    _signal_group(pgid, signal.SIGKILL)
    with trio.move_on_after(grace + 1.0):
        await _wait_group_gone(process)


async def _wait_group_gone(process: trio.Process) -> None:
    # Polled: nothing tells a parent when the last member of a process group has gone.
    while await group_alive(process):  # noqa: ASYNC110  # see the line above
        await trio.sleep(_POLL)


async def group_alive(process: trio.Process) -> bool:
    """Whether any process of the group is still running (the leader is reaped here, so
    that it does not linger as a zombie). The scan of /proc runs in a worker thread: with
    a fork flood it reads thousands of files, which must not stall the other agents."""
    process.poll()
    pgid = process.pid
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its user id: still there
        return True
    # killpg counts zombies, and a zombie whose parent has died waits for init, which in
    # some containers never reaps. On Linux, look for a member that still runs.
    if sys.platform == "linux":
        # Not abandoned on cancel: the scan is short and only reads, and no thread may
        # outlive the call that started it.
        return bool(await trio.to_thread.run_sync(live_members, pgid))
    return True


def live_members(pgid: int) -> list[int]:
    """The pids of processes in group ``pgid`` that are not zombies (Linux, from /proc)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as file:
                    stat = file.read()
            except OSError:
                continue  # it ended while we looked
            # The command name may hold spaces and parentheses: fields start after the
            # last ')'. Then: state, ppid, pgrp.
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != b"Z":
                found.append(int(entry.name))
    return found


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    # A child that does not read its input (or exits first) closes the pipe: not our error.
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        async with stream:
            await stream.send_all(data)


async def _drain(stream: trio.abc.ReceiveStream, output: HeadTail, drained: trio.Event) -> None:
    with contextlib.suppress(trio.ClosedResourceError):
        while data := await stream.receive_some(1 << 16):
            output.feed(data)
    drained.set()
