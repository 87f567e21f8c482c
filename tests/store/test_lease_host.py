"""Whose pid a lease's holder is, in containers (issue 29, item 13): containers share host
names while each has its own PID namespace, and a machine booted again reuses pids. A
holder's pid is judged only where it means a process here (same host name, boot id and
PID namespace); any other holder, and one recorded without that identity by an older
satsuma, is judged by its lease's expiry."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import attrs
import pytest
import trio

from satsuma.store import Owner, SQLiteStore, StoreError
from satsuma.store._lease import _host_id, holder_gone

WORKER = Path(__file__).with_name("lease_worker.py")

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="boot ids and PID namespaces")


def _start_ticks(pid: int) -> str:
    """The process's start as /proc says it: what a holder of that pid would record."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rindex(b")") + 2 :].split()[19].decode()


def _live_pid() -> int:
    return os.getppid()  # alive for as long as this test runs, and not this process


def _here() -> tuple[str, str]:
    boot, namespace = _host_id().split("/", 1)
    return boot, namespace


@linux_only
@pytest.mark.parametrize("elsewhere", ["another boot", "another PID namespace"])
def test_a_holder_of_another_boot_or_pid_namespace_is_judged_by_expiry(elsewhere: str) -> None:
    boot, namespace = _here()
    other_boot = str(uuid.uuid4())
    host_id = f"{other_boot}/{namespace}" if elsewhere == "another boot" else f"{boot}/pid:[12345]"
    process_start = f"{other_boot if elsewhere == 'another boot' else boot}:1"
    pid = _live_pid()
    for holder_pid in (pid, 2_000_000_000):  # its pid is some process here, or none
        holder = Owner(
            owner_id="holder",
            pid=holder_pid,
            host=socket.gethostname(),
            process_start=process_start,
            host_id=host_id,
        )
        now = time.time()
        assert not holder_gone(holder, expires_at=now + 30, now=now)
        assert holder_gone(holder, expires_at=now - 1, now=now)


@linux_only
def test_a_holder_of_this_pid_namespace_is_still_judged_by_its_pid() -> None:
    host = socket.gethostname()
    pid = _live_pid()
    boot, _ = _here()
    alive = Owner(
        owner_id="holder",
        pid=pid,
        host=host,
        process_start=f"{boot}:{_start_ticks(pid)}",
        host_id=_host_id(),
    )
    reused = attrs.evolve(alive, process_start=f"{boot}:1")  # the pid went to another process
    dead = attrs.evolve(alive, pid=2_000_000_000)
    now = time.time()
    assert not holder_gone(alive, expires_at=now - 1, now=now)  # alive past its expiry
    assert holder_gone(reused, expires_at=now + 30, now=now)
    assert holder_gone(dead, expires_at=now + 30, now=now)


@linux_only
async def test_an_owner_recorded_without_a_host_identity_waits_for_its_expiry(
    tmp_path: Path,
) -> None:
    # A lease row as an older satsuma wrote it (no host_id): same host name, and a pid
    # that is free here. Judged by the pid, it would be taken at once; it may have been
    # written from another container, so only its expiry tells.
    path = tmp_path / "agents.db"
    async with SQLiteStore(path):
        pass
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "INSERT INTO leases (agent_id, owner_id, pid, host, process_start, epoch, "
            "expires_at) VALUES ('a', 'older', 2000000000, ?, ?, 3, ?)",
            (socket.gethostname(), f"{boot}:1", time.time() + 600),
        )
    async with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="already open in process 2000000000"):
            await store.acquire_lease("a", Owner.new(), seconds=30)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE leases SET expires_at = ?", (time.time() - 1,))
    async with SQLiteStore(path) as store:
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        assert lease.epoch == 4
        await store.release_lease(lease)


def _can_unshare() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


async def _open(path: Path) -> None:
    async with SQLiteStore(path):
        pass


async def _refused(path: Path, pid: int) -> None:
    async with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match=f"already open in process {pid} on host"):
            await store.acquire_lease("a", Owner.new(), seconds=30)


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare --pid (root, or user namespaces)")
def test_a_live_holder_in_another_pid_namespace_of_this_host_keeps_its_lease(
    tmp_path: Path,
) -> None:
    # A real holder, in a PID namespace of its own (as a container is), with this host's
    # name: its pid there (1, say) is another process here, with another start time.
    path = tmp_path / "agents.db"
    trio.run(_open, path)
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(WORKER), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdin is not None and holder.stdout is not None
    with holder.stdin, holder.stdout:
        try:
            line = holder.stdout.readline()
            assert line.startswith(b"held by pid ")
            pid = int(line.split()[-1])
            with contextlib.closing(sqlite3.connect(path)) as db:
                recorded = db.execute("SELECT pid, host, host_id FROM leases").fetchone()
            assert recorded[0] == pid
            assert recorded[1] == socket.gethostname()
            assert recorded[2] != _host_id()  # another PID namespace, this boot
            assert recorded[2].split("/")[0] == _host_id().split("/")[0]
            trio.run(_refused, path, pid)
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
