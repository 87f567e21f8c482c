"""Calls that change one file take turns: in a parallel turn, across runners and agents,
across trio runs, however the path is spelled (issue 16, item 1: two edit_file calls in
one turn both said "Edited" and one edit was gone, 199 times in 200).

Each check looks at the file after every trial: every call that reported success must be
in it, in some order the calls could have run one after the other.
"""

from __future__ import annotations

import itertools
import os
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma.testing import Reply, ScriptedModel, tool_call
from satsuma.tools import ToolCall, ToolContext, ToolOutcome, ToolRunner
from satsuma.tools.builtin import EditFile, WriteFile
from satsuma.tools.builtin._pathlocks import PATH_LOCKS, PathLockStatistics
from satsuma.tools.builtin._sandbox import Resolved, Workspace

TRIALS = 200  # the count: the old code lost an edit in 199 of them


def context(root: Path) -> dict[str, Any]:
    return {"working_dir": root, "capabilities": {"read", "write"}}


def edit(path: str, old: str, new: str) -> ToolCall:
    return tool_call("edit_file", {"path": path, "old": old, "new": new})


def write(path: str, content: str) -> ToolCall:
    return tool_call("write_file", {"path": path, "content": content})


def serial_endings(start: str, calls: Sequence[ToolCall]) -> set[tuple[str, tuple[bool, ...]]]:
    """Every (final text, which calls failed) that running ``calls`` one at a time, in
    some order, can end with: what a correct concurrent run must match."""
    endings = set()
    for order in itertools.permutations(range(len(calls))):
        text = start
        failed = [False] * len(calls)
        for index in order:
            args = calls[index].input
            if calls[index].name == "write_file":
                text = args["content"]
            elif text.count(args["old"]) == 1:
                text = text.replace(args["old"], args["new"])
            else:
                failed[index] = True
        endings.add((text, tuple(failed)))
    return endings


def ending(target: Path, outcomes: Sequence[ToolOutcome]) -> tuple[str, tuple[bool, ...]]:
    return target.read_text(), tuple(outcome.is_error for outcome in outcomes)


@pytest.fixture
def ws(tool_workspace: Path) -> Path:
    return tool_workspace


@pytest.fixture(autouse=True)
def _no_lock_left_behind() -> Any:
    yield
    assert PATH_LOCKS.statistics().paths == 0


async def test_two_parallel_edits_of_one_file_both_land(ws: Path) -> None:
    runner = ToolRunner([EditFile])  # parallel, as when a model asks for both at once
    target = ws / "notes.txt"
    lost = []
    for trial in range(TRIALS):
        target.write_text("alpha\nbeta\n")
        first, second = await runner.execute(
            [edit("notes.txt", "alpha", "ALPHA"), edit("notes.txt", "beta", "BETA")],
            context(ws),
        )
        assert first.content == "Edited notes.txt: replaced 1 occurrence at line 1"
        assert second.content == "Edited notes.txt: replaced 1 occurrence at line 2"
        if target.read_text() != "ALPHA\nBETA\n":
            lost.append(trial)
    assert lost == [], f"an edit was lost in {len(lost)} of {TRIALS} trials"


