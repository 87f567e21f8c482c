"""Per-file locks: calls that change the same file take turns.

``edit_file`` reads, changes and writes back; two of them on one file, run at the same
time, each read the old text and the second rename dropped the first edit while both
reported success (issue 16: 199 trials in 200). The file tools therefore change a file
only while holding its lock here, so the second edit reads what the first wrote.

The lock is keyed by what the sandbox resolved: the directory that holds the entry
(its device and inode) and the entry's name. Every spelling of one file meets there:
``a/../f``, an absolute path, a symlink to it (resolution follows symlinks up to the
last component), another working dir that is the same directory under a symlink, a
directory renamed while a call holds it.

The locks are ``threading.Lock``s in one process-wide registry, not trio locks, on
purpose: the file tools run in worker threads that the runner abandons at their
deadline, and the thread must keep the lock until it has really finished writing (a
trio lock would be released by the task that gave up on it, with the thread still
writing). A threading lock also knows nothing of trio runs, so agents in different
``trio.run`` calls of one process, on any threads, take turns too. An entry lives while
a call holds or awaits it and is dropped after, so the registry stays as small as the
number of files being changed at the moment.

Other processes do not take these locks: ``edit_file`` checks that the file did not
change between its read and its rename (see ``_files``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import final

import attrs

from ._sandbox import Resolved

__all__ = ["PATH_LOCKS", "PathLockStatistics", "PathLocks"]

_Key = tuple[int, int, str]  # the holding directory's st_dev and st_ino, the entry's name


@attrs.frozen(kw_only=True)
class PathLockStatistics:
    """What ``PathLocks.statistics()`` reports.

    Attributes:
        paths: Files that a call is changing or waiting to change.
        calls: Calls holding a lock or waiting for one.
    """

    paths: int
    calls: int


@attrs.define(eq=False)
class _Entry:
    lock: threading.Lock = attrs.Factory(threading.Lock)
    users: int = 0  # holding or waiting; the entry is dropped when this falls to 0


@final
@attrs.define(eq=False)
class PathLocks:
    """A registry of one lock per file, shared by every caller in the process."""

    _guard: threading.Lock = attrs.Factory(threading.Lock)
    _entries: dict[_Key, _Entry] = attrs.Factory(dict)

    @contextmanager
    def hold(self, target: Resolved) -> Iterator[None]:
        """Block (the calling thread) until no one else holds ``target``'s lock, and hold
        it for the ``with`` body. Call it from a worker thread, never from trio's: the
        wait is as long as the other writer takes.

        A target that names a directory (``name`` is None) takes no lock: nothing writes
        one.
        """
        if target.name is None:
            yield
            return
        directory = os.fstat(target.dir_fd)
        key = (directory.st_dev, directory.st_ino, target.name)
        with self._guard:
            entry = self._entries.setdefault(key, _Entry())
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._entries[key]

    def statistics(self) -> PathLockStatistics:
        """How many files are locked or awaited, and by how many calls."""
        with self._guard:
            calls = sum(entry.users for entry in self._entries.values())
            return PathLockStatistics(paths=len(self._entries), calls=calls)


PATH_LOCKS: PathLocks = PathLocks()
"""The process's registry: every file tool takes its locks here."""
