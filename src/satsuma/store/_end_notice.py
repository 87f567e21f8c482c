"""A run's end, told with its result: the NOTIFY a node sends on ``RESULT_CHANNEL`` when
it records a run's end (``run_queue.finish``), carrying the run's ``RunResult`` (as the
queue keeps it, JSON text), so that the client waiting for it need not read it back.

The payload is ``<run id> <version> <result>``: the run id first (the client's shared
listener wakes the waiter of that run by it), then this format's version (1), then the
result's text. PostgreSQL refuses a payload of 8000 bytes or more: a result too long for
it is not sent this way, and its end is told on ``DONE_CHANNEL`` instead (the run id
alone), whose waiter reads the result from the queue. An end sends one of the two,
never both: ``Cluster.result`` and event streams listen on both. (A client of a
version before the result's channel, which listens on ``DONE_CHANNEL`` only, hears of
an end with a result by its poll instead.) A payload of another version, or one that
does not parse, is ignored as a missing one: the waiter reads the queue.
"""

from __future__ import annotations

from typing import Final

__all__ = ["RESULT_CHANNEL", "end_notice", "read_end_notice"]

RESULT_CHANNEL: Final = "satsuma_run_result"

_VERSION: Final = "1"
# PostgreSQL's limit is 8000 bytes (less than that); the channel's name is not counted.
_MOST_BYTES: Final = 7999


def end_notice(run_id: str, result: str) -> str | None:
    """The payload that tells of a run's end with its ``result``; None when it would be
    too long for a NOTIFY."""
    payload = f"{run_id} {_VERSION} {result}"
    # Cheap first: a character is 4 bytes at most.
    if len(payload) * 4 <= _MOST_BYTES or len(payload.encode()) <= _MOST_BYTES:
        return payload
    return None


def read_end_notice(payload: str) -> tuple[str, str] | None:
    """The run id and the result a payload of ``end_notice`` carries; None for one of
    another version, or that is not one."""
    run_id, _, rest = payload.partition(" ")
    version, _, result = rest.partition(" ")
    if not run_id or version != _VERSION or not result:
        return None
    return run_id, result
