"""``--store`` of ``run``, ``chat``, ``runs`` and ``resume``: a SQLite file's path, or a
PostgreSQL URL (``postgresql://``, ``postgres://``) that opens a PostgresStore, read by
the same rules as ``satsuma node --store``; any other URL is refused.

The conversation's commands run as real processes against the test PostgreSQL server;
the mistakes run in process (``main``), which is quicker than a Python start each.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from satsuma.cli import main
from satsuma.store import PostgresStore

BANK = '''
from pathlib import Path

import satsuma


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much.
    """
    with Path("transfers.log").open("a") as log:
        log.write(f"{amount} to {to}\\n")
    return f"sent {amount} to {to}"


class Bank(satsuma.Agent):
    name = "bank"
    tools = [transfer]
'''
COMMANDS = ("run", "chat", "runs", "resume")


def url_of(dsn: str, scheme: str = "postgresql") -> str:
    """The fixture's connection string (key=value) as a URL, the form ``--store`` takes."""
    params = conninfo_to_dict(dsn)
    user = quote(str(params.get("user", "")), safe="")
    secret = params.get("password")
    auth = f"{user}:{quote(str(secret), safe='')}@" if secret else f"{user}@"
    host = str(params.get("host") or "")
    port = f":{params['port']}" if params.get("port") else ""
    dbname = quote(str(params.get("dbname", "")), safe="")
    if host.startswith("/"):
        return f"{scheme}://{auth}{port}/{dbname}?host={quote(host, safe='/')}"
    return f"{scheme}://{auth}{host}{port}/{dbname}"


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


async def satsuma_command(*args: str, cwd: Path, stdin: bytes = b"") -> tuple[int, str, str]:
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", *args],
        cwd=cwd,
        env=environment(),
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def files_in(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


async def test_run_runs_resume_and_chat_keep_one_conversation_in_postgresql(
    tmp_path: Path, postgres_dsn: str
) -> None:
    (tmp_path / "bank.py").write_text(BANK)
    url = url_of(postgres_dsn)
    async with PostgresStore(postgres_dsn) as store:
        shown = store.location  # the URL without its password
    offline = ("--model", "fake")

    # run: pauses awaiting approval, in the database; the command to go on names it.
    status, out, err = await satsuma_command(
        "run", "bank.py:Bank", 'transfer {"to": "bob", "amount": 5}', *offline,
        "--store", url, cwd=tmp_path,
    )  # fmt: skip
    assert status == 1, err
    run_id = re.search(r"run (run_\w+) is awaiting approval of:", err).group(1)  # type: ignore[union-attr]
    call_id = re.search(r"  (\S+)  transfer\(", err).group(1)  # type: ignore[union-attr]
    assert f"satsuma resume bank.py:Bank {run_id} --store {shown} --approve CALL_ID" in err

    # runs: reads it back (postgres:// is the same database).
    status, out, err = await satsuma_command(
        "runs", "bank.py:Bank", "--store", url_of(postgres_dsn, "postgres"), cwd=tmp_path
    )
    assert (status, err) == (0, ""), err
    assert out.splitlines()[0] == f"runs of agent bank in {shown}:"
    assert re.match(rf"  {run_id}  awaiting_approval ", out.splitlines()[1]), out
    assert "pending   transfer" in out and call_id in out

    # resume: decides the call, which runs, and the run completes (the scheme in any case).
    status, out, err = await satsuma_command(
        "resume", "bank.py:Bank", run_id, *offline, "--approve", call_id,
        "--store", url_of(postgres_dsn, "POSTGRESQL"), cwd=tmp_path,
    )  # fmt: skip
    assert status == 0, err
    assert "- transfer: sent 5 to bob" in out
    assert (tmp_path / "transfers.log").read_text() == "5 to bob\n"

    # chat: goes on with the same conversation.
    status, out, err = await satsuma_command(
        "chat", "bank.py:Bank", *offline, "--store", url, cwd=tmp_path, stdin=b"hello again\n"
    )
    assert (status, err) == (0, ""), err

    async with PostgresStore(postgres_dsn) as store:
        runs = await store.runs("bank")
        messages = await store.load_messages("bank")
    assert [(record.run_id == run_id, record.status) for record in runs] == [
        (True, "completed"),
        (False, "completed"),
    ]
    assert runs[1].prompt == "hello again"
    assert len(messages) >= 6  # both runs' turns, in PostgreSQL
    # No SQLite file named after the URL (what --store postgresql://... used to make).
    assert not [name for name in files_in(tmp_path) if name.lower().startswith("postgres")]


# --- mistakes: one line, exit status 2 --------------------------------------------------


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """For ``main`` called here: an empty current directory (to see that no file is made
    in it), and the satsuma logger's level and handlers (which ``main`` sets) put back."""
    monkeypatch.chdir(tmp_path)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    log = logging.getLogger("satsuma")
    level, handlers = log.level, list(log.handlers)
    try:
        yield tmp_path
    finally:
        log.setLevel(level)
        log.handlers[:] = handlers


def arguments(command: str, store: str) -> list[str]:
    given = {
        "run": ["run", "hi", "--model", "fake"],
        "chat": ["chat", "--model", "fake"],
        "runs": ["runs"],
        "resume": ["resume", "run_0123456789ab", "--model", "fake"],
    }[command]
    return [*given, "--store", store]


def error_of(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    """Run ``satsuma ARGS``, which must fail with status 2 and one line on stderr."""
    assert main(args) == 2, args
    captured = capsys.readouterr()
    assert captured.out == "", args
    [line] = captured.err.splitlines()
    assert line.startswith("satsuma: error: "), line
    return line.removeprefix("satsuma: error: ")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_database_that_cannot_be_reached_is_one_line(
    command: str,
    capsys: pytest.CaptureFixture[str],
    in_process: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    nowhere = tmp_path_factory.mktemp("no-server")  # a socket folder with no server in it
    for scheme in ("postgresql", "postgres"):
        url = f"{scheme}://app:s3cret@/agents?host={nowhere}"
        line = error_of(capsys, arguments(command, url))
        assert line.startswith(
            f"Store postgresql://app@/agents?host={nowhere}: cannot reach the database ("
        ), line
        assert "s3cret" not in line
    assert files_in(in_process) == set()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_of_another_scheme_is_refused(
    command: str, capsys: pytest.CaptureFixture[str], in_process: Path
) -> None:
    for url in ("mysql://app:s3cret@db/agents", "http://db:80/agents", "MongoDB+srv://db/x"):
        line = error_of(capsys, arguments(command, url))
        scheme = url.partition("://")[0].lower()
        assert line == (
            f"--store must be a SQLite file or a postgresql:// URL, got a {scheme}:// URL"
        )
    # sqlite:// too: two conventions read sqlite:///a.db differently; a path is plain.
    line = error_of(capsys, arguments(command, "sqlite:///agents.db"))
    assert line == (
        "--store takes a SQLite file by its path, not as a sqlite:// URL (e.g. --store agents.db)"
    )
    assert files_in(in_process) == set()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_gone_slightly_wrong_is_refused_not_made_a_file(
    command: str, capsys: pytest.CaptureFixture[str], in_process: Path
) -> None:
    # Taken as paths, these made SQLite files named " postgresql:/..." and
    # "postgresql:agents" and exited 0: the mistake --store's parser exists to stop.
    for url in (" postgresql://app:s3cret@db/agents", "postgres://app:s3cret@db/agents\n"):
        line = error_of(capsys, arguments(command, url))
        scheme = url.strip().partition(":")[0]
        assert line == (
            f"--store has blanks around its {scheme}:// URL: remove them (a SQLite "
            "file's path would be written ./ in front)"
        )
    for url in ("postgresql:agents", "Postgres:app:s3cret@db"):
        line = error_of(capsys, arguments(command, url))
        head = url.partition(":")[0].lower()
        assert line == (
            f"--store {head}:... is not a URL: a PostgreSQL URL starts with {head}:// "
            f"(a SQLite file of that name is written ./{head}:...)"
        )
    assert "s3cret" not in capsys.readouterr().err
    assert files_in(in_process) == set()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_libpq_cannot_read_is_one_line_without_its_password(
    command: str, capsys: pytest.CaptureFixture[str], in_process: Path
) -> None:
    # urllib and libpq both refuse "[::1": the command printed a traceback quoting the
    # URL with its password, and exited 1.
    line = error_of(capsys, arguments(command, "postgresql://u:s3cret@[::1/agents"))
    assert line.startswith("--store: not a PostgreSQL connection string: "), line
    assert "s3cret" not in line and "u:***@[::1/agents" in line
    assert files_in(in_process) == set()


@pytest.mark.parametrize("command", COMMANDS)
def test_without_psycopg_the_extra_to_install_is_named(
    command: str,
    capsys: pytest.CaptureFixture[str],
    in_process: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    line = error_of(capsys, arguments(command, "postgresql://app@db/agents"))
    assert line == (
        "PostgresStore needs psycopg 3, an optional dependency of satsuma: "
        "pip install 'satsuma[postgres]'"
    )
    assert files_in(in_process) == set()


def test_a_plain_path_is_still_a_sqlite_file(
    capsys: pytest.CaptureFixture[str], in_process: Path
) -> None:
    assert main(["run", "hi", "--model", "fake", "--store", "s.db"]) == 0
    assert main(["runs", "--store", "s.db"]) == 0
    assert "runs of agent assistant in s.db:" in capsys.readouterr().out
    # The way out for a file whose name looks like a URL: a path that says it is one.
    assert main(["run", "hi", "--model", "fake", "--store", "./postgresql:agents"]) == 0
    assert (in_process / "postgresql:agents").is_file()
    assert (in_process / "s.db").is_file()
