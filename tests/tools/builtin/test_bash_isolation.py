"""The bash tool keeps the service's secrets out of a command's reach (issue 16, item 2):
not through its own environment (test_bash.py), and not through /proc either: the
environment, command line or open files of the service or of any process outside the
command's own tree.

The service is played by a child Python process that holds one secret in its
environment, one in its command line and one in a file open on an inheritable
descriptor that no path leads to; it runs one bash call and prints the outcome. The
command does what an attacker would: reads its parent's environ, cmdline and fds, walks
every process it can see, unmounts /proc (only where /proc is its own) and looks again.

With ``isolation = "off"`` the same command prints every secret: that is the threat,
and it shows that these tests can fail. The service runs as the test's own user and, when
the test runs as root, as an ordinary one (``nobody``) too; a test run by an ordinary
user covers that case as it is.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from satsuma import ToolDefinitionError
from satsuma.testing import run_tool
from satsuma.tools.builtin import Bash, ShellIsolation, _isolation
from satsuma.tools.builtin._isolation import not_isolated

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="isolation uses Linux namespaces")

NOBODY = 65534
# The issue's safe reproduction: the current value written back (issue 29, item 1).
WRITE_CORE_PATTERN = (
    "v=$(cat /proc/sys/kernel/core_pattern); "
    "printf '%s' \"$v\" > /proc/sys/kernel/core_pattern && echo WROTE_OK"
)
SHELL = frozenset({"shell"})
OUR_MOUNTS = os.readlink("/proc/self/ns/mnt") if sys.platform == "linux" else ""

# The attack. Regular files only are read through fd links: opening a pipe's link would
# read the command's own output. Every read is cut short, so that walking a whole
# machine's processes (unisolated, as root) stays within the output kept.
ATTACK = r"""
look() {
  for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
    echo "== $f"; head -c 65536 "$f" | tr '\0' '\n'; echo
  done 2>&1
  for f in /proc/self/fd/* /proc/[0-9]*/fd/*; do
    [ -f "$f" ] && { echo "== $f"; head -c 4096 "$f"; echo; }
  done 2>&1
  ls -l /proc/[0-9]*/fd 2>&1 | grep -v ' -> /proc/' | head -c 65536
}
echo "uid=$(id -u) ppid=$PPID"
grep -E '^Cap(Prm|Eff):' /proc/self/status
echo "== parent"
tr '\0' '\n' < /proc/$PPID/environ; tr '\0' ' ' < /proc/$PPID/cmdline; echo
for f in /proc/$PPID/fd/*; do [ -f "$f" ] && head -c 4096 "$f"; done; echo
look
# Only where /proc is the command's own: run unisolated as root, this would take the
# machine's /proc away.
if [ "$(readlink /proc/self/ns/mnt)" != "OUR_MOUNTS" ]; then
  umount /proc; umount -l /proc; echo "== after" "umount"; look
fi
""".replace("OUR_MOUNTS", OUR_MOUNTS)

# The service: its secrets in its environment (set by the test), its argv[2] and a file
# open on an inheritable descriptor whose secret comes on stdin and has no path.
SERVICE = r"""
import json, os, sys, tempfile
import trio
from satsuma.testing import run_tool
from satsuma.tools.builtin import Bash

class ServiceBash(Bash):
    isolation = sys.argv[1]
    max_output_chars = 50_000_000

async def main():
    fd_secret = sys.stdin.read()
    with tempfile.TemporaryFile() as file:
        file.write(fd_secret.encode())
        file.flush()
        os.set_inheritable(file.fileno(), True)
        context = {"working_dir": sys.argv[3], "capabilities": {"shell"}}
        outcome = await run_tool(
            ServiceBash, {"command": sys.argv[4]}, context, max_result_chars=None
        )
    print(json.dumps({"content": outcome.content, "details": outcome.details}))

trio.run(main)
"""


@attrs.frozen(kw_only=True)
class Secrets:
    environment: str = attrs.field(factory=lambda: f"sk-ant-env-{secrets.token_hex(12)}")
    argument: str = attrs.field(factory=lambda: f"satsuma-argv-{secrets.token_hex(12)}")
    descriptor: str = attrs.field(factory=lambda: f"satsuma-fd-{secrets.token_hex(12)}")

    def all(self) -> dict[str, str]:
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class Attacked:
    content: str
    details: dict[str, Any]

    def leaked(self, held: Secrets) -> list[str]:
        return [where for where, secret in held.all().items() if secret in self.content]


# ----------------------------------------------------------------- users and the OS


def _as_user(user: str) -> list[str]:
    """The command-line prefix that runs the service as ``user``."""
    if user == "current" or os.geteuid() != 0:
        return []  # an ordinary user already is one
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("the test runs as root and cannot switch users: setpriv is missing")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def _os_cannot_isolate(as_user: list[str]) -> str | None:
    """Why this system cannot give ``as_user`` a PID namespace, asked directly (not
    through satsuma's probe, so that a bug there cannot turn into a skip), or None."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare (util-linux) is not installed"
    # Root may make a PID namespace directly, or (in a container) inside a user namespace.
    ways = [["--user", "--map-current-user"]]
    if os.geteuid() == 0 and not as_user:
        ways.insert(0, [])
    refusals = []
    for namespaces in ways:
        done = subprocess.run(
            [*as_user, unshare, *namespaces, "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            return None
        refusals.append(done.stderr.decode().strip())
    return f"this system gives no PID namespace: {'; '.join(refusals)}"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A workspace every user may enter (a test's tmp_path is its user's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="satsuma-isolation-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _python_for(as_user: list[str]) -> str:
    """A Python of this version that ``as_user`` may start. Ours may not be one: a test
    run as root may use an interpreter under /root, which an ordinary user cannot reach
    (setpriv itself may still exec it, but the service then cannot start the helper)."""
    if not as_user:
        return sys.executable
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for python in (
        os.readlink("/proc/self/exe"),
        *(f"{d}/python{version}" for d in ("/usr/bin", "/usr/local/bin")),
    ):
        tried = subprocess.run(
            [*as_user, "/bin/sh", "-c", 'exec "$0" -I -S -c pass', python],
            capture_output=True,
            check=False,
        )
        if tried.returncode == 0:
            return python
    pytest.skip(f"an ordinary user can start no Python {version} here")


async def attack(mode: str, user: str, folder: Path, held: Secrets) -> Attacked:
    """Run the service as ``user`` with bash's ``isolation = mode``; the attack's outcome."""
    as_user = _as_user(user)
    environment = {
        **os.environ,
        "ANTHROPIC_API_KEY": held.environment,
        # satsuma and its dependencies, wherever the interpreter is.
        "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry),
    }
    python = _python_for(as_user)
    argv = [*as_user, python, "-c", SERVICE, mode, held.argument, str(folder), ATTACK]
    done = await trio.run_process(
        argv,
        stdin=held.descriptor.encode(),
        capture_stdout=True,
        capture_stderr=True,
        env=environment,
        cwd=folder,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    details = report["details"]
    assert details is not None, report["content"]
    # Nothing of the output was left out, where a secret could hide.
    assert details["omitted_bytes"] == 0
    # The command ran as the service's user, or, isolated under a root service, as
    # Bash.run_as (test_bash_host.py says what that changes).
    uid = NOBODY if as_user else os.geteuid()
    if uid == 0 and mode != "off":
        uid = Bash.run_as[0]
    assert report["content"].startswith(f"uid={uid} "), report["content"][:200]
    return Attacked(content=report["content"], details=details)


# ------------------------------------------------------------- isolated: no secrets


@pytest.mark.parametrize("user", ["current", "ordinary"])
@pytest.mark.parametrize("mode", ["auto", "required"])
async def test_a_command_cannot_read_the_services_secrets(
    user: str, mode: str, shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = _os_cannot_isolate(_as_user(user))
    if reason is not None:
        # test_without_unshare_* check the warning and the refusal instead.
        pytest.skip(reason)
    held = Secrets()
    monkeypatch.setenv("SATSUMA_TEST_SECRET", held.environment)
    attacked = await attack(mode, user, shared_dir, held)
    assert attacked.details["isolated"] is True
    assert attacked.leaked(held) == [], attacked.content
    # Its parent is the namespace's PID 1, not the service, and it holds no capability.
    assert "ppid=1\n" in attacked.content
    assert "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" in attacked.content
    assert "== after umount" in attacked.content


@pytest.mark.parametrize("user", ["current", "ordinary"])
async def test_without_isolation_a_command_can_read_them(
    user: str, shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The threat, and the proof that the test above can fail.
    held = Secrets()
    monkeypatch.setenv("SATSUMA_TEST_SECRET", held.environment)
    attacked = await attack("off", user, shared_dir, held)
    assert attacked.details["isolated"] is False
    assert attacked.leaked(held) == ["environment", "argument", "descriptor"]
    assert "== after umount" not in attacked.content


@pytest.mark.parametrize("mode", ["auto", "off"])
async def test_no_descriptor_of_the_service_is_inherited(
    tool_workspace: Path, tmp_path: Path, mode: str
) -> None:
    secret = f"satsuma-fd-{secrets.token_hex(12)}"
    (tmp_path / "secret").write_text(secret)
    fd = os.open(tmp_path / "secret", os.O_RDONLY)
    try:
        os.set_inheritable(fd, True)

        class ThisBash(Bash):
            isolation = mode  # type: ignore[assignment]  # one of the modes, parametrized

        command = f"ls /proc/$$/fd; cat /proc/self/fd/{fd} /proc/$$/fd/{fd} 2>/dev/null; true"
        outcome = await run_tool(
            ThisBash, {"command": command}, {"working_dir": tool_workspace, "capabilities": SHELL}
        )
    finally:
        os.close(fd)
    assert outcome.content == "0\n1\n2\n"
    assert secret not in outcome.content


# --------------------------------------------------------- without isolation: said so

# Stand-ins for the helper program (_jail.py), as a kernel or container that refuses
# would make it behave: namespaces refused; a wrapper that runs the command but isolates
# nothing; the uid switch refused (an idmapped mount of the workspace is not supported by
# its file system), everything else done by the real helper.
REFUSED = (
    "import sys\n"
    "sys.stderr.write('bash isolation: unshare mount, PID and IPC namespaces: "
    "Operation not permitted\\n')\n"
    "sys.exit(126)\n"
)
UNISOLATED = (
    "import os, sys\nargv = sys.argv[sys.argv.index('--') + 1:]\nos.execvp(argv[0], argv)\n"
)
NO_IDMAP = f"""import os, sys
if '--uid' in sys.argv:
    sys.stderr.write('bash isolation: mount_setattr workspace: Invalid argument\\n')
    sys.exit(126)
os.execv(sys.executable, [sys.executable, '-I', '-S', {str(_isolation._JAIL)!r}, *sys.argv[1:]])
"""
REFUSAL = "bash isolation: unshare mount, PID and IPC namespaces: Operation not permitted"


@pytest.fixture
def fake_jail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Installs a stand-in helper; nothing has been probed or warned yet."""
    monkeypatch.setattr(_isolation, "_probed", {})
    monkeypatch.setattr(_isolation, "_warned", False)

    def install(script: str) -> None:
        path = tmp_path / "fake_jail.py"
        path.write_text(script)
        monkeypatch.setattr(_isolation, "_JAIL", path)

    return install


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("satsuma.tools") and record.levelno == logging.WARNING
    ]


def _refusals() -> str:
    """The reason the check gives when every wrapper is refused."""
    if os.geteuid() != 0:
        return REFUSAL
    return (
        f"running as uid {Bash.run_as[0]}: {REFUSAL}; new PID namespace: {REFUSAL}; "
        f"new user namespace: {REFUSAL}"
    )


async def test_without_namespaces_the_check_says_why(
    fake_jail: Callable[[str], None], tool_workspace: Path
) -> None:
    fake_jail(REFUSED)
    isolation = await Bash.check_isolation(tool_workspace)
    assert isolation == ShellIsolation(
        isolated=False,
        method="none",
        protections=frozenset() if os.geteuid() == 0 else frozenset({"unprivileged"}),
        reason=_refusals(),
    )


async def test_without_namespaces_auto_warns_once_and_runs(
    fake_jail: Callable[[str], None],
    tool_context: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_jail(REFUSED)
    caplog.set_level(logging.WARNING, logger="satsuma.tools")
    for _ in range(2):
        outcome = await run_tool(Bash, {"command": "echo ran"}, tool_context)
        assert outcome.content == "ran\n"
        assert outcome.details["isolated"] is False
    consequences = [
        "a command can read the environment of the service through /proc",
        "a command can write what the service's user may write in /proc/sys and /sys "
        "(as root: kernel settings)",
    ]
    if os.geteuid() == 0:
        consequences.append(
            "a command runs as root (without capabilities) and can change files root owns"
        )
    assert _warnings(caplog) == [
        f"bash: commands are not fully isolated: {_refusals()}. So {'; '.join(consequences)}. "
        "See docs/builtin-tools.md"
    ]


async def test_without_namespaces_required_refuses(
    fake_jail: Callable[[str], None], tool_workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_jail(REFUSED)

    class StrictBash(Bash):
        isolation = "required"

    context = {"working_dir": tool_workspace, "capabilities": SHELL}
    outcome = await run_tool(StrictBash, {"command": "touch ran"}, context)
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert outcome.content == (
        "Error: bash commands must run isolated (isolation = 'required'), and this system "
        f"cannot isolate them fully: {_refusals()}"
    )
    assert not (tool_workspace / "ran").exists()
    assert _warnings(caplog) == []


async def test_off_neither_isolates_nor_warns(
    fake_jail: Callable[[str], None],
    tool_context: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_jail(REFUSED)

    class PlainBash(Bash):
        isolation = "off"

    outcome = await run_tool(PlainBash, {"command": "echo ran"}, tool_context)
    assert outcome.content == "ran\n"
    assert outcome.details["isolated"] is False
    assert _warnings(caplog) == []
    assert await PlainBash.check_isolation() == not_isolated("PlainBash.isolation is 'off'")


async def test_a_wrapper_that_does_not_isolate_is_not_trusted(
    fake_jail: Callable[[str], None], tool_workspace: Path
) -> None:
    # It runs the command, but in the service's own PID namespace and /proc.
    fake_jail(UNISOLATED)
    isolation = await Bash.check_isolation(tool_workspace)
    assert not isolation.isolated
    assert isolation.method == "none"
    assert "in the /proc it sees, not 1" in isolation.reason


@pytest.mark.skipif(
    sys.platform == "linux" and os.geteuid() != 0,
    reason="only a root service switches the command's uid; as any other user it is not root",
)
@pytest.mark.parametrize("mode", ["auto", "required"])
async def test_without_the_uid_switch_root_keeps_the_rest_and_says_so(
    mode: str,
    fake_jail: Callable[[str], None],
    tool_workspace: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A file system without idmapped mounts: the command cannot run as another user and
    # still work in the workspace. "auto" runs it as root without capabilities, the
    # kernel's settings still read-only; "required" refuses.
    fake_jail(NO_IDMAP)
    reason = f"running as uid {Bash.run_as[0]}: bash isolation: mount_setattr workspace: Invalid argument"
    isolation = await Bash.check_isolation(tool_workspace)
    assert (isolation.isolated, isolation.method, isolation.reason) == (
        False,
        "pid_namespace",
        reason,
    )
    assert isolation.protections == {"processes", "system"}

    class ThisBash(Bash):
        isolation = mode  # type: ignore[assignment]  # one of the modes, parametrized

    command = f"echo $PPID $EUID; {WRITE_CORE_PATTERN}"
    context = {"working_dir": tool_workspace, "capabilities": SHELL}
    outcome = await run_tool(ThisBash, {"command": command}, context)
    if mode == "required":
        assert outcome.content == (
            "Error: bash commands must run isolated (isolation = 'required'), and this "
            f"system cannot isolate them fully: {reason}"
        )
        return
    assert outcome.content.startswith("Exit code: 1\n\n1 0\n"), outcome.content
    assert "WROTE_OK" not in outcome.content
    assert "Read-only file system" in outcome.content
    assert outcome.details["protections"] == ["processes", "system"]
    assert _warnings(caplog) == [
        f"bash: commands are not fully isolated: {reason}. So a command runs as root "
        "(without capabilities) and can change files root owns. See docs/builtin-tools.md"
    ]


# ----------------------------------------------------------------- the check itself


async def test_the_probe_runs_once_off_the_trio_thread(
    fake_jail: Callable[[str], None], tool_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_jail(REFUSED)
    probes: list[int] = []
    real = _isolation._probe

    def recorded(euid: int, workspace: Path, run_as: tuple[int, int]) -> ShellIsolation:
        probes.append(threading.get_ident())
        return real(euid, workspace, run_as)

    monkeypatch.setattr(_isolation, "_probe", recorded)
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(Bash.check_isolation, tool_workspace)
    await Bash.check_isolation(tool_workspace)
    assert len(probes) == 1
    assert threading.get_ident() not in probes


async def test_the_check_matches_what_the_tool_does(tool_context: dict[str, Any]) -> None:
    isolation = await Bash.check_isolation()
    assert isolation.isolated == (isolation.method != "none")
    assert bool(isolation.reason) != isolation.isolated
    outcome = await run_tool(Bash, {"command": "true"}, tool_context)
    assert outcome.details["isolated"] is isolation.isolated


def test_an_unknown_mode_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError, match="isolation must be 'auto', 'required' or"):

        class Typo(Bash):
            isolation = "on"  # type: ignore[assignment]  # the mistake under test


@pytest.mark.skipif(
    sys.platform == "linux" and os.geteuid() != 0,
    reason="only a root service switches the command's uid; as any other user it is not root",
)
async def test_a_weaker_isolation_of_one_workspace_is_not_the_others(
    tmp_path: Path, fake_jail: Callable[[str], None]
) -> None:
    # An idmapped mount refused on one directory (the helper here refuses it in any
    # workspace named no-idmap) gives that workspace less; the probe was kept per file
    # system, so every later workspace on it ran as root too, and with "required"
    # every one was refused, naming the first.
    fake_jail(
        "import os, sys\n"
        "if '--uid' in sys.argv and os.path.basename(os.getcwd()) == 'no-idmap':\n"
        "    sys.stderr.write('bash isolation: mount_setattr workspace: Invalid argument\\n')\n"
        "    sys.exit(126)\n"
        f"os.execv(sys.executable, [sys.executable, '-I', '-S', {str(_isolation._JAIL)!r}, "
        "*sys.argv[1:]])\n"
    )
    refused, plain = tmp_path / "no-idmap", tmp_path / "plain"
    refused.mkdir()
    plain.mkdir()
    weaker = await Bash.check_isolation(refused)
    assert weaker.protections == {"processes", "system"}
    assert "mount_setattr workspace" in weaker.reason
    full = await Bash.check_isolation(plain)
    assert (full.isolated, full.protections) == (True, _isolation.ALL_PROTECTIONS)
    assert await Bash.check_isolation(refused) == weaker  # its own, kept


@pytest.mark.skipif(
    sys.platform == "linux" and os.geteuid() != 0,
    reason="only a root service switches the command's uid; as any other user it is not root",
)
def test_the_command_line_shows_the_isolation_warning_at_its_default_level(
    fake_jail: Callable[[str], None],
    tool_workspace: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # satsuma run shows errors only by default, and the one warning that a root
    # service's commands run as root (no idmapped mount here) was never seen.
    from satsuma.cli import main

    fake_jail(NO_IDMAP)
    monkeypatch.chdir(tool_workspace)
    log = logging.getLogger("satsuma")
    level, handlers = log.level, list(log.handlers)
    try:
        command = ["run", 'bash {"command": "true"}', "--model", "fake", "--tools", "bash"]
        status = main([*command, "--allow", "shell", "--workdir", str(tool_workspace)])
    finally:
        log.setLevel(level)
        log.handlers[:] = handlers
    assert status == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "bash: commands are not fully isolated: running as uid" in err, err
