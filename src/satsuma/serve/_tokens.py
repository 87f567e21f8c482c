"""Bearer tokens: the token file, making a token, and finding who a request's token is.

The file holds hashes only, one token a line, so that a copy of it (a backup, a leaked
config) lets no one in::

    # satsuma serve tokens: HASH NAME SCOPES AGENTS
    sha256:9f86d08...  ops  run,read  support,billing
    sha256:2c26b46...  admin  admin  *

``HASH`` is ``sha256:`` and the token's SHA-256 in hex; ``NAME`` names the token in
logs and errors (letters, digits, ``.``, ``_``, ``-``); ``SCOPES`` are ``run``,
``read``, ``approve``, ``admin`` comma-separated; ``AGENTS`` the agent names it
reaches, comma-separated, or ``*`` for all. Blank lines and lines starting with ``#``
are skipped. The server reads the file again when it changes (its size, inode or
modification time), so a token is added or revoked without a restart; a file that has
become unreadable or wrong refuses every token (503) until it is fixed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, cast, final, get_args

import attrs

from ._http import Principal, Scope

__all__ = ["TOKEN_PREFIX", "TokenBook", "TokenFileError", "create_token", "hash_token"]

TOKEN_PREFIX: Final = "sat_"
SCOPES: Final[tuple[Scope, ...]] = get_args(Scope)
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_HEADER = "# satsuma serve tokens: HASH NAME SCOPES AGENTS (docs/serve.md)\n"


class TokenFileError(ValueError):
    """The token file cannot be read, or a line of it is wrong (its message names the
    file and the line)."""


def hash_token(token: str) -> str:
    """The line's ``HASH`` of ``token``.

    SHA-256, not a slow password hash: a token is 256 random bits, so there is nothing
    to guess from its hash, and a fast hash keeps every request's check cheap.
    """
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


@attrs.frozen
class _Entry:
    digest: str
    principal: Principal


def _scopes(text: str) -> frozenset[Scope]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCOPES]
    if not names or unknown:
        shown = f"unknown scope {unknown[0]!r}" if unknown else "no scope"
        raise ValueError(f"{shown}: scopes are {', '.join(SCOPES)}, comma-separated")
    return frozenset(cast("list[Scope]", names))


def _agents(text: str) -> frozenset[str] | None:
    if text.strip() == "*":
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("no agent: give agent names comma-separated, or *")
    bad = [name for name in names if not _NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"bad agent name {bad[0]!r}")
    return frozenset(names)


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"bad token name {name!r}: 1 to 64 letters, digits, '.', '_' or '-'")
    return name


def _parse(path: Path, text: str) -> list[_Entry]:
    entries: list[_Entry] = []
    names: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        try:
            if len(fields) != 4:
                raise ValueError(f"expected 4 fields (HASH NAME SCOPES AGENTS), got {len(fields)}")
            digest, name, scopes, agents = fields
            if not _HASH.fullmatch(digest):
                raise ValueError("the hash is not sha256: and 64 hex digits")
            if _check_name(name) in names:
                raise ValueError(f"a second token named {name!r}")
            names.add(name)
            entries.append(_Entry(digest, Principal(name, _scopes(scopes), _agents(agents))))
        except ValueError as error:
            raise TokenFileError(f"{path}, line {number}: {error}") from None
    return entries


@final
@attrs.define(eq=False)
class TokenBook:
    """The tokens a server accepts: a token file, read again when it changes.

    Raises (``from_file``): TokenFileError when the file cannot be read or is wrong.
    """

    path: Path
    _entries: list[_Entry]
    _stamp: tuple[int, int, int] | None
    _broken: str | None = None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TokenBook:
        """The tokens of the file at ``path``, read now.

        Raises:
            TokenFileError: it cannot be read, or a line is wrong.
        """
        path = Path(path)
        stamp, entries = _read(path)
        return cls(path, entries, stamp)

    @property
    def names(self) -> list[str]:
        """The tokens' names, in the file's order."""
        return [str(entry.principal.name) for entry in self._entries]

    def authenticate(self, token: str) -> Principal | None:
        """Who holds ``token``, or None for a token that is not in the file.

        Every line is compared, in constant time, whether or not one matched already:
        how long the check takes says nothing about the token.

        Raises:
            TokenFileError: the file changed and cannot be read any more (every token
                is refused until it is fixed).
        """
        self._refresh()
        digest = hash_token(token).encode("ascii")
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest.encode("ascii")):
                found = entry.principal
        return found

    def _refresh(self) -> None:
        try:
            now = _stamp(self.path)
        except OSError as error:
            self._broken = f"cannot read the token file {self.path}: {error.strerror}"
        else:
            if now == self._stamp and self._broken is None:
                return
            try:
                self._stamp, self._entries = _read(self.path)
                self._broken = None
            except TokenFileError as error:
                self._stamp = now
                self._broken = str(error)
        if self._broken is not None:
            raise TokenFileError(self._broken)


def _stamp(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _read(path: Path) -> tuple[tuple[int, int, int], list[_Entry]]:
    try:
        stamp = _stamp(path)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise TokenFileError(f"cannot read the token file {path}: {reason}") from None
    return stamp, _parse(path, text)


def create_token(
    path: str | os.PathLike[str],
    *,
    name: str,
    scopes: Iterable[str],
    agents: Sequence[str] | None = None,
) -> str:
    """Make a new token, append its hash to the file at ``path`` (created, readable by
    its owner only, when missing) and return the token: the only time it is seen.

    Args:
        name: The token's name (unique in the file).
        scopes: Some of ``run``, ``read``, ``approve``, ``admin``.
        agents: The agent names it reaches; None (or ``["*"]``) for all.

    Raises:
        TokenFileError: a bad name, scope or agent, a name the file holds already, or
            a file that cannot be read or written.
    """
    path = Path(path)
    try:
        _check_name(name)
        scope_text = ",".join(sorted(_scopes(",".join(scopes))))
        agent_set = None if agents is None else _agents(",".join(agents))
    except ValueError as error:
        raise TokenFileError(str(error)) from None
    agent_text = "*" if agent_set is None else ",".join(sorted(agent_set))
    existing = _read(path)[1] if path.exists() else []
    if any(entry.principal.name == name for entry in existing):
        raise TokenFileError(f"{path} has a token named {name!r} already")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    line = f"{hash_token(token)} {name} {scope_text} {agent_text}\n"
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "a", encoding="utf-8") as file:
            if file.tell() == 0:
                file.write(_HEADER)
            file.write(line)
    except OSError as error:
        raise TokenFileError(f"cannot write the token file {path}: {error.strerror}") from None
    return token
