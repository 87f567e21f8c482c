"""The ``--store`` option of every command, read in one place.

``run``, ``chat``, ``runs``, ``resume``, ``node`` and ``cluster status`` take the same
``--store`` text and mean the same by it:

- ``postgresql://...`` or ``postgres://...`` (the scheme in any case): a PostgresStore
  on that database;
- any other ``SCHEME://...`` is refused, ``sqlite://`` included: SQLAlchemy reads
  ``sqlite:///a.db`` as a relative path and file URIs read it as an absolute one, so
  either reading would surprise someone, while the file's own path is never ambiguous;
- anything else is the path of a SQLite file (``./x://y`` is one, if ever needed).

Before this module, ``run`` and the others took every text as a path, so
``--store postgresql://db/x`` quietly made a SQLite file ``./postgresql:/db/x``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import attrs
import trio

from ._command_error import CommandError
from ._exceptions import StoreError
from .store import PostgresStore, SQLiteStore, Store

__all__ = ["POSTGRES_SCHEMES", "StoreOption", "open_store", "store_option", "url_scheme"]

POSTGRES_SCHEMES: Final = ("postgresql", "postgres")
# RFC 3986's scheme, then "//": what makes a --store text a URL rather than a path.
_URL: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@attrs.frozen
class StoreOption:
    """What a ``--store`` text names: a SQLite file, or a PostgreSQL database.

    Attributes:
        text: The text as given (for PostgreSQL it may hold a password: never print
            it; print ``shown``).
        postgres: True for a PostgreSQL URL, False for a SQLite file's path.
    """

    text: str
    postgres: bool

    @property
    def path(self) -> Path:
        """The SQLite file (for a PostgreSQL URL, a ValueError)."""
        if self.postgres:
            raise ValueError("a PostgreSQL store has no path")
        return Path(self.text)

    @property
    def shown(self) -> str:
        """The store as messages name it: the path, or the URL without its password."""
        if not self.postgres:
            return self.text
        return _postgres(self.text).location

    def make(self) -> Store:
        """A new store on what the option names, not yet opened.

        Raises:
            CommandError: psycopg is not installed, or the URL is not one libpq reads.
        """
        if not self.postgres:
            return SQLiteStore(Path(self.text))
        return _postgres(self.text)


def store_option(text: str) -> StoreOption:
    """Read a ``--store`` text (see the module's docstring for the rules).

    Raises:
        CommandError: a URL of another scheme than PostgreSQL's (only the scheme is
            shown: the rest may hold a password), or an empty text.
    """
    if not text:
        raise CommandError("--store is empty: give a SQLite file or a postgresql:// URL")
    _refuse_near_miss(text)
    scheme = url_scheme(text)
    if scheme is None:
        return StoreOption(text, postgres=False)
    if scheme in POSTGRES_SCHEMES:
        return StoreOption(text, postgres=True)
    if scheme == "sqlite":
        raise CommandError(
            "--store takes a SQLite file by its path, not as a sqlite:// URL "
            "(e.g. --store agents.db)"
        )
    raise CommandError(
        f"--store must be a SQLite file or a postgresql:// URL, got a {scheme}:// URL"
    )


def _refuse_near_miss(text: str) -> None:
    """Refuse a path that is a PostgreSQL URL gone slightly wrong: taken as a path it
    would quietly become a SQLite file, the very mistake this module exists to stop.
    Only the scheme is shown: the rest may hold a password.

    Raises:
        CommandError: ``text`` is a URL with blanks around it (a quoted variable), or
            starts with ``postgresql:`` / ``postgres:`` without the ``//``.
    """
    stripped = text.strip()
    scheme = url_scheme(stripped)
    if scheme is not None and stripped != text:
        raise CommandError(
            f"--store has blanks around its {scheme}:// URL: remove them (a SQLite "
            "file's path would be written ./ in front)"
        )
    head = stripped.partition(":")[0].lower()
    if scheme is None and ":" in stripped and head in POSTGRES_SCHEMES:
        raise CommandError(
            f"--store {head}:... is not a URL: a PostgreSQL URL starts with {head}:// "
            f"(a SQLite file of that name is written ./{head}:...)"
        )


def url_scheme(text: str) -> str | None:
    """The scheme of a ``--store`` URL, in lower case; None for a path."""
    url = _URL.match(text)
    return url.group(1).lower() if url is not None else None


async def open_store(option: StoreOption) -> Store:
    """A store on what ``option`` names, opened: its database reached, its schema up to
    date. The caller closes it.

    Raises:
        CommandError: the store cannot be made (see ``StoreOption.make``) or opened
            (a database that cannot be reached, a file that is not a SQLite database):
            the StoreError's own one-line message.
    """
    store = option.make()
    try:
        await store.open()
    except StoreError as error:
        with trio.CancelScope(shield=True):
            await store.aclose()
        raise CommandError(str(error)) from None
    return store


def _postgres(url: str) -> PostgresStore:
    scheme, _, rest = url.partition("://")
    # libpq reads the scheme in lower case only; any case is taken here, as URLs allow.
    url = f"{scheme.lower()}://{rest}"
    try:
        return PostgresStore(url)
    except ImportError as error:  # the extra is not installed: the message names it
        raise CommandError(str(error)) from None
    except ValueError as error:
        # PostgresStore shows no password in it (libpq's complaint quotes the URL);
        # should one be left, the URL's own, where Python can read one, goes too.
        message = str(error).splitlines()[0]
        try:
            password = urlsplit(url).password
        except ValueError:  # a URL urllib cannot read either ("[::1", a bad port)
            password = None
        if password:
            message = message.replace(password, "***")
        raise CommandError(f"--store: {message}") from None
