"""``satsuma node`` and ``satsuma cluster status``, run as real processes against the test
PostgreSQL server, with the fake model served over loopback HTTP (the real SDK through
ANTHROPIC_BASE_URL) or in process (``--model fake``). The runs are submitted by a
``Cluster`` in the test's own process.

The command-line mistakes are run in process (``main``), which is quicker than a Python
start each.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

import satsuma
from satsuma.cli import main
from satsuma.cluster import Cluster
from satsuma.store import PostgresStore
from satsuma.testing import MessagesServer, fake_reply

AGENTS = '''
from functools import partial
from pathlib import Path

import trio

import satsuma


@satsuma.tool
async def hold(ctx: satsuma.ToolContext) -> str:
    """Run a child process that sleeps for ten minutes."""
    async with trio.open_nursery() as nursery:
        child = await nursery.start(partial(trio.run_process, ["sleep", "600"]))
        (Path(ctx.working_dir) / "holding").write_text(str(child.pid))
    return "held"


class Echo(satsuma.Agent):
    name = "echo"
    tools = [hold]


class Shouter(satsuma.Agent):
    name = "shouter"


class EchoAgain(satsuma.Agent):
    name = "echo"
'''


class Echo(satsuma.Agent):
    """The test's side of the node's Echo: the queue knows a class by its name only."""

    name = "echo"


def url_of(dsn: str, password: str | None = None) -> str:
    """The fixture's connection string (key=value) as a postgresql:// URL, the form
    ``--store`` takes; with ``password`` in it if given."""
    params = conninfo_to_dict(dsn)
    user = quote(str(params.get("user", "")), safe="")
    secret = params.get("password") or password
    auth = f"{user}:{quote(str(secret), safe='')}@" if secret else f"{user}@"
    host = str(params.get("host") or "")
    port = f":{params['port']}" if params.get("port") else ""
    dbname = quote(str(params.get("dbname", "")), safe="")
    if host.startswith("/"):
        return f"postgresql://{auth}{port}/{dbname}?host={quote(host, safe='/')}"
    return f"postgresql://{auth}{host}{port}/{dbname}"


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cluster_agents.py").write_text(AGENTS)
    return tmp_path


def fake_answer(body: dict[str, Any]) -> Any:
    return fake_reply(body.get("messages") or [], body.get("tools") or [])


@attrs.define
class NodeProcess:
    """A ``satsuma node`` process, in a session (a process group) of its own."""

    process: trio.Process
    stderr: Path
    buffer: bytearray = attrs.Factory(bytearray)

    async def line(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some()
            if not chunk:
                raise AssertionError(f"the node ended; stderr:\n{self.stderr.read_text()}")
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer[:] = rest
        return line.decode()

    async def rest(self) -> str:
        """Everything it prints until it exits."""
        assert self.process.stdout is not None
        async for chunk in self.process.stdout:
            self.buffer += chunk
        return self.buffer.decode()


@asynccontextmanager
async def satsuma_node(*args: str, cwd: Path, env: dict[str, str]) -> AsyncIterator[NodeProcess]:
    """``satsuma node ARGS``; killed with its whole group at the end if still running."""
    stderr = cwd / "node.err"
    with stderr.open("wb") as err:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "satsuma.cli", "node", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
    try:
        yield NodeProcess(process, stderr)
    finally:
        # The node, and whatever it left behind in its group (should a test fail).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await process.wait()


def group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


async def satsuma_command(*args: str, cwd: Path) -> tuple[int, str, str]:
    done = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", *args],
        cwd=cwd,
        env=environment(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_a_node_serves_runs_shows_in_status_and_drains_on_sigterm(
    postgres_dsn: str, project: Path
) -> None:
    url = url_of(postgres_dsn, password="s3cret")  # trust authentication ignores it
    async with (
        MessagesServer(then=fake_answer, keep_requests=0) as server,
        PostgresStore(postgres_dsn) as store,
    ):
        await store.open()  # the schema, before the node process and the client race
        cluster = Cluster(store, poll_interval=1.0)
        env = environment(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=server.base_url)
        async with satsuma_node(
            "cluster_agents:Echo",
            "--store",
            url,
            "--name",
            "cli-node",
            "--workdir",
            str(project),
            "--poll-interval",
            "0.2",
            "--drain-timeout",
            "0.5",
            cwd=project,
            env=env,
        ) as node:
            with trio.fail_after(30):
                started = await node.line()
            assert started.startswith(
                f"satsuma node cli-node: serving echo (cluster_agents:Echo) on {store.location} "
            ), started
            assert "s3cret" not in started

            with trio.fail_after(30):
                result = await cluster.run(Echo, "t-1", "hello")
            assert result.status == "completed"
            assert result.output == "(fake model) You said: hello"

            # A run in flight (its tool holds it, in a child process of the node), and
            # one queued behind it in the same conversation.
            holding = await cluster.submit(Echo, "t-2", "use hold")
            with trio.fail_after(30):
                while not (project / "holding").exists():  # noqa: ASYNC110  (another process)
                    await trio.sleep(0.02)
            waiting = await cluster.submit(Echo, "t-2", "and then?")

            status, out, err = await satsuma_command(
                "cluster", "status", "--store", url, cwd=project
            )
            assert (status, err) == (0, ""), err
            assert "s3cret" not in out
            lines = out.splitlines()
            assert lines[0] == f"cluster on {store.location}"
            assert "nodes: 1 alive, 0 expired" in lines
            [node_row] = [line for line in lines if line.startswith("  cli-node ")]
            assert node_row.split()[1:2] == ["alive"]
            assert node_row.split()[-1] == "echo"
            assert "leases: 1 held" in lines
            [lease_row] = [line for line in lines if line.startswith("  t-2 ")]
            assert lease_row.split()[1] == "cli-node"
            assert "queue: 1 queued" in lines
            # AGENT QUEUED CLAIMED RUNNING COMPLETED FAILED CANCELLED
            [queue_row] = [line for line in lines if line.startswith("  echo ")]
            assert queue_row.split() == ["echo", "1", "0", "1", "1", "0", "0"]
            assert "runs in flight: 1" in lines
            [run_row] = [line for line in lines if line.startswith(f"  {holding} ")]
            assert run_row.split()[1:6] == ["echo", "t-2", "running", "cli-node", "1"]

            status, out, err = await satsuma_command(
                "cluster", "status", "--store", url, "--json", cwd=project
            )
            assert (status, err) == (0, ""), err
            shown = json.loads(out)
            assert [(n["name"], n["alive"], n["runs_in_flight"]) for n in shown["nodes"]] == [
                ("cli-node", True, 1)
            ]
            assert [(lease["agent_id"], lease["node"]) for lease in shown["leases"]] == [
                ("t-2", "cli-node")
            ]
            assert shown["queue"] == {
                "echo": {
                    "queued": 1,
                    "claimed": 0,
                    "running": 1,
                    "completed": 1,
                    "failed": 0,
                    "cancelled": 0,
                }
            }
            assert [run["run_id"] for run in shown["runs_in_flight"]] == [holding]

            # SIGTERM drains: the held run does not end within --drain-timeout, so it is
            # cancelled (its tool's child process with it) and goes back to the queue
            # for another node; the node leaves the node table and exits 0.
            node.process.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                returncode = await node.process.wait()
            assert returncode == 0, node.stderr.read_text()
            assert group_is_gone(node.process.pid)  # the node and the tool's child
            with trio.fail_after(30):
                rest = await node.rest()  # (a child left behind would hold the pipe open)
            assert "satsuma node cli-node: SIGTERM: draining, 1 run in flight" in rest
            assert rest.splitlines()[-1] == "satsuma node cli-node: stopped"
            assert "Traceback" not in node.stderr.read_text()

        queue = {run.run_id: run for run in await cluster.runs()}
        assert (queue[holding].status, queue[holding].node_id) == ("queued", None)
        assert queue[waiting].status == "queued"


async def test_a_node_with_the_fake_model_outlives_a_database_restart_and_stops_on_ctrl_c(
    postgres_server: Any, postgres_dsn: str, project: Path
) -> None:
    if not postgres_server.restartable:
        pytest.skip(f"the server of {postgres_server.admin_dsn!r} is not the suite's own")
    async with PostgresStore(postgres_dsn) as store:
        await store.open()
        cluster = Cluster(store, poll_interval=1.0)
        async with satsuma_node(
            "cluster_agents.py:Shouter",
            "cluster_agents:Echo",
            "--store",
            url_of(postgres_dsn),
            "--model",
            "fake",
            "--poll-interval",
            "0.2",
            "--lease-seconds",
            "1.5",
            cwd=project,
            env=environment(),  # no key: the fake model needs none
        ) as node:
            with trio.fail_after(30):
                started = await node.line()
            # The default name: the host and the node's pid.
            assert f"-{node.process.pid}: serving shouter (cluster_agents.py:Shouter), echo " in (
                started
            )

            class Shouter(satsuma.Agent):
                name = "shouter"

            with trio.fail_after(30):
                results = [
                    await cluster.run(Shouter, "s-1", "hi"),
                    await cluster.run(Echo, "e-1", "ho"),
                ]
            assert [r.output for r in results] == [
                "(fake model) You said: hi",
                "(fake model) You said: ho",
            ]

            # The database goes away for longer than the node's heartbeat interval and
            # comes back: the node (restarted by its supervisor if it crashed) serves on.
            await trio.to_thread.run_sync(postgres_server.stop)
            try:
                await trio.sleep(1.5)
            finally:
                await trio.to_thread.run_sync(postgres_server.start)
            with trio.fail_after(30):
                again = await cluster.run(Echo, "e-1", "still there?")
            assert again.output == "(fake model) You said: still there?"
            assert node.process.returncode is None

            node.process.send_signal(signal.SIGINT)
            with trio.fail_after(30):
                returncode = await node.process.wait()
                rest = await node.rest()
            assert returncode == 0, node.stderr.read_text()
            # (The count of runs in flight may still include the last one, recording its
            # end: its result is written before the node forgets it.)
            assert "satsuma node " in rest and ": SIGINT: draining, " in rest
            assert group_is_gone(node.process.pid)
        # It left the node table.
        status, out, _ = await satsuma_command(
            "cluster", "status", "--store", url_of(postgres_dsn), "--json", cwd=project
        )
        assert status == 0
        assert json.loads(out)["nodes"] == []


# --- mistakes: one line, exit status 2 --------------------------------------------------


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, project: Path) -> Iterator[Path]:
    """For ``main`` called here: the project as the current directory, and the satsuma
    logger's level and handlers (which ``main`` sets) put back after."""
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    log = logging.getLogger("satsuma")
    level, handlers = log.level, list(log.handlers)
    try:
        yield project
    finally:
        log.setLevel(level)
        log.handlers[:] = handlers


