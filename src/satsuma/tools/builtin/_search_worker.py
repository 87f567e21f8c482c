"""The child program behind the ``search`` tool: a regex over the files of one directory.

A catastrophic regular expression holds the GIL inside :mod:`re` and cannot be interrupted
from Python, so the walk runs in a child process that the parent can kill when its time is
up. The child is started as ``sys.executable -I <this file>``: it uses the standard library
only and never imports ``satsuma``.

Protocol:
    Input is one JSON object on stdin::

        {"root": "/abs/real/dir", "base": "src", "pattern": "regex", "glob": "*.py" | null,
         "max_matches": 100, "max_line_chars": 300, "max_file_bytes": 2000000}

    ``root`` is the real path of the directory to search, ``base`` the prefix shown before
    the paths found (``""`` for the workspace root).

    Output is one JSON object per line on stdout, flushed after each line, so a parent that
    kills the child part-way still has every line written so far:

    * ``{"path": "src/a.py", "line": 3, "text": "..."}`` for each matching line. ``path``
      is ``base`` joined with the path relative to ``root`` (``/`` separators), ``line``
      counts from 1 (lines end at ``\\n``; a trailing ``\\r`` is dropped), and ``text`` is
      cut to ``max_line_chars`` characters followed by ``…`` when longer.
    * ``{"done": true, "files_searched": N, "binary_skipped": B, "large_skipped": L,
      "deep_skipped": D, "truncated": bool}`` at the end; ``truncated`` says a match
      beyond ``max_matches`` was found and the search stopped there; ``deep_skipped``
      counts directories more than ``MAX_DEPTH`` levels down, not entered.
    * ``{"error": "Invalid regex: ..."}`` (or ``Invalid glob``, ``Invalid request``,
      ``Not a directory``) instead, when the search cannot start. The exit status is 0 for
      a bad pattern or glob, 2 for a malformed request.

Walk:
    ``os.fwalk`` without following symbolic links, directories and files in name order.
    Symbolic links are skipped (files and directories alike), as is anything that is not a
    regular file; files are opened with ``O_NOFOLLOW`` relative to their directory's file
    descriptor, so a directory swapped for a link mid-walk cannot lead outside ``root``.
    Directories named ``.git`` are never entered. A file with a NUL byte in its first
    8 KiB is binary and skipped, as is one larger than ``max_file_bytes``; both are counted.
    Text is decoded as UTF-8, undecodable bytes replaced.

The glob and ``.gitignore`` rules it applies are in ``_search_patterns.py``, beside it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

# The patterns are re-exported: the child's tests load this file alone and read them here.
if __package__:  # imported by the search tool (for MAX_DEPTH)
    from ._search_patterns import (
        IgnoreRule,
        IgnoreRules,
        glob_matches,
        glob_to_regex,
        parse_gitignore,
    )
else:  # run as a script (sys.executable -I this file): -I leaves its folder off sys.path
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from _search_patterns import (  # type: ignore[import-not-found,no-redef]
        IgnoreRule,
        IgnoreRules,
        glob_matches,
        glob_to_regex,
        parse_gitignore,
    )

__all__ = [
    "MAX_DEPTH",
    "IgnoreRule",
    "IgnoreRules",
    "glob_matches",
    "glob_to_regex",
    "main",
    "parse_gitignore",
    "search",
]

_BINARY_PROBE = 8192  # bytes looked at for a NUL
_READ_CHUNK = 1 << 20
_GITIGNORE_MAX_BYTES = 1 << 20  # a larger .gitignore is read only this far
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # no hang on a FIFO


# --------------------------------------------------------------------------- search


class Request(NamedTuple):
    """A parsed request (see the module docstring)."""

    root: str
    base: str
    pattern: str
    glob: str | None
    max_matches: int
    max_line_chars: int
    max_file_bytes: int


class Stats:
    """Counters for the final line."""

    def __init__(self) -> None:
        """Starts at zero."""
        self.files_searched = 0
        self.binary_skipped = 0
        self.large_skipped = 0
        self.deep_skipped = 0  # directories past MAX_DEPTH, not entered
        self.truncated = False


def _parse_request(data: Any) -> Request:
    """Checks and unpacks the request object.

    Args:
        data: The decoded JSON.

    Returns:
        The request.

    Raises:
        ValueError: When a field is missing or of the wrong type.
    """
    if not isinstance(data, dict):
        raise ValueError("the request is not a JSON object")

    def text(key: str, *, optional: bool = False) -> str | None:
        value = data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise ValueError(f"{key!r} must be a string")
        return value

    def number(key: str) -> int:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key!r} must be a non-negative integer")
        return value

    root = text("root")
    base = text("base")
    pattern = text("pattern")
    assert root is not None and base is not None and pattern is not None
    return Request(
        root=root,
        base=base.strip("/"),
        pattern=pattern,
        glob=text("glob", optional=True),
        max_matches=number("max_matches"),
        max_line_chars=number("max_line_chars"),
        max_file_bytes=number("max_file_bytes"),
    )


def _is_kind(name: str, dirfd: int, kind: int) -> bool:
    """Tells whether an entry is of a kind (``stat.S_IFDIR``, ...), not following links.

    Args:
        name: The entry's name.
        dirfd: Its directory's descriptor.
        kind: The ``S_IFMT`` bits wanted.

    Returns:
        False too when the entry cannot be looked at.
    """
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_IFMT(st.st_mode) == kind


def _read_regular(name: str, dirfd: int, limit: int) -> bytes | None:
    """Reads at most ``limit + 1`` bytes of a regular file, never through a link.

    Args:
        name: The file's name.
        dirfd: Its directory's descriptor.
        limit: The size beyond which the caller will skip the file.

    Returns:
        The bytes read, or None when the file is not a regular file or cannot be read.
    """
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dirfd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read_all(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _display(path: str) -> str:
    """Makes a path fit for JSON text: undecodable bytes become U+FFFD.

    Args:
        path: A path from the file system (surrogate-escaped).

    Returns:
        The path as text.
    """
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _emit(obj: dict[str, Any]) -> None:
    """Writes one JSON line to stdout and flushes it.

    Args:
        obj: The object to write.
    """
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _lines(data: bytes) -> Iterator[tuple[int, str]]:
    """Splits a file's bytes into numbered lines.

    Args:
        data: The file's content.

    Yields:
        (line number from 1, line without its ``\\n`` or ``\\r\\n``).
    """
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        yield number, line.removesuffix("\r")


# Directories deeper than this are not entered (the final line counts them): each level
# of the walk holds a descriptor, and a tree thousands of levels deep is a trap, not code.
MAX_DEPTH: Final = 256

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class _Dir:
    """A directory being walked: its descriptor stays open while children of it wait to
    be opened (so a walk holds about one descriptor per level, never one per entry)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.waiting = 0

    def release(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            os.close(self.fd)


def _walk(root: str, rules: IgnoreRules, stats: Stats) -> Iterator[tuple[str, int, list[str]]]:
    """Walks ``root`` without recursion, reading ``.gitignore`` files and pruning what
    they and git exclude; directories past ``MAX_DEPTH`` levels are counted in
    ``stats.deep_skipped`` instead of entered.

    Args:
        root: The directory to walk.
        rules: Filled with each directory's ``.gitignore`` as it is reached.
        stats: Counts the directories cut off by depth.

    Yields:
        (directory relative to root, its descriptor, names of the regular, not ignored
        files in it, sorted), directories in depth-first name order.
    """
    # Each entry: (its path relative to root, its parent (None for root), its name, depth).
    stack: list[tuple[str, _Dir | None, str, int]] = [("", None, root, 0)]
    opened: list[_Dir] = []
    try:
        while stack:
            rel_dir, parent, name, depth = stack.pop()
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent.fd if parent else None)
            except OSError:
                fd = -1  # gone, or not a directory any more: skipped
            finally:
                if parent is not None:
                    parent.release()
            if fd < 0:
                continue
            here = _Dir(fd)
            here.waiting = 1  # released once this directory's own files were searched
            opened.append(here)
            try:
                names = sorted(os.listdir(fd))
            except OSError:
                names = []
            prefix = rel_dir + "/" if rel_dir else ""
            if ".gitignore" in names:
                data = _read_regular(".gitignore", fd, _GITIGNORE_MAX_BYTES)
                if data is not None:
                    rules.add(rel_dir, data.decode("utf-8", errors="replace"))
            subdirs = [
                entry
                for entry in names
                if entry != ".git"
                and _is_kind(entry, fd, stat.S_IFDIR)
                and not rules.matches(prefix + entry, True)
            ]
            files = [
                entry
                for entry in names
                if _is_kind(entry, fd, stat.S_IFREG) and not rules.matches(prefix + entry, False)
            ]
            yield rel_dir, fd, files
            if depth >= MAX_DEPTH:
                stats.deep_skipped += len(subdirs)
                subdirs = []
            here.waiting += len(subdirs)
            stack.extend((prefix + entry, here, entry, depth + 1) for entry in reversed(subdirs))
            here.release()
    finally:
        for directory in opened:
            if directory.waiting > 0:  # the walk was left early: close what is still open
                directory.waiting = 1
                directory.release()


