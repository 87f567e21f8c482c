"""PostgreSQL as a person reads it: where the database is (without its password), and
the StoreError, of the class that says what to do next, for each of psycopg's errors."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from .._exceptions import StoreError, StoreUnavailable

if TYPE_CHECKING:
    import psycopg

__all__ = ["error", "first_line", "location", "refused_connection", "without_password"]

# A URL's "user:password@" (up to the last @ before the path, as libpq reads it) and a
# keyword string's password=..., quoted or not.
_URL_PASSWORD: Final = re.compile(r"(://[^/@\s\"]*?:)[^/\s\"]*@")
_KEYWORD_PASSWORD: Final = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s\"]+)", re.I)


def without_password(text: str) -> str:
    """``text`` with every password of a connection string in it shown as ``***``."""
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _KEYWORD_PASSWORD.sub(r"\1***", text)


def location(dsn: str) -> str:
    """The database as a person reads it, without the password."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        # libpq quotes the string it could not read, password and all.
        raise ValueError(
            f"not a PostgreSQL connection string: {without_password(str(exc))}"
        ) from None
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host") or "")
    port = f":{params['port']}" if params.get("port") else ""
    dbname = str(params.get("dbname") or "")
    if host.startswith("/"):  # a Unix socket's folder
        return f"postgresql://{user}{port}/{dbname}?host={host}"
    return f"postgresql://{user}{host}{port}/{dbname}"


def first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n", 1)[0].split()) or type(exc).__name__


# SQLSTATEs after which the same call may succeed later: the server is starting,
# stopping or out of connections (57P01-57P03, 53300, 53200), the connection failed
# (class 08), or the call waited too long or lost a conflict (57014 a statement or lock
# timeout, 55P03, 40001, 40P01).
_TRY_LATER: Final = frozenset(
    {"57P01", "57P02", "57P03", "53300", "53200", "57014", "55P03", "40001", "40P01"}
)


def error(location: str, exc: psycopg.Error, *, lost: bool, committing: bool) -> StoreError:
    """The StoreError for one of psycopg's, of the class that says what the caller does
    next: try again later (the connection broke, the server is away, busy or timed the
    call out) or read the message."""
    problem = _explain(exc, lost=lost, committing=committing)
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if lost or sqlstate in _TRY_LATER or sqlstate.startswith("08"):
        return StoreUnavailable(location, problem)
    return StoreError(location, problem)


def refused_connection(location: str, exc: psycopg.Error) -> StoreError:
    """A connection that could not be made: the server is away (StoreUnavailable), or it
    refused this user or database (a plain StoreError: trying again does not help)."""
    text = first_line(exc)
    lowered = text.lower()
    if any(
        refusal in lowered
        for refusal in ("authentication failed", "does not exist", "no password", "pg_hba.conf")
    ):
        return StoreError(location, f"cannot reach the database ({text})")
    return StoreUnavailable(location, f"cannot reach the database ({text})")


def _explain(exc: psycopg.Error, *, lost: bool, committing: bool) -> str:
    """A clear sentence for the errors of PostgreSQL and of the connection to it;
    ``lost``: the connection broke."""
    from psycopg import errors

    text = first_line(exc)
    if lost and committing:
        return (
            "the connection was lost while the change was committed: it may or may not "
            f"have been written ({text})"
        )
    if lost:
        return (
            f"the connection to the database was lost; nothing of this change was written ({text})"
        )
    if isinstance(exc, errors.DiskFull):
        return f"the disk is full or failing; nothing of this change was written ({text})"
    if isinstance(exc, (errors.InsufficientPrivilege, errors.ReadOnlySqlTransaction)):
        return f"the database cannot be written by this user ({text})"
    return text
