"""PostgreSQL connections that a trio caller can walk away from.

psycopg's sync API runs in worker threads (see ``_postgres``), and a thread blocked on a
socket cannot be cancelled: behind a network that stopped answering (a partition, a
hung server or pooler) a query waits for TCP to give up, up to 15 minutes with Linux's
defaults. So a caller whose deadline passes does not wait for its thread
(``trio.to_thread.run_sync(..., abandon_on_cancel=True)``); its ``Ticket`` then:

- marks the connection the thread holds as lost to the pool: the thread closes it when
  it comes back, never gives it back for reuse (its state is unknown: a statement may
  still be running on it, or an answer half read);
- asks the server to cancel what runs on it (``Connection.cancel_safe``, bounded by its
  own timeout), in a thread of its own that nothing waits for;
- then wakes the thread by shutting the socket down (``shutdown(2)`` wakes a thread
  blocked on it; ``close(2)`` would not), so the thread ends, and gives back its slot of
  the pool, within that timeout, whether the server answers or not.

The socket is shut down through a duplicate of its descriptor that the link owns, never
by its number: libpq closes its own descriptor when the server hangs up, and the number
may by then belong to another file. A link is closed once both the thread and the
cancel are done with it, since cancelling reads the connection that closing frees.

TCP keepalives and ``tcp_user_timeout`` (``Network``) bound the rest: a thread nobody
waits for, and a call without a deadline, on a connection whose peer is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, final

import attrs
import trio

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Link",
    "Network",
    "Ticket",
    "close_all",
    "limit_transactions",
    "run_abandonable",
    "said_goodbye",
]

logger = logging.getLogger("satsuma.store")

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class Network:
    """How the store's connections find out that the network or the server went away:
    libpq's parameters, in libpq's units (whole seconds; milliseconds for
    ``tcp_user_timeout_ms``), and how long a cancel request may take."""

    connect_timeout: int
    keepalives_idle: int
    keepalives_interval: int
    keepalives_count: int
    tcp_user_timeout_ms: int
    cancel_timeout: float

    def parameters(self, dsn: str) -> dict[str, Any]:
        """The parameters to give ``psycopg.connect`` beside ``dsn``: those the DSN does
        not set itself (a value in the DSN wins). libpq ignores the TCP ones on a Unix
        socket."""
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(dsn)
        ours = {
            "connect_timeout": self.connect_timeout,
            "keepalives": 1,
            "keepalives_idle": self.keepalives_idle,
            "keepalives_interval": self.keepalives_interval,
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": self.tcp_user_timeout_ms,
        }
        return {key: value for key, value in ours.items() if key not in given}


@final
class Link:
    """A psycopg connection, and what it takes to wake a thread blocked on it."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection
        # A descriptor of the link's own for the same socket (see the module's notes).
        self._socket: socket.socket | None = socket.socket(fileno=os.dup(connection.fileno()))
        self._lock = threading.Lock()
        self._cancelling = False
        self._doomed = False  # closed once the cancel is done with it

    def close(self) -> None:
        """Close the connection now, or once the cancel in flight on it is done."""
        with self._lock:
            self._doomed = True
            if self._cancelling:
                return
        self._close_now()

    def _close_now(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection may complain
            self.connection.close()
        with self._lock:
            own, self._socket = self._socket, None
        if own is not None:
            own.close()

    def _wake(self) -> None:
        with self._lock:
            if self._socket is not None:
                with contextlib.suppress(OSError):  # already shut down, or not connected
                    self._socket.shutdown(socket.SHUT_RDWR)

    def _cancel_and_wake(self, timeout: float) -> None:
        """In a thread of its own: cancel what runs on the connection server-side, then
        wake the thread that waits on it."""
        try:
            self.connection.cancel_safe(timeout=timeout)
        except Exception as exc:  # the server did not answer in time, or is gone
            logger.debug("could not cancel an abandoned query: %s", exc)
        finally:
            self._wake()
            with self._lock:
                self._cancelling = False
                doomed = self._doomed
            if doomed:
                self._close_now()


@final
class Ticket:
    """One worker thread's use of connections, which its trio caller may abandon
    (``abandon``). The thread registers each connection it uses with ``hold``, and
    either gives it back with ``release`` or returns it, still held, as its answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._link: Link | None = None
        self._abandoned = False
        self._ended = False  # the thread's function returned or raised

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def hold(self, link: Link) -> bool:
        """(In the thread.) The connection it uses from now; False when the caller left
        already, and then the link is closed."""
        with self._lock:
            if not self._abandoned:
                self._link = link
                return True
        link.close()
        return False

    def release(self, link: Link) -> bool:
        """(In the thread.) Done with ``link``: True when it may go back to the pool;
        False when the caller left meanwhile, and then it is closed (after the cancel)."""
        with self._lock:
            if self._link is link:
                self._link = None
            if not self._abandoned:
                return True
        link.close()
        return False

    def _end(self) -> None:
        """(In the thread, last.) A link still held is the thread's answer: closed when
        no one will receive it."""
        with self._lock:
            self._ended = True
            orphan = self._link if self._abandoned else None
            self._link = None if orphan is not None else self._link
        if orphan is not None:
            orphan.close()

    def abandon(self, cancel_timeout: float) -> bool:
        """(In trio, when the caller leaves without the thread's answer.) Whether the
        thread was at work on a connection then: it is dropped from the pool, what runs
        on it is cancelled and the thread woken (see the module's notes)."""
        with self._lock:
            if self._abandoned:
                return False
            self._abandoned = True
            link = self._link
            if link is None:
                return False
            orphan = self._ended  # done: its answer (this link) goes to no one
            if orphan:
                self._link = None
            else:
                with link._lock:
                    link._cancelling = True
        if orphan:
            link.close()
            return False
        trio.lowlevel.start_thread_soon(
            lambda: link._cancel_and_wake(cancel_timeout),
            lambda _: None,  # nothing waits for it; it logs its own failure
            name="satsuma store cancel",
        )
        return True


async def run_abandonable(
    fn: Callable[[Ticket], T],
    *,
    cancel_timeout: float,
    limiter: trio.CapacityLimiter | None = None,
    on_abandon: Callable[[], object] | None = None,
) -> T:
    """``fn(ticket)`` in a worker thread; when the caller is cancelled first (its
    deadline, or its scope's cancel), it returns at once (``trio.Cancelled`` goes on)
    and the thread's connection is abandoned (``Ticket.abandon``); ``on_abandon`` is
    then called if the thread was at work on one."""
    ticket = Ticket()

    def work() -> T:
        try:
            return fn(ticket)
        finally:
            ticket._end()

    answered = False
    try:
        result = await trio.to_thread.run_sync(work, limiter=limiter, abandon_on_cancel=True)
        answered = True
        return result
    finally:
        if not answered and ticket.abandon(cancel_timeout) and on_abandon is not None:
            on_abandon()


def limit_transactions(connection: psycopg.Connection[Any], ms: int) -> None:
    """Have the server end the session's transactions unfinished after ``ms`` (0: no
    limit). Set on the session rather than in the DSN's options, which stay the user's.
    A transaction in pipeline mode whose client stopped sending counts as active, not
    idle: only transaction_timeout (PostgreSQL 17) ends it."""
    timeouts = "set_config('idle_in_transaction_session_timeout', %(ms)s, false)"
    if connection.info.server_version >= 170000:
        timeouts += ", set_config('transaction_timeout', %(ms)s, false)"
    connection.execute(f"SELECT {timeouts}", {"ms": str(ms)})


def said_goodbye(connection: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has something to read: nothing is due on one, so it is
    the server's last words (a shutdown, a restart, a terminated backend) or its EOF."""
    if connection.closed or connection.broken:
        return True
    try:
        if hasattr(select, "poll"):  # select.select refuses descriptors past 1023
            poller = select.poll()
            poller.register(connection.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def close_all(links: Sequence[Link]) -> None:
    for link in links:
        link.close()
