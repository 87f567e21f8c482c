"""The search tool: its answers, its limits, and a pattern that would freeze the host."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from satsuma.testing import run_tool
from satsuma.tools.builtin._process import live_members
from satsuma.tools.builtin._search import Search

READ = {"capabilities": {"read"}}


def context(root: Path) -> dict[str, Any]:
    return {"working_dir": root, **READ}


def make_tree(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (root / "src" / "util.py").write_text("def helper():\n    return 'main'\n")
    (root / "README.md").write_text("# app\nRun main() to start.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00main")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("def main(): pass\n")


async def test_matches_come_as_path_line_text(tmp_path: Path) -> None:
    make_tree(tmp_path)
    outcome = await run_tool(Search, {"pattern": r"main"}, context(tmp_path))
    assert not outcome.is_error
    assert outcome.content.splitlines() == [
        "README.md:2: Run main() to start.",
        "src/app.py:3: def main():",
        "src/util.py:2:     return 'main'",
        "[files skipped: 1 binary]",
    ]
    assert outcome.details is not None and outcome.details["matches"] == 3


async def test_a_glob_narrows_the_files(tmp_path: Path) -> None:
    make_tree(tmp_path)
    by_name = await run_tool(Search, {"pattern": "main", "glob": "*.py"}, context(tmp_path))
    by_path = await run_tool(
        Search, {"pattern": "def", "glob": "src/**/util.py"}, context(tmp_path)
    )
    assert [line.split(":")[0] for line in by_name.content.splitlines()] == [
        "src/app.py",
        "src/util.py",
    ]
    assert by_path.content == "src/util.py:1: def helper():"


async def test_no_match_is_an_answer_not_an_error(tmp_path: Path) -> None:
    make_tree(tmp_path)
    outcome = await run_tool(Search, {"pattern": "nothing here"}, context(tmp_path))
    assert not outcome.is_error
    assert outcome.content.startswith("No matches for 'nothing here' in 4 files")


async def test_max_matches_stops_the_search_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "many.txt").write_text("hit\n" * 50)
    outcome = await run_tool(Search, {"pattern": "hit", "max_matches": 5}, context(tmp_path))
    lines = outcome.content.splitlines()
    assert lines[:5] == [f"many.txt:{n}: hit" for n in range(1, 6)]
    assert lines[5:] == ["[stopped at 5 matches; narrow the pattern or the glob]"]


async def test_an_invalid_regex_is_a_clear_error(tmp_path: Path) -> None:
    outcome = await run_tool(Search, {"pattern": "(unclosed"}, context(tmp_path))
    assert outcome.error_kind == "failed"
    assert outcome.content.startswith("Error: Invalid regex: missing ), unterminated subpattern")


async def test_max_matches_is_bounded_by_the_schema(tmp_path: Path) -> None:
    outcome = await run_tool(Search, {"pattern": "x", "max_matches": 5000}, context(tmp_path))
    assert outcome.error_kind == "invalid_args"


async def test_without_read_capability_it_is_denied(tmp_path: Path) -> None:
    outcome = await run_tool(Search, {"pattern": "x"}, {"working_dir": tmp_path})
    assert outcome.content == "Error: Tool capability denied: read"


async def test_a_symlink_out_of_the_workspace_is_not_searched(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("TOP-SECRET\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "more.txt").write_text("TOP-SECRET\n")
    os.symlink(tmp_path / "secret.txt", workspace / "link.txt")
    os.symlink(tmp_path / "outside", workspace / "linkdir")
    outcome = await run_tool(Search, {"pattern": "SECRET"}, context(workspace))
    assert "TOP-SECRET" not in outcome.content
    assert outcome.content.startswith("No matches")


class QuickSearch(Search):
    time_limit = 1.0


async def test_a_catastrophic_pattern_is_stopped_and_the_host_keeps_running(
    tmp_path: Path,
) -> None:
    # (a+)+$ against a long run of a's with a mismatch at the end backtracks
    # exponentially. re holds the GIL while it does: run in this process, it would stop
    # every task. The ticker below counts how often the trio loop got to run meanwhile.
    (tmp_path / "trap.txt").write_text("a" * 40 + "!\n")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.05)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        outcome = await run_tool(QuickSearch, {"pattern": "(a+)+$"}, context(tmp_path))
        nursery.cancel_scope.cancel()
    assert not outcome.is_error
    assert outcome.content.startswith("No matches for '(a+)+$'")
    assert "[search stopped at its 1s time limit after 0 matches" in outcome.content
    assert outcome.details is not None and outcome.details["timed_out"] is True
    assert ticks > 0
    assert live_members(outcome.details["pid"]) == []


async def test_matches_found_before_the_time_limit_are_kept(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("aaaa\n")  # matches at once
    (tmp_path / "b.txt").write_text("a" * 40 + "!\n")  # then the trap
    outcome = await run_tool(QuickSearch, {"pattern": "^(a+)+$"}, context(tmp_path))
    assert outcome.content.splitlines()[0] == "a.txt:1: aaaa"
    assert "time limit after 1 matches" in outcome.content


async def test_cancelling_the_call_stops_the_worker(tmp_path: Path) -> None:
    (tmp_path / "trap.txt").write_text("a" * 40 + "!\n")
    with trio.move_on_after(0.5):
        await run_tool(Search, {"pattern": "(a+)+$"}, context(tmp_path))
    # The worker's process group is gone: no python -I _search_worker.py is left.
    leftovers = [
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and _is_search_worker(pid) and _parent(pid) == os.getpid()
    ]
    assert leftovers == []


def _is_search_worker(pid: str) -> bool:
    try:
        return b"_search_worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _parent(pid: str) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return -1
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def _remove_chain(top: Path) -> None:
    """Remove the chain of nested ``d`` directories without recursion (shutil.rmtree, and
    so pytest's own clean-up of old temporary directories, recurses and would fail):
    each step lifts the rest of the chain one level up, then removes the emptied level."""
    level = top / "d"
    while level.exists():
        for entry in os.listdir(level):
            if entry != "d":
                os.unlink(level / entry)
        if (level / "d").exists():
            os.rename(level / "d", top / "rest")
            os.rmdir(level)
            os.rename(top / "rest", level)
        else:
            os.rmdir(level)


@pytest.mark.parametrize("depth", [300, 2_000])
async def test_a_tree_thousands_of_levels_deep_is_searched_to_a_depth_and_says_so(
    tmp_path: Path, depth: int
) -> None:
    # Built with descriptors: the path of the deepest directory is longer than PATH_MAX.
    (tmp_path / "top.txt").write_text("needle at the top\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level == 10:
                file = os.open("shallow.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
                os.write(file, b"needle eleven levels down\n")
                os.close(file)
    finally:
        os.close(fd)
    try:
        outcome = await run_tool(Search, {"pattern": "needle"}, context(tmp_path))
    finally:
        _remove_chain(tmp_path)
    assert not outcome.is_error, outcome.text
    assert "RecursionError" not in outcome.text
    assert "needle at the top" in outcome.text
    assert "needle eleven levels down" in outcome.text
    assert "directories more than 256 levels deep were not searched" in outcome.text
