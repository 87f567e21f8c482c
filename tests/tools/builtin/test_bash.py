"""The bash tool: normal use, its limits, its environment, and that no process it started
outlives the call (timeout, TERM ignored, grandchildren, background jobs, cancellation,
the runner's own deadline).

Every test runs twice: with ``isolation = "auto"`` (on Linux, the command in a PID
namespace of its own, where ``$$`` and ``$!`` are not the host's pids) and with
``"off"``. What isolation keeps out of reach is tested in test_bash_isolation.py.

Subprocesses and the autojump clock do not mix, so these tests use the real clock with
short timeouts, and a subclass with a short kill grace. No assertion is about timing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma.testing import run_tool, tool_call
from satsuma.tools.builtin._bash import Bash
from satsuma.tools.builtin._process import live_members

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="looks at processes in /proc")


class QuickBash(Bash):
    kill_grace = 0.3


class TinyBash(QuickBash):
    max_output_chars = 1000


class ConfiguredBash(QuickBash):
    env = {"FOO": "bar"}
    env_allowlist = (*Bash.env_allowlist, "EXTRA_OK")


class PathBash(QuickBash):
    env = {"PATH": "/satsuma-custom-bin:/usr/bin:/bin"}


SHELL = frozenset({"shell"})

# What a command writes for GroupWatch: its pid as it sees it, and its PID namespace.
MARK = 'echo $$ "$(readlink /proc/$$/ns/pid)" > pid.txt'
OUR_NAMESPACE = os.readlink("/proc/self/ns/pid") if sys.platform == "linux" else ""

# Every process group (each is also a session: the child is started with setsid) that a
# test of this module started; the module's last check looks for survivors in them.
_SESSIONS: set[int] = set()


@pytest.fixture(autouse=True, params=["auto", "off"])
def isolation_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode: str = request.param
    monkeypatch.setattr(Bash, "isolation", mode)
    return mode


@pytest.fixture
async def isolated(isolation_mode: str) -> bool:
    """Whether commands of this run are isolated (``"auto"`` on a system that allows it)."""
    return (await Bash.check_isolation()).isolated


@pytest.fixture
def ws(tool_workspace: Path) -> Path:
    return tool_workspace


@pytest.fixture
def ctx(ws: Path) -> dict[str, Any]:
    return {"working_dir": ws, "capabilities": set(SHELL)}


async def bash(
    args: dict[str, Any], ctx: dict[str, Any], tool: type[Bash] = QuickBash, **kwargs: Any
) -> satsuma.ToolOutcome:
    outcome = await run_tool(tool, args, ctx, **kwargs)
    if outcome.details and "pid" in outcome.details:
        _SESSIONS.add(outcome.details["pid"])
    return outcome


# ------------------------------------------------------------------- process helpers


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp,
    session, ...), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            cmdline = file.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmdline = "?"
    return f"pid {pid} ({cmdline!r}, stat {_stat_fields(pid)!r})"


def assert_dead(pid: int) -> None:
    """The process is gone, or is a zombie (its parent, init in some containers, has not
    reaped it yet): nothing of it runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    fields = _stat_fields(pid)
    assert fields is None or fields[0] == b"Z", f"survived: {_describe(pid)}"


def _namespace_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _inner_pid(pid: int) -> int | None:
    """The pid of a process in its own (innermost) PID namespace, from its NSpid line."""
    try:
        with open(f"/proc/{pid}/status", "rb") as file:
            status = file.read()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            return int(line.split()[-1])
    return None


def _host_pid(inner: int, namespace: str) -> int | None:
    """The pid in our /proc of the process that is ``inner`` in PID namespace ``namespace``."""
    if namespace == OUR_NAMESPACE:
        return inner
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                pid = int(entry.name)
                if _namespace_of(pid) == namespace and _inner_pid(pid) == inner:
                    return pid
    return None


