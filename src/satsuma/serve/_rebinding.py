"""The DNS-rebinding check of a server without tokens: which requests it refuses.

A server without tokens (which binds loopback only, unless ``--insecure``) trusts
whoever reaches its socket, and a web page in a browser on the same machine can reach it
too: by DNS rebinding (a name of the attacker's that resolves to 127.0.0.1, so the
browser sends ``Host: attacker.example``) or by a cross-origin ``fetch`` (``Origin:
http://attacker.example``). So a request that arrives on a loopback socket of such a
server that names a ``Host`` must name a loopback one (else 421 ``misdirected``; a
request with none, HTTP/1.0's, is no browser's) and, when it sends an
``Origin``, a loopback one or one the server's CORS list allows (else 403
``forbidden``). Non-browser clients send neither a foreign ``Host`` nor an ``Origin``.
With tokens the token is the check: behind a proxy the ``Host`` is the public name.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from ._http import HTTPError

__all__ = ["is_loopback", "rebinding_refusal"]


# Asked twice per request of a server without tokens (its socket, its Host), nearly
# always of the same few names: parsing an address each time was a visible share of a
# request's CPU. Bounded, so that foreign Host headers cannot grow it.
@functools.lru_cache(maxsize=256)
def is_loopback(host: str) -> bool:
    """True for a host that only this machine can reach (``localhost``, 127.0.0.0/8,
    ``::1``, bracketed or not)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` is ``[::1]``)."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def rebinding_refusal(
    scope: Mapping[str, Any], headers: Mapping[str, str], allowed_origins: Collection[str] = ()
) -> HTTPError | None:
    """Why a server without tokens refuses this request (a browser's from elsewhere), or
    None. ``headers`` are the request's, by lower-case name."""
    server = scope.get("server")
    if not server or not is_loopback(str(server[0])):
        return None  # a socket others can reach: only with --insecure, which says so
    host = headers.get("host")
    # No Host at all is an HTTP/1.0 client's request, never a browser's (a browser
    # always sends the name it resolved): served. An empty one is refused.
    if host is not None and not is_loopback(_host_name(host)):
        return HTTPError(
            421,
            "misdirected",
            f"Host {host!r} is not this server's: without tokens it answers only to a "
            "loopback name (127.0.0.1, localhost, [::1])",
        )
    origin = headers.get("origin")
    if origin is not None and origin not in allowed_origins:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not is_loopback(parts.hostname or ""):
            return HTTPError(
                403,
                "forbidden",
                f"a request from the origin {origin!r} may not use this server: without "
                "tokens it answers only to pages on this machine (or its CORS origins)",
            )
    return None
