"""File tools: ``read_file``, ``write_file``, ``edit_file`` and ``list_dir``.

Each runs in a worker thread (its ``run`` is sync) and reaches files only through the
workspace sandbox: an open directory descriptor and a name, never a path string.
``write_file`` and ``edit_file`` change a file only while holding its lock (see
``_pathlocks``), so that calls changing one file take turns.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO, ClassVar, Final

from .. import Tool, ToolContext, ToolError, ToolResult
from ._pathlocks import PATH_LOCKS
from ._sandbox import Resolved, Workspace

__all__ = ["EditFile", "ListDir", "ReadFile", "WriteFile"]

_SNIFF: Final = 8192  # bytes looked at for a NUL, as git does to tell binary files
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class ReadFile(Tool):
    """Reads a UTF-8 text file, whole or a range of lines, with line numbers."""

    name = "read_file"
    description = (
        "Read a text file in the workspace. Lines come numbered ('     1\\tfirst line'). "
        "Give start_line and end_line (1-based, inclusive) to read part of a long file. "
        "Binary files are refused."
    )
    capabilities = frozenset({"read"})
    parameters: ClassVar[Any] = {
        "path": {
            "type": "string",
            "required": True,
            "description": "File path, relative to the workspace (or absolute inside it)",
        },
        "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based)"},
        "end_line": {"type": "integer", "minimum": 1, "description": "Last line, inclusive"},
    }

    max_bytes: ClassVar[int] = 1_000_000
    """Largest file read whole; a bigger one must be read by line ranges."""
    max_chars: ClassVar[int] = 100_000
    """Most characters returned by one call; past it the text ends with where to go on."""
    max_line_chars: ClassVar[int] = 2_000
    """Longer lines are cut (minified files would otherwise fill the answer)."""

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path: str = args["path"]
        start: int = args.get("start_line", 1)
        end: int | None = args.get("end_line")
        if end is not None and end < start:
            raise ToolError(f"end_line ({end}) is before start_line ({start})")
        with Workspace.of(ctx).resolve(path) as target, _open_regular(target) as (file, size):
            if _is_binary(file):
                raise ToolError(f"Binary file refused: {target.display} ({size:,} bytes)")
            whole = start == 1 and end is None
            if whole and size > self.max_bytes:
                raise ToolError(
                    f"File too large to read whole: {target.display} is {size:,} bytes "
                    f"(limit {self.max_bytes:,}); read it in parts with start_line and end_line"
                )
            return self._numbered(file, target.display, start, end)

    def _numbered(self, file: BinaryIO, display: str, start: int, end: int | None) -> ToolResult:
        lines: list[str] = []
        used = 0
        number = 0
        cut_at: int | None = None
        # UTF-8 takes at most 4 bytes a character: this many bytes of a line always hold
        # the characters shown, and the rest of the line is only counted.
        keep = self.max_line_chars * 4
        for number, (head, more_chars) in enumerate(_bounded_lines(file, keep), start=1):
            if number < start:
                continue
            if end is not None and number > end:
                number -= 1
                break
            line = head.decode("utf-8", errors="replace")
            if not more_chars:
                line = line.rstrip("\r")
            if len(line) > self.max_line_chars or more_chars:
                extra = len(line) - self.max_line_chars + more_chars
                line = f"{line[: self.max_line_chars]}… [line cut: {extra:,} more characters]"
            entry = f"{number:6}\t{line}"
            if used + len(entry) + 1 > self.max_chars and lines:
                cut_at = number
                break
            lines.append(entry)
            used += len(entry) + 1
        total = number
        details: dict[str, Any] = {"path": display}
        if number == 0:
            return ToolResult(f"(empty file: {display})", details=details)
        if start > total and cut_at is None:
            raise ToolError(f"start_line {start} is past the end of {display} ({total} lines)")
        shown_end = start + len(lines) - 1
        details["lines"] = [start, shown_end]
        text = "\n".join(lines)
        if cut_at is not None:
            text += (
                f"\n[... output cut at {self.max_chars:,} characters after line {shown_end}; "
                f"read on with start_line={shown_end + 1}]"
            )
            details["truncated"] = True
        return ToolResult(text, details=details)


class WriteFile(Tool):
    """Writes a whole file, creating its directories; the old file is replaced atomically."""

    name = "write_file"
    description = (
        "Write a text file in the workspace, replacing it if it exists (missing directories "
        "are created). To change part of an existing file, prefer edit_file."
    )
    capabilities = frozenset({"write"})
    parameters: ClassVar[Any] = {
        "path": {
            "type": "string",
            "required": True,
            "description": "File path, relative to the workspace (or absolute inside it)",
        },
        "content": {"type": "string", "required": True, "description": "The whole new content"},
    }

    max_bytes: ClassVar[int] = 10_000_000
    """Largest content written."""

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        data = args["content"].encode("utf-8")
        if len(data) > self.max_bytes:
            raise ToolError(f"content too large: {len(data):,} bytes (limit {self.max_bytes:,})")
        workspace = Workspace.of(ctx)
        with workspace.resolve(args["path"], create_parents=True) as target, _turn(target, ctx):
            existed = _write_atomically(target, data)
        verb = "Replaced" if existed else "Created"
        return f"{verb} {target.display} ({len(data):,} bytes)"


class EditFile(Tool):
    """Replaces one exact, unique occurrence of a text in a file."""

    name = "edit_file"
    description = (
        "Edit a text file in the workspace by replacing one exact occurrence of old with new. "
        "old must match the file exactly (whitespace and indentation included) and occur "
        "exactly once: include a few surrounding lines to make it unique. An empty new "
        "deletes old."
    )
    capabilities = frozenset({"read", "write"})
    parameters: ClassVar[Any] = {
        "path": {
            "type": "string",
            "required": True,
            "description": "File path, relative to the workspace (or absolute inside it)",
        },
        "old": {
            "type": "string",
            "required": True,
            "min_length": 1,
            "description": "The exact text to replace",
        },
        "new": {"type": "string", "required": True, "description": "The text to put instead"},
    }

    max_bytes: ClassVar[int] = 10_000_000
    """Largest file edited."""

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        old: str = args["old"]
        new: str = args["new"]
        if old == new:
            raise ToolError("old and new are the same: nothing to change")
        # Read, change and write back under the file's lock: a second edit of the same
        # file, in this turn or any other, reads what this one wrote.
        with Workspace.of(ctx).resolve(args["path"]) as target, _turn(target, ctx):
            text, seen = self._read_text(target)
            changed, line = _replace_once(text, old, new, target.display)
            _write_atomically(target, changed.encode(), unchanged_since=seen)
        return f"Edited {target.display}: replaced 1 occurrence at line {line}"

    def _read_text(self, target: Resolved) -> tuple[str, os.stat_result]:
        """The file's text, and its status as it was read (to tell a change by another
        process before writing over it)."""
        with _open_regular(target) as (file, size):
            seen = os.fstat(file.fileno())
            if size > self.max_bytes:
                raise ToolError(
                    f"File too large to edit: {target.display} is {size:,} bytes "
                    f"(limit {self.max_bytes:,})"
                )
            if _is_binary(file):
                raise ToolError(f"Binary file refused: {target.display}")
            raw = file.read()
        try:
            return raw.decode("utf-8"), seen
        except UnicodeDecodeError:
            raise ToolError(
                f"Not UTF-8 text: {target.display}; edit_file edits UTF-8 files only"
            ) from None


def _replace_once(text: str, old: str, new: str, display: str) -> tuple[str, int]:
    """``text`` with its one occurrence of ``old`` replaced, and the line it starts on."""
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # The model writes "\n"; the file has Windows line ends.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old text not found in {display}; it must match the file exactly, "
            "whitespace and indentation included (read_file shows the current text)"
        )
    if count > 1:
        raise ToolError(
            f"old text occurs {count} times in {display}; include more "
            "surrounding lines so that it matches exactly once"
        )
    index = text.index(old)
    return text[:index] + new + text[index + len(old) :], text.count("\n", 0, index) + 1


@contextlib.contextmanager
def _turn(target: Resolved, ctx: ToolContext) -> Iterator[None]:
    """Hold ``target``'s lock for the body: calls changing one file take turns."""
    with PATH_LOCKS.hold(target):
        # A call whose deadline passed while it waited has been answered already (the
        # runner abandoned this thread): changing the file now would be a change that
        # the model was told did not happen.
        if ctx.cancelled:
            raise ToolError(f"Gave up waiting for another call changing {target.display}")
        yield