def search(request: Request, regex: re.Pattern[str], glob: re.Pattern[str] | None) -> Stats:
    """Runs the search, writing a line per match.

    Args:
        request: The request.
        regex: The compiled pattern.
        glob: The compiled glob, or None to search every file.

    Returns:
        The counters for the final line.
    """
    stats = Stats()
    matches = 0
    rules = IgnoreRules()
    for rel_dir, dirfd, files in _walk(request.root, rules, stats):
        prefix = rel_dir + "/" if rel_dir else ""
        for name in files:
            relpath = prefix + name
            if (
                glob is not None
                and request.glob is not None
                and not glob_matches(request.glob, glob, relpath)
            ):
                continue
            data = _read_file(name, dirfd, request.max_file_bytes, stats)
            if data is None:
                continue
            shown = _display(f"{request.base}/{relpath}" if request.base else relpath)
            for number, line in _lines(data):
                if regex.search(line) is None:
                    continue
                if matches >= request.max_matches:
                    stats.truncated = True
                    return stats
                matches += 1
                if len(line) > request.max_line_chars:
                    line = line[: request.max_line_chars] + "…"
                _emit({"path": shown, "line": number, "text": line})
    return stats


def _read_file(name: str, dirfd: int, max_bytes: int, stats: Stats) -> bytes | None:
    """Reads a file to be searched, counting it as searched or skipped.

    Args:
        name: The file's name.
        dirfd: Its directory's descriptor.
        max_bytes: The size beyond which it is skipped.
        stats: The counters.

    Returns:
        The content, or None when the file is skipped.
    """
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dirfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > max_bytes:
            stats.large_skipped += 1
            return None
        data = _read_all(fd, max_bytes + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew since fstat
        stats.large_skipped += 1
        return None
    if b"\0" in data[:_BINARY_PROBE]:
        stats.binary_skipped += 1
        return None
    stats.files_searched += 1
    return data


def _read_all(fd: int, limit: int) -> bytes:
    """Reads from a descriptor until EOF or ``limit`` bytes.

    Args:
        fd: The descriptor.
        limit: The most bytes to read.

    Returns:
        What was read.

    Raises:
        OSError: When reading fails.
    """
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(_READ_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _compile(request: Request) -> tuple[re.Pattern[str], re.Pattern[str] | None] | str:
    """Compiles the pattern and the glob.

    Args:
        request: The request.

    Returns:
        Both compiled, or the error message to report.
    """
    try:
        regex = re.compile(request.pattern)
    except re.error as exc:
        return f"Invalid regex: {exc}"
    glob: re.Pattern[str] | None = None
    if request.glob:
        try:
            glob = glob_to_regex(request.glob)
        except re.error as exc:
            return f"Invalid glob: {exc}"
    return regex, glob


def main() -> int:
    """Reads the request from stdin, searches, and writes the result lines to stdout.

    Returns:
        The exit status: 0, or 2 for a malformed request.
    """
    try:
        request = _parse_request(json.loads(sys.stdin.buffer.read()))
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError included
        _emit({"error": f"Invalid request: {exc}"})
        return 2
    compiled = _compile(request)
    if isinstance(compiled, str):
        _emit({"error": compiled})
        return 0
    regex, glob = compiled
    try:
        root_stat = os.stat(request.root, follow_symlinks=False)
    except OSError as exc:
        _emit({"error": f"Not a directory: {exc.strerror}"})
        return 0
    if not stat.S_ISDIR(root_stat.st_mode):
        _emit({"error": "Not a directory"})
        return 0
    stats = search(request, regex, glob)
    _emit(
        {
            "done": True,
            "files_searched": stats.files_searched,
            "binary_skipped": stats.binary_skipped,
            "large_skipped": stats.large_skipped,
            "deep_skipped": stats.deep_skipped,
            "truncated": stats.truncated,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
