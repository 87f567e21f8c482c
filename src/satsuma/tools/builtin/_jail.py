"""The child program that puts a ``bash`` command in its namespaces (Linux only).

Started as ``sys.executable -I -S <this file> [options] -- argv...`` in the workspace,
the command's working directory. It uses the standard library only (``-S``: no
site-packages) and never imports ``satsuma``: it runs once per command and must start
fast.

Options:
    ``--user-namespace``: make a user namespace first, mapping the service's own uid and
    gid to themselves (the only way an ordinary user, or root in a container without
    ``CAP_SYS_ADMIN``, gets the other namespaces).

    ``--uid U --gid G`` (root only): run the command as the host's uid U and gid G, with
    no supplementary groups. The workspace is then mounted again over itself as an
    idmapped mount (Linux 5.12): the owner of the workspace's root appears to the command
    as U, so it works there as its owner would, and what it writes is owned on disk by
    the workspace's owner, not by U.

What it does, in order:

1. ``unshare`` mount, PID and IPC namespaces (after the user namespace, if asked), then
   ``fork``: the child is PID 1 of the new PID namespace. The parent ignores SIGTERM and
   SIGINT (the command's group receives them: the command dies, PID 1 then exits) and
   exits as its child did.
2. In the child: every mount made private, so nothing mounted here reaches the host; a
   /proc of the new PID namespace; the paths container runtimes (runc, crun) protect made
   read-only (``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq``, ``/proc/bus``,
   ``/proc/fs``, all of ``/sys``) or masked (``/proc/kcore``, ``/proc/keys``,
   ``/proc/timer_list``, ``/sys/firmware``, ...).
3. With ``--uid``: the idmapped workspace. Directories on the way to it that U may not
   search are covered by a read-only tmpfs holding only the way to the workspace, so that
   its absolute path still works (U could see nothing else there anyway).
4. The capability bounding set emptied, the uid switched (with ``--uid``), a new empty
   session keyring (the service's, inherited, would let the command read its keys), no
   new privileges (setuid programs do not raise it again), PR_SET_PDEATHSIG so that
   PID 1 dies with the parent; then ``execve`` with the environment the program was
   given (not ``os.environ``, which Python may have changed) and SIGPIPE and SIGXFSZ no
   longer ignored.

A step that fails is reported on stderr as ``bash isolation: <step>: <error>`` and the
program exits 126 before the command runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 0x1
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8
MOUNT_ATTR_IDMAP = 0x100000

# The new mount API's numbers are the same on every architecture but alpha (which
# satsuma does not run on): they were added after the tables were unified.
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442

# keyctl(2) has no wrapper in libc, and its number differs by architecture.
SYS_KEYCTL = {
    "x86_64": 250,
    "i386": 288,
    "i686": 288,
    "aarch64": 219,
    "riscv64": 219,
    "armv7l": 311,
    "ppc64le": 271,
    "s390x": 280,
}
KEYCTL_JOIN_SESSION_KEYRING = 1
ENOSYS = 38

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38

# What runc and crun protect by default (their masked and read-only paths).
READ_ONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
MASKED = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/devices/virtual/powercap",
    "/sys/firmware",
)

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class SetupError(Exception):
    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"{step}: {detail}")


def check(result: int, step: str) -> int:
    if result < 0:
        raise SetupError(step, os.strerror(ctypes.get_errno()))
    return result


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    check(
        libc.mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def mount_setattr(dirfd: int, path: str, flags: int, attr_set: int, userns_fd: int = 0) -> None:
    # struct mount_attr: attr_set, attr_clr, propagation, userns_fd (all u64).
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", attr_set, 0, 0, userns_fd), 32)
    step = f"mount_setattr {path or 'workspace'}"
    check(
        libc.syscall(
            ctypes.c_long(SYS_MOUNT_SETATTR),
            ctypes.c_int(dirfd),
            path.encode(),
            ctypes.c_uint(flags),
            attr,
            ctypes.c_size_t(32),
        ),
        step,
    )


def write(path: str, text: str) -> None:
    try:
        with open(path, "w") as file:
            file.write(text)
    except OSError as exc:
        raise SetupError(f"write {path}", exc.strerror or str(exc)) from None


def main(argv: list[str]) -> int:
    user_namespace = False
    run_as: tuple[int, int] | None = None
    while argv and argv[0] != "--":
        option = argv.pop(0)
        if option == "--user-namespace":
            user_namespace = True
        elif option == "--uid" and argv:
            uid = int(argv.pop(0))
            gid = run_as[1] if run_as else uid
            run_as = (uid, gid)
        elif option == "--gid" and argv and run_as:
            run_as = (run_as[0], int(argv.pop(0)))
        else:
            raise SetupError("arguments", f"unknown option {option}")
    command = argv[1:]
    if not command:
        raise SetupError("arguments", "no command")
    environment = original_environment()
    # Found now: after the uid switch the service's Python (its stdlib, which execvp
    # imports from) may be out of the command's reach.
    program = find_program(command[0], environment.get(b"PATH", b"/usr/bin:/bin").decode())

    host_mounts = os.readlink("/proc/self/ns/mnt")
    euid, egid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
    if user_namespace:
        check(libc.unshare(CLONE_NEWUSER), "unshare user namespace")
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", f"{euid} {euid} 1")
        write("/proc/self/gid_map", f"{egid} {egid} 1")
    check(libc.unshare(flags), "unshare mount, PID and IPC namespaces")
    # Never mount anything in the host's namespace, whatever went wrong above.
    if os.readlink("/proc/self/ns/mnt") == host_mounts:
        raise SetupError("unshare", "still in the host's mount namespace")

    pid = os.fork()
    if pid == 0:
        try:
            inside(program, command, environment, run_as)
        except BaseException as exc:  # a forked child must never return
            os.write(2, f"bash isolation: {exc}\n".encode())
        os._exit(126)
    return wait_for(pid)


def wait_for(pid: int) -> int:
    # The command's process group gets the SIGTERM of a timeout: the command dies and
    # PID 1 then exits, which is how this process learns of it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            return 126
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    return os.waitstatus_to_exitcode(status)


def original_environment() -> dict[bytes, bytes]:
    """The environment this program was started with. Python may have added to
    ``os.environ`` at start (``LC_CTYPE=C.UTF-8`` under the C locale, PEP 538); the
    kernel's copy is what the service gave."""
    with open("/proc/self/environ", "rb") as file:
        entries = file.read().split(b"\0")
    return dict(entry.partition(b"=")[::2] for entry in entries if b"=" in entry)


