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

Glob:
    Without a ``/`` the glob matches a file's name, with one it matches the path relative
    to ``root``. ``**/`` is zero or more directories, ``**`` anything, ``*`` anything but
    ``/``, ``?`` one character but ``/``, ``[abc]`` / ``[!abc]`` a class, ``{a,b}`` either
    alternative; everything else, and anything after ``\\``, is literal.

Ignore files:
    ``.gitignore`` files are honoured with git's rules: one in ``root`` and one in each
    directory walked, each applying to its directory and below, deeper files and later lines
    taking precedence. ``.gitignore`` files *above* ``root`` are not read: when the search
    starts below the workspace root, the parent's ignore rules do not apply. Not supported:
    ``.git/info/exclude``, ``core.excludesFile``, ``.ignore`` files and POSIX character
    classes such as ``[[:alpha:]]`` (read as ordinary brackets).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

__all__ = ["IgnoreRule", "IgnoreRules", "glob_to_regex", "main", "parse_gitignore", "search"]

_BINARY_PROBE = 8192  # bytes looked at for a NUL
_READ_CHUNK = 1 << 20
_GITIGNORE_MAX_BYTES = 1 << 20  # a larger .gitignore is read only this far
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # no hang on a FIFO


# --------------------------------------------------------------------------- translation


def _class_end(pat: str, start: int) -> int:
    """Finds the ``]`` closing the bracket expression opened at ``pat[start]``.

    Args:
        pat: The pattern.
        start: Index of the ``[``.

    Returns:
        The index of the closing ``]``, or -1 when there is none.
    """
    j = start + 1
    if j < len(pat) and pat[j] in "!^":
        j += 1
    if j < len(pat) and pat[j] == "]":
        j += 1  # a ``]`` first in the class is a member
    while j < len(pat):
        if pat[j] == "\\":
            j += 2
            continue
        if pat[j] == "]":
            return j
        j += 1
    return -1


def _translate_class(body: str) -> str:
    """Translates the inside of a bracket expression to a regex class.

    Args:
        body: What stands between ``[`` and ``]``.

    Returns:
        A regex that matches one character of the class, never ``/``.
    """
    negate = bool(body) and body[0] in "!^"
    if negate:
        body = body[1:]
    items: list[str] = []  # single characters, or "-" standing for a range operator
    literal: list[bool] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            items.append(body[i + 1])
            literal.append(True)
            i += 2
            continue
        items.append(c)
        literal.append(c != "-")
        i += 1
    out: list[str] = []
    for k, (item, is_literal) in enumerate(zip(items, literal, strict=True)):
        between = 0 < k < len(items) - 1
        if not is_literal and between:
            out.append("-")
        else:
            out.append(re.escape(item))
    return "(?!/)[" + ("^" if negate else "") + "".join(out) + "]"


