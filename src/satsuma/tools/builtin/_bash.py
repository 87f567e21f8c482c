"""The ``bash`` tool: a shell command in the workspace, in a process group of its own."""

from __future__ import annotations

import math
import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, get_args

import trio

from .. import Tool, ToolContext, ToolDefinitionError, ToolError, ToolResult
from ._isolation import (
    IsolationMode,
    ShellIsolation,
    check_isolation,
    isolated_argv,
    not_isolated,
    warn_once,
)
from ._process import HeadTail, run_in_group
from ._sandbox import Workspace

__all__ = ["Bash"]

_FALLBACK_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_MARKER_ROOM: Final = 100  # characters kept free for the "bytes omitted" marker
_MODES: Final = frozenset(get_args(IsolationMode))


class Bash(Tool):
    """Runs ``bash -c <command>`` in the workspace root.

    On Linux the command runs in namespaces of its own, where it cannot see the service's
    processes (their environment, command line and open files in /proc) nor write the
    kernel's settings (/proc/sys, /sys), and not as root (as root, it runs as
    ``run_as``); see ``isolation`` and ``check_isolation()``.

    Subclass it to change a limit or the environment::

        class ProjectBash(Bash):
            env = {"PYTHONPATH": "src"}
            env_allowlist = (*Bash.env_allowlist, "VIRTUAL_ENV")
            default_timeout = 300.0
            isolation = "required"
    """

    name = "bash"
    description = (
        "Run a shell command with bash -c in the workspace directory and return its output "
        "(stdout and stderr merged). A non-zero exit is reported as 'Exit code: N' followed "
        "by the output. Long output keeps its beginning and its end. The command is stopped, "
        "with every process it started, when its timeout passes. Commands cannot read from "
        "stdin; do not start servers or interactive programs."
    )
    capabilities = frozenset({"shell"})
    parameters: ClassVar[Any] = {
        "command": {
            "type": "string",
            "required": True,
            "min_length": 1,
            "description": "The command line, run with bash -c",
        },
        "timeout": {
            "type": "number",
            "minimum": 0.1,
            "description": "Seconds before the command is stopped (default 60)",
        },
    }

    default_timeout: ClassVar[float] = 60.0
    """Seconds a command may run when the call gives no ``timeout``."""
    kill_grace: ClassVar[float] = 2.0
    """Seconds between SIGTERM and SIGKILL when the group is stopped (DESIGN: at most 5)."""
    max_output_chars: ClassVar[int] = 100_000
    """Output kept: half from the start, half from the end."""
    env_allowlist: ClassVar[tuple[str, ...]] = (
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "TERM",
        "TZ",
        "TMPDIR",
    )
    """Variables passed through from satsuma's own environment; nothing else is."""
    env: ClassVar[Mapping[str, str]] = {}
    """Variables set for every command, on top of the allowlisted ones."""
    isolation: ClassVar[IsolationMode] = "auto"
    """Whether commands run isolated (Linux: namespaces of their own, read-only kernel
    settings, not as root). ``"auto"`` applies every protection the system allows and
    runs the command anyway, after one warning per process on the ``satsuma.tools``
    logger naming what is missing; ``"required"`` refuses to run a command without every
    protection; ``"off"`` never isolates. See docs/builtin-tools.md."""
    run_as: ClassVar[tuple[int, int]] = (65534, 65534)
    """The uid and gid commands run as when the service runs as root (``nobody`` and
    ``nogroup`` by default); the workspace's owner appears to them as this uid."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.isolation not in _MODES:
            raise ToolDefinitionError(
                cls.name,
                f"isolation must be 'auto', 'required' or 'off', not {cls.isolation!r}",
            )
        run_as = cls.run_as
        if not (
            isinstance(run_as, tuple)
            and len(run_as) == 2
            and all(type(n) is int and 0 < n < 2**32 - 1 for n in run_as)
        ):
            raise ToolDefinitionError(
                cls.name, f"run_as must be (uid, gid), neither of them 0, not {run_as!r}"
            )

    @classmethod
    async def check_isolation(cls, working_dir: str | os.PathLike[str] = ".") -> ShellIsolation:
        """How this tool's commands will be isolated in ``working_dir``.

        Call it when a service starts, to log the answer or to refuse to start without
        isolation. The system is probed once per process and file system of the
        workspace (in a worker thread, some tens of milliseconds); later calls and the
        tool itself reuse the answer. With ``isolation = "off"`` the answer is always
        not isolated.
        """
        if cls.isolation == "off":
            return not_isolated(f"{cls.__name__}.isolation is 'off'")
        workspace = Path(await trio.Path(working_dir).resolve())
        return await check_isolation(workspace, cls.run_as)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if os.name != "posix":
            raise ToolError("bash needs a POSIX system (Linux or macOS)")
        workspace = Workspace.of(ctx)
        isolation = await self._isolation(workspace.real_root)
        environment = self._environment()
        # Under a wrapper, a missing bash would be the wrapper's exit status 126.
        if isolation.wrapper and shutil.which("bash", path=environment["PATH"]) is None:
            raise ToolError("bash was not found on PATH")
        requested = args.get("timeout", self.default_timeout)
        limit = self._time_limit(float(requested), ctx)
        # Bytes are kept generously (a character is at most 4 bytes in UTF-8); the cut
        # itself is made in characters when the output is rendered.
        chars = max(self.max_output_chars, 2 * _MARKER_ROOM)
        try:
            result = await run_in_group(
                isolated_argv(isolation, args["command"]),
                cwd=workspace.real_root,
                env=environment,
                time_limit=limit,
                grace=min(self.kill_grace, 5.0),
                output=HeadTail(4 * chars, 2 * chars),
            )
        except FileNotFoundError:
            raise ToolError("bash was not found on PATH") from None
        output, omitted = _render(result.output, chars)
        details = {
            "exit_code": result.returncode,
            "pid": result.pid,
            "timed_out": result.timed_out,
            "output_bytes": result.output.total,
            "omitted_bytes": omitted,
            "isolated": isolation.isolated,
            "protections": sorted(isolation.protections),
        }
        if result.timed_out:
            text = (
                f"Command timed out after {limit:g}s; it was stopped with every process it started."
            )
            return ToolResult(f"{text}\n\n{output}", is_error=True, details=details)
        if result.returncode != 0:
            return ToolResult(
                f"Exit code: {_describe_status(result.returncode)}\n\n{output}",
                is_error=True,
                details=details,
            )
        return ToolResult(output, details=details)

    async def _isolation(self, workspace: Path) -> ShellIsolation:
        isolation = await self.check_isolation(workspace)
        if isolation.isolated or self.isolation == "off":
            return isolation
        if self.isolation == "required":
            raise ToolError(
                "bash commands must run isolated (isolation = 'required'), and this "
                f"system cannot isolate them fully: {isolation.reason}"
            )
        warn_once(isolation)
        return isolation

    def _time_limit(self, requested: float, ctx: ToolContext) -> float:
        # The tool's own deadline (the runner's, for this call) wins: the command is
        # stopped early enough that the group can be killed and the output returned
        # before it. A deadline of whoever called execute() is not the tool's business:
        # when it passes, the call is cancelled (and the group killed) like any other.
        remaining = ctx.deadline - trio.current_time()
        if math.isinf(remaining):
            return requested
        room = remaining - min(self.kill_grace, 5.0) - 0.1
        # Where the grace does not fit, the command still gets half of what is left (at
        # least 0.1 s): an isolated command's first tens of milliseconds go to starting
        # the helper that isolates it, more on a loaded machine.
        least = max(0.1, remaining / 2)
        return round(max(min(requested, room), min(requested, least)), 1)

    def _environment(self) -> dict[str, str]:
        environment = {name: os.environ[name] for name in self.env_allowlist if name in os.environ}
        environment.setdefault("PATH", _FALLBACK_PATH)
        environment.update(self.env)
        return environment


def _render(output: HeadTail, limit: int) -> tuple[str, int]:
    """The output as text of at most ``limit`` characters, its head and tail kept around
    a marker when it is longer; and how many bytes the marker stands for.

    Decoded with surrogateescape so that the bytes left out can be counted exactly;
    undecodable bytes become U+FFFD only in the text returned."""
    if output.omitted == 0:  # every byte is at hand
        whole = (output.head + output.tail).decode("utf-8", errors="surrogateescape")
        if len(whole) <= limit:
            return _shown(whole) if whole.strip() else "(no output)", 0
        first, last = whole, whole
    else:
        first = output.head.decode("utf-8", errors="surrogateescape")
        last = output.tail.decode("utf-8", errors="surrogateescape")
    half = (limit - _MARKER_ROOM) // 2
    first, last = first[:half], last[-half:]
    omitted = output.total - _byte_length(first) - _byte_length(last)
    text = f"{first}\n\n[... {omitted:,} bytes of output omitted ...]\n\n{last}"
    return _shown(text), omitted


def _byte_length(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogateescape"))


def _shown(text: str) -> str:
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


def _describe_status(returncode: int) -> str:
    if returncode >= 0:
        return str(returncode)
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"{returncode} (killed by {name})"
