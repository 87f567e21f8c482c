"""One LISTEN connection per database and trio run, shared by every waiting
``Cluster.result`` (and ``run``) and every open ``EventStream`` of the run.

A waiter subscribes to what it waits for (a channel, and the payload it cares about or
any: a payload's first word, a run id, is what is matched, and the whole payload is
kept for the waiter, ``Subscription.heard``); the listener's system task LISTENs to the channels some waiter wants and UNLISTENs
the others as waiters come and go, waits for the connection's socket under trio
(``trio.lowlevel.wait_readable``, then ``notifies(timeout=0)``), and wakes the waiters a
notification concerns. Connecting, LISTEN and UNLISTEN run in a worker thread, each
bounded (``_ANSWER_SECONDS``): a server that stops answering (a network partition) is a
lost connection, whose thread is abandoned, woken and its connection closed (see the
store's ``_link``), so the task never hangs, nor the end of the trio run with it.

Its guarantees, which the waiters build on:

- A subscription is ready (``subscribe`` returns) once its channels are LISTENed, so a
  waiter that reads the queue afterwards hears every later change; or once connecting
  failed, and then the waiter polls.
- When the connection breaks (the server restarted), the task connects again every
  second; once it LISTENs again it wakes every waiter, which reads the queue again: a
  notification sent during the outage is never needed.
- A waiter that leaves (it got its answer, was cancelled, failed) only drops its own
  subscription.

Its lifetime: the task is a system task of the trio run, started by the first waiter. It
closes its connection and ends once no waiter has wanted anything for ``_IDLE_SECONDS``,
or when the trio run ends, whichever comes first; so a service keeps one connection
while it waits on runs and none after, and nothing outlives ``trio.run``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypeVar, final

import trio

from ..store import Link, PostgresStore, Ticket, run_abandonable

__all__ = ["APPLICATION_NAME", "Subscription", "subscribe"]

logger = logging.getLogger("satsuma.cluster")

# How long the connection stays open with no waiter: a service that waits on runs now
# and then keeps it, one that stopped waiting gives it back to the server.
_IDLE_SECONDS: Final = 30.0
# How often the task tries to connect again while the server is away.
_RETRY_SECONDS: Final = 1.0
# How long LISTEN or UNLISTEN may take before the connection counts as lost (a server
# that stopped answering); connecting is bounded by the store's connect_timeout.
_ANSWER_SECONDS: Final = 10.0

T = TypeVar("T")

# What pg_stat_activity shows for the shared connection.
APPLICATION_NAME: Final = "satsuma cluster listener"

_Key = tuple[str, str | None]  # a channel, and a payload (None: any)


@final
class Subscription:
    """What one waiter waits for: notifications on some channels (each with the payload
    it cares about, or None for any). Made by ``subscribe``; ``close`` it when done."""

    def __init__(self, hub: _Hub, wants: Mapping[str, str | None]) -> None:
        self._hub = hub
        self.keys: frozenset[_Key] = frozenset(wants.items())
        self.ready = trio.Event()
        # The last payload heard on each channel it wants (a run's end notice carries
        # its result: the waiter need not read it).
        self.heard: dict[str, str] = {}
        self._woken = False
        self._event = trio.Event()
        self._closed = False

    def _wake(self, channel: str | None = None, payload: str | None = None) -> None:
        if channel is not None and payload is not None:
            self.heard[channel] = payload
        self._woken = True
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification it wants; True when one came (or
        listening resumed after an outage: the waiter should read its state again)."""
        if not self._woken:
            with trio.move_on_after(seconds):
                await self._event.wait()
        else:
            await trio.lowlevel.checkpoint()
        woken, self._woken = self._woken, False
        if woken:
            self._event = trio.Event()
        return woken

    def close(self) -> None:
        """Stop listening for this waiter (at once; idempotent)."""
        if not self._closed:
            self._closed = True
            self._hub.remove(self)