def find_program(name: str, path: str) -> str:
    if "/" in name:
        return name
    for directory in path.split(":"):
        path = os.path.join(directory or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise SetupError("find the command", f"{name} was not found on PATH")


def inside(
    program: str,
    command: list[str],
    environment: dict[bytes, bytes],
    run_as: tuple[int, int] | None,
) -> None:
    workspace = os.getcwd()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in MASKED:
        mask(path)
    for path in READ_ONLY:
        if os.path.lexists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            mount_setattr(AT_FDCWD, path, AT_RECURSIVE, MOUNT_ATTR_RDONLY)
    if os.path.ismount("/sys"):  # a container may have none
        mount_setattr(AT_FDCWD, "/sys", AT_RECURSIVE, MOUNT_ATTR_RDONLY)
    if run_as is not None:
        idmap_workspace(workspace, *run_as)
        os.chdir(workspace)  # the idmapped mount, not the directory under it
    with open("/proc/sys/kernel/cap_last_cap") as file:
        last_cap = int(file.read())
    for capability in range(last_cap + 1):
        check(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "drop capabilities")
    if run_as is not None:
        uid, gid = run_as
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)  # the kernel clears every capability here
    # The session keyring is inherited, and whoever possesses it may read its keys
    # whatever its uid: the command gets an empty one of its own, as runc gives each
    # container (after the uid switch, so that it is the command's).
    leave_session_keyring()
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")
    # After the uid change, which clears it.
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent death signal")
    # Python ignores these at start, and an ignored signal stays ignored across execve:
    # `yes | head` would then print "Broken pipe" (subprocess resets them the same way).
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    os.execve(program, command, environment)


def leave_session_keyring() -> None:
    machine = os.uname().machine
    number = SYS_KEYCTL.get(machine)
    if number is None:
        raise SetupError("leave the session keyring", f"keyctl's number on {machine} is unknown")
    joined = libc.syscall(ctypes.c_long(number), KEYCTL_JOIN_SESSION_KEYRING, None)
    # ENOSYS: a kernel without keyrings, nothing to leave.
    if joined < 0 and ctypes.get_errno() != ENOSYS:
        raise SetupError("leave the session keyring", os.strerror(ctypes.get_errno()))


def mask(path: str) -> None:
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    else:
        mount("/dev/null", path, None, MS_BIND)


def idmap_workspace(workspace: str, uid: int, gid: int) -> None:
    owner = os.stat(workspace)
    userns = idmap_namespace(f"{owner.st_uid} {uid} 1", f"{owner.st_gid} {gid} 1")
    try:
        tree = check(
            libc.syscall(
                ctypes.c_long(SYS_OPEN_TREE),
                ctypes.c_int(AT_FDCWD),
                workspace.encode(),
                ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC),
            ),
            "open_tree workspace",
        )
        idmapped = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
        mount_setattr(tree, "", AT_EMPTY_PATH, idmapped, userns)
        cover_unsearchable(workspace, uid, gid)
        check(
            libc.syscall(
                ctypes.c_long(SYS_MOVE_MOUNT),
                ctypes.c_int(tree),
                b"",
                ctypes.c_int(AT_FDCWD),
                workspace.encode(),
                ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH),
            ),
            "move_mount workspace",
        )
        os.close(tree)
    finally:
        os.close(userns)


def idmap_namespace(uid_map: str, gid_map: str) -> int:
    """A user namespace holding the mapping, for mount_setattr: a child makes it and
    waits while its maps are written and the namespace is opened."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(done_w)
        ok = libc.unshare(CLONE_NEWUSER) == 0
        os.write(ready_w, b"1" if ok else b"0")
        os.read(done_r, 1)
        os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise SetupError("unshare user namespace for the idmapped workspace", "refused")
        write(f"/proc/{pid}/uid_map", uid_map)
        write(f"/proc/{pid}/gid_map", gid_map)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


def cover_unsearchable(workspace: str, uid: int, gid: int) -> None:
    """Put a read-only tmpfs holding only the way to the workspace over the first
    directory above it that ``uid`` may not search (a 0700 /tmp/pytest-of-root, /root)."""
    parts = [part for part in workspace.split("/") if part]
    for depth in range(len(parts)):
        directory = "/" + "/".join(parts[:depth])
        info = os.stat(directory)
        if searchable(info, uid, gid):
            continue
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        os.makedirs(workspace, mode=0o755, exist_ok=True)
        mount_setattr(AT_FDCWD, directory, 0, MOUNT_ATTR_RDONLY)
        return


def searchable(info: os.stat_result, uid: int, gid: int) -> bool:
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SetupError as error:
        os.write(2, f"bash isolation: {error}\n".encode())
        sys.exit(126)