def _brace_alternatives(pat: str, start: int) -> tuple[list[str], int] | None:
    """Splits the ``{a,b,...}`` group opened at ``pat[start]`` into its alternatives.

    Args:
        pat: The pattern.
        start: Index of the ``{``.

    Returns:
        The alternatives and the index of the closing ``}``, or None when the brace is not
        closed or holds no top-level comma (then it is literal).
    """
    depth = 0
    parts: list[str] = []
    current_start = start + 1
    j = start + 1
    while j < len(pat):
        c = pat[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            end = _class_end(pat, j)
            if end != -1:
                j = end + 1
                continue
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                parts.append(pat[current_start:j])
                return (parts, j) if len(parts) > 1 else None
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(pat[current_start:j])
            current_start = j + 1
        j += 1
    return None


def _translate(pat: str, *, braces: bool, git_stars: bool) -> str:
    """Translates a glob to regex source (not anchored).

    Args:
        pat: The glob.
        braces: Whether ``{a,b}`` is alternation (search globs) or literal (gitignore).
        git_stars: Whether ``**`` is special only as a whole path segment, as in git;
            elsewhere it is then a plain ``*``. Otherwise ``**`` matches anything.

    Returns:
        Regex source.
    """
    out: list[str] = []
    i = 0
    n = len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            j = i
            while j < n and pat[j] == "*":
                j += 1
            at_start = i == 0 or pat[i - 1] == "/"
            at_end = j == n or pat[j] == "/"
            if j - i == 1 or (git_stars and not (at_start and at_end)):
                out.append("[^/]*")
                i = j
            elif at_start and j < n and pat[j] == "/":
                out.append("(?:.*/)?")  # "**/": zero or more directories
                i = j + 1
            else:
                out.append(".*")
                i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = _class_end(pat, i)
            if end == -1:
                out.append(re.escape(c))
                i += 1
            else:
                out.append(_translate_class(pat[i + 1 : end]))
                i = end + 1
        elif c == "\\":
            if i + 1 < n:
                out.append(re.escape(pat[i + 1]))
                i += 2
            else:
                out.append(re.escape(c))
                i += 1
        elif c == "{" and braces:
            group = _brace_alternatives(pat, i)
            if group is None:
                out.append(re.escape(c))
                i += 1
            else:
                alternatives, end = group
                translated = [_translate(a, braces=True, git_stars=git_stars) for a in alternatives]
                out.append("(?:" + "|".join(translated) + ")")
                i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def glob_to_regex(glob: str) -> re.Pattern[str]:
    """Compiles a search glob to a regex to be used with ``fullmatch``.

    Whether the regex is matched against a file's name or its path relative to the root is
    the caller's choice (see :func:`glob_matches`).

    Args:
        glob: The glob, e.g. ``*.py``, ``src/**/*.{py,md}``.

    Returns:
        The compiled regex (``DOTALL``: names may hold any character).

    Raises:
        re.error: When a class is malformed, e.g. a reversed range ``[z-a]``.
    """
    if glob.startswith("./"):
        glob = glob[2:]
    return re.compile(_translate(glob, braces=True, git_stars=False), re.DOTALL)


def glob_matches(glob: str, regex: re.Pattern[str], relpath: str) -> bool:
    """Tells whether a file matches a search glob.

    Args:
        glob: The glob as given (it decides between name and path).
        regex: ``glob_to_regex(glob)``.
        relpath: The file's path relative to the root, ``/``-separated.

    Returns:
        True when the file matches.
    """
    subject = relpath if "/" in glob else relpath.rpartition("/")[2]
    return regex.fullmatch(subject) is not None


# --------------------------------------------------------------------------- gitignore


class IgnoreRule(NamedTuple):
    """One line of a ``.gitignore``.

    Attributes:
        regex: Matches the path relative to the ``.gitignore``'s directory (``fullmatch``).
        negate: A ``!`` line: matching paths are re-included.
        dir_only: A line ending in ``/``: it matches directories only.
    """

    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _trim_trailing_spaces(line: str) -> str:
    """Drops trailing spaces, keeping one escaped with a backslash (as git does).

    Args:
        line: One line.

    Returns:
        The line without its unescaped trailing spaces.
    """
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        backslashes = 0
        j = end - 1
        while j > 0 and line[j - 1] == "\\":
            backslashes += 1
            j -= 1
        if backslashes % 2 == 1:
            break
        end -= 1
    return line[:end]


def parse_gitignore(text: str) -> list[IgnoreRule]:
    """Parses the text of one ``.gitignore``.

    Args:
        text: The file's text.

    Returns:
        Its rules in file order; blank lines, comments and lines that cannot be compiled
        are left out.
    """
    rules: list[IgnoreRule] = []
    for raw in text.split("\n"):
        line = _trim_trailing_spaces(raw.removesuffix("\r"))
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        if dir_only:
            line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        if not line:
            continue
        source = _translate(line, braces=False, git_stars=True)
        if not anchored:
            source = "(?:.*/)?" + source  # a bare name matches at any depth
        try:
            regex = re.compile(source, re.DOTALL)
        except re.error:
            continue  # e.g. a reversed range: git's matcher would never match it either
        rules.append(IgnoreRule(regex, negate, dir_only))
    return rules


class IgnoreRules:
    """The ``.gitignore`` rules known so far, by the directory that holds them.

    Paths are relative to the searched root, ``/``-separated, ``""`` being the root itself.
    """

    def __init__(self) -> None:
        """Starts with no rules."""
        self._by_dir: dict[str, list[IgnoreRule]] = {}

    def add(self, directory: str, text: str) -> None:
        """Adds the rules of the ``.gitignore`` found in ``directory``.

        Args:
            directory: The directory holding the file, relative to the root (``""``).
            text: The file's text.
        """
        rules = parse_gitignore(text)
        if rules:
            self._by_dir.setdefault(directory, []).extend(rules)

    def matches(self, relpath: str, is_dir: bool) -> bool:
        """Tells whether the rules exclude this path itself, ignoring its parents.

        This is what a walk that prunes ignored directories needs: the parents are known
        not to be ignored already.

        Args:
            relpath: The path relative to the root.
            is_dir: Whether it is a directory.

        Returns:
            True when the last rule matching the path excludes it.
        """
        if not self._by_dir:
            return False
        parts = relpath.split("/")
        ignored = False
        for depth in range(len(parts)):
            rules = self._by_dir.get("/".join(parts[:depth]))
            if not rules:
                continue
            below = "/".join(parts[depth:])
            for rule in rules:
                if rule.dir_only and not is_dir:
                    continue
                if rule.negate == ignored and rule.regex.fullmatch(below):
                    ignored = not rule.negate
        return ignored

    def is_ignored(self, relpath: str, is_dir: bool) -> bool:
        """Tells whether a path is ignored, itself or through an ignored parent directory.

        A path inside an excluded directory stays excluded whatever a ``!`` line says, as in
        git.

        Args:
            relpath: The path relative to the root.
            is_dir: Whether it is a directory.

        Returns:
            True when the path is ignored.
        """
        parts = relpath.split("/")
        for depth in range(1, len(parts)):
            if self.matches("/".join(parts[:depth]), True):
                return True
        return self.matches(relpath, is_dir)


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