async def subscribe(
    store: PostgresStore, wants: Mapping[str, str | None], *, keep: Iterable[str] = ()
) -> Subscription:
    """A subscription of this trio run's shared listener on the store's database,
    returned once its channels are LISTENed (or connecting failed: the caller then
    polls). Never raises for a server that is away; a caller with a deadline bounds
    the wait for a server that does not answer. ``keep``: channels that stay LISTENed
    while the connection lasts, even with no one waiting on them (the results channel,
    which every wait wants). The first store of a database in the trio run lends the
    listener its network settings."""
    dsn = store.dsn
    try:
        hubs = _HUBS.get()
    except LookupError:
        hubs = {}
        _HUBS.set(hubs)
    hub = hubs.get(dsn)
    if hub is None:
        hub = hubs[dsn] = _Hub(store, hubs)
    hub._keep.update(keep)
    subscription = Subscription(hub, wants)
    hub.add(subscription)
    try:
        await subscription.ready.wait()
    except BaseException:
        subscription.close()
        raise
    return subscription


@final
class _Hub:
    """The shared listener of one database in one trio run, and its system task."""

    def __init__(self, store: PostgresStore, hubs: dict[str, _Hub]) -> None:
        self._store = store
        self._dsn = store.dsn
        self._hubs = hubs
        self._index: dict[_Key, set[Subscription]] = {}
        self._keep: set[str] = set()  # channels LISTENed as long as the connection lasts
        self._listened: frozenset[str] = frozenset()  # on the live connection
        self._connected = False
        self._away = False  # connecting failed: a new waiter polls at once
        self._changed = False
        self._pause: trio.CancelScope | None = None
        trio.lowlevel.spawn_system_task(self._serve, name="satsuma cluster listener")

    def add(self, subscription: Subscription) -> None:
        for key in subscription.keys:
            self._index.setdefault(key, set()).add(subscription)
        if self._away or (
            self._connected and {channel for channel, _ in subscription.keys} <= self._listened
        ):
            subscription.ready.set()
        else:
            self._poke()

    def remove(self, subscription: Subscription) -> None:
        for key in subscription.keys:
            waiting = self._index.get(key)
            if waiting is not None:
                waiting.discard(subscription)
                if not waiting:
                    del self._index[key]
        self._poke()

    def _poke(self) -> None:
        self._changed = True
        if self._pause is not None:
            self._pause.cancel()

    def _subscriptions(self) -> set[Subscription]:
        return {s for waiting in self._index.values() for s in waiting}

    async def _wait(self, fd: int | None, seconds: float) -> bool:
        """Until the socket ``fd`` is readable, a waiter came or left, or ``seconds``
        passed; False only in that last case."""
        with trio.move_on_after(seconds) as scope:
            self._pause = scope
            try:
                if self._changed:
                    return True
                if fd is None:
                    await trio.sleep_forever()
                else:
                    await trio.lowlevel.wait_readable(fd)
            finally:
                self._pause = None
        return not scope.cancelled_caught or self._changed

    async def _in_thread(self, fn: Callable[[Ticket], T], seconds: float) -> T:
        """``fn`` in a worker thread, abandoned (its connection closed) when it has not
        answered within ``seconds``, and then trio.TooSlowError."""
        with trio.fail_after(seconds):
            return await run_abandonable(fn, cancel_timeout=self._store.cancel_timeout)

    async def _serve(self) -> None:
        connection: Link | None = None
        away = False  # the last connection broke, or connecting failed
        fresh = False  # a new connection: every waiter already waiting reads again
        retry_at = -math.inf  # no connecting before (the server was away)
        idle_until = 0.0  # when no one waits: until when the connection stays
        try:
            while True:
                self._changed = False
                wanted = frozenset(channel for channel, _ in self._index)
                if not wanted:
                    # Idle: per-run channels are dropped, the kept ones (results) stay
                    # LISTENed, so that the next wait in a row costs no round trip.
                    idle_until = idle_until or trio.current_time() + _IDLE_SECONDS
                    drop = self._listened - self._keep
                    if connection is not None and drop:
                        try:
                            await self._in_thread(
                                _statements(connection, frozenset(), drop), _ANSWER_SECONDS
                            )
                            self._listened -= drop
                        except Exception as exc:
                            connection = self._lost(connection, exc)
                            continue
                    if connection is not None:
                        connection = self._drain(connection)  # notifications no one wants
                        away = away or connection is None
                    fd = None if connection is None else connection.connection.fileno()
                    left = idle_until - trio.current_time()
                    if not await self._wait(fd, left) and not self._index:
                        return  # idle: the finally closes the connection
                    continue
                idle_until = 0.0
                wanted |= self._listened & self._keep
                if connection is None:
                    if (left := retry_at - trio.current_time()) > 0:
                        await self._wait(None, left)
                        continue
                    try:
                        # Bounded by connect_timeout; the margin covers the thread's
                        # start on a busy machine.
                        connection = await self._in_thread(
                            self._connect, self._store.connect_seconds + _ANSWER_SECONDS
                        )
                    except Exception as exc:
                        if not self._away:
                            logger.warning(
                                "cannot connect to listen for runs (%s); waiters poll, "
                                "trying again every %gs",
                                exc,
                                _RETRY_SECONDS,
                            )
                        self._away = away = True
                        retry_at = trio.current_time() + _RETRY_SECONDS
                        for subscription in self._subscriptions():
                            subscription.ready.set()  # they poll meanwhile
                        continue
                    self._away = False
                    self._connected = True
                    self._listened = frozenset()
                    fresh = True
                if wanted != self._listened:
                    try:
                        await self._in_thread(
                            _statements(
                                connection, wanted - self._listened, self._listened - wanted
                            ),
                            _ANSWER_SECONDS,
                        )
                    except Exception as exc:
                        connection = self._lost(connection, exc)
                        away = True
                        continue
                    self._listened = wanted
                if away:
                    away = False
                    logger.warning("listening for runs again")
                for subscription in self._subscriptions():
                    if {channel for channel, _ in subscription.keys} <= wanted:
                        if fresh and subscription.ready.is_set():
                            subscription._wake()  # it may have missed a notification
                        subscription.ready.set()
                fresh = False
                # Read before waiting on the socket: a statement run in a thread (a
                # LISTEN) may have read notifications off it, which psycopg keeps for
                # notifies() and the socket no longer shows.
                connection = self._drain(connection)
                if connection is None:
                    away = True
                    continue
                await self._wait(connection.connection.fileno(), _IDLE_SECONDS)
        finally:
            self._connected = self._away = False
            self._listened = frozenset()
            if self._hubs.get(self._dsn) is self:
                del self._hubs[self._dsn]
            if connection is not None:
                connection.close()

    def _connect(self, ticket: Ticket) -> Link:
        link = self._store.connect(application_name=APPLICATION_NAME)
        if not ticket.hold(link):
            raise trio.TooSlowError  # its caller left already; no one reads this
        return link

    def _drain(self, connection: Link) -> Link | None:
        """Read what arrived and wake whom it concerns; None when the connection broke."""
        try:
            heard = [(n.channel, n.payload) for n in connection.connection.notifies(timeout=0)]
        except Exception as exc:
            return self._lost(connection, exc)
        for channel, payload in heard:
            # A payload's first word is what a waiter wants (a run id); a run's end
            # notice goes on with the result.
            for key in ((channel, payload.partition(" ")[0]), (channel, None)):
                for subscription in self._index.get(key, ()):
                    subscription._wake(channel, payload)
        return connection

    def _lost(self, connection: Link, exc: Exception) -> Link | None:
        if isinstance(exc, trio.TooSlowError):
            exc = TimeoutError(f"the server did not answer in {_ANSWER_SECONDS:g}s")
        logger.warning("lost the connection that listens for runs (%s); waiters poll", exc)
        self._connected = False
        self._listened = frozenset()
        connection.close()
        return None


def _statements(
    link: Link, listen: frozenset[str], unlisten: frozenset[str]
) -> Callable[[Ticket], None]:
    """LISTEN and UNLISTEN on the connection, for a worker thread."""

    def run(ticket: Ticket) -> None:
        if not ticket.hold(link):
            return
        try:
            for channel in unlisten:
                link.connection.execute(f'UNLISTEN "{channel}"')
            for channel in listen:
                link.connection.execute(f'LISTEN "{channel}"')
        finally:
            ticket.release(link)

    return run


_HUBS: trio.lowlevel.RunVar[dict[str, _Hub]] = trio.lowlevel.RunVar("satsuma_cluster_listeners")
