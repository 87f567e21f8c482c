"""JsonLinesLog: events written to a file as JSON lines, for services to ship and grep.

The event is turned into its line on the caller's thread (the trio thread, usually),
which is cheap; the line then goes to a writer thread that each log has for itself. The
writer takes whatever has queued up, writes it in one go and flushes once per batch, so
a slow disk slows the log, never the agents. The queue is bounded by
``MAX_PENDING_LINES``: a writer that far behind is stuck or hopelessly slow, and holding
more would only trade the disk's problem for a memory problem. For the same reason
``close`` waits for the writer for a bounded time (``CLOSE_TIMEOUT``), not for ever.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import threading
import time
import weakref
from os import PathLike
from types import TracebackType
from typing import IO, cast, final

import attrs

from .._text import MESSAGE_LIMIT, describe_exception_text, valid_text
from ._events import any_event_to_json

__all__ = ["JsonLinesLog", "json_line"]

logger = logging.getLogger("satsuma.agents")

MAX_PENDING_LINES = 10_000
"""Lines a log holds for its writer thread; past it, newer events are dropped and counted."""

CLOSE_TIMEOUT = 5.0
"""Seconds ``JsonLinesLog.close`` waits, by default, for its writer to write what is
queued; past it the queued lines are dropped and ``close`` returns (see its docstring)."""

_EXIT_WAIT = 5.0
"""Seconds the interpreter's exit waits, for all logs together, for lines still queued in
logs that were never closed; a file that blocks longer must not hang the exit."""


@final
class JsonLinesLog:
    """An event sink that writes each event as one JSON object on its own line.

    Each line is ``satsuma.event_to_json(event)`` (the cattrs form, with the event's class
    name under ``"type"``). Any attrs event will do: pass the log as ``events=`` to
    ``agent.run``/``agent.resume``, to ``Supervisor(events=...)``, to a ``ToolRunner``, or
    call it with each event of ``agent.stream``::

        with satsuma.JsonLinesLog("events.jsonl") as log:
            result = await agent.run("Summarise the report", events=log)

    Calling the log never waits for the file. The event is serialised at once, on the
    caller's thread, and the line is handed to the log's own writer thread, which writes
    what has queued up in one go and flushes after each batch: a reader tailing the file
    (or a log shipper) sees each event moments after it happened. ``flush`` waits until
    every line so far is written; ``close`` (or leaving the ``with`` block) writes what is
    queued, stops the thread and waits for it, for at most ``CLOSE_TIMEOUT`` (5 seconds)
    unless told otherwise: a file that blocks (a pipe nobody reads, a hung network
    mount) never hangs the close. A log that is never closed still writes
    its queued lines when it is garbage-collected, and at interpreter exit (for up to 5
    seconds, so a stuck file cannot hang the exit).

    A log never fails a run:

    - If a write fails (a full disk, a closed file), the problem is logged once to the
      ``satsuma.agents`` logger, the lines of that batch are lost, and later lines are
      tried again.
    - If the writer falls more than ``MAX_PENDING_LINES`` (10,000) lines behind, newer
      events are dropped until it catches up; that is logged once, as a warning, and
      ``dropped`` counts them.
    - A value that JSON cannot hold (in a tool's ``details``, say) is written as its
      ``repr``. An event that cannot be serialised at all (a value nested too deeply, a
      cycle, a ``repr`` that raises) is written as a line with its ``"type"``, its plain
      fields (ids, names) and ``"unserialisable"``, saying what went wrong.

    Args:
        target: A path, opened for appending (created if missing) and closed by
            ``close``; or an open text file object, such as ``sys.stdout``, which stays
            its owner's to close (``close`` only flushes it).
        encoding: The encoding of a file opened from a path.

    Raises:
        OSError: the path cannot be opened.
        TypeError: ``target`` is neither a path nor a file object.
    """

    def __init__(self, target: str | PathLike[str] | IO[str], *, encoding: str = "utf-8") -> None:
        if isinstance(target, (str, PathLike)):
            file: IO[str] = open(target, "a", encoding=encoding)  # noqa: SIM115  # closed by the writer
            owns_file = True
        elif callable(getattr(target, "write", None)):
            file = target
            owns_file = False
        else:
            raise TypeError(
                f"JsonLinesLog takes a path or a text file object, got: {type(target).__name__}"
            )
        self._file = file
        self._closed = False
        self._writer = _Writer(file, owns_file=owns_file)
        # The writer must not refer back to the log, or the log would never be collected.
        self._finalizer = weakref.finalize(self, self._writer.stop)
        self._finalizer.atexit = False  # _write_queued_lines_at_exit waits for it instead

    @property
    def closed(self) -> bool:
        """Whether ``close`` has been called (events are then dropped, and logged once)."""
        return self._closed

    @property
    def dropped(self) -> int:
        """How many events were dropped because the writer was ``MAX_PENDING_LINES``
        behind, or still queued when ``close`` gave up on a stuck file."""
        return self._writer.dropped

    def __call__(self, event: object) -> None:
        """Serialise one event and queue its line for the writer thread; never waits for
        the file.

        Raises:
            TypeError: ``event`` is not an attrs event (a caller's mistake, not I/O).
        """
        line = json_line(event)
        if self._closed:
            self._writer.failed(ValueError("the log is closed"))
            return
        self._writer.put(line)

    def flush(self) -> None:
        """Wait until every line queued so far is written and flushed (or lost to a failed
        write). This blocks the calling thread on the file: a service calls it where it
        may wait, for instance before handing the file to someone else."""
        self._writer.wait_written()

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write every queued line, then close the file if the log opened it, else flush
        it, waiting at most ``timeout`` seconds; the writer thread has ended when this
        returns in time. Calling it again does nothing.

        This blocks the calling thread: in async code whose file may block, call it
        through ``trio.to_thread.run_sync(log.close)``.

        If the writer is still stuck in a write when ``timeout`` passes, ``close``
        returns anyway: the lines still queued are dropped (``dropped`` counts them, and
        a warning says so on the ``satsuma.agents`` logger), and the writer thread, a
        daemon, ends by itself once the write it is in returns (closing the file then,
        if the log opened it). No Python code can interrupt a write blocked in the
        kernel, so that thread is the one thing left behind.

        Args:
            timeout: The most seconds to wait for the writer; ``math.inf`` waits as long
                as the file takes.
        """
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        self._writer.stop()
        self._writer.join(None if math.isinf(timeout) else max(0.0, timeout))
        if self._writer.alive:
            self._writer.abandon(timeout)

    def __enter__(self) -> JsonLinesLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<JsonLinesLog {getattr(self._file, 'name', self._file)!r}{state}>"


def json_line(event: object) -> str:
    """An event as JsonLinesLog writes it: one line of JSON, with its newline.

    Raises:
        TypeError: ``event`` is not an attrs event.
    """
    try:
        # Valid Unicode: a lone surrogate (a model's streamed text, a tool's details)
        # cannot be encoded, and the writer that failed on it lost every later line.
        line = json.dumps(any_event_to_json(event), ensure_ascii=False, default=repr)
        return valid_text(line) + "\n"
    except Exception as exc:
        if not attrs.has(type(event)):
            raise  # not an event: any_event_to_json's TypeError, the caller's mistake
        # A log never fails a run, and a lost line would hide that the event happened.
        return _unserialisable_line(event, exc)


def _unserialisable_line(event: object, exc: Exception) -> str:
    data: dict[str, object] = {"type": type(event).__name__}
    # Only called for attrs events: json_line re-raises for anything else.
    for field in attrs.fields(cast("type[attrs.AttrsInstance]", type(event))):
        value = getattr(event, field.name, None)
        # Exact types only: a subclass could carry the very problem being reported.
        if value is None or type(value) in (str, int, bool):
            data[field.name] = value
    problem = describe_exception_text(exc, limit=MESSAGE_LIMIT)
    data["unserialisable"] = f"this event could not be written as JSON: {problem}"
    return valid_text(json.dumps(data, ensure_ascii=False)) + "\n"


@final
class _Writer:
    """A log's writer thread and the queue it takes lines from.

    Every method but ``_run`` is called from the log's callers; ``_run`` is the thread.
    """

    def __init__(self, file: IO[str], *, owns_file: bool) -> None:
        self._file = file
        self._owns_file = owns_file
        self._name = getattr(file, "name", repr(file))
        lock = threading.Lock()
        self._lock = lock
        self._has_lines = threading.Condition(lock)  # the thread waits on this
        self._progress = threading.Condition(lock)  # flush waits on this
        self._lines: list[str] = []
        self._stopping = False
        self._finished = False
        self._queued = 0  # lines accepted so far
        self._written = 0  # lines written, or lost to a failed write, so far
        self.dropped = 0
        self._failure_logged = False
        self._thread = threading.Thread(target=self._run, name="satsuma JsonLinesLog", daemon=True)
        with _running_lock:
            _running.add(self)
        self._thread.start()

    def put(self, line: str) -> None:
        with self._lock:
            if self._stopping:
                closed = True
            elif len(self._lines) >= MAX_PENDING_LINES:
                closed = False
                self.dropped += 1
                if self.dropped > 1:
                    return
            else:
                self._lines.append(line)
                self._queued += 1
                self._has_lines.notify()
                return
        # Logged outside the lock: a logging handler may be slow too.
        if closed:
            self.failed(ValueError("the log is closed"))
        else:
            logger.warning(
                "JsonLinesLog writer for %s is %d lines behind; newer events are dropped "
                "until it catches up (logged once; JsonLinesLog.dropped counts them)",
                self._name,
                MAX_PENDING_LINES,
            )

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._failure_logged:
                return
            self._failure_logged = True
        logger.error(
            "JsonLinesLog could not write to %s: %s; events are being lost (logged once)",
            self._name,
            exc,
        )

    def wait_written(self) -> None:
        with self._lock:
            target = self._queued
            while self._written < target and not self._finished:
                self._progress.wait()

    def stop(self) -> None:
        """Let the thread write what is queued and end; does not wait for it."""
        with self._lock:
            self._stopping = True
            self._has_lines.notify()

    def join(self, timeout: float | None = None) -> None:
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and threading.current_thread() is not self._thread

    def abandon(self, waited: float) -> None:
        """``close`` waited ``waited`` seconds in vain: drop what is still queued, so
        that the thread, stuck in a write, ends as soon as that write returns."""
        with self._lock:
            lost = len(self._lines)
            self._lines = []
            self.dropped += lost
        logger.warning(
            "JsonLinesLog.close gave up on %s after %g s: a write to it is stuck; %d queued "
            "lines are dropped (JsonLinesLog.dropped counts them), and the writer thread "
            "ends when that write returns",
            self._name,
            waited,
            lost,
        )

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._lines and not self._stopping:
                        self._has_lines.wait()
                    batch, self._lines = self._lines, []
                if not batch:
                    return  # stopping, and everything queued is written
                self._write("".join(batch))
                with self._lock:
                    self._written += len(batch)
                    self._progress.notify_all()
        finally:
            self._end()

    def _write(self, text: str) -> None:
        try:
            self._file.write(text)
            self._file.flush()
        # Any Exception: a file object of the caller's may raise anything, and an
        # exception here would end the thread with the queue still filling up.
        except Exception as exc:
            self.failed(exc)

    def _end(self) -> None:
        try:
            if self._owns_file:
                self._file.close()
            else:
                self._file.flush()
        except Exception as exc:
            self.failed(exc)
        finally:
            with self._lock:
                self._finished = True
                self._progress.notify_all()
            with _running_lock:
                _running.discard(self)


# Writers whose thread still runs. Their threads are daemons so that a log never closed
# cannot hang the exit; this hook gives them a bounded moment to write what they hold.
_running: set[_Writer] = set()
_running_lock = threading.Lock()


@atexit.register
def _write_queued_lines_at_exit() -> None:
    with _running_lock:
        writers = list(_running)
    for writer in writers:
        writer.stop()
    deadline = time.monotonic() + _EXIT_WAIT
    for writer in writers:
        writer.join(max(0.0, deadline - time.monotonic()))
