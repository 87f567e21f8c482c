"""Keeping a ``bash`` command away from the service's processes: a PID namespace of its own.

The environment allowlist keeps secrets out of a command's own environment, but on Linux
a process can read ``/proc/<pid>/environ``, ``cmdline`` and ``fd/*`` of every process of
its user (root: of every process): ``cat /proc/$PPID/environ`` would print the service's
``ANTHROPIC_API_KEY`` (issue 16, item 2). In a new PID namespace with a /proc of its own
mounted over the host's, a command sees only the processes it started.

The wrapper put before the command is the first of these that works:

- as root, ``unshare --pid --fork --mount-proc --kill-child`` then ``setpriv`` with an
  empty capability bounding set: the command is still uid 0, but without
  ``CAP_SYS_ADMIN`` it cannot ``umount /proc`` to uncover the host's;
- as root where that is refused (a container), the same inside a new user namespace;
- as any other user, ``unshare --user --map-current-user --pid --fork --mount-proc
  --kill-child``: the command keeps its uid and, like any non-root program after exec,
  has no capabilities. A nested user namespace does not help it: the /proc it inherits
  is locked and cannot be unmounted there.

"Works" is probed once per process (and PATH): a shell run under the wrapper reads its
own pid in /proc/self/stat, which is ``1`` only in a PID namespace of its own with its
own /proc.

Inside, PID 1 is a small bash (``_INIT``) that runs ``bash -c <command>`` as its child and
exits with its status. The command's shell is not PID 1 on purpose: the kernel gives
PID 1 no default signal actions, so a shell there would ignore the SIGTERM of a timeout
(and carry on with the rest of the script until the SIGKILL) and ``kill $$`` would do
nothing. When PID 1 exits, the kernel kills whatever is left in the namespace, including
processes that left the process group (``setsid``). The price: a shell killed by signal N
is reported as bash reports it, exit status 128+N.

``unshare`` and ``setpriv`` are looked up on the service's PATH, not the command's: the
command's PATH may point into the workspace, where the model can write programs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from typing import Final, Literal, TypeAlias

import attrs
import trio

__all__ = ["IsolationMode", "ShellIsolation", "check_isolation", "isolated_argv", "warn_once"]

logger = logging.getLogger("satsuma.tools")

IsolationMode: TypeAlias = Literal["auto", "required", "off"]
"""``"auto"``: isolate when the system allows, else warn once and run anyway;
``"required"``: refuse to run commands that cannot be isolated; ``"off"``: never isolate."""

IsolationMethod: TypeAlias = Literal["pid_namespace", "user_namespace", "none"]

_FALLBACK_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_PROBE_SECONDS: Final = 10.0  # a wrapper that has not run `readlink` by then does not work

# PID 1 of the namespace. Its own stderr goes to /dev/null so that bash's notes about its
# child ("Killed", "Segmentation fault") do not join the output; the command gets the
# real stderr back as fd 2. `exit $?` keeps bash from exec'ing the command in its place.
_INIT: Final = 'exec 3>&2 2>/dev/null; bash -c "$1" 2>&3 3>&-; exit $?'
# Prints the shell's pid as the /proc it sees has it: 1 only in a PID namespace of its own
# with its own /proc. A builtin, so that only bash (which the tool needs anyway) is used.
_WHO_AM_I: Final = 'read -r pid rest < /proc/self/stat && echo "$pid"'
_NO_CAPABILITIES: Final = ("--bounding-set=-all", "--inh-caps=-all", "--")
_NAMESPACES: Final = ("--pid", "--fork", "--mount-proc", "--kill-child")
_LABELS: Final[dict[IsolationMethod, str]] = {
    "pid_namespace": "new PID namespace",
    "user_namespace": "new user and PID namespaces",
    "none": "none",
}


@attrs.frozen(kw_only=True)
class ShellIsolation:
    """Whether ``bash`` commands run isolated from the service's processes, and how.

    Returned by ``Bash.check_isolation()``. Isolated means the command runs in a PID
    namespace of its own with its own /proc: it cannot read the environment, command line
    or open files of any process outside the tree it started, the service included.

    Attributes:
        isolated: True when commands run isolated.
        method: ``"pid_namespace"`` (root: new PID and mount namespaces, capabilities
            dropped), ``"user_namespace"`` (the same inside a new user namespace, which
            needs no privilege), or ``"none"``.
        reason: Why commands are not isolated; empty when they are.
        wrapper: The words put before ``bash`` on the command line; empty when not
            isolated.
    """

    isolated: bool
    method: IsolationMethod
    reason: str = ""
    wrapper: tuple[str, ...] = ()


def not_isolated(reason: str) -> ShellIsolation:
    return ShellIsolation(isolated=False, method="none", reason=reason)


# Probed once per (PATH, effective uid): both change what can be found and what works.
_probed: dict[tuple[str, int], ShellIsolation] = {}
_probe_lock = threading.Lock()
_warned = False


async def check_isolation() -> ShellIsolation:
    """How commands can be isolated on this system; probed once, in a worker thread."""
    if sys.platform != "linux":
        return not_isolated(f"PID namespaces need Linux, and this is {sys.platform}")
    key = (os.environ.get("PATH", _FALLBACK_PATH), os.geteuid())
    found = _probed.get(key)
    if found is None:
        # Not abandoned on cancel: the probe is bounded (_PROBE_SECONDS a wrapper), and
        # no thread may outlive the call that started it.
        found = await trio.to_thread.run_sync(_probe_once, key)
    return found


def isolated_argv(isolation: ShellIsolation, command: str) -> list[str]:
    """The command line that runs ``bash -c command`` under ``isolation``."""
    if not isolation.isolated:
        return ["bash", "-c", command]
    return [*isolation.wrapper, "bash", "-c", _INIT, "bash", command]


def warn_once(isolation: ShellIsolation) -> None:
    """Log, once per process, that commands run without isolation and why."""
    global _warned
    if _warned:
        return
    _warned = True
    logger.warning(
        "bash: commands are not isolated from the service's processes: %s; a command can "
        "read the environment of the service through /proc. See docs/builtin-tools.md",
        isolation.reason,
    )


def _probe_once(key: tuple[str, int]) -> ShellIsolation:
    # Two first calls at once: the second waits for the first's answer.
    with _probe_lock:
        found = _probed.get(key)
        if found is None:
            found = _probed[key] = _probe(*key)
        return found


def _probe(path: str, euid: int) -> ShellIsolation:
    unshare = shutil.which("unshare", path=path)
    if unshare is None:
        return not_isolated(f"unshare (util-linux) was not found on PATH ({path})")
    candidates: list[tuple[IsolationMethod, tuple[str, ...]]]
    if euid == 0:
        setpriv = shutil.which("setpriv", path=path)
        if setpriv is None:
            return not_isolated(f"setpriv (util-linux) was not found on PATH ({path})")
        candidates = [
            ("pid_namespace", (unshare, *_NAMESPACES, setpriv, *_NO_CAPABILITIES)),
            (
                "user_namespace",
                (unshare, "--user", "--map-current-user", *_NAMESPACES, setpriv, *_NO_CAPABILITIES),
            ),
        ]
    else:
        candidates = [("user_namespace", (unshare, "--user", "--map-current-user", *_NAMESPACES))]
    failures = []
    for method, wrapper in candidates:
        failure = _try(wrapper, path)
        if failure is None:
            return ShellIsolation(isolated=True, method=method, wrapper=wrapper)
        failures.append(f"{_LABELS[method]}: {failure}")
    return not_isolated("; ".join(failures))


def _try(wrapper: tuple[str, ...], path: str) -> str | None:
    """Why ``wrapper`` gives no PID namespace with its own /proc, or None if it does."""
    try:
        done = subprocess.run(
            [*wrapper, "bash", "-c", _WHO_AM_I],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={"PATH": path},
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
    printed = done.stdout.decode(errors="replace").strip()
    if printed != "1":
        return f"a shell under it is pid {printed or '?'} in the /proc it sees, not 1"
    return None