def namespace_members(namespace: str) -> list[str]:
    """The processes still running in PID namespace ``namespace`` (none when it is ours)."""
    if namespace == OUR_NAMESPACE:
        return []
    found = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            fields = _stat_fields(pid)
            if fields and fields[0] != b"Z" and _namespace_of(pid) == namespace:
                found.append(_describe(pid))
    return found


def assert_no_survivors(pgid: int, pids: Iterable[int] = (), namespace: str | None = None) -> None:
    survivors = live_members(pgid)
    assert survivors == [], f"group {pgid} still runs: {[_describe(p) for p in survivors]}"
    for pid in pids:
        assert_dead(pid)
    if namespace is not None:
        assert namespace_members(namespace) == []


def read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


class GroupWatch:
    """Reads what a command wrote to ``pid.txt`` (MARK: its pid as it sees it, and its
    PID namespace), finds its process group, and records every process of the group it
    sees while the command runs, with the pid each has in the command's namespace."""

    def __init__(self, ws: Path) -> None:
        self._path = ws / "pid.txt"
        self.pgid: int | None = None
        self.namespace: str | None = None
        self.seen: set[int] = set()
        self._host: dict[int, int] = {}  # pid in the command's namespace -> ours

    async def watch(self) -> None:
        while True:
            if self.pgid is None:
                try:
                    text = self._path.read_text()
                except FileNotFoundError:
                    text = ""
                if text.endswith("\n"):
                    inner, self.namespace = text.split()
                    self.pgid = self._group_of(int(inner), self.namespace)
                    _SESSIONS.add(self.pgid)
            if self.pgid is not None:
                for pid in live_members(self.pgid):
                    self.seen.add(pid)
                    if (inner_pid := _inner_pid(pid)) is not None:
                        self._host.setdefault(inner_pid, pid)
            await trio.sleep(0.01)

    @staticmethod
    def _group_of(shell: int, namespace: str) -> int:
        if namespace == OUR_NAMESPACE:
            return shell  # it leads its group
        # Isolated, the group's leader is the wrapper outside the namespace; the shell is
        # still running (the commands sleep after writing pid.txt).
        found = _host_pid(shell, namespace)
        fields = _stat_fields(found) if found is not None else None
        assert fields is not None, f"the command's shell {shell} in {namespace} is gone"
        return int(fields[2])

    def host_pid(self, inner: int) -> int | None:
        """Our pid of a process the command named (``$!``), if it was seen running."""
        return self._host.get(inner)

    def host_pids(self, inner: Iterable[int]) -> set[int]:
        """Our pids of processes the command named; each must have been seen."""
        found = {pid: self.host_pid(pid) for pid in inner}
        assert None not in found.values(), f"never seen running: {found}"
        return {pid for pid in found.values() if pid is not None}


async def watched(ws: Path, call: Callable[[], Awaitable[Any]]) -> tuple[Any, GroupWatch]:
    """Run ``call()`` while a GroupWatch looks at the command's group."""
    watch = GroupWatch(ws)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.watch)
        result = await call()
        nursery.cancel_scope.cancel()
    return result, watch


def _sleepers_in_our_sessions() -> list[str]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 4 or fields[0] == b"Z":
            continue
        if int(fields[3]) not in _SESSIONS:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                cmdline = file.read()
        except OSError:
            continue
        if cmdline == b"sleep\x0030\x00":
            found.append(_describe(pid))
    return found


@pytest.fixture(autouse=True, scope="module")
def _no_sleeper_left() -> Iterator[None]:
    """Suite-level check: once every test of this module has run, no ``sleep 30`` runs
    in any session one of them started."""
    yield
    assert _sleepers_in_our_sessions() == []


# ------------------------------------------------------------------------ normal use


async def test_output(ctx: dict[str, Any], isolated: bool) -> None:
    outcome = await bash({"command": "echo hi"}, ctx)
    assert not outcome.is_error
    assert outcome.content == "hi\n"
    details = outcome.details
    assert details is not None
    assert details["exit_code"] == 0
    assert details["timed_out"] is False
    assert details["output_bytes"] == 3
    assert details["omitted_bytes"] == 0
    assert isinstance(details["pid"], int)
    assert details["isolated"] is isolated


