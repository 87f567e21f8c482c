"""A LISTEN connection that waits under trio without a thread.

psycopg's sync connection in autocommit mode, LISTENing on a few channels: trio waits for
its socket to be readable (``trio.lowlevel.wait_readable``) and psycopg then reads what
arrived without blocking (``notifies(timeout=0)``). Connecting, and LISTEN itself, run in
a worker thread, which a wait's deadline abandons (a server that stopped answering
cannot hold the wait; the thread is woken and its connection closed, see the store's
``_link``). A connection that breaks (the server restarted) is dropped and made again
on the next wait; meanwhile callers fall back on polling, which they bound.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import final

import trio

from ..store import Link, PostgresStore, StoreError, StoreUnavailable, Ticket, run_abandonable

__all__ = ["Listener"]

logger = logging.getLogger("satsuma.cluster")


@final
class Listener:
    """Notifications on ``channels``, as ``(channel, payload)`` pairs. One task at a time
    may wait on it."""

    def __init__(self, store: PostgresStore, channels: Sequence[str]) -> None:
        self._store = store
        self._channels = tuple(channels)
        self._connection: Link | None = None

    def _connect(self, ticket: Ticket) -> Link:
        link = self._store.connect()
        if not ticket.hold(link):
            raise trio.TooSlowError  # its caller left already; no one reads this
        try:
            for channel in self._channels:
                link.connection.execute(f'LISTEN "{channel}"')
        except BaseException:
            ticket.release(link)
            link.close()
            raise
        return link  # still held: closed by the ticket if no one takes it

    async def open(self) -> None:
        """Connect and LISTEN now: notifications sent from here on are kept for ``wait``.

        Raises:
            psycopg.Error, StoreError: the server cannot be reached.
        """
        if self._connection is None:
            self._connection = await run_abandonable(
                self._connect, cancel_timeout=self._store.cancel_timeout
            )

    def _drop(self) -> None:
        import psycopg

        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            fd = connection.connection.fileno()
        except psycopg.OperationalError:
            # The connection broke (the server went away) and its socket is gone: no
            # wait can be on it, and fileno() raised, which crashed the node that
            # listened when the database restarted.
            pass
        else:
            trio.lowlevel.notify_closing(fd)
        connection.close()

    def _read(self) -> list[tuple[str, str]]:
        assert self._connection is not None
        return [(n.channel, n.payload) for n in self._connection.connection.notifies(timeout=0)]

    async def wait(self, seconds: float) -> list[tuple[str, str]]:
        """The notifications that arrived, waiting up to ``seconds`` for one;
        empty when none came (or the connection broke: the caller polls instead)."""
        import psycopg

        try:
            # Connecting has a bound of its own, not the wait's: a poll interval shorter
            # than a slow connect (a loaded server) would abandon every attempt.
            with trio.move_on_after(self._store.connect_seconds + 1):
                await self.open()
            if self._connection is None:
                raise StoreUnavailable(self._store.location, "no answer to connect and LISTEN")
        except (psycopg.Error, OSError, StoreError) as exc:
            self._lost(exc)
            await trio.sleep(seconds)  # the caller polls meanwhile
            return []
        with trio.move_on_after(seconds):
            try:
                while True:
                    got = self._read()
                    if got:
                        return got
                    assert self._connection is not None
                    await trio.lowlevel.wait_readable(self._connection.connection.fileno())
            except (psycopg.Error, OSError) as exc:
                self._lost(exc)
                await trio.sleep_forever()  # until the timeout: the caller polls
        return []

    def _lost(self, exc: Exception) -> None:
        logger.warning("lost the connection that listens for runs (%s); polling", exc)
        self._drop()

    def close(self) -> None:
        self._drop()
