"""``satsuma store prune`` on a SQLite file, as a real process: what it prints, what it
deletes, and its mistakes (one line, exit status 2). On PostgreSQL:
tests/cluster/test_retention.py."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import pytest
import trio

from satsuma import Message, Usage
from satsuma.store import RunRecord, SQLiteStore

DAY = 86400.0


async def satsuma_command(*args: str, cwd: Path) -> tuple[int, str, str]:
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", *args],
        cwd=cwd,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def fill(path: Path) -> None:
    """Agents a0..a3, three runs each with a journaled call: a0 and a1 ended 40 days
    ago, a2 a day ago, a3's last run was interrupted 40 days ago."""
    now = time.time()
    async with SQLiteStore(path) as store:
        for a, age in enumerate((40, 40, 1, 40)):
            agent_id = f"a{a}"
            for n in range(3):
                run_id = f"r{a}-{n}"
                await store.start_run(
                    RunRecord(
                        run_id=run_id,
                        agent_id=agent_id,
                        status="running",
                        prompt="hi",
                        started_at=now - age * DAY,
                        position=n,
                    ),
                    start=n,
                    messages=[Message.user(f"hi {n}")],
                )
                await store.call_started(run_id, "t", "tool", {})
                if a == 3 and n == 2:
                    await store.mark_interrupted(agent_id)
                    continue
                await store.end_run(
                    run_id, status="completed", ended_at=now - age * DAY, usage=Usage(), error=None
                )


def counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("runs", "tool_calls", "messages")
        }


async def test_prune_prints_what_it_deletes_and_a_dry_run_deletes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    await fill(path)
    assert counts(path) == {"runs": 12, "tool_calls": 12, "messages": 12}

    args = ("store", "prune", "--store", "state.db", "--older-than", "30d")
    status, out, err = await satsuma_command(*args, "--dry-run", cwd=tmp_path)
    assert (status, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0].startswith("state.db: runs that ended before ")
    assert lines[1:] == [
        "  runs            8",
        "  tool_calls      8",
        "  approvals       0",
        "  conversations   0",
        "  messages        0",
        "  budget_ledgers  0",
        "  budget_holds    0",
        "would delete 16 rows (dry run: nothing was deleted)",
    ]
    assert counts(path) == {"runs": 12, "tool_calls": 12, "messages": 12}

    status, out, err = await satsuma_command(*args, cwd=tmp_path)
    assert (status, err) == (0, ""), err
    assert out.splitlines()[-1] == "deleted 16 rows"
    assert counts(path) == {"runs": 4, "tool_calls": 4, "messages": 12}

    # a0 and a1 are idle; a2 ran a day ago; a3 has an interrupted run.
    status, out, err = await satsuma_command(*args, "--conversations", cwd=tmp_path)
    assert (status, err) == (0, ""), err
    assert out.splitlines()[0].startswith("state.db: ended runs and conversations idle before ")
    assert out.splitlines()[-5:-3] == ["  conversations   2", "  messages        6"]
    assert out.splitlines()[-1] == "deleted 6 rows"
    assert counts(path) == {"runs": 4, "tool_calls": 4, "messages": 6}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--older-than", "30d"), "satsuma: error: no such store: missing.db"),
        (
            ("--older-than", "30d", "--store", "mysql://app:s3cret@db/x"),
            "satsuma: error: --store must be a SQLite file or a postgresql:// URL, "
            "got a mysql:// URL",
        ),
        (
            ("--older-than", "30 days"),
            "satsuma store prune: error: argument --older-than: not a duration: '30 days' "
            "(a number and a unit: 30d, 12h, 90m, 45s, 2w)",
        ),
    ],
    ids=["missing", "scheme", "duration"],
)
async def test_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    given = args if "--store" in args else (*args, "--store", "missing.db")
    status, out, err = await satsuma_command("store", "prune", *given, cwd=tmp_path)
    assert (status, out, err.strip().splitlines()[-1]) == (2, "", message)
    assert not (tmp_path / "missing.db").exists()  # nothing was created
