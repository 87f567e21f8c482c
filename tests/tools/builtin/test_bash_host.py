"""An isolated bash command can change no kernel or system setting and reach no process
outside its own tree, and still works in its workspace (issue 29, item 1).

The threat: a service running as root. Before, the command kept uid 0 (without
capabilities), and uid 0 owns ``/proc/sys/kernel/core_pattern``: a pipe written there is
run by the kernel as full root at the next core dump. The reproduction writes the current
value back, so that no test ever changes a host setting; the scans only ask the kernel
whether a file may be written (``access(W_OK)``, find's ``-writable``) and write nothing.

Each probe goes through the real tool and the real kernel. Probes that only matter for
a root service are skipped, with the reason, for any other user.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import satsuma
from satsuma.testing import run_tool
from satsuma.tools.builtin import Bash

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="isolation uses Linux namespaces")

ROOT = sys.platform == "linux" and os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT,
    reason="only a root service's command could write these; as any other user it cannot",
)
SHELL = frozenset({"shell"})
WRITE_CORE_PATTERN = (
    "v=$(cat /proc/sys/kernel/core_pattern); "
    "printf '%s' \"$v\" > /proc/sys/kernel/core_pattern && echo WROTE_OK"
)
# The kernel's interfaces: every file under them that the command may write. Per-process
# directories are left out: the command may of course change its own processes. Masked
# files are /dev/null mounted over them: writable, and writes go nowhere.
SCAN = (
    "find /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs /sys "
    "-type f -writable ! -samefile /dev/null -print 2>/dev/null | head -n 100; "
    "find /proc -maxdepth 1 -type f -writable ! -samefile /dev/null -print 2>/dev/null; "
    "echo scanned"
)


class PlainBash(Bash):
    isolation = "off"


async def bash(
    command: str, workspace: Path, tool: type[Bash] = Bash, seconds: float = 60
) -> satsuma.ToolOutcome:
    context = {"working_dir": workspace, "capabilities": set(SHELL)}
    outcome = await run_tool(tool, {"command": command, "timeout": seconds}, context)
    assert outcome.details is not None, outcome.content
    if tool is Bash:
        # Every protection applies on this system: the tests below are about what they
        # stop, not about a fallback (test_bash_isolation.py covers those).
        assert outcome.details["isolated"] is True, await Bash.check_isolation(workspace)
    return outcome


# --------------------------------------------------------------- kernel and system


@needs_root
async def test_the_core_pattern_write_back_is_refused(tool_workspace: Path) -> None:
    outcome = await bash(WRITE_CORE_PATTERN, tool_workspace)
    assert "WROTE_OK" not in outcome.content
    assert outcome.is_error, outcome.content


@needs_root
async def test_without_isolation_the_write_back_succeeds(tool_workspace: Path) -> None:
    # The threat, and the proof that the test above can fail. The same value goes back.
    outcome = await bash(WRITE_CORE_PATTERN, tool_workspace, PlainBash)
    assert outcome.content == "WROTE_OK\n"


async def test_no_kernel_interface_is_writable(tool_workspace: Path) -> None:
    outcome = await bash(SCAN, tool_workspace, seconds=120)
    assert outcome.content == "scanned\n"


@needs_root
async def test_without_isolation_the_scan_finds_writable_settings(tool_workspace: Path) -> None:
    outcome = await bash(SCAN, tool_workspace, PlainBash, seconds=120)
    assert "/proc/sys/kernel/core_pattern\n" in outcome.content


async def test_the_command_is_not_root_and_has_no_capabilities(tool_workspace: Path) -> None:
    outcome = await bash(
        "echo $EUID; grep -E '^(CapPrm|CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
        tool_workspace,
    )
    uid = Bash.run_as[0] if ROOT else os.geteuid()
    assert outcome.content == (
        f"{uid}\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
        "CapBnd:\t0000000000000000\nNoNewPrivs:\t1\n"
    )


async def test_no_mount_and_no_remount(tool_workspace: Path) -> None:
    command = """
    mount -t tmpfs none /mnt 2>/dev/null; echo "mount $?"
    mount -o remount,rw /proc/sys 2>/dev/null; echo "remount $?"
    umount /proc 2>/dev/null; echo "umount $?"
    umount -l /sys 2>/dev/null; echo "umount-sys $?"
    """
    outcome = await bash(command, tool_workspace)
    lines = outcome.content.splitlines()
    assert [line.split()[0] for line in lines] == ["mount", "remount", "umount", "umount-sys"]
    assert all(line.split()[1] != "0" for line in lines), outcome.content


async def test_unshare_again_gains_nothing(tool_workspace: Path) -> None:
    # Any user may make a user namespace where it is "root"; the mounts it inherits are
    # locked there, and the kernel's settings still check the host's uid.
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    inner = (
        "umount /proc/sys 2>/dev/null; umount -l /proc 2>/dev/null; "
        "mount -o remount,rw /proc/sys 2>/dev/null; mount -o remount,rw /sys 2>/dev/null; "
        f"{WRITE_CORE_PATTERN}; "
        "find /proc/sys /sys -type f -writable -print 2>/dev/null | head -n 20; echo done"
    )
    command = f"unshare --user --map-root-user --mount sh -c '{inner}' 2>&1 | grep -v '^sh:'"
    outcome = await bash(command, tool_workspace)
    assert "WROTE_OK" not in outcome.content
    assert outcome.content.endswith("done\n"), outcome.content
    assert "/proc/sys/" not in outcome.content, outcome.content


async def test_keyrings_are_out_of_reach(tool_workspace: Path) -> None:
    # Keyrings are not namespaced: /proc/keys lists every key the reader may view. It is
    # masked, as container runtimes mask it.
    outcome = await bash("wc -c < /proc/keys", tool_workspace)
    assert outcome.content == "0\n"


# The service, in a child process: a key holding a secret in a session keyring of its
# own (so that the test's keyrings are not touched), then one bash call that reads it
# back by id, as a possessor of the keyring would (KEYCTL_READ, 11).
KEYS_SERVICE = r"""
import ctypes, json, sys
import trio
from satsuma.testing import run_tool
from satsuma.tools.builtin import Bash

