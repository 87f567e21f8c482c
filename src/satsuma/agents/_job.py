"""The requests an agent's mailbox holds: a run to serve (``Job``) and a reset. A job is
what the caller and the run share: its prompt and id, where its events go, its cancel
scope, and, once the run ends, its result; with the checks that make a caller's prompt
and event callback a job's."""

from __future__ import annotations

import abc
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _telemetry
from .._exceptions import StoreError, StoreUnavailable
from .._text import valid_text
from ..store import PendingApproval, RunRecord
from ..tools import Approve, Deny
from ._events import AgentEvent
from ._output import OutputSpec
from ._result import NO_ANSWER, RunResult

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["Job", "Request", "ResetRequest", "WatchedEvents", "callback_sink", "checked_prompt"]

logger = logging.getLogger("satsuma.agents")


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
    # Set by a cluster's node (internal.run_with_id, resume_with_id): a StoreUnavailable
    # stops the run without an end written, for the node to hand it back and the next
    # attempt to resume it from its journal (see ``left_to_node``).
    hands_back: bool = False
    # Set by a node's resume with decisions (internal.resume_decided) as its decided
    # calls start to run: stopped on the store before then, nothing ran, and the node
    # can take the claim back (the run paused again) rather than leave the calls in doubt.
    decided_began: bool = False

    def left_to_node(self) -> bool:
        """Whether the run stopped on a store that went away, under a node that hands it
        back: its record stays ``running`` (``interrupted`` once its agent opens again)
        and its conversation as last committed, nothing of its end written."""
        return self.hands_back and isinstance(self.store_error, StoreUnavailable)

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


def checked_prompt(text: object) -> str:
    """The prompt as an exact str of valid Unicode.

    A lone surrogate (what a JSON body's ``"\\ud800"`` escape decodes to) is replaced by
    U+FFFD rather than refused: the text goes on to the model as a browser would show
    it, where refusing would fail a request for one unreadable character, and keeping
    it would fail every later request of the conversation (docs/failure-semantics.md).
    """
    if not isinstance(text, str):
        raise ValueError(f"a prompt must be a non-empty str, got: {text!r}")
    plain = valid_text(text if type(text) is str else str.__str__(text))
    if not plain.strip():
        raise ValueError(f"a prompt must be a non-empty str, got: {plain!r}")
    return plain


class WatchedEvents(abc.ABC):
    """An event callback that says, before each model call, whether it wants the
    answer's text as it is written (``wants_deltas``; else the answer is asked for
    whole, its text given in one piece): a cluster node's recorder, which wants it only
    while someone streams the run. A callback must derive from it to be asked: any
    other always gets the text as it is written."""

    @abc.abstractmethod
    def __call__(self, event: AgentEvent, /) -> object: ...

    @property
    @abc.abstractmethod
    def wants_deltas(self) -> bool: ...


class _WatchedSink:
    """A run's event sink for ``WatchedEvents``: the models' listener reads its
    ``wants_deltas``."""

    __slots__ = ("deliver", "events")

    def __init__(self, deliver: Callable[[AgentEvent], None], events: WatchedEvents) -> None:
        self.deliver = deliver
        self.events = events

    def __call__(self, event: AgentEvent) -> None:
        self.deliver(event)

    @property
    def wants_deltas(self) -> bool:
        return self.events.wants_deltas


def callback_sink(
    events: Callable[[AgentEvent], object] | None,
) -> Callable[[AgentEvent], None] | None:
    if events is None:
        return None
    if not callable(events):
        raise TypeError(f"events must be a callable, got: {type(events).__name__}")

    def sink(event: AgentEvent) -> None:
        try:
            events(event)
        except Exception:  # an observer's bug must not end the run or the agent
            logger.exception("satsuma event callback %r raised on %r", events, event)

    return _WatchedSink(sink, events) if isinstance(events, WatchedEvents) else sink
