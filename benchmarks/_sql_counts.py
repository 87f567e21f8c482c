"""Exact counts of what a store does, for the store benchmarks: on a noisy machine a count
is the figure that does not move.

``counting(store)`` counts, while it is entered:

- store calls, by method (every store);
- transactions committed and reads made (``SQLiteStore``, ``PostgresStore``: each store
  call is one of them, and each is one hop to a worker thread);
- the SQL statements sent, ``BEGIN``/``COMMIT`` left out (SQLite: its trace callback;
  PostgreSQL: psycopg's ``execute``/``executemany``, one per row);
- Python function calls in the worker threads of a ``PostgresStore`` (psycopg's work
  and the store's, from taking a connection to giving it back: ``sys.setprofile`` in
  the thread for the call), the client's CPU as a count;
- round trips to a PostgreSQL server: ``Exchanges``, a loopback TCP proxy in front of the
  server, counts each time a client speaks after the server answered (a pipelined write
  sends statements in one go and waits once). The store being counted must connect
  through it (``Exchanges.dsn``).

Counting adds a little time; count in a run of its own, never in a timed one.
"""

from __future__ import annotations

import collections
import contextlib
import selectors
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import attrs
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from satsuma.store import Store

__all__ = ["Exchanges", "Tally", "counting"]


@attrs.define
class Tally:
    """What a store did while counted."""

    calls: collections.Counter[str] = attrs.Factory(collections.Counter)
    transactions: int = 0
    reads: int = 0
    statements: int = 0
    round_trips: int | None = None  # PostgreSQL through an Exchanges proxy only
    thread_calls: int | None = None  # PostgreSQL only

    def per(self, units: int) -> dict[str, float]:
        """The counts divided by ``units`` (turns, runs)."""
        out = {
            "store calls": sum(self.calls.values()) / units,
            "transactions": self.transactions / units,
            "reads": self.reads / units,
            "statements": self.statements / units,
        }
        if self.round_trips is not None:
            out["round trips"] = self.round_trips / units
        if self.thread_calls is not None:
            out["thread calls"] = self.thread_calls / units
        return out


_STORE_METHODS = (
    "load_agent",
    "load_messages",
    "write_tail",
    "write_step",
    "start_run",
    "end_run",
    "runs",
    "get_run",
    "mark_interrupted",
    "runs_awaiting_approval",
    "call_started",
    "call_finished",
    "calls",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "summaries",
)


@contextlib.contextmanager
def counting(store: Store, exchanges: Exchanges | None = None) -> Iterator[Tally]:
    """Count what ``store`` does inside the block (see the module)."""
    tally = Tally()
    with contextlib.ExitStack() as stack:
        for name in _STORE_METHODS:
            method = getattr(store, name, None)
            if method is None:
                continue
            stack.enter_context(_patched(store, name, _counted_call(tally, name, method)))
        inner = getattr(store, "_call", None)
        if inner is not None:
            stack.enter_context(_patched(store, "_call", _counted_transaction(tally, inner)))
        connection = getattr(store, "_connection", None)
        if connection is not None:  # SQLiteStore's one connection
            connection.set_trace_callback(lambda sql: _count_sqlite(tally, sql))
            stack.callback(connection.set_trace_callback, None)
        if type(store).__name__ == "PostgresStore":
            stack.enter_context(_psycopg_statements(tally))
            tally.thread_calls = 0
            run = getattr(store, "_run")  # noqa: B009 (private: a measurement)
            stack.enter_context(_patched(store, "_run", _profiled(tally, run)))
        if exchanges is not None:
            before = exchanges.count
            stack.callback(lambda: setattr(tally, "round_trips", exchanges.count - before))
        yield tally


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    setattr(owner, name, value)
    try:
        yield
    finally:
        delattr(owner, name)  # the class's method again


def _counted_call(tally: Tally, name: str, method: Any) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        tally.calls[name] += 1
        return await method(*args, **kwargs)

    return call


