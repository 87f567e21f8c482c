"""The cluster benchmark's CPU accounting, per kind of process, from Linux's /proc."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from _cluster_procs import Child

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # from field 3 (state) on


def cpu_seconds(pid: int, *, waited_children: bool = False) -> float:
    """User and system CPU time of a process (and of its children it has waited for)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if waited_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


def postgres_cpu(postmaster: int | None) -> float:
    """The server's CPU time: the postmaster, its live backends, and those that ended."""
    if postmaster is None:
        return 0.0
    total = cpu_seconds(postmaster, waited_children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == postmaster:  # ppid
                total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def machine_busy() -> tuple[float, float]:
    """Busy and total CPU time of the machine since boot (all CPUs), in ticks."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])
    return total - idle, total


class CpuMeter:
    """CPU time over a phase, per kind of process."""

    def __init__(self, postmaster: int | None, model: Child, nodes: Sequence[Child]) -> None:
        self.postmaster = postmaster
        self.model = model
        self.nodes = list(nodes)

    def read(self) -> dict[str, float]:
        busy, total = machine_busy()
        return {
            "benchmark": time.process_time(),
            "nodes": sum(cpu_seconds(node.pid) for node in self.nodes),
            "postgres": postgres_cpu(self.postmaster),
            "model server": cpu_seconds(self.model.pid),
            "busy": busy,
            "total": total,
        }


def postmaster_of(admin_dsn: str) -> int | None:
    """The pid of a server this benchmark started (its data folder is known), else None."""
    host = psycopg.conninfo.conninfo_to_dict(admin_dsn).get("host")
    pid_file = Path(str(host)) / "data" / "postmaster.pid" if host else None
    if pid_file is None or not pid_file.exists():
        return None
    return int(pid_file.read_text().split("\n", 1)[0])
