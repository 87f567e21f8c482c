"""JsonLinesLog: events written to a file as JSON lines, for services to ship and grep."""

from __future__ import annotations

import json
import logging
from os import PathLike
from types import TracebackType
from typing import IO, final

from ._events import any_event_to_json

__all__ = ["JsonLinesLog"]

logger = logging.getLogger("satsuma.agents")


@final
class JsonLinesLog:
    """An event sink that writes each event as one JSON object on its own line.

    Each line is ``satsuma.event_to_json(event)`` (the cattrs form, with the event's class
    name under ``"type"``), written and flushed at once, so that a reader tailing the file
    (or a log shipper) sees every event as it happens. Any attrs event will do: pass the
    log as ``events=`` to ``agent.run``/``agent.resume``, to ``Supervisor(events=...)``,
    to a ``ToolRunner``, or call it with each event of ``agent.stream``::

        with satsuma.JsonLinesLog("events.jsonl") as log:
            result = await agent.run("Summarise the report", events=log)

    Writing is synchronous, on the trio thread, as every event callback is: give it a
    local file, not a network mount.

    A log never fails a run. If a write fails (a full disk, a closed file), the problem
    is logged once to the ``satsuma.agents`` logger, that event is lost, and later events
    are tried again. A value that JSON cannot hold (in a tool's ``details``, say) is
    written as its ``repr``.

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
            self._file: IO[str] = open(target, "a", encoding=encoding)  # noqa: SIM115  # closed by close()
            self._owns_file = True
        elif callable(getattr(target, "write", None)):
            self._file = target
            self._owns_file = False
        else:
            raise TypeError(
                f"JsonLinesLog takes a path or a text file object, got: {type(target).__name__}"
            )
        self._closed = False
        self._failure_logged = False

    @property
    def closed(self) -> bool:
        """Whether ``close`` has been called (events are then dropped, and logged once)."""
        return self._closed

    def __call__(self, event: object) -> None:
        """Write one event as a line.

        Raises:
            TypeError: ``event`` is not an attrs event (a caller's mistake, not I/O).
        """
        line = json.dumps(any_event_to_json(event), ensure_ascii=False, default=repr) + "\n"
        if self._closed:
            self._failed(ValueError("the log is closed"))
            return
        try:
            self._file.write(line)
            self._file.flush()
        except (OSError, ValueError) as exc:  # ValueError: the file object was closed
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if self._failure_logged:
            return
        self._failure_logged = True
        name = getattr(self._file, "name", repr(self._file))
        logger.error(
            "JsonLinesLog could not write to %s: %s; events are being lost (logged once)",
            name,
            exc,
        )

    def close(self) -> None:
        """Close the file if the log opened it, else flush it. Calling it again does
        nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._owns_file:
                self._file.close()
            else:
                self._file.flush()
        except (OSError, ValueError) as exc:
            self._failed(exc)

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
