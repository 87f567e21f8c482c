"""A timeline of one ``cluster.run``: when each step happens, from the caller's call to
its result, with the node in the same process (on a store of its own) so that one clock
times both sides.

Marks are taken by wrapping, for this measurement only, private names of satsuma's (the
stores' way to their connections, the node's and the caller's listeners) and
``AnthropicModel.respond`` (the model call): fine for a benchmark, wrong anywhere else. Each
store call gets three figures: when its caller called it, how long its worker thread
worked (the round trips), and the hops (waiting for a thread and coming back to trio).
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from satsuma.cluster import _listen, _shared_listen
from satsuma.models import AnthropicModel
from satsuma.store import PostgresStore

__all__ = ["Timeline", "timeline_lines"]


class Timeline:
    """The marks of one run at a time: (what, seconds since the run began)."""

    def __init__(self) -> None:
        self.runs: list[list[tuple[str, float, float]]] = []  # (what, start, end)
        self._origin = 0.0
        self._marks: list[tuple[str, float, float]] = []

    def begin(self) -> None:
        self._origin = time.perf_counter()
        self._marks = []

    def end(self) -> None:
        self.runs.append(self._marks)

    def span(self, what: str, start: float, end: float) -> None:
        self._marks.append((what, start - self._origin, end - self._origin))

    def point(self, what: str) -> None:
        now = time.perf_counter()
        self.span(what, now, now)

    @contextlib.contextmanager
    def hooked(self, **stores: PostgresStore) -> Iterator[None]:
        """Mark what the stores (each named by its side: ``caller``, ``node``), the
        listeners and the model do, meanwhile."""
        undo: list[Callable[[], None]] = []
        for side, store in stores.items():
            undo.append(self._hook_store(side.replace("_", " "), store))
        undo.append(self._hook_listeners())
        undo.append(self._hook_model())
        try:
            yield
        finally:
            for step in reversed(undo):
                step()

    def _hook_store(self, side: str, store: PostgresStore) -> Callable[[], None]:
        call: Callable[..., Awaitable[Any]] = store._call  # private: a measurement
        run: Callable[..., Any] = store._run
        threads: dict[int, tuple[float, float]] = {}

        def ran(work: Callable[[Any], Any], lease: Any, transaction: bool, ticket: Any) -> Any:
            started = time.perf_counter()
            try:
                return run(work, lease, transaction, ticket)
            finally:
                threads[id(work)] = (started, time.perf_counter())

        async def called(work: Callable[[Any], Any], *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await call(work, *args, **kwargs)
            finally:
                ended = time.perf_counter()
                name = _name_of(work)
                self.span(f"{side}: {name}", started, ended)
                thread = threads.pop(id(work), None)
                if thread is not None:
                    self.span(f"{side}: {name} (in its thread)", *thread)

        store._call = called  # type: ignore[method-assign]
        store._run = ran  # type: ignore[method-assign]

        def undo() -> None:
            del store._call, store._run  # back to the class's

        return undo

    def _hook_listeners(self) -> Callable[[], None]:
        node_read = _listen.Listener._read
        wake = _shared_listen.Subscription._wake

        def read(listener: Any) -> list[tuple[str, str]]:
            got = node_read(listener)
            if got:
                self.point("node: NOTIFY read")
            return got

        def woken(subscription: Any, *args: Any) -> None:
            self.point("caller: NOTIFY heard, waiter woken")
            wake(subscription, *args)

        _listen.Listener._read = read  # type: ignore[method-assign]
        _shared_listen.Subscription._wake = woken  # type: ignore[method-assign]

        def undo() -> None:
            _listen.Listener._read = node_read  # type: ignore[method-assign]
            _shared_listen.Subscription._wake = wake  # type: ignore[method-assign]

        return undo

    def _hook_model(self) -> Callable[[], None]:
        respond = AnthropicModel.respond

        async def responded(model: AnthropicModel, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await respond(model, *args, **kwargs)
            finally:
                self.span(
                    "node: the model answers (AnthropicModel.respond)", started, time.perf_counter()
                )

        AnthropicModel.respond = responded  # type: ignore[method-assign]

        def undo() -> None:
            AnthropicModel.respond = respond  # type: ignore[method-assign]

        return undo


def _name_of(work: Callable[..., Any]) -> str:
    # A write of a conversation comes wrapped (store._batched.TailWrite: its work is
    # ``write``); a partial, by its function.
    work = getattr(work, "write", work)
    while isinstance(work, functools.partial):
        work = work.func
    qualname = getattr(work, "__qualname__", "?")
    # SQLStore.load_agent.<locals>.<lambda> -> load_agent; claim_next.<locals>.work -> claim_next
    parts = [part for part in qualname.split(".") if not part.startswith("<")]
    parts = [part for part in parts if part not in ("work", "SQLStore", "PostgresStore")]
    return (parts[-1] if parts else qualname).lstrip("_") or qualname


def timeline_lines(timeline: Timeline) -> list[str]:
    """Each step's median start and end (ms from the caller's call), in the order of
    their median starts; a step made more than once a run is numbered."""
    starts: dict[str, list[float]] = {}
    ends: dict[str, list[float]] = {}
    for marks in timeline.runs:
        seen: dict[str, int] = {}
        for what, start, end in marks:
            seen[what] = seen.get(what, 0) + 1
            label = what if seen[what] == 1 else f"{what} #{seen[what]}"
            starts.setdefault(label, []).append(start)
            ends.setdefault(label, []).append(end)
    runs = len(timeline.runs)
    rows = sorted(
        (statistics.median(starts[label]), statistics.median(ends[label]), label)
        for label in starts
        if len(starts[label]) * 2 > runs  # in most runs
    )
    width = max(len(label) for _, _, label in rows)
    lines = [
        f"{'':{width}}  start ms  end ms  took ms",
        f"{'-' * width}  --------  ------  -------",
    ]
    for start, end, label in rows:
        took = f"{(end - start) * 1e3:7.2f}" if end > start else "      -"
        lines.append(f"{label:{width}}  {start * 1e3:8.2f}  {end * 1e3:6.2f}  {took}")
    hops = _hops(starts, ends)
    lines += [
        "",
        f"store calls of a run: {hops[0] * 1e3:.2f} ms in all, of which {hops[1] * 1e3:.2f} "
        f"ms in their threads (round trips) and {(hops[0] - hops[1]) * 1e3:.2f} ms hops (to "
        "a worker thread and back); sums of each call's median",
    ]
    return lines


def _hops(starts: dict[str, list[float]], ends: dict[str, list[float]]) -> tuple[float, float]:
    whole = 0.0
    threads = 0.0
    for label in starts:
        if "NOTIFY" in label or "model" in label or label.startswith("the run"):
            continue
        took = statistics.median(e - s for s, e in zip(starts[label], ends[label], strict=True))
        if "(in its thread)" in label:
            threads += took
        else:
            whole += took
    return whole, threads
