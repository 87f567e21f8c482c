"""The console's sessions: the cookie a browser holds instead of a bearer token, and the
CSRF token every console form carries.

A browser cannot send ``Authorization: Bearer`` from a plain form or an ``EventSource``,
so the login form takes the token once and the server keeps it, here in memory, under
a random session id that the cookie holds (HttpOnly, SameSite=Strict, Secure under TLS).
Each request authenticates the kept token again, so that a token struck from the token
file stops its sessions at once. A browser that has not logged in (or a server without
tokens) gets an anonymous session all the same: its id is what the CSRF token of the
login form, and of every form on a server without tokens, is bound to.

The CSRF token is an HMAC of the session id under a secret drawn when the server
starts: a page from another origin can neither read it nor compute it, and a POST
without it is refused. The sessions live as long as the process (a restart logs
everyone out) and on this front only.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping

import attrs

from ._http import Principal
from ._tokens import TokenBook, TokenFileError

__all__ = ["COOKIE", "Sessions", "cookie_value"]

COOKIE = "satsuma_console"
"""The session cookie's name."""

EVERYONE = Principal(None, frozenset({"run", "read", "approve", "admin"}))

log = logging.getLogger("satsuma.serve")


def cookie_value(headers: Mapping[str, str], name: str = COOKIE) -> str | None:
    """The value of cookie ``name`` in a request's ``Cookie`` header, if any."""
    for part in headers.get("cookie", "").replace(",", ";").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value.strip()
    return None


@attrs.frozen
class _Session:
    token: str | None  # None: not logged in (or a server without tokens)
    created: float


@attrs.define(eq=False)
class Sessions:
    """The console's sessions of one server.

    Attributes:
        tokens: The server's tokens; None when it has none (every session may do all).
        lifetime: Seconds a session lasts after its login.
        max_sessions: Sessions kept at most; past it the oldest is forgotten (a flood of
            anonymous visits cannot grow the memory without end).
    """

    tokens: TokenBook | None
    lifetime: float = 12 * 3600
    max_sessions: int = 10_000
    _secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), init=False)
    _held: OrderedDict[str, _Session] = attrs.field(factory=OrderedDict, init=False)

    def open(self, token: str | None = None) -> str:
        """A new session (logged in with ``token`` when given); returns its id."""
        session_id = secrets.token_urlsafe(32)
        self._held[session_id] = _Session(token, time.time())
        while len(self._held) > self.max_sessions:
            self._held.popitem(last=False)
        return session_id

    def close(self, session_id: str | None) -> None:
        """Forget a session (logout); an unknown id is no error."""
        if session_id is not None:
            self._held.pop(session_id, None)

    def known(self, session_id: str | None) -> bool:
        """True for the id of a live session."""
        return self._live(session_id) is not None

    def principal_of(self, session_id: str | None) -> Principal | None:
        """Who a session acts for: its token's principal (checked again now), everyone
        on a server without tokens, else None (no session, not logged in, expired, or
        its token no longer in the file)."""
        session = self._live(session_id)
        if session is None:
            return None
        if self.tokens is None:
            return EVERYONE
        if session.token is None:
            return None
        try:
            return self.tokens.authenticate(session.token)
        except TokenFileError as error:
            log.error("the console's sessions refused: %s", error)
            return None

    def principal(self, headers: Mapping[str, str]) -> Principal | None:
        """``principal_of`` the session a request's cookie names."""
        return self.principal_of(cookie_value(headers))

    def csrf(self, session_id: str) -> str:
        """The CSRF token of a session's forms."""
        return hmac.new(self._secret, session_id.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session_id: str | None, given: str | None) -> bool:
        """True when ``given`` is the CSRF token of a live session ``session_id``."""
        if given is None or not self.known(session_id):
            return False
        assert session_id is not None
        return hmac.compare_digest(self.csrf(session_id), given)

    def _live(self, session_id: str | None) -> _Session | None:
        if session_id is None:
            return None
        session = self._held.get(session_id)
        if session is None:
            return None
        if time.time() - session.created > self.lifetime:
            del self._held[session_id]
            return None
        return session