class ListDir(Tool):
    """Lists a directory, sorted by name, each entry marked ``[dir]``, ``[file]`` or
    ``[link]``."""

    name = "list_dir"
    description = (
        "List a directory in the workspace, sorted by name: '[dir] name/', "
        "'[file] name (size)', '[link] name -> target'. Defaults to the workspace root."
    )
    capabilities = frozenset({"read"})
    parameters: ClassVar[Any] = {
        "path": {
            "type": "string",
            "default": ".",
            "description": "Directory path, relative to the workspace (default: its root)",
        },
    }

    max_entries: ClassVar[int] = 1_000
    """Most entries listed; the rest are counted."""

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        with Workspace.of(ctx).resolve(args["path"]) as target, _open_dir(target) as fd:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
            if not entries:
                return f"(empty directory: {target.display})"
            lines = [_describe_entry(entry, fd) for entry in entries[: self.max_entries]]
        if len(entries) > self.max_entries:
            rest = len(entries) - self.max_entries
            lines.append(f"... and {rest:,} more entries (list_dir shows {self.max_entries:,})")
        return "\n".join(lines)


def _describe_entry(entry: os.DirEntry[str], fd: int) -> str:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return f"[gone] {entry.name}"  # removed while we listed
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(entry.name, dir_fd=fd)
        except OSError:
            return f"[link] {entry.name}"
        return f"[link] {entry.name} -> {target}"
    if stat.S_ISDIR(info.st_mode):
        return f"[dir] {entry.name}/"
    if stat.S_ISREG(info.st_mode):
        return f"[file] {entry.name} ({info.st_size:,} bytes)"
    return f"[other] {entry.name}"


