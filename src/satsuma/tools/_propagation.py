"""What of an exception raised by user code (a tool, a hook, an approver) goes on past the
runner: only ``KeyboardInterrupt``, ``SystemExit`` and a ``trio.Cancelled`` of a scope
really being cancelled; everything else is that call's failure."""

from __future__ import annotations

import logging
import math

import trio

from .._text import describe_exception

__all__ = ["propagating_part", "raise_propagating"]

logger = logging.getLogger("satsuma.tools")


def _really_cancelled() -> bool:
    # A task inside a scope that is being cancelled sees an effective deadline of -inf;
    # a Cancelled raised while it is not (kept from an earlier scope and re-raised) is
    # stale: nothing is cancelling this call.
    return trio.current_effective_deadline() == -math.inf


def propagating_part(exc: BaseException) -> BaseException | None:
    """What of an exception raised by user code (a tool, a hook) must go on past the
    runner, or None when all of it is that call's failure.

    Only KeyboardInterrupt, SystemExit and a Cancelled of a scope really being
    cancelled go on; everything else is captured, BaseExceptions included.
    """
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return exc
    if isinstance(exc, trio.Cancelled):
        return exc if _really_cancelled() else None
    if isinstance(exc, BaseExceptionGroup):
        stopping, _ = exc.split((KeyboardInterrupt, SystemExit))
        if stopping is not None:
            return exc  # the whole group goes on, as a KeyboardInterrupt would
        cancelled, rest = exc.split(trio.Cancelled)
        if cancelled is None or not _really_cancelled():
            return None
        if rest is not None:
            # The cancellation goes on; the tool's own errors it would hide are logged.
            logger.warning("a tool failed while being cancelled: %s", describe_exception(rest))
        return cancelled
    return None


def raise_propagating(exc: BaseException) -> None:
    """Raise what of ``exc`` (caught from user code) must go on past the runner: ``exc``
    itself, or the part of its group that must, without the group as its context.
    Returns when none of it must: the caller captures ``exc`` as the call's failure.
    """
    going_on = propagating_part(exc)
    if going_on is exc:
        raise exc
    if going_on is not None:
        raise going_on from None
