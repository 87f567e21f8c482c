"""How a tool's run ended, when it did not return: past its deadline, a ToolError, or a
crash, each as the call's outcome (``docs/failure-semantics.md`` words them). A run that
returned goes through the result gate instead (``_gate.normalise``)."""

from __future__ import annotations

import logging

from .. import _telemetry
from .._exceptions import ToolError
from ._calls import ToolCall
from ._results import ToolOutcome, crash_details, error_outcome
from ._texts import crashed_text, failed_text, timeout_text

__all__ = ["failed_outcome"]

logger = logging.getLogger("satsuma.tools")


def failed_outcome(
    call: ToolCall,
    crash: BaseException | None,
    timeout: float | None,
    duration: float,
    *,
    traced: bool,
) -> ToolOutcome:
    """The outcome of a run that ended late (``crash`` None: its own deadline passed,
    ``timeout`` seconds after it was entered) or raised ``crash``. A crash is logged at
    INFO, with its traceback, and recorded on the call's span when ``traced``."""
    if crash is None:
        assert timeout is not None  # only a deadline makes a call late
        return error_outcome(
            call.id, call.name, "timeout", timeout_text(timeout), duration=duration
        )
    if isinstance(crash, ToolError):
        return error_outcome(
            call.id, call.name, "failed", failed_text(crash.reason), duration=duration
        )
    # Captured and answered: a crash is the tool's news, not a warning about satsuma.
    logger.info("tool %s (call %s) crashed", call.name, call.id, exc_info=crash)
    if traced:
        _telemetry.record_on_current_span(crash)
    return error_outcome(
        call.id,
        call.name,
        "crashed",
        crashed_text(crash),
        duration=duration,
        details=crash_details(crash),
    )