@contextlib.contextmanager
def _open_regular(target: Resolved) -> Iterator[tuple[BinaryIO, int]]:
    """The target opened for reading, with its size; it must be a regular file."""
    if target.name is None:
        raise ToolError(f"Is a directory: {target.display} (use list_dir)")
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(target.name, _FILE_FLAGS, dir_fd=target.dir_fd)
    except FileNotFoundError:
        raise ToolError(f"File not found: {target.display}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a symlink after it was resolved
            raise ToolError(f"File changed while it was opened: {target.display}") from None
        raise ToolError(f"Cannot open {target.display}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"Is a directory: {target.display} (use list_dir)")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"Not a regular file: {target.display}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as file:
        yield file, info.st_size


@contextlib.contextmanager
def _open_dir(target: Resolved) -> Iterator[int]:
    if target.name is None:
        yield target.dir_fd
        return
    try:
        fd = os.open(target.name, _FILE_FLAGS | os.O_DIRECTORY, dir_fd=target.dir_fd)
    except FileNotFoundError:
        raise ToolError(f"No such directory: {target.display}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            # Linux answers ENOTDIR for a symlink opened with O_DIRECTORY | O_NOFOLLOW too.
            if stat.S_ISLNK(_lstat_mode(target)):
                raise ToolError(
                    f"Directory changed while it was opened: {target.display}"
                ) from None
            raise ToolError(f"Not a directory: {target.display} (use read_file)") from None
        raise ToolError(f"Cannot open {target.display}: {exc.strerror}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat_mode(target: Resolved) -> int:
    info = target.lstat() if target.name is not None else None
    return info.st_mode if info is not None else 0


_CHUNK: Final = 1 << 16
# UTF-8 continuation bytes (0b10xxxxxx): deleting them from a piece leaves one byte per
# character, so counting characters never needs to decode (or hold) a whole line.
_CONTINUATION: Final = bytes(range(0x80, 0xC0))


def _bounded_lines(file: BinaryIO, keep: int) -> Iterator[tuple[bytes, int]]:
    """Each line's first ``keep`` bytes (without its newline) and how many characters
    more it has, read in chunks: memory stays about ``keep`` plus one chunk, whatever the
    length of a line (a 400 MB file of one line included)."""
    head = bytearray()
    more = 0
    open_line = False
    while chunk := file.read(_CHUNK):
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            stop = newline if newline != -1 else len(chunk)
            room = keep - len(head)
            if room > 0:
                head += chunk[start : min(stop, start + room)]
            if stop - start > room:
                more += len(chunk[start + max(room, 0) : stop].translate(None, _CONTINUATION))
            if newline == -1:
                open_line = open_line or stop > start  # text after the last newline
                break
            yield bytes(head), more
            head, more, open_line = bytearray(), 0, False
            start = newline + 1
    if open_line:
        yield bytes(head), more


def _is_binary(file: BinaryIO) -> bool:
    head = file.read(_SNIFF)
    file.seek(0)
    return b"\x00" in head


def _write_atomically(
    target: Resolved, data: bytes, *, unchanged_since: os.stat_result | None = None
) -> bool:
    """Write ``data`` to a temporary file beside the target, then rename it over the
    target: a reader sees the old file or the new one, never half of one. Returns whether
    a file was replaced.

    With ``unchanged_since`` (the status of the file as it was read), refuse to rename
    over a file that has changed since: another process wrote it, and its change would
    be lost without a word.
    """
    if target.name is None:
        raise ToolError(f"Is a directory: {target.display}")
    name, dir_fd = target.name, target.dir_fd
    existing = target.lstat()
    mode = 0o666
    if existing is not None:
        if stat.S_ISDIR(existing.st_mode):
            raise ToolError(f"Is a directory: {target.display}")
        if not stat.S_ISREG(existing.st_mode):
            raise ToolError(f"Not a regular file: {target.display}")
        mode = stat.S_IMODE(existing.st_mode)
    temporary = f".{name}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o666, dir_fd=dir_fd)
    except OSError as exc:
        raise ToolError(f"Cannot write {target.display}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as file:
            if existing is not None:
                os.fchmod(file.fileno(), mode)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if unchanged_since is not None and _changed(unchanged_since, target.lstat()):
            raise ToolError(
                f"{target.display} changed while it was being edited (by another program); "
                "nothing was written: read it again and redo the edit"
            )
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise ToolError(f"Cannot write {target.display}: {exc.strerror}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)  # the rename itself survives a power cut
    return existing is not None


def _changed(seen: os.stat_result, now: os.stat_result | None) -> bool:
    """Whether the file is no longer the one read: replaced (another inode), gone, or
    written in place (size or modification time). A write within one tick of the file
    system's clock that keeps the size is not seen: this narrows the window for other
    processes; calls in this process are kept apart by the per-file locks."""
    if now is None:
        return True
    return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (
        seen.st_dev,
        seen.st_ino,
        seen.st_size,
        seen.st_mtime_ns,
    )
