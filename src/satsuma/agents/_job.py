"""The requests an agent's mailbox holds: a run to serve (``Job``) and a reset. A job is
what the caller and the run share: its prompt and id, where its events go, its cancel
scope, and, once the run ends, its result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _telemetry
from .._exceptions import StoreError
from ..store import PendingApproval, RunRecord
from ..tools import Approve, Deny
from ._events import AgentEvent
from ._output import OutputSpec
from ._result import NO_ANSWER, RunResult

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["Job", "Request", "ResetRequest"]


@attrs.define(eq=False)
class Job:
    """One queued run."""

    prompt: str
    run_id: str
    sink: Callable[[AgentEvent], None] | None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: trio.Event = attrs.Factory(trio.Event)
    result: RunResult[Any] | None = None
    error: BaseException | None = None
    on_done: Callable[[], None] | None = None
    # Awaited by the run before each model call: a stream's reader that is far behind
    # holds the run there (agent.stream's backpressure); None: nothing to wait for.
    wait_for_reader: Callable[[], Awaitable[None]] | None = None
    resume: RunRecord | None = None  # set when the job resumes an interrupted run
    # Set when the job goes on with a run paused awaiting approval: the decisions given,
    # and (once the run is claimed) the calls the run waited on.
    decisions: Mapping[str, Approve | Deny] | None = None
    pending: tuple[PendingApproval, ...] = ()
    # A run's own output type and retries (agent.run(..., output_type=...)); None: the
    # agent's.
    output: tuple[OutputSpec | None, int] | None = None
    # The requester's OpenTelemetry context: the run happens in the agent's task, and its
    # span is the child of the caller's span (a tool's, for a sub-agent), not the agent's.
    trace_context: Context | None = attrs.Factory(_telemetry.current_context)
    # The store's error that failed the run, if one did: what a cluster's node decides
    # on by its type (try again later, or let the failure stand).
    store_error: StoreError | None = None

    def abandon(self) -> None:
        """The caller is gone (or asked to cancel): stop the run, or never start it."""
        self.scope.cancel()

    def complete(self, result: RunResult[Any]) -> None:
        self.result = result
        self._finish()

    def fail(self, error: BaseException) -> None:
        """The run will not be answered: its caller raises ``error``."""
        self.error = error
        self._finish()

    def _finish(self) -> None:
        self.done.set()
        if self.on_done is not None:
            self.on_done()

    def stopped(self) -> None:
        """The agent stopped (not crashed) before or while serving this job."""
        self.complete(
            RunResult(
                run_id=self.run_id,
                output=self.no_output(),
                status="cancelled",
                error="the agent stopped",
            )
        )

    def no_output(self) -> Any:
        """What ``output`` is for a run that ended without an answer: "" for text,
        NO_ANSWER for a typed one (known here only for a per-run type; the actor knows
        the rest)."""
        return "" if self.output is None or self.output[0] is None else NO_ANSWER


@attrs.define(eq=False)
class ResetRequest:
    done: trio.Event = attrs.Factory(trio.Event)
    error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        """The reset will not happen: its caller raises ``error``."""
        self.error = error
        self.done.set()


Request = Job | ResetRequest
