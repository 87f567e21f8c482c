"""The library logs only through loggers named under ``satsuma`` and never prints: an
application configures (or silences) all of it with ``logging.getLogger("satsuma")``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import satsuma

SOURCE = Path(satsuma.__file__).parent
# The command line is an application: it prints for its user (ruff's T20 allows it
# there and nowhere else) and may configure logging for its process.
APPLICATION = {"cli.py"}
# Module-level logging functions write to the root logger, past the "satsuma" name;
# basicConfig configures the root logger, which is the application's business.
ROOT_LOGGER_CALLS = {
    "debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log",
}  # fmt: skip


def modules() -> list[Path]:
    found = sorted(SOURCE.rglob("*.py"))
    assert len(found) > 20
    return found


def calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def name_of(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else "?"
        return f"{owner}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else "?"


def test_every_logger_is_named_under_satsuma() -> None:
    names = []
    for path in modules():
        for call in calls(ast.parse(path.read_text(encoding="utf-8"))):
            if name_of(call) not in ("logging.getLogger", "getLogger"):
                continue
            where = f"{path.relative_to(SOURCE)}:{call.lineno}"
            assert len(call.args) == 1 and not call.keywords, f"{where}: getLogger() with no name"
            [argument] = call.args
            assert isinstance(argument, ast.Constant) and isinstance(argument.value, str), (
                f"{where}: the logger's name must be a literal"
            )
            name = argument.value
            assert name == "satsuma" or name.startswith("satsuma."), f"{where}: logger {name!r}"
            names.append(name)
    assert {"satsuma.tools", "satsuma.agents", "satsuma.telemetry"} <= set(names)


def test_nothing_logs_to_the_root_logger_or_prints() -> None:
    for path in modules():
        relative = path.relative_to(SOURCE)
        for call in calls(ast.parse(path.read_text(encoding="utf-8"))):
            name = name_of(call)
            where = f"{relative}:{call.lineno}"
            owner, _, attribute = name.rpartition(".")
            assert not (owner == "logging" and attribute in ROOT_LOGGER_CALLS), (
                f"{where}: {name} logs to the root logger"
            )
            if str(relative) not in APPLICATION:
                assert name != "print", f"{where}: the library never prints"
                assert name != "logging.basicConfig", f"{where}: a library leaves config alone"


CRASHING_CHILD = """
import logging
import sys

import trio

import satsuma


class Crashes:
    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep(0.01)
        raise RuntimeError("boom")


async def main():
    async with satsuma.Supervisor() as sup:
        await sup.start_child(Crashes(), restart="temporary")
        await trio.sleep(0.1)


if sys.argv[1:] == ["configured"]:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
trio.run(main)
"""


def test_a_library_warning_stays_off_stderr_until_logging_is_configured(tmp_path: Path) -> None:
    # Without the NullHandler on "satsuma", logging's last-resort handler would print
    # the crash's WARNING on stderr of a program that never asked for logs.
    script = tmp_path / "crashing_child.py"
    script.write_text(CRASHING_CHILD)

    def stderr_of(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert stderr_of() == ""
    assert stderr_of("configured") == (
        "WARNING satsuma.supervisor: the root supervisor: child Crashes crashed: "
        "RuntimeError: boom\n"
    )