async def test_write_file_and_edit_file_in_one_turn_take_turns(ws: Path) -> None:
    runner = ToolRunner([EditFile, WriteFile])
    target = ws / "notes.txt"
    start = "one\ntwo\n"
    calls = [
        edit("notes.txt", "one", "ONE"),
        write("notes.txt", "one\ntwo\nthree\n"),
        edit("notes.txt", "two", "TWO"),
    ]
    possible = serial_endings(start, calls)
    wrong = []
    for _ in range(TRIALS // 2):
        target.write_text(start)
        outcomes = await runner.execute(calls, context(ws))
        if ending(target, outcomes) not in possible:
            wrong.append(ending(target, outcomes))
    assert wrong == []


async def test_two_runners_sharing_a_working_dir(ws: Path, tmp_path: Path) -> None:
    # The second runner's working dir is the same directory under another name.
    alias = tmp_path / "alias"
    alias.symlink_to(ws, target_is_directory=True)
    first, second = ToolRunner([EditFile]), ToolRunner([EditFile, WriteFile])
    target = ws / "notes.txt"
    start = "alpha\nbeta\n"
    calls = [edit("notes.txt", "alpha", "ALPHA"), edit("notes.txt", "beta", "BETA")]
    possible = serial_endings(start, calls)
    wrong = []
    for _ in range(TRIALS // 2):
        target.write_text(start)
        outcomes: list[ToolOutcome] = []

        async def one(runner: ToolRunner, call: ToolCall, root: Path) -> None:
            outcomes.extend(await runner.execute([call], context(root)))  # noqa: B023  (awaited in this trial)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, first, calls[0], ws)
            nursery.start_soon(one, second, calls[1], alias)
        outcomes.sort(key=lambda outcome: outcome.tool_use_id != calls[0].id)
        if ending(target, outcomes) not in possible:
            wrong.append(ending(target, outcomes))
    assert wrong == []


class Editor(satsuma.Agent):
    name = "editor"
    model = "claude-sonnet-4-5"
    tools = [EditFile]
    system = "You edit notes."


async def test_two_agents_sharing_a_working_dir(ws: Path) -> None:
    trials = 50
    target = ws / "notes.txt"

    def script(old: str, new: str) -> ScriptedModel:
        turn = [Reply(tool_calls=[("edit_file", {"path": "notes.txt", "old": old, "new": new})])]
        return ScriptedModel([*turn, "done"] * trials)

    async with (
        satsuma.open_agent(Editor, model=script("alpha", "ALPHA"), context=context(ws)) as one,
        satsuma.open_agent(Editor, model=script("beta", "BETA"), context=context(ws)) as two,
    ):
        lost = []
        for trial in range(trials):
            target.write_text("alpha\nbeta\n")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one.run, "edit")
                nursery.start_soon(two.run, "edit")
            if target.read_text() != "ALPHA\nBETA\n":
                lost.append(trial)
    assert lost == []


async def test_separate_trio_runs_in_one_process_take_turns(ws: Path) -> None:
    # A lock bound to one trio run would not stop a second run in another thread.
    target = ws / "notes.txt"
    lost = []

    def edit_in_own_run(old: str, new: str) -> None:
        async def main() -> None:
            (outcome,) = await ToolRunner([EditFile]).execute(
                [edit("notes.txt", old, new)], context(ws)
            )
            assert not outcome.is_error, outcome.content

        trio.run(main)

    for trial in range(TRIALS // 4):
        target.write_text("alpha\nbeta\n")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, edit_in_own_run, "alpha", "ALPHA")
            nursery.start_soon(trio.to_thread.run_sync, edit_in_own_run, "beta", "BETA")
        if target.read_text() != "ALPHA\nBETA\n":
            lost.append(trial)
    assert lost == []


async def test_one_file_under_every_spelling_is_one_lock(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "link.txt").symlink_to("notes.txt")
    (ws / "here").symlink_to(".", target_is_directory=True)
    (ws / "sub" / "up").symlink_to("../notes.txt")
    spellings = [
        "notes.txt",
        "./notes.txt",
        "sub/../notes.txt",
        "link.txt",
        "here/here/notes.txt",
        "sub/up",
        str(ws / "notes.txt"),
    ]
    start = "".join(f"line {n}\n" for n in range(len(spellings)))
    done = "".join(f"LINE {n}\n" for n in range(len(spellings)))
    calls = [edit(path, f"line {n}\n", f"LINE {n}\n") for n, path in enumerate(spellings)]
    runner = ToolRunner([EditFile])
    target = ws / "notes.txt"
    lost = []
    for trial in range(TRIALS // 4):
        target.write_text(start)
        outcomes = await runner.execute(calls, context(ws))
        assert [outcome.is_error for outcome in outcomes] == [False] * len(calls)
        if target.read_text() != done:
            lost.append(trial)
    assert lost == []
    assert (ws / "link.txt").is_symlink()


@pytest.mark.parametrize("mode", [0o600, 0o755])
@pytest.mark.parametrize("tool", ["edit_file", "write_file"])
async def test_parallel_changes_keep_the_mode(ws: Path, mode: int, tool: str) -> None:
    target = ws / "script.sh"
    target.write_text("alpha\nbeta\n")
    target.chmod(mode)
    first = edit("script.sh", "alpha", "ALPHA")
    if tool == "edit_file":
        second = edit("script.sh", "beta", "BETA")
    else:
        second = write("script.sh", "alpha\nbeta\ngamma\n")
    outcomes = await ToolRunner([EditFile, WriteFile]).execute([first, second], context(ws))
    assert [outcome.is_error for outcome in outcomes] == [False, False]
    assert stat.S_IMODE(target.stat().st_mode) == mode


class RacedEdit(EditFile):
    """edit_file, with another process changing the file between its read and its
    write (a real one: what a build, an editor or ``bash`` in the same turn does)."""

    how: str = "in_place"

    def _read_text(self, target: Resolved) -> tuple[str, os.stat_result]:
        text, seen = super()._read_text(target)
        path = Path(os.readlink(f"/proc/self/fd/{target.dir_fd}")) / str(target.name)
        script = (
            "import os, sys; p = sys.argv[1]; open(p + '.new', 'w').write('theirs\\n'); "
            "os.replace(p + '.new', p)"
            if self.how == "replaced"
            else "import sys; open(sys.argv[1], 'w').write('theirs, longer\\n')"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], check=True)
        return text, seen


class RacedByRename(RacedEdit):
    how = "replaced"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the path by /proc")
@pytest.mark.parametrize("tool", [RacedEdit, RacedByRename])
async def test_a_change_by_another_process_mid_edit_is_a_conflict(
    ws: Path, tool: type[EditFile]
) -> None:
    target = ws / "notes.txt"
    target.write_text("alpha\n")
    (outcome,) = await ToolRunner([tool]).execute(
        [edit("notes.txt", "alpha", "ALPHA")], context(ws)
    )
    assert outcome.error_kind == "failed"
    assert outcome.content == (
        "Error: notes.txt changed while it was being edited (by another program); "
        "nothing was written: read it again and redo the edit"
    )
    assert target.read_text().startswith("theirs")  # their change is kept
    assert sorted(os.listdir(ws)) == ["notes.txt"]  # no temporary file left


async def test_a_call_that_timed_out_waiting_never_writes(ws: Path) -> None:
    # Real time, not autojump_clock: a mocked clock jumps to the deadline whenever trio
    # waits for a worker thread, so every sync tool would time out. The deadline passes
    # for certain here: the lock is held until it has.
    target = ws / "notes.txt"
    target.write_text("alpha\n")
    runner = ToolRunner([EditFile], timeout=0.05)
    ctx = ToolContext(tool_use_id="holder", tool_name="test", working_dir=ws)
    with Workspace.of(ctx).resolve("notes.txt") as resolved, PATH_LOCKS.hold(resolved):
        # Someone else is changing the file: the call waits, and its deadline passes.
        (outcome,) = await runner.execute([edit("notes.txt", "alpha", "ALPHA")], context(ws))
        assert outcome.error_kind == "timeout"
        assert PATH_LOCKS.statistics() == PathLockStatistics(paths=1, calls=2)  # the two of us
    # Its thread, abandoned by the runner, gets the lock now and must leave the file be.
    while PATH_LOCKS.statistics().paths:
        await trio.to_thread.run_sync(time.sleep, 0.001)
    assert target.read_text() == "alpha\n"