async def test_runs_in_the_real_workspace_root(ws: Path, tmp_path: Path) -> None:
    (ws / "marker.txt").write_text("here\n")
    outcome = await bash(
        {"command": "pwd; cat marker.txt"}, {"working_dir": ws, "capabilities": SHELL}
    )
    assert outcome.content == f"{os.path.realpath(ws)}\nhere\n"

    link = tmp_path / "link"
    link.symlink_to(ws)
    outcome = await bash({"command": "pwd"}, {"working_dir": link, "capabilities": SHELL})
    assert outcome.content == f"{os.path.realpath(ws)}\n"


async def test_stdout_and_stderr_merged_in_order(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": "echo a; echo b >&2; echo c; echo d >&2"}, ctx)
    assert not outcome.is_error
    assert outcome.content == "a\nb\nc\nd\n"


async def test_exit_code(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": "echo out; echo err >&2; exit 3"}, ctx)
    assert outcome.is_error
    assert outcome.content == "Exit code: 3\n\nout\nerr\n"
    assert outcome.details is not None
    assert outcome.details["exit_code"] == 3
    assert outcome.details["timed_out"] is False


async def test_exit_code_without_output(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": "exit 1"}, ctx)
    assert outcome.is_error
    assert outcome.content == "Exit code: 1\n\n(no output)"


async def test_killed_by_a_signal(ctx: dict[str, Any], isolated: bool) -> None:
    outcome = await bash({"command": "echo before; kill -9 $$; echo after"}, ctx)
    assert outcome.is_error
    assert outcome.details is not None
    assert outcome.details["timed_out"] is False
    if isolated:
        # The shell is a child of the namespace's PID 1, which reports it as bash does.
        assert outcome.content == "Exit code: 137\n\nbefore\n"
        assert outcome.details["exit_code"] == 137
    else:
        assert outcome.content == "Exit code: -9 (killed by SIGKILL)\n\nbefore\n"
        assert outcome.details["exit_code"] == -9


async def test_no_output(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": "true"}, ctx)
    assert not outcome.is_error
    assert outcome.content == "(no output)"


@pytest.fixture
def stdin_pipe() -> Iterator[None]:
    """The test process's own stdin is, for the test, a pipe that holds data and stays
    open: a command that inherited it would read the data and then hang."""
    read_end, write_end = os.pipe()
    os.write(write_end, b"parent's input\n")
    saved = os.dup(0)
    os.dup2(read_end, 0)
    os.close(read_end)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(write_end)


@pytest.mark.usefixtures("stdin_pipe")
async def test_stdin_is_closed(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": 'cat; read -r line; echo "read=$?"', "timeout": 5}, ctx)
    assert outcome.details is not None
    assert outcome.details["timed_out"] is False
    assert not outcome.is_error
    assert outcome.content == "read=1\n"


async def test_unicode_output(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": "echo 'héllo wörld — 日本語 🍊'"}, ctx)
    assert outcome.content == "héllo wörld — 日本語 🍊\n"


async def test_invalid_utf8_is_replaced(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": r"printf 'ok \xff\xfe\xc3 end\n'"}, ctx)
    assert not outcome.is_error
    assert outcome.content == "ok \ufffd\ufffd\ufffd end\n"
    assert outcome.details is not None
    assert outcome.details["output_bytes"] == 11


async def test_multibyte_characters_cut_in_half_by_the_cap(ctx: dict[str, Any]) -> None:
    # 3,001 bytes: an odd prefix puts every cut in the middle of a two-byte character.
    outcome = await bash(
        {"command": "printf x; for i in $(seq 1500); do printf 'é'; done"}, ctx, TinyBash
    )
    assert not outcome.is_error
    text = outcome.content
    assert isinstance(text, str)
    assert text.startswith("xé")
    assert text.endswith("é")
    assert "bytes of output omitted" in text
    assert len(text) <= 1000


# ------------------------------------------------------------- capability, arguments


async def test_capability_denied(ws: Path) -> None:
    (ws / "ran").unlink(missing_ok=True)
    outcome = await bash(
        {"command": "touch ran"}, {"working_dir": ws, "capabilities": {"read", "write"}}
    )
    assert outcome.is_error
    assert outcome.error_kind == "denied"
    assert outcome.content == "Error: Tool capability denied: shell"
    assert not (ws / "ran").exists()


@pytest.mark.parametrize(
    "args",
    [
        {"command": ""},
        {"command": "true", "timeout": 0},
        {"command": "true", "timeout": -1},
        {},
        {"command": 5},
    ],
    ids=["empty-command", "zero-timeout", "negative-timeout", "no-command", "not-a-string"],
)
async def test_invalid_arguments(ws: Path, ctx: dict[str, Any], args: dict[str, Any]) -> None:
    outcome = await bash(args, ctx)
    assert outcome.is_error
    assert outcome.error_kind == "invalid_args"
    assert outcome.content.startswith("Error: Invalid arguments: ")
    assert list(ws.iterdir()) == []


@pytest.mark.parametrize("kind", ["missing", "file"])
async def test_unusable_working_dir(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "nowhere"
    if kind == "file":
        root.write_text("not a directory\n")
    outcome = await bash({"command": "echo hi"}, {"working_dir": root, "capabilities": SHELL})
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert outcome.content == f"Error: Workspace root is not a directory: {root}"


# --------------------------------------------------------------- no process survives


async def test_timeout_stops_the_command(ws: Path, ctx: dict[str, Any]) -> None:
    outcome, watch = await watched(
        ws,
        lambda: bash({"command": f"{MARK}; echo started; sleep 30", "timeout": 0.5}, ctx),
    )
    assert outcome.is_error
    assert outcome.content.startswith("Command timed out after 0.5s")
    assert outcome.content.endswith("\n\nstarted\n")
    details = outcome.details
    assert details["timed_out"] is True
    assert details["pid"] == watch.pgid
    assert watch.seen, "the command was never seen running"
    assert_no_survivors(details["pid"], watch.seen, watch.namespace)


async def test_timeout_kills_a_child_that_ignores_term(ws: Path, ctx: dict[str, Any]) -> None:
    command = f"{MARK}; trap '' TERM; sleep 30 & echo $!; wait"
    outcome, watch = await watched(ws, lambda: bash({"command": command, "timeout": 0.5}, ctx))
    assert outcome.is_error
    assert outcome.content.startswith("Command timed out after 0.5s")
    details = outcome.details
    assert details["timed_out"] is True
    # Neither the shell nor its child listened to SIGTERM: SIGKILL came after the grace.
    assert details["exit_code"] == -9
    (child,) = [int(line) for line in outcome.content.split("\n\n", 1)[1].split()]
    children = watch.host_pids([child])
    assert children <= watch.seen
    assert_no_survivors(details["pid"], {*children, *watch.seen}, watch.namespace)


async def test_timeout_kills_a_background_grandchild_that_ignores_term(
    ws: Path, ctx: dict[str, Any], isolated: bool
) -> None:
    command = (
        f"{MARK}; (trap '' TERM; sleep 30; echo never) & echo $! > kids.txt; "
        "(trap '' TERM; exec sleep 30) & echo $! >> kids.txt; sleep 30"
    )
    outcome, watch = await watched(ws, lambda: bash({"command": command, "timeout": 0.5}, ctx))
    assert outcome.is_error
    assert outcome.content.startswith("Command timed out after 0.5s")
    assert "never" not in outcome.content
    details = outcome.details
    assert details["timed_out"] is True
    # The shell itself went at SIGTERM (isolated: as its PID 1 reports it, 128 + 15).
    assert details["exit_code"] == (143 if isolated else -15)
    kids = watch.host_pids(read_pids(ws / "kids.txt"))
    assert len(kids) == 2
    assert kids <= watch.seen
    assert_no_survivors(details["pid"], {*kids, *watch.seen}, watch.namespace)


@pytest.mark.parametrize(
    "background",
    ["sleep 30", "(trap '' TERM; exec sleep 30)", "(trap '' TERM; sleep 30; echo never)"],
    ids=["plain", "ignores-term", "ignores-term-in-subshell"],
)
async def test_background_job_is_stopped_when_the_command_exits(
    ctx: dict[str, Any], background: str
) -> None:
    command = f"{background} & echo $!; readlink /proc/$$/ns/pid; echo started"
    with trio.fail_after(20):  # a hang guard, far from anything asserted
        outcome = await bash({"command": command}, ctx)
    assert not outcome.is_error
    first, namespace, third = outcome.content.splitlines()
    assert third == "started"
    details = outcome.details
    assert details["exit_code"] == 0
    assert details["timed_out"] is False
    # Isolated, $! is a pid in the command's namespace: nothing runs there any more.
    job = [int(first)] if namespace == OUR_NAMESPACE else []
    assert_no_survivors(details["pid"], job, namespace)


async def test_cancelled_from_outside(ws: Path, ctx: dict[str, Any]) -> None:
    command = (
        f"{MARK}; sleep 30 & echo $! > kids.txt; "
        "(trap '' TERM; exec sleep 30) & echo $! >> kids.txt; "
        "trap '' TERM; sleep 30"
    )
    runner = satsuma.ToolRunner([QuickBash])
    watch = GroupWatch(ws)
    kids_file = ws / "kids.txt"
    results: list[satsuma.ToolOutcome] | None = None

    def running() -> bool:
        # Both background sleeps have been seen in the group, and so has the shell.
        if watch.pgid is None or not kids_file.exists():
            return False
        text = kids_file.read_text()
        if text.count("\n") < 2:
            return False
        kids = {watch.host_pid(int(word)) for word in text.split()}
        return None not in kids and {watch.pgid, *kids} <= watch.seen

    async def cancel_when_running(scope: trio.CancelScope) -> None:
        while not running():  # noqa: ASYNC110
            await trio.sleep(0.01)
        scope.cancel()

    with trio.fail_after(20):  # a hang guard, far from anything asserted
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.watch)
            with trio.CancelScope() as scope:
                nursery.start_soon(cancel_when_running, scope)
                results = await runner.execute(
                    [tool_call("bash", {"command": command, "timeout": 10})], ctx
                )
            nursery.cancel_scope.cancel()
    assert scope.cancelled_caught
    assert results is None
    assert watch.pgid is not None
    kids = watch.host_pids(read_pids(kids_file))
    assert len(kids) == 2
    assert_no_survivors(watch.pgid, {*kids, *watch.seen}, watch.namespace)


async def test_cancelled_by_a_deadline_outside(ws: Path, ctx: dict[str, Any]) -> None:
    # Whether the call is cancelled or the tool ends the command first (see the next
    # test), nothing it started survives.
    command = f"{MARK}; (trap '' TERM; exec sleep 30) & echo $! > kids.txt; trap '' TERM; sleep 30"
    runner = satsuma.ToolRunner([QuickBash])

    async def call() -> list[satsuma.ToolOutcome] | None:
        with trio.move_on_after(0.5):
            return await runner.execute([tool_call("bash", {"command": command})], ctx)
        return None

    results, watch = await watched(ws, call)
    if results is not None:
        (outcome,) = results
        assert outcome.details is not None
        assert outcome.details["pid"] == watch.pgid
    assert watch.pgid is not None
    # The kid may not have been seen before the cancel: it is looked for by its group,
    # and, isolated, by its namespace.
    kids = read_pids(ws / "kids.txt") if watch.namespace == OUR_NAMESPACE else []
    assert_no_survivors(watch.pgid, {*kids, *watch.seen}, watch.namespace)


async def test_a_deadline_outside_is_not_the_tools_own(ws: Path, ctx: dict[str, Any]) -> None:
    runner = satsuma.ToolRunner([QuickBash])
    scope = trio.CancelScope()

    async def call() -> list[satsuma.ToolOutcome] | None:
        with scope:
            scope.deadline = trio.current_time() + 0.5
            return await runner.execute([tool_call("bash", {"command": f"{MARK}; sleep 30"})], ctx)
        return None

    results, watch = await watched(ws, call)
    assert watch.pgid is not None
    assert_no_survivors(watch.pgid, watch.seen, watch.namespace)
    assert results is None, results
    assert scope.cancelled_caught


async def test_stopped_before_the_runners_deadline(ws: Path, ctx: dict[str, Any]) -> None:
    command = f"{MARK}; sleep 30"
    outcome, watch = await watched(
        ws, lambda: bash({"command": command, "timeout": 100}, ctx, timeout=1.0)
    )
    # The tool stops the command early enough to report it itself: not the runner's
    # "Error: Tool timed out after 1s".
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert outcome.content.startswith("Command timed out after ")
    details = outcome.details
    assert details["timed_out"] is True
    assert details["pid"] == watch.pgid
    assert_no_survivors(details["pid"], watch.seen, watch.namespace)


async def test_runners_deadline_with_a_child_that_ignores_term(
    ws: Path, ctx: dict[str, Any]
) -> None:
    command = f"{MARK}; (trap '' TERM; exec sleep 30) & echo $! > kids.txt; trap '' TERM; sleep 30"
    outcome, watch = await watched(
        ws, lambda: bash({"command": command, "timeout": 100}, ctx, timeout=1.0)
    )
    assert outcome.is_error
    if outcome.error_kind == "timeout":  # the runner's deadline came first
        assert outcome.content == "Error: Tool timed out after 1s"
    else:
        assert outcome.content.startswith("Command timed out after ")
        assert outcome.details["timed_out"] is True
        assert outcome.details["exit_code"] == -9
    assert watch.pgid is not None
    kids = read_pids(ws / "kids.txt") if watch.namespace == OUR_NAMESPACE else []
    assert_no_survivors(watch.pgid, {*kids, *watch.seen}, watch.namespace)


async def test_default_grace_under_a_short_runner_deadline(ws: Path, ctx: dict[str, Any]) -> None:
    # Bash's own grace (2s) is longer than the runner's deadline: the command still gets
    # a moment to run, is stopped, and the outcome is the tool's.
    outcome = await bash({"command": "echo hi; sleep 30", "timeout": 100}, ctx, Bash, timeout=1.0)
    assert outcome.is_error
    assert outcome.content.startswith("Command timed out after ")
    assert outcome.content.endswith("\n\nhi\n")
    assert_no_survivors(outcome.details["pid"])


# ---------------------------------------------------------------------- output caps


async def test_huge_output_keeps_head_and_tail(ctx: dict[str, Any]) -> None:
    command = r"head -c 100000000 /dev/zero | tr '\0' a; echo END"
    outcome = await bash({"command": command, "timeout": 60}, ctx, Bash)
    assert not outcome.is_error
    text = outcome.content
    assert isinstance(text, str)
    assert len(text) <= 100_000
    assert text.startswith("a" * 1000)
    assert text.endswith("a" * 1000 + "END\n")
    assert "bytes of output omitted" in text
    details = outcome.details
    assert details["output_bytes"] == 100_000_004
    assert details["omitted_bytes"] > 99_000_000
    # The runner did not have to cut it a second time.
    assert "full_content" not in details
    assert "truncated_chars" not in details


async def test_small_cap_keeps_head_and_tail_around_the_marker(ctx: dict[str, Any]) -> None:
    command = "printf HEAD; head -c 5000 /dev/zero | tr '\\0' x; printf TAIL"
    outcome = await bash({"command": command}, ctx, TinyBash)
    assert not outcome.is_error
    text = outcome.content
    assert isinstance(text, str)
    assert len(text) <= 1000
    head, marker, tail = text.split("\n\n")
    assert marker == "[... 4,108 bytes of output omitted ...]"
    assert head == "HEAD" + "x" * 446
    assert tail == "x" * 446 + "TAIL"
    assert outcome.details["output_bytes"] == 5008
    assert outcome.details["omitted_bytes"] == 4108


async def test_output_well_under_the_cap_is_not_cut(ctx: dict[str, Any]) -> None:
    command = "head -c 899 /dev/zero | tr '\\0' x; echo"
    outcome = await bash({"command": command}, ctx, TinyBash)
    assert outcome.content == "x" * 899 + "\n"
    assert outcome.details["omitted_bytes"] == 0


async def test_output_exactly_at_the_cap_is_not_cut(ctx: dict[str, Any]) -> None:
    command = "head -c 999 /dev/zero | tr '\\0' x; echo"
    outcome = await bash({"command": command}, ctx, TinyBash)
    assert outcome.content == "x" * 999 + "\n"
    assert outcome.details["omitted_bytes"] == 0


async def test_cap_counts_characters(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": "for i in $(seq 600); do printf 'é'; done"}, ctx, TinyBash)
    assert outcome.content == "é" * 600


# ---------------------------------------------------------------------- environment


async def test_secrets_do_not_reach_the_command(
    ctx: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "ANTHROPIC_API_KEY": "sk-secret-123",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-456",
        "MY_TOKEN": "token-secret-789",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    outcome = await bash({"command": "env; cat /proc/$$/environ | tr '\\0' '\\n'"}, ctx)
    assert not outcome.is_error
    for name, value in secrets.items():
        assert name not in outcome.content
        assert value not in outcome.content


async def test_allowlisted_variables_pass_through(
    ctx: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = f"{os.environ.get('PATH', '/usr/bin:/bin')}:/satsuma-test-bin"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    outcome = await bash({"command": 'printf "%s\\n" "$PATH" "$HOME" "$LANG" "$TZ"'}, ctx)
    assert outcome.content == f"{path}\n{tmp_path / 'home'}\nC.UTF-8\nAsia/Tokyo\n"


async def test_subclass_adds_variables_and_allowlist(
    ctx: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXTRA_OK", "extra-value")
    monkeypatch.setenv("FOO", "from-parent")
    command = 'printf "%s\\n" "FOO=$FOO" "EXTRA_OK=$EXTRA_OK"'
    outcome = await bash({"command": command}, ctx, ConfiguredBash)
    assert outcome.content == "FOO=bar\nEXTRA_OK=extra-value\n"
    # The plain tool passes neither.
    outcome = await bash({"command": command}, ctx)
    assert outcome.content == "FOO=\nEXTRA_OK=\n"


async def test_subclass_env_overrides_the_allowlist(ctx: dict[str, Any]) -> None:
    outcome = await bash({"command": 'echo "$PATH"'}, ctx, PathBash)
    assert outcome.content == "/satsuma-custom-bin:/usr/bin:/bin\n"


async def test_path_falls_back_when_the_parent_has_none(
    ctx: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PATH", raising=False)
    outcome = await bash({"command": 'echo "$PATH"; ls -d /'}, ctx)
    assert not outcome.is_error, outcome.content
    path, listed = outcome.content.splitlines()
    assert "/usr/bin" in path.split(":")
    assert "/bin" in path.split(":")
    assert listed == "/"


async def test_process_group_bookkeeping_scans_proc_off_the_trio_thread(
    ws: Path, ctx: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a fork flood, a scan of /proc reads thousands of files: on the trio thread it
    # would stall every other agent. Each scan is recorded with the thread it ran on.
    import threading

    from satsuma.tools.builtin import _process

    scans: list[int] = []
    real = _process.live_members

    def recorded(pgid: int) -> list[int]:
        scans.append(threading.get_ident())
        return real(pgid)

    monkeypatch.setattr(_process, "live_members", recorded)
    trio_thread = threading.get_ident()
    command = "trap '' TERM; for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; wait"
    outcome = await bash({"command": command, "timeout": 0.5}, ctx)
    assert outcome.details["timed_out"] is True
    assert scans, "the group was never scanned"
    assert trio_thread not in scans
