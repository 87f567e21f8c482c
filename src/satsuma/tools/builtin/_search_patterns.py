"""Glob and ``.gitignore`` patterns, translated to regular expressions, for the child
program behind the ``search`` tool (``_search_worker.py``): the standard library only,
never ``satsuma``, as the child imports it.

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

import re
from typing import NamedTuple

__all__ = ["IgnoreRule", "IgnoreRules", "glob_matches", "glob_to_regex", "parse_gitignore"]


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