def _counted_transaction(tally: Tally, inner: Any) -> Any:
    async def call(work: Any, lease: Any = None, *, transaction: bool = True) -> Any:
        if transaction:
            tally.transactions += 1
        else:
            tally.reads += 1
        return await inner(work, lease, transaction=transaction)

    return call


def _profiled(tally: Tally, run: Any) -> Any:
    """``PostgresStore._run`` (in its worker thread), its Python calls counted."""

    def count(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            tally.thread_calls = (tally.thread_calls or 0) + 1

    def call(*args: Any) -> Any:
        sys.setprofile(count)
        try:
            return run(*args)
        finally:
            sys.setprofile(None)

    return call


def _count_sqlite(tally: Tally, sql: str) -> None:
    word = sql.split(None, 1)[0].upper() if sql.strip() else ""
    if word not in ("BEGIN", "COMMIT", "ROLLBACK"):
        tally.statements += 1


@contextlib.contextmanager
def _psycopg_statements(tally: Tally) -> Iterator[None]:
    import psycopg

    # Connection.execute goes through Cursor.execute: counted there.
    cursor_execute = psycopg.Cursor.execute
    executemany = psycopg.Cursor.executemany

    def counted_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if query not in ("BEGIN", "COMMIT", "ROLLBACK"):
            tally.statements += 1
        return cursor_execute(self, query, params, **kw)

    def counted_many(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        rows = list(params_seq)
        tally.statements += len(rows)
        return executemany(self, query, rows, **kw)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_many  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.Cursor.execute = cursor_execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]


class Exchanges:
    """A loopback TCP proxy in front of a PostgreSQL server that counts round trips: a
    round trip begins each time a client sends after the server last sent to it."""

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "/tmp")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            self._target: Any = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            self._target = (socket.AF_INET, (host, port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        port_here = self._listener.getsockname()[1]
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=port_here, sslmode="disable")
        self.count = 0
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._stop_r, self._stop_w = socket.socketpair()
        self._selector.register(self._stop_r, selectors.EVENT_READ, "stop")
        self._thread = threading.Thread(target=self._serve, name="exchanges", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop_w.send(b"x")
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._stop_w.close()

    def _serve(self) -> None:
        # Per connection: its peer socket, and whether the server spoke last.
        pairs: dict[socket.socket, tuple[socket.socket, bool]] = {}
        server_spoke: dict[socket.socket, bool] = {}
        while True:
            for key, _ in self._selector.select():
                if key.data == "stop":
                    return
                if key.fileobj is self._listener:
                    client, _ = self._listener.accept()
                    family, address = self._target
                    upstream = socket.socket(family, socket.SOCK_STREAM)
                    upstream.connect(address)
                    client.setblocking(True)
                    upstream.setblocking(True)
                    pairs[client] = (upstream, True)
                    pairs[upstream] = (client, False)
                    server_spoke[client] = True
                    self._selector.register(client, selectors.EVENT_READ, None)
                    self._selector.register(upstream, selectors.EVENT_READ, None)
                    continue
                source = key.fileobj
                assert isinstance(source, socket.socket)
                if source not in pairs:
                    continue  # closed with its peer, earlier in this batch of events
                peer, from_client = pairs[source]
                data = source.recv(65536)
                if not data:
                    for end in (source, peer):
                        self._selector.unregister(end)
                        pairs.pop(end, None)
                        server_spoke.pop(end, None)
                        end.close()
                    continue
                client = source if from_client else peer
                if from_client and server_spoke.get(client):
                    self.count += 1
                server_spoke[client] = not from_client
                if _TRACE is not None:
                    _TRACE.append((from_client, _kinds(data)))
                peer.sendall(data)


_TRACE: list[tuple[bool, str]] | None = None


def _kinds(data: bytes) -> str:
    kinds = []
    at = 0
    while at + 5 <= len(data):
        kinds.append(chr(data[at]))
        at += 1 + int.from_bytes(data[at + 1 : at + 5], "big")
    return "".join(kinds)
