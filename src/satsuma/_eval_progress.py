"""``satsuma eval``'s progress: a bar on a terminal, plain lines anywhere else.

On a terminal (stderr a TTY) a rich progress bar counts the cases that finished, passed
and failed, and each failed case is printed above it with its reasons; the bar is
redrawn by a trio task, never by rich's own thread. Anywhere else (a pipe, a CI log)
each case is one plain line as it finishes, ``[3/10] CASE_ID: passed`` or ``FAILED:``
with the reasons: no cursor movement, no colour, nothing a log cannot keep.
"""

from __future__ import annotations

from types import TracebackType
from typing import Final

import trio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._terminal import say, visible
from .evals import CaseReport

__all__ = ["EvalProgress"]

_REDRAW_SECONDS: Final = 0.25


class EvalProgress:
    """Shows an evaluation's cases as they finish, on ``errors`` (stderr)."""

    def __init__(self, errors: Console, total: int) -> None:
        self._errors = errors
        self._total = total
        self._done = self._failed = 0
        self._bar: Progress | None = None
        if errors.is_terminal:
            self._bar = Progress(
                TextColumn("evaluating"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("cases, {task.fields[failed]} failed"),
                TimeElapsedColumn(),
                console=errors,
                auto_refresh=False,  # redrawn by `redraw`, a trio task: no thread
                transient=True,
            )
            self._task = self._bar.add_task("cases", total=total, failed=0)

    def __enter__(self) -> EvalProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    async def redraw(self) -> None:
        """Redraw the bar (its clock) until cancelled; returns at once without one."""
        if self._bar is None:
            return
        while True:
            self._bar.refresh()
            await trio.sleep(_REDRAW_SECONDS)

    def case(self, case: CaseReport) -> None:
        """One case finished (``evaluate``'s ``on_case``)."""
        self._done += 1
        self._failed += not case.passed
        verdict = "passed" if case.passed else "FAILED: " + "; ".join(case.reasons)
        line = f"[{self._done}/{self._total}] {visible(case.case_id)}: {visible(verdict)}"
        if self._bar is None:
            say(self._errors, line)
            return
        if not case.passed:  # above the bar, which counts the ones that passed
            say(self._bar.console, line)
        self._bar.update(self._task, advance=1, failed=self._failed)
        self._bar.refresh()
