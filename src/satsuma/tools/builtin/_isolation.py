"""Keeping a ``bash`` command away from the service's processes and from the host's
settings: namespaces of its own, read-only system files and, as root, another user.

The environment allowlist keeps secrets out of a command's own environment, but on Linux
a process can read ``/proc/<pid>/environ``, ``cmdline`` and ``fd/*`` of every process of
its user (root: of every process): ``cat /proc/$PPID/environ`` would print the service's
``ANTHROPIC_API_KEY`` (issue 16, item 2). In a new PID namespace with a /proc of its own
mounted over the host's, a command sees only the processes it started.

A command that keeps uid 0 can do more, capabilities or not: uid 0 owns
``/proc/sys/kernel/core_pattern`` (mode 0644), and a pipe written there is run by the
kernel as full root at the next core dump (issue 29, item 1); it owns ``/etc`` too. So
when the service runs as root, the command runs as an unprivileged uid (``nobody`` by
default), and the paths container runtimes protect (``/proc/sys``, ``/sys``,
``/proc/sysrq-trigger``, ...) are read-only or masked in its mount namespace, whoever it
runs as. The helper program ``_jail.py`` does all of it (its docstring says how).

Three protections, and the wrapper that gives the most of them is used:

- ``processes``: a PID, mount and IPC namespace of its own, with its own /proc;
- ``system``: /proc/sys, /sys and the other kernel interfaces read-only or masked;
- ``unprivileged``: the command is not root (as root: it runs as ``run_as``, and the
  workspace is idmapped so that it works there as the workspace's owner would).

The candidates, strongest first:

- as root, namespaces of the host's user namespace, and the uid switched (all three);
- as root where an idmapped mount of the workspace is refused (a file system without
  idmap support, a kernel older than 5.12): the same with uid 0 and no capabilities;
- as root where namespaces are refused (a container), the same inside a new user
  namespace;
- as any other user, inside a new user namespace (no privilege needed); the command keeps
  the service's uid, which is not root: all three.

"Works" is probed once per process, workspace file system and ``run_as`` when every
protection applies (once per workspace when one does not): a shell run
under the wrapper says its pid in the /proc it sees (``1`` only in a PID namespace of its
own with its own /proc), its uid, whether it may write ``core_pattern`` and
``sysrq-trigger``, and whether it may write in the workspace (it must, where the
workspace's owner may: ``_owner_may_write``).

Inside, PID 1 is a small bash (``_INIT``) that runs ``bash -c <command>`` as its child and
exits with its status. The command's shell is not PID 1 on purpose: the kernel gives
PID 1 no default signal actions, so a shell there would ignore the SIGTERM of a timeout
(and carry on with the rest of the script until the SIGKILL) and ``kill $$`` would do
nothing. When PID 1 exits, the kernel kills whatever is left in the namespace, including
processes that left the process group (``setsid``). The price: a shell killed by signal N
is reported as bash reports it, exit status 128+N.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Final, Literal, TypeAlias, get_args

import attrs
import trio

__all__ = [
    "IsolationMode",
    "Protection",
    "ShellIsolation",
    "check_isolation",
    "isolated_argv",
    "warn_once",
]

# Its own logger, under satsuma.tools: the satsuma command shows its one warning even at
# its default level (errors only), since running less isolated is a security matter.
logger = logging.getLogger("satsuma.tools.isolation")

IsolationMode: TypeAlias = Literal["auto", "required", "off"]
"""``"auto"``: apply what the system allows, else warn once and run anyway;
``"required"``: refuse to run commands without every protection; ``"off"``: none."""

IsolationMethod: TypeAlias = Literal["pid_namespace", "user_namespace", "none"]

Protection: TypeAlias = Literal["processes", "system", "unprivileged"]
"""``"processes"``: the command sees no process but its own (a PID namespace with its own
/proc); ``"system"``: /proc/sys, /sys and the other kernel interfaces are read-only or
masked for it; ``"unprivileged"``: it does not run as root."""

ALL_PROTECTIONS: Final[frozenset[Protection]] = frozenset(get_args(Protection))

_FALLBACK_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_PROBE_SECONDS: Final = 10.0  # a wrapper whose shell has not answered by then does not work
_JAIL: Final = Path(__file__).with_name("_jail.py")

# PID 1 of the namespace. Its own stderr goes to /dev/null so that bash's notes about its
# child ("Killed", "Segmentation fault") do not join the output; the command gets the
# real stderr back as fd 2. `exit $?` keeps bash from exec'ing the command in its place.
_INIT: Final = 'exec 3>&2 2>/dev/null; bash -c "$1" 2>&3 3>&-; exit $?'
# Answers the probe: the shell's pid as the /proc it sees has it (1 only in a PID
# namespace of its own with its own /proc), its uid, and which of two kernel settings and
# the workspace it may write. Builtins only, so that only bash (which the tool needs
# anyway) is used.
_PROBE: Final = (
    'read -r pid rest < /proc/self/stat; w=""; '
    "for f in /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do "
    '[ -w "$f" ] && w="$w $f"; done; '
    '[ -w . ] && ws=yes || ws=no; echo "$pid $EUID $ws${w:+ writes}$w"'
)
_CONSEQUENCES: Final[dict[Protection, str]] = {
    "processes": "a command can read the environment of the service through /proc",
    "system": (
        "a command can write what the service's user may write in /proc/sys and /sys "
        "(as root: kernel settings)"
    ),
    "unprivileged": "a command runs as root (without capabilities) and can change files root owns",
}


@attrs.frozen(kw_only=True)
class ShellIsolation:
    """How ``bash`` commands are kept from the service's processes and the host's
    settings.

    Returned by ``Bash.check_isolation()``.

    Attributes:
        isolated: True when every protection applies: the command sees no process
            outside its own tree (it cannot read the environment, command line or open
            files of the service), cannot write /proc/sys, /sys and the other kernel
            interfaces, and does not run as root.
        method: ``"pid_namespace"`` (root: new PID, mount and IPC namespaces),
            ``"user_namespace"`` (the same inside a new user namespace, which needs no
            privilege), or ``"none"``.
        protections: Which of ``"processes"``, ``"system"`` and ``"unprivileged"`` apply.
        reason: What is missing and why; empty when isolated.
        wrapper: The words put before ``bash`` on the command line; empty without
            namespaces.
    """

    isolated: bool
    method: IsolationMethod
    protections: frozenset[Protection] = frozenset()
    reason: str = ""
    wrapper: tuple[str, ...] = ()

    @property
    def missing(self) -> frozenset[Protection]:
        """The protections that do not apply."""
        return ALL_PROTECTIONS - self.protections


def not_isolated(reason: str) -> ShellIsolation:
    """No namespaces at all; a service that is not root still runs commands as a user
    other than root."""
    unprivileged: frozenset[Protection] = frozenset()
    if sys.platform != "win32" and os.geteuid() != 0:
        unprivileged = frozenset({"unprivileged"})
    return ShellIsolation(isolated=False, method="none", protections=unprivileged, reason=reason)


@attrs.frozen
class _Candidate:
    method: IsolationMethod
    protections: frozenset[Protection]
    wrapper: tuple[str, ...]
    label: str


# Probed once per (effective uid, workspace file system, run_as) where every protection
# applied: each changes what works, the workspace itself does not. A result with less is
# kept for its own workspace (its real path in place of the file system): it may come of
# that directory alone (an idmapped mount refused on it), and one workspace must never
# weaken the isolation of the others on its file system.
_probed: dict[tuple[int, int | str, tuple[int, int]], ShellIsolation] = {}
_probe_lock = threading.Lock()
_warned = False


async def check_isolation(workspace: Path, run_as: tuple[int, int]) -> ShellIsolation:
    """How commands in ``workspace`` can be isolated on this system; probed once per
    file system, in a worker thread.

    Args:
        workspace: The directory the commands run in (its real path).
        run_as: The uid and gid commands run as when the service runs as root.
    """
    if sys.platform != "linux":
        return not_isolated(f"namespaces need Linux, and this is {sys.platform}")
    try:
        device = os.stat(workspace).st_dev
    except OSError as exc:
        return not_isolated(f"cannot look at the workspace {workspace}: {exc.strerror}")
    euid = os.geteuid()
    shared, own = (euid, device, run_as), (euid, str(workspace), run_as)
    found = _probed.get(own) or _probed.get(shared)
    if found is None:
        # Not abandoned on cancel: the probe is bounded (_PROBE_SECONDS a wrapper), and
        # no thread may outlive the call that started it.
        found = await trio.to_thread.run_sync(_probe_once, shared, own, workspace)
    return found


def isolated_argv(isolation: ShellIsolation, command: str) -> list[str]:
    """The command line that runs ``bash -c command`` under ``isolation``."""
    if not isolation.wrapper:
        return ["bash", "-c", command]
    return [*isolation.wrapper, "bash", "-c", _INIT, "bash", command]


def warn_once(isolation: ShellIsolation) -> None:
    """Log, once per process, what commands run without and why."""
    global _warned
    if _warned:
        return
    _warned = True
    consequences = "; ".join(_CONSEQUENCES[p] for p in sorted(isolation.missing))
    logger.warning(
        "bash: commands are not fully isolated: %s. So %s. See docs/builtin-tools.md",
        isolation.reason,
        consequences,
    )


def _probe_once(
    shared: tuple[int, int, tuple[int, int]], own: tuple[int, str, tuple[int, int]], workspace: Path
) -> ShellIsolation:
    # Two first calls at once: the second waits for the first's answer.
    with _probe_lock:
        found = _probed.get(own) or _probed.get(shared)
        if found is None:
            euid, _, run_as = shared
            found = _probe(euid, workspace, run_as)
            _probed[shared if found.isolated else own] = found
        return found


def _python() -> str:
    """The interpreter running satsuma, as the kernel found it. ``sys.executable`` may be
    a virtual environment's symlink into a directory the service's user cannot search
    (it names the link, not the binary), and the helper must start wherever we did."""
    try:
        found = os.readlink("/proc/self/exe")
    except OSError:
        return sys.executable
    # Python embedded in another program (uWSGI, say) is that program's binary.
    if os.path.basename(found).startswith("python") and os.path.isfile(found):
        return found
    return sys.executable


def _candidates(euid: int, run_as: tuple[int, int]) -> list[_Candidate]:
    jail = (_python(), "-I", "-S", str(_JAIL))
    in_user_namespace = (*jail, "--user-namespace", "--")
    if euid != 0:
        return [_Candidate("user_namespace", ALL_PROTECTIONS, in_user_namespace, "")]
    uid, gid = run_as
    contained: frozenset[Protection] = frozenset({"processes", "system"})
    return [
        _Candidate(
            "pid_namespace",
            ALL_PROTECTIONS,
            (*jail, "--uid", str(uid), "--gid", str(gid), "--"),
            f"running as uid {uid}",
        ),
        _Candidate("pid_namespace", contained, (*jail, "--"), "new PID namespace"),
        _Candidate("user_namespace", contained, in_user_namespace, "new user namespace"),
    ]


def _probe(euid: int, workspace: Path, run_as: tuple[int, int]) -> ShellIsolation:
    if not _python():
        return not_isolated("the Python running satsuma does not know its own executable")
    writable = _owner_may_write(workspace)
    failures: list[str] = []
    for candidate in _candidates(euid, run_as):
        failure = _try(candidate, workspace, writable, run_as)
        if failure is None:
            isolated = candidate.protections == ALL_PROTECTIONS
            return ShellIsolation(
                isolated=isolated,
                method=candidate.method,
                protections=candidate.protections,
                reason="" if isolated else "; ".join(failures),
                wrapper=candidate.wrapper,
            )
        failures.append(f"{candidate.label}: {failure}" if candidate.label else failure)
    return not_isolated("; ".join(failures))


def _owner_may_write(workspace: Path) -> bool:
    """Whether a command should be able to write in ``workspace``: the probe checks that
    it can, which is how an idmapped mount that did not take is seen.

    As root, ``os.access`` says yes to every directory (root overrides permissions), but
    the command has no capabilities: it works there as the workspace's owner would (the
    idmapped mount), so only the owner's write bit counts. A root-owned 0555 workspace
    is not writable for any candidate, and must not be taken for one that isolation
    broke, which made every candidate fail and the command run with no protection.
    """
    if os.geteuid() != 0:
        return os.access(workspace, os.W_OK)
    try:
        mode = os.stat(workspace).st_mode
        read_only = bool(os.statvfs(workspace).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return bool(mode & stat.S_IWUSR) and not read_only


def _try(
    candidate: _Candidate, workspace: Path, writable: bool, run_as: tuple[int, int]
) -> str | None:
    """Why ``candidate`` does not give what it promises, or None if it does."""
    try:
        done = subprocess.run(
            [*candidate.wrapper, "bash", "-c", _PROBE],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=workspace,
            env={"PATH": os.environ.get("PATH", _FALLBACK_PATH)},
            timeout=_PROBE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"a shell under it did not finish in {_PROBE_SECONDS:g}s"
    except OSError as exc:
        return str(exc)
    said = done.stderr.decode(errors="replace").strip().splitlines()
    if done.returncode != 0:
        return said[-1] if said else f"exit status {done.returncode}"
    answer = done.stdout.decode(errors="replace").split()
    if len(answer) < 3:
        return f"a shell under it answered {' '.join(answer)!r}"
    pid, uid, workspace_ok, *writes = answer
    if pid != "1":
        return f"a shell under it is pid {pid} in the /proc it sees, not 1"
    if writes:
        return f"a shell under it may write {', '.join(writes[1:])}"
    if "unprivileged" in candidate.protections and uid == "0":
        return "a shell under it runs as root"
    if "unprivileged" in candidate.protections and os.geteuid() == 0 and uid != str(run_as[0]):
        return f"a shell under it runs as uid {uid}, not {run_as[0]}"
    if writable and workspace_ok != "yes":
        return f"a shell under it cannot write in the workspace {workspace}"
    return None