def error_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``satsuma ARGS``, which must fail with status 2 and one line on stderr."""
    assert main(list(args)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("satsuma: error: "), line
    return line.removeprefix("satsuma: error: ")


@pytest.mark.usefixtures("in_process")
def test_a_store_that_is_not_postgresql_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "node", "cluster_agents:Echo", "--store", "state.db", "--model", "fake")
    assert line == (
        "--store must be a PostgreSQL database (postgresql://USER@HOST/DBNAME), got "
        "'state.db': a cluster shares its agents through PostgreSQL"
    )
    # Another database's URL: only its scheme is shown, never what may be a password.
    line = error_of(capsys, "cluster", "status", "--store", "mysql://app:s3cret@db/agents")
    assert "got a mysql:// URL" in line
    assert "s3cret" not in line


@pytest.mark.usefixtures("in_process")
def test_a_database_that_cannot_be_reached_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nowhere = tmp_path / "no-server"  # a socket folder with no server in it
    nowhere.mkdir()
    url = f"postgresql://app:s3cret@/agents?host={nowhere}"
    for args in (
        ("node", "cluster_agents:Echo", "--model", "fake"),
        ("cluster", "status"),
    ):
        line = error_of(capsys, *args, "--store", url)
        assert line.startswith(
            f"Store postgresql://app@/agents?host={nowhere}: cannot reach the database ("
        ), line
        assert "s3cret" not in line


@pytest.mark.usefixtures("in_process")
def test_without_psycopg_the_extra_to_install_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    line = error_of(capsys, "cluster", "status", "--store", "postgresql://app@db/agents")
    assert line == (
        "PostgresStore needs psycopg 3, an optional dependency of satsuma: "
        "pip install 'satsuma[postgres]'"
    )


@pytest.mark.usefixtures("in_process")
def test_a_bad_target_or_setting_of_a_node_is_named(
    capsys: pytest.CaptureFixture[str], postgres_dsn: str
) -> None:
    url = url_of(postgres_dsn)
    assert error_of(capsys, "node", "nosuch:Agent", "--store", url) == "no module named 'nosuch'"
    assert (
        error_of(capsys, "node", "cluster_agents:Nope", "--store", url, "--model", "fake")
        == "cluster_agents has no attribute 'Nope'"
    )
    # Without --model fake, the node needs a key for the real API.
    assert error_of(capsys, "node", "cluster_agents:Echo", "--store", url).startswith(
        "ANTHROPIC_API_KEY is not set"
    )
    # Two classes that the queue cannot tell apart (found once connected).
    assert error_of(
        capsys,
        "node",
        "cluster_agents:Echo",
        "cluster_agents:EchoAgain",
        "--store",
        url,
        "--model",
        "fake",
    ) == ("two agent classes are named 'echo'")


def test_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for option, value, says in (
        ("--lease-seconds", "0", "must be more than 0 seconds, got: 0"),
        ("--drain-timeout", "soon", "not a number of seconds: 'soon'"),
        ("--max-runs", "0", "must be 1 or more, got: 0"),
    ):
        with pytest.raises(SystemExit) as exit:
            main(["node", "a:B", "--store", "postgresql://db/x", option, value])
        assert exit.value.code == 2
        assert says in capsys.readouterr().err
