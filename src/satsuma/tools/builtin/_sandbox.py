"""The workspace sandbox: turning a path the model gave into a file inside the root.

A path is never handed to the kernel as a string. Resolution starts from an open
descriptor of the root and walks one component at a time: each directory is opened
relative to its parent's descriptor with ``O_NOFOLLOW``; a symlink is read and its target
walked by the same rules (an absolute target must name a place inside the root); ``..``
drops a directory descriptor we hold instead of asking the kernel for a parent. The caller
then opens the last component relative to the last descriptor, again with ``O_NOFOLLOW``.

So there is no gap between checking a path and using it for an attacker to swap a
directory for a symlink: a swapped component is seen as a symlink when it is opened and
is followed only inside the root (what ``openat2(RESOLVE_IN_ROOT)`` does on Linux, written
portably for Linux and macOS).

Limits, stated in docs/builtin-tools.md: a hard link made inside the root to a file
outside it is the same file (nothing in a path says otherwise); a directory that someone
moves out of the root while a call holds it open is walked where it now is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Final

import attrs

from .. import ToolContext, ToolError

__all__ = ["PathEscapes", "Resolved", "Workspace"]

MAX_SYMLINKS: Final = 40  # as Linux's own limit for one lookup
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathEscapes(ToolError):
    """A path that leads outside the workspace root, by ``..``, an absolute path or a
    symlink. The model reads ``Error: Path escapes workspace root: <path>``."""

    def __init__(self, path: str) -> None:
        super().__init__(f"Path escapes workspace root: {path}")
        self.path = path


@attrs.define(eq=False)
class Resolved:
    """Where a path leads: an open directory and a name in it.

    Attributes:
        dir_fd: An open descriptor of the directory holding the target (owned: closed by
            ``Workspace.resolve``'s context manager).
        name: The target's name in that directory; None when the path names the
            directory itself.
        display: The path relative to the root, for messages (``.`` for the root).
    """

    dir_fd: int
    name: str | None
    display: str

    def lstat(self) -> os.stat_result | None:
        """The target's status without following a symlink, or None if it does not
        exist."""
        if self.name is None:
            return os.stat(self.dir_fd)
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None


@attrs.frozen
class Workspace:
    """The root a call's paths must stay in: the context's ``working_dir``.

    Attributes:
        root: The root as the context gave it.
        real_root: The root with its own symlinks resolved.
    """

    root: Path
    real_root: Path

    @classmethod
    def of(cls, ctx: ToolContext) -> Workspace:
        """The workspace of a call.

        Raises:
            ToolError: if the working directory is missing or not a directory.
        """
        root = Path(os.path.abspath(ctx.working_dir))
        real_root = Path(os.path.realpath(root))
        if not real_root.is_dir():
            raise ToolError(f"Workspace root is not a directory: {root}")
        return cls(root, real_root)

    @contextmanager
    def resolve(self, path: str, *, create_parents: bool = False) -> Iterator[Resolved]:
        """Resolve ``path`` (relative to the root, or absolute inside it), following
        symlinks only where they stay inside the root.

        The last component need not exist (a file about to be written); with
        ``create_parents``, missing directories on the way are created.

        Raises:
            PathEscapes: the path, or a symlink on its way, leads outside the root.
            ToolError: a directory on the way is missing or is a file, too many
                symlinks, an unusable path.
        """
        if "\x00" in path:
            raise ToolError(f"Invalid path (it contains a NUL character): {path!r}")
        resolved = self._walk(path, create_parents)
        try:
            yield resolved
        finally:
            os.close(resolved.dir_fd)

    def _relative_parts(self, path: str, original: str) -> list[str]:
        """The components of ``path`` below the root; an absolute path must start with
        the root (as given, or resolved)."""
        if not path.startswith("/"):
            return [part for part in path.split("/") if part not in ("", ".")]
        parts = PurePosixPath(path).parts
        for root in (self.real_root, self.root):
            root_parts = root.parts
            if parts[: len(root_parts)] == root_parts:
                return [part for part in parts[len(root_parts) :] if part != "."]
        raise PathEscapes(original)

    def _walk(self, path: str, create_parents: bool) -> Resolved:
        pending = self._relative_parts(path, path)
        pending.reverse()  # a stack: the next component is at the end
        stack: list[tuple[int, str]] = []  # open directories below the root, with names
        # With create_parents, directories that do not exist yet. Past the first missing
        # one nothing can be a symlink, so the rest of the path is walked by name only,
        # and nothing is created until the whole path is known to stay inside the root:
        # a refused call leaves the workspace as it was.
        missing: list[str] = []
        root_fd = os.open(self.real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        changes = 0  # symlinks followed, and entries that changed under us

        def counted(what: str) -> None:
            nonlocal changes
            changes += 1
            if changes > MAX_SYMLINKS:
                raise ToolError(f"{what}: {path}")

        try:
            while pending:
                part = pending.pop()
                if part == "..":
                    if missing:
                        missing.pop()
                    elif stack:
                        os.close(stack.pop()[0])
                    else:
                        raise PathEscapes(path)
                    continue
                names = [name for _, name in stack]
                if missing:
                    if not pending:
                        return self._create(root_fd, stack, missing, part, path)
                    missing.append(part)
                    continue
                current = stack[-1][0] if stack else root_fd
                try:
                    info = os.stat(part, dir_fd=current, follow_symlinks=False)
                except FileNotFoundError:
                    if not pending:
                        return self._result(root_fd, stack, part)
                    if not create_parents:
                        raise ToolError(
                            f"No such directory: {_join([*names, part])} (on the way to {path})"
                        ) from None
                    missing.append(part)
                    continue
                except OSError as exc:
                    raise ToolError(f"Cannot reach {path}: {exc.strerror}") from None
                if stat.S_ISLNK(info.st_mode):
                    counted("Too many levels of symbolic links")
                    try:
                        target = os.readlink(part, dir_fd=current)
                    except OSError:  # no longer a symlink, or gone: look again
                        pending.append(part)
                        continue
                    if target.startswith("/"):
                        target_parts = self._relative_parts(target, path)
                        while stack:
                            os.close(stack.pop()[0])
                    else:
                        target_parts = [p for p in target.split("/") if p not in ("", ".")]
                    pending.extend(reversed(target_parts))
                    continue
                if not pending:
                    return self._result(root_fd, stack, part)
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=current)
                except OSError as exc:
                    # Linux says ENOTDIR, not ELOOP, for a symlink opened with
                    # O_DIRECTORY | O_NOFOLLOW: either way, look at the entry again.
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        if exc.errno == errno.ENOTDIR and _is_plain(_lstat_mode(part, current)):
                            raise ToolError(
                                f"Not a directory: {_join([*names, part])} (on the way to {path})"
                            ) from None
                        counted("Cannot reach it, it keeps changing")
                        pending.append(part)
                        continue
                    raise ToolError(f"Cannot reach {path}: {exc.strerror}") from None
                stack.append((fd, part))
            if missing:  # "new/x/..": a directory that does not exist
                raise ToolError(f"No such directory: {path}")
            # The path names a directory (the root, or one ending in ``..`` and the like).
            if stack:
                fd, _ = stack[-1]
                names = [name for _, name in stack]
                stack.pop()
                os.close(root_fd)
                root_fd = -1
                return Resolved(dir_fd=fd, name=None, display=_join(names))
            fd, root_fd = root_fd, -1
            return Resolved(dir_fd=fd, name=None, display=".")
        finally:
            for fd, _ in stack:
                os.close(fd)
            if root_fd != -1:
                os.close(root_fd)

    def _create(
        self,
        root_fd: int,
        stack: list[tuple[int, str]],
        missing: list[str],
        name: str,
        path: str,
    ) -> Resolved:
        """Create the ``missing`` directories below the last open one, each opened with
        O_NOFOLLOW as it is made; return where ``name`` goes."""
        for part in missing:
            current = stack[-1][0] if stack else root_fd
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=current)
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=current)
            except OSError as exc:
                # Someone else put something there since we looked: not followed.
                raise ToolError(
                    f"Cannot create the directories of {path}: {exc.strerror}"
                ) from None
            stack.append((fd, part))
        return self._result(root_fd, stack, name)

    @staticmethod
    def _result(root_fd: int, stack: list[tuple[int, str]], name: str) -> Resolved:
        # The directory holding ``name`` is handed to the caller; dup it so that the
        # finally clause can close everything it opened without exceptions.
        holder = stack[-1][0] if stack else root_fd
        names = [entry for _, entry in stack]
        return Resolved(dir_fd=os.dup(holder), name=name, display=_join([*names, name]))


def _lstat_mode(name: str, dir_fd: int) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return 0


def _is_plain(mode: int) -> bool:
    """A file, FIFO, socket or device: an entry that exists and can never be walked."""
    return mode != 0 and not stat.S_ISDIR(mode) and not stat.S_ISLNK(mode)


def _join(names: list[str]) -> str:
    return "/".join(names) if names else "."
