"""Ownership of an agent: the lease rule, in one place for every store.

An ``agent_id`` has at most one live owner at a time. The owner holds a *lease* on it: who
holds it (an :class:`Owner`: an id, and the process's pid, host and start), an *epoch*
that grows by one each time the lease is taken, and when it expires unless renewed. Every
write an owner makes carries its lease, and a store refuses a write whose epoch is not the
current one: an owner that lost its lease (it was paused, partitioned, or replaced) can
never write into a conversation that moved on.

A lease held by someone else can be taken only when its holder is gone:

- a holder whose pid means a process here is gone when its process is (the pid is free,
  or taken by another process: the start time tells), or, for one in this very process,
  when it released everything it held;
- any other holder is gone when its lease expired (it stopped renewing it).

A pid means a process here only on the same host *as the kernel knows it*: the same host
name, the same boot (``/proc/sys/kernel/random/boot_id``) and the same PID namespace
(``/proc/self/ns/pid``), recorded as the owner's ``host_id``. Containers often share a
host name (the pod's, or one set by hand) while each has its own PID namespace, and a
machine booted again reuses pids: judged by the host name alone, a live holder in
another container could be taken as gone because its pid is free here, or a dead one
kept because its pid is some other process here. An owner recorded without a
``host_id`` (by an older satsuma, or where /proc cannot be read) is judged by expiry.
On systems without /proc (macOS, Windows), the host name is all there is, as before.

Every store applies the rule with these types; the two SQL stores keep the lease in the
same row (``LEASE_ROW``) and read it with the same functions (``lease_holds``,
``lease_lost``, ``next_epoch``).
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .._exceptions import LeaseLost, StoreError

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LEASE_ROW",
    "Lease",
    "Owner",
    "holder_gone",
    "lease_holds",
    "lease_lost",
    "next_epoch",
    "owner_text",
    "refuse_takeover",
]

DEFAULT_LEASE_SECONDS: Final = 30.0
"""How long a lease lasts unless renewed (its holder renews it every third of that)."""


@functools.cache
def _host() -> str:
    return socket.gethostname()


def _process_start(pid: int) -> str | None:
    """What tells this process from another that later gets the same pid: the boot and
    the start time in clock ticks (Linux); empty where the OS does not say, None where
    it could not be read."""
    if sys.platform != "linux":
        return ""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
        with open("/proc/sys/kernel/random/boot_id", "rb") as file:
            boot = file.read().strip().decode()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return f"{boot}:{fields[19].decode()}"


@functools.cache
def _host_id() -> str:
    """Where a pid of this process's means this process: the boot id and the PID
    namespace (Linux); empty where they cannot be read or the OS has neither."""
    if sys.platform != "linux":
        return ""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as file:
            boot = file.read().strip().decode()
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    return f"{boot}/{namespace}"


@attrs.frozen(kw_only=True)
class Owner:
    """Who holds a lease.

    Attributes:
        owner_id: Unique to the holder (an opened agent, or a supervisor's child across
            its restarts).
        pid: The holder's process id.
        host: The host name of the machine (or container) the process runs on.
        process_start: Tells the process from a later one with the same pid (empty where
            the OS does not say).
        host_id: Where ``pid`` means this process: the boot id and the PID namespace,
            ``"<boot id>/pid:[<inode>]"`` (Linux); empty where unknown (then the lease
            is judged by its expiry, see the module's docstring).
    """

    owner_id: str
    pid: int
    host: str
    process_start: str = ""
    host_id: str = ""

    @classmethod
    def new(cls) -> Owner:
        """A new owner in this process."""
        pid = os.getpid()
        return cls(
            owner_id=uuid.uuid4().hex,
            pid=pid,
            host=_host(),
            process_start=_this_start(),
            host_id=_host_id(),
        )


@functools.cache
def _this_start_of(pid: int) -> str:
    return _process_start(pid) or ""


def _this_start() -> str:
    return _this_start_of(os.getpid())  # keyed by pid: a forked child is another process


@attrs.frozen(kw_only=True)
class Lease:
    """An owner's hold on one agent.

    Attributes:
        agent_id: The agent.
        owner: Who holds it.
        epoch: Grows by one each time the lease is taken; writes carry it.
        expires_at: When it lapses unless renewed (seconds since the epoch).
    """

    agent_id: str
    owner: Owner
    epoch: int
    expires_at: float


# The owners of this process that hold a lease now, and how many each holds. A lease
# whose holder is of this process but not in here was left behind (its release could
# not be written) and may be taken.
_held: Counter[str] = Counter()
_held_lock = threading.Lock()  # stores take leases in worker threads


def hold(owner: Owner) -> None:
    with _held_lock:
        _held[owner.owner_id] += 1


def let_go(owner: Owner) -> None:
    with _held_lock:
        _held[owner.owner_id] -= 1
        if _held[owner.owner_id] <= 0:
            del _held[owner.owner_id]


def pid_means_a_process_here(holder: Owner) -> bool:
    """Whether ``holder.pid`` names a process of this host's PID namespace (see the
    module's docstring): the same host name, and the same boot and PID namespace."""
    if holder.host != _host():
        return False
    here = _host_id()
    if not here:
        # No /proc: on Linux, nothing can be told (expiry); elsewhere the host name
        # is all there is, for owners recorded without a host_id alike.
        return sys.platform != "linux" and not holder.host_id
    return holder.host_id == here


def holder_gone(holder: Owner, expires_at: float, *, now: float | None = None) -> bool:
    """Whether the lease of ``holder``, expiring at ``expires_at``, may be taken."""
    if not pid_means_a_process_here(holder):
        return expires_at < (time.time() if now is None else now)
    if holder.pid == os.getpid() and holder.process_start == _this_start():
        with _held_lock:
            return holder.owner_id not in _held
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, under another user
    # The pid is in use: by the holder, unless a process started since has it.
    if not holder.process_start:
        return False
    start = _process_start(holder.pid)
    return start is not None and start != holder.process_start


def owner_text(holder: Owner) -> str:
    """The holder as a person reads it."""
    here = (
        " (this process)" if holder.pid == os.getpid() and pid_means_a_process_here(holder) else ""
    )
    return f"process {holder.pid} on host {holder.host}{here}"


def refuse_takeover(
    where: str,
    agent_id: str,
    owner: Owner,
    holder: Owner | None,
    expires_at: float,
    *,
    now: float | None = None,
) -> None:
    """Refuse ``owner`` the agent while another holder that is not gone has it (``holder``:
    None when no one does), in the words every store says it.

    Raises:
        StoreError: another owner holds it and is not gone; the message names it.
    """
    if (
        holder is not None
        and holder.owner_id != owner.owner_id
        and not holder_gone(holder, expires_at, now=now)
    ):
        raise StoreError(
            where,
            f"agent {agent_id!r} is already open in {owner_text(holder)}; an agent has "
            "one owner at a time (close it there first, or use another agent_id)",
        )


# --- the lease row of the SQL stores ---------------------------------------------------------

LEASE_ROW: Final = (
    "SELECT owner_id, pid, host, process_start, epoch, host_id FROM leases WHERE agent_id = ?"
)
"""The agent's lease row, as ``lease_lost`` reads it."""


def lease_holds(lease: Lease, row: Sequence[Any] | None) -> bool:
    """Whether ``row`` (of ``LEASE_ROW``) says ``lease`` is still the agent's current one."""
    return row is not None and row[0] == lease.owner.owner_id and row[4] == lease.epoch


def lease_lost(where: str, lease: Lease, row: Sequence[Any] | None) -> LeaseLost:
    """The refusal of a write made under ``lease``, which ``row`` (of ``LEASE_ROW``) says
    is no longer the agent's current one."""
    if row is None or row[0] is None:
        now = "no one holds it now"
    else:
        holder = Owner(
            owner_id=row[0], pid=row[1], host=row[2], process_start=row[3], host_id=row[5]
        )
        now = f"{owner_text(holder)} holds it now (epoch {row[4]})"
    return LeaseLost(
        where,
        f"agent {lease.agent_id!r}: a write under a lease it no longer has (epoch "
        f"{lease.epoch}) was refused; {now}",
    )


def next_epoch(
    where: str, agent_id: str, owner: Owner, row: Sequence[Any] | None, *, now: float | None = None
) -> int:
    """The epoch at which ``owner`` takes the agent whose lease row is ``row`` (``owner_id,
    pid, host, process_start, epoch, expires_at, host_id``; None: it has none yet).

    Raises:
        StoreError: another owner holds it and is not gone; the message names it.
    """
    if row is None:
        return 1
    holder_id, pid, host, process_start, epoch, expires_at, host_id = row
    if holder_id is not None:
        holder = Owner(
            owner_id=holder_id, pid=pid, host=host, process_start=process_start, host_id=host_id
        )
        refuse_takeover(where, agent_id, owner, holder, expires_at, now=now)
    epoch_after: int = epoch + 1
    return epoch_after
