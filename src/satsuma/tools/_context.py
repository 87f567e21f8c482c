"""ToolContext: what a running tool is given besides its arguments."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, final

import attrs
import trio

from .._text import valid_text
from ._events import Emitter, NestedEvent, ToolProgress, ToolUpdate
from ._gate import check_content
from ._results import Content

__all__ = ["ToolContext"]


@final
@attrs.define(eq=False)
class ToolContext:
    """Given to ``run`` with the arguments: where the call runs and a way to report.

    Attributes:
        tool_use_id: The id of this call.
        tool_name: The name of the tool.
        working_dir: The directory paths are relative to (``context["working_dir"]``,
            else the current directory when ``execute`` was called).
        capabilities: The names granted by ``context["capabilities"]`` (e.g. ``read``,
            ``write``, ``shell``, ``network``).
        extra: Every other key of the context mapping.
        agent: The agent handle when an agent runs the tool, else None.
    """

    tool_use_id: str
    tool_name: str
    working_dir: Path
    capabilities: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = attrs.Factory(dict)
    agent: Any = None
    _emitter: Emitter | None = attrs.field(default=None, alias="emitter", repr=False)
    _trio_thread: int | None = attrs.field(default=None, alias="trio_thread", repr=False)
    _trio_token: trio.lowlevel.TrioToken | None = attrs.field(
        default=None, alias="trio_token", repr=False
    )
    _scope: trio.CancelScope | None = attrs.field(default=None, repr=False, init=False)
    _ended: bool = attrs.field(default=False, repr=False, init=False)
    _abandoned: bool = attrs.field(default=False, repr=False, init=False)

    @property
    def cancelled(self) -> bool:
        """True once this call has been cancelled or has passed its deadline.

        A sync tool (run in a worker thread that the runner abandons at the deadline)
        polls this to stop early; an async tool is simply cancelled by trio.
        """
        if self._abandoned:
            return True
        # A CancelScope may only be read on the trio thread (it looks at trio's clock). In
        # a worker thread, _abandoned is the answer: the runner sets it the moment it
        # gives up on the thread.
        scope = self._scope
        if scope is None or threading.get_ident() != self._trio_thread:
            return False
        return scope.cancel_called

    @property
    def deadline(self) -> float:
        """When this call's deadline passes, on trio's clock (``trio.current_time()``);
        ``math.inf`` when it has none (no timeout, or a context made outside a runner).

        A tool that runs something it must stop itself (a subprocess, as ``Bash`` does)
        reads it to stop in time and still return what it has: past it, the runner
        cancels the call.
        """
        scope = self._scope
        return scope.deadline if scope is not None else math.inf

    def progress(self, text: str) -> None:
        """Report a status line for humans (a ``ToolProgress`` event); never sent to the
        model. Safe to call from the worker thread of a sync tool."""
        if not issubclass(type(text), str):
            raise TypeError(f"progress text must be a str, got: {type(text).__name__}")
        # An exact str, read from its storage: the event's readers (the live view, a
        # log) never run a str subclass's own methods.
        # Valid Unicode too (a lone surrogate as U+FFFD), as every text an event carries.
        plain = valid_text(text if type(text) is str else str.__str__(text))
        self._emit(ToolProgress(tool_use_id=self.tool_use_id, tool_name=self.tool_name, text=plain))

    def update(self, content: Content, details: Any = None) -> None:
        """Report a partial result for UIs (a ``ToolUpdate`` event); never sent to the
        model. ``content`` is a str or a list of content blocks."""
        checked, problem = check_content(content)
        if checked is None:
            raise TypeError(f"update {problem}")
        self._emit(
            ToolUpdate(
                tool_use_id=self.tool_use_id,
                tool_name=self.tool_name,
                content=checked,
                details=details,
            )
        )

    def forward(self, event: object) -> None:
        """Report an event of a run nested in this call (a sub-agent's), as a
        ``NestedEvent`` under this call; never sent to the model."""
        self._emit(NestedEvent(tool_use_id=self.tool_use_id, tool_name=self.tool_name, event=event))

    def _emit(self, event: ToolProgress | ToolUpdate | NestedEvent) -> None:
        emitter = self._emitter
        if emitter is None or self._ended:
            return
        if self._trio_thread is None or threading.get_ident() == self._trio_thread:
            emitter.emit(event)
            return
        # If the trio run is over, no one is left to see the event.
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(self._emit_if_running, event, trio_token=self._trio_token)

    def _emit_if_running(self, event: ToolProgress | ToolUpdate | NestedEvent) -> None:
        if not self._ended and self._emitter is not None:
            self._emitter.emit(event)

    def _end(self, *, abandoned: bool) -> None:
        self._ended = True
        self._abandoned = abandoned