KEYCTL, ADD_KEY = {"x86_64": (250, 248), "aarch64": (219, 217)}[sys.argv[3]]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
assert libc.syscall(KEYCTL, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
secret = sys.argv[2].encode()
key = libc.syscall(ADD_KEY, b"user", b"satsuma-test", secret, len(secret), -3)  # @s
assert key > 0, ctypes.get_errno()

class ServiceBash(Bash):
    isolation = sys.argv[1]

READ = (
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "buffer = ctypes.create_string_buffer(256); "
    f"print(libc.syscall({KEYCTL}, 11, {key}, buffer, 256), ctypes.get_errno(), buffer.value)"
)

async def main():
    context = {"working_dir": sys.argv[4], "capabilities": {"shell"}}
    command = f"/usr/bin/python3 -I -S -c '{READ}'"
    outcome = await run_tool(ServiceBash, {"command": command}, context)
    print(json.dumps({"content": outcome.content, "details": outcome.details}))

trio.run(main)
"""


@pytest.mark.skipif(
    os.uname().machine not in ("x86_64", "aarch64") or not os.path.exists("/usr/bin/python3"),
    reason="the probe calls keyctl through /usr/bin/python3, with x86_64's or aarch64's numbers",
)
@pytest.mark.parametrize("mode", ["auto", "off"])
async def test_the_services_session_keyring_is_left_behind(mode: str, tool_workspace: Path) -> None:
    # A session keyring is inherited, and whoever possesses it may read its keys, as
    # nobody too. "off" shows the threat.
    secret = f"satsuma-key-{secrets.token_hex(12)}"
    argv = [sys.executable, "-c", KEYS_SERVICE, mode, secret, os.uname().machine]
    done = await trio.run_process(
        [*argv, str(tool_workspace)], capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    if mode == "off":
        assert secret in report["content"]
        return
    assert report["details"]["isolated"] is True
    assert secret not in report["content"]
    assert report["content"].startswith("-1 13 "), report["content"]  # EACCES


# ------------------------------------------------------------------ other processes


@pytest.fixture
def sibling() -> Iterator[tuple[int, str]]:
    """A process the service started outside the command, with a secret in its
    environment: its pid and the secret."""
    secret = f"sk-ant-sibling-{secrets.token_hex(12)}"
    process = subprocess.Popen(
        ["sleep", "600"], env={"PATH": os.environ["PATH"], "SIBLING_SECRET": secret}
    )
    try:
        yield process.pid, secret
    finally:
        process.kill()
        process.wait()


async def test_no_process_outside_can_be_reached(
    tool_workspace: Path, sibling: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pid, secret = sibling
    service_secret = f"sk-ant-service-{secrets.token_hex(12)}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", service_secret)
    ptrace = ""
    if os.path.exists("/usr/bin/python3"):
        # PTRACE_ATTACH (16) through libc: no debugger needed.
        ptrace = (
            '/usr/bin/python3 -I -S -c "import ctypes, sys; libc = ctypes.CDLL(None, '
            "use_errno=True); r = libc.ptrace(16, int(sys.argv[1]), 0, 0); "
            f'print(\\"ptrace\\", r, ctypes.get_errno())" {pid}'
        )
    service = os.getpid()
    command = f"""
    kill -0 {pid} 2>/dev/null; echo "kill $?"
    kill -KILL {service} 2>/dev/null; echo "kill-service $?"
    cat /proc/{pid}/environ /proc/{service}/environ 2>/dev/null; echo "environ $?"
    for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < "$f"; done 2>/dev/null
    nsenter --target 1 --mount --pid true 2>/dev/null; echo "setns $?"
    {ptrace}
    readlink /proc/1/ns/mnt
    """
    outcome = await bash(command, tool_workspace)
    assert secret not in outcome.content
    assert service_secret not in outcome.content
    assert "kill 1\n" in outcome.content
    assert "kill-service 1\n" in outcome.content
    assert "environ 1\n" in outcome.content
    assert "setns 0" not in outcome.content
    if ptrace:
        assert "ptrace -1 3\n" in outcome.content  # ESRCH: no such process here
    # PID 1 there is the command's own namespace's first process, in mounts of its own.
    assert os.readlink("/proc/self/ns/mnt") not in outcome.content
    assert "mnt:[" in outcome.content
    # And the sibling is alive: it was never reached.
    os.kill(pid, 0)


# ------------------------------------------------------------------ ordinary work


async def test_ordinary_work_in_the_workspace(tool_workspace: Path) -> None:
    # tool_workspace lies under pytest's 0700 directory: as root, the command's uid may
    # not search it, and the absolute path must still lead to the workspace.
    (tool_workspace / "given.txt").write_text("c\na\nb\n")
    command = """
    sort given.txt | tr a-z A-Z > sorted.txt
    mkdir -p out/deep && (cd out/deep && printf 'x\\n' > made.txt && cat made.txt)
    cat "$PWD/sorted.txt" | head -n 1
    echo appended >> given.txt
    ln -s sorted.txt link.txt && cat link.txt | wc -l
    [ -O . ] && echo owner
    rm -f scratch && : > scratch && rm scratch && echo removed
    """
    outcome = await bash(command, tool_workspace)
    assert outcome.content == "x\nA\n3\nowner\nremoved\n", outcome.content
    owner = tool_workspace.stat().st_uid, tool_workspace.stat().st_gid
    made = [
        tool_workspace / "sorted.txt",
        tool_workspace / "out",
        tool_workspace / "out" / "deep",
        tool_workspace / "out" / "deep" / "made.txt",
        tool_workspace / "given.txt",
    ]
    # On disk, what the command made belongs to the workspace's owner (the service),
    # not to the uid the command ran as.
    assert [(path.lstat().st_uid, path.lstat().st_gid) for path in made] == [owner] * len(made)
    assert (tool_workspace / "sorted.txt").read_text() == "A\nB\nC\n"
    assert (tool_workspace / "given.txt").read_text() == "c\na\nb\nappended\n"
    shutil.rmtree(tool_workspace / "out")


@pytest.mark.parametrize("locale", ["C.UTF-8", "C", None])
async def test_the_command_starts_as_it_would_without_isolation(
    tool_workspace: Path, locale: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The helper is Python: it ignores SIGPIPE and SIGXFSZ, and under the C locale it
    # adds LC_CTYPE=C.UTF-8 to its environment (PEP 538). The command inherits neither.
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        monkeypatch.delenv(name, raising=False)
    if locale is not None:
        monkeypatch.setenv("LANG", locale)
    command = (
        "grep -E '^Sig(Ign|Blk)' /proc/self/status; yes | head -n 1; "
        "env | grep -v -E '^(SHLVL|_)=' | sort; umask"
    )
    plain = await bash(command, tool_workspace, PlainBash)
    isolated = await bash(command, tool_workspace)
    assert isolated.content == plain.content
    assert "\ny\n" in isolated.content, isolated.content


async def test_a_setuid_file_made_in_the_workspace_gives_nothing(tool_workspace: Path) -> None:
    # The workspace is mounted nosuid for the command, and no_new_privs holds anyway.
    if not os.path.exists("/usr/bin/id"):
        pytest.skip("no /usr/bin/id to copy")
    command = "cp /usr/bin/id ./myid && chmod u+s ./myid && ./myid -u"
    outcome = await bash(command, tool_workspace)
    assert outcome.content == f"{Bash.run_as[0] if ROOT else os.geteuid()}\n"


async def test_the_check_names_every_protection(tool_workspace: Path) -> None:
    isolation = await Bash.check_isolation(tool_workspace)
    assert isolation.isolated
    assert isolation.protections == {"processes", "system", "unprivileged"}
    assert isolation.missing == frozenset()
    assert isolation.method == ("pid_namespace" if ROOT else "user_namespace")


def test_run_as_root_is_a_definition_error() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match=r"run_as must be \(uid, gid\)"):

        class RootBash(Bash):
            run_as = (0, 0)


# --------------------------------------------------------------- workspaces


@needs_root
async def test_a_workspace_the_command_may_not_write_keeps_every_protection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A root-owned 0555 directory: root may write it (it overrides permissions), no
    # command can. Taken for an isolation that broke the workspace, it failed every
    # candidate, so its commands ran as root with no protection, and so did those of
    # every later workspace on its file system (the probe was kept per file system).
    from satsuma.tools.builtin import _isolation

    monkeypatch.setattr(_isolation, "_probed", {})  # nothing probed yet in this process
    read_only, other = tmp_path / "read-only", tmp_path / "other"
    read_only.mkdir()
    other.mkdir()
    read_only.chmod(0o555)
    try:
        for workspace in (read_only, other):
            outcome = await bash(f"id -u; {WRITE_CORE_PATTERN}", workspace)
            assert str(Bash.run_as[0]) in outcome.content.splitlines(), outcome.content
            assert "WROTE_OK" not in outcome.content
        outcome = await bash("touch made-here", read_only)
        assert outcome.is_error and "Permission denied" in outcome.content
        assert not (read_only / "made-here").exists()
    finally:
        read_only.chmod(0o755)
