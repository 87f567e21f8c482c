"""The runs a server answers for: the one seam between the HTTP surfaces (satsuma's own
API, A2A, AG-UI, MCP, the console) and where runs happen (agents in this process, or a
cluster on PostgreSQL).

Every surface speaks to a ``Runs``; none of them opens an agent, reads the store or
knows whether a cluster is behind it. That keeps each protocol module a translation
(its wire format to and from these values) and lets one run be watched through several
protocols at once: started over A2A, its approvals decided in the console.

A run belongs to the server, not to the request that started it: ``start`` returns once
the run exists, and neither a caller that stops waiting nor a client that goes away
cancels it. Only ``cancel`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol

import attrs

from .._exceptions import StoreError
from ..agents import Agent
from ..tools import Approve, Deny

__all__ = [
    "DENIED",
    "ENDED",
    "AlreadyDecided",
    "BadDecision",
    "Busy",
    "IfBusy",
    "NotResumed",
    "PendingView",
    "RunEvent",
    "RunState",
    "RunView",
    "Runs",
    "UnknownAgent",
    "UnknownRun",
]

DENIED = "denied"
"""The reason a denial without one (or with a blank one) gives, on every surface: the
model reads ``Error: Denied: denied``."""

RunState = Literal[
    "queued",  # waiting for the agent (a run before it) or, in a cluster, for a node
    "running",
    "awaiting_approval",  # paused; ``pending`` names the calls waiting for a decision
    "interrupted",  # its process stopped mid-run; a node or a restart resumes it
    "completed",
    "max_iterations",
    "deadline_exceeded",
    "cancelled",
    "failed",
]
"""Where a run stands. The last five are RunResult statuses: the run ended."""

ENDED: frozenset[str] = frozenset(
    {"completed", "max_iterations", "deadline_exceeded", "cancelled", "failed"}
)

IfBusy = Literal["enqueue", "reject", "interrupt"]
"""What ``start`` does when the conversation has a run in progress: queue the new run
behind it, refuse (``Busy``), or steer the run in progress with the prompt."""


@attrs.frozen(kw_only=True)
class PendingView:
    """A tool call waiting for a person's decision.

    Attributes:
        run_id: The paused run.
        agent: The served agent's name (``Agent.name``).
        agent_id: The conversation.
        call_id: The call's id (the ``tool_use`` id): what a decision names.
        tool: The tool it calls.
        input: The arguments it would run with.
        reason: Why it waits (the tool requires approval, or a hook's reason).
    """

    run_id: str
    agent: str
    agent_id: str
    call_id: str
    tool: str
    input: Any
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The call as satsuma's API answers it (``GET /v1/approvals``)."""
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "agent_id": self.agent_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "input": self.input,
            "reason": self.reason,
        }


@attrs.frozen(kw_only=True)
class RunView:
    """A run as the server answers for it, at one moment.

    Attributes:
        run_id: The run's id.
        agent: The served agent's name (``Agent.name``).
        agent_id: The conversation.
        status: Where it stands (``RunState``).
        prompt: The user's message that started it.
        output: The answer once it ended: the final text, or a typed output as JSON
            values (``satsuma.agents``' ``output_to_json``); None before.
        error: ``{"type": ..., "message": ...}`` for a failed run, else None.
        usage: Tokens used so far: ``input_tokens``, ``output_tokens``,
            ``cache_creation_input_tokens``, ``cache_read_input_tokens``, and
            ``cost_usd`` (None when the model's prices are unknown).
        pending: The calls waiting for a decision (only while ``awaiting_approval``).
        started_at: Seconds since the epoch, or None while queued.
        ended_at: Seconds since the epoch once it ended, else None.
    """

    run_id: str
    agent: str
    agent_id: str
    status: RunState
    prompt: str
    output: Any = None
    error: Mapping[str, str] | None = None
    usage: Mapping[str, int | float | None] = attrs.field(factory=dict)
    pending: tuple[PendingView, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def ended(self) -> bool:
        """True once the run has ended (it will not change again)."""
        return self.status in ENDED

    def to_json(self) -> dict[str, Any]:
        """The run as satsuma's API answers it (``GET /v1/runs/{run_id}``): DESIGN's
        fields, and ``prompt``, ``started_at`` and ``ended_at``, which a client showing
        a run needs. ``pending`` is a list (empty unless ``awaiting_approval``)."""
        return {
            "run_id": self.run_id,
            "agent": self.agent,
            "agent_id": self.agent_id,
            "status": self.status,
            "prompt": self.prompt,
            "output": self.output,
            "error": dict(self.error) if self.error is not None else None,
            "usage": dict(self.usage),
            "pending": [call.to_json() for call in self.pending],
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


@attrs.frozen
class RunEvent:
    """One event of a run, numbered.

    Attributes:
        id: Its number in the run: 1, 2, 3, ... with no gap and no repeat across a
            resume of the run. Never repeated across a restart of the server either: on
            SQLite, where events are kept in memory, a run resumed after a restart
            numbers its events on from a larger id, after an ``EventsLost`` event for
            the gap. It is the SSE ``id:`` and what ``Last-Event-ID``
            (``events(after=...)``) resumes from.
        data: The event as ``satsuma.event_to_json`` writes it; ``data["type"]`` is the
            event's class name (``RunStart``, ``TextDelta``, ``ToolCallStart``,
            ``ToolCallEnd``, ``ApprovalRequested``, ``TurnEnd``, ``RunEnd``, ...).
    """

    id: int
    data: Mapping[str, Any]

    @property
    def type(self) -> str:
        """The event's class name."""
        return str(self.data["type"])


class Busy(Exception):
    """``if_busy="reject"`` and the conversation has a run in progress (HTTP 409)."""


class UnknownAgent(LookupError):
    """No served agent has this name (HTTP 404)."""


class UnknownRun(LookupError):
    """No run has this id, or it is past its retention (HTTP 404)."""


class AlreadyDecided(Exception):
    """The call was decided already, or its run no longer waits (HTTP 409)."""


class NotResumed(StoreError):
    """The store failed as a decided run was to resume (HTTP 503): none of its calls
    ran, and it still awaits approval with every decision kept. The same decision sent
    again once the store works resumes it.

    Attributes:
        run_id: The run.
    """

    def __init__(self, run_id: str, cause: StoreError) -> None:
        super().__init__(cause.location, cause.problem)
        self.run_id = run_id

    @property
    def public(self) -> str:
        """What a client is told: the store's words and file are for the log only."""
        return (
            f"the store failed as run {self.run_id} was to resume (the server's log says "
            "why): none of its calls ran, and it still awaits approval with every decision "
            "kept; send the same decision (or the cancel) again once the store works"
        )


class BadDecision(ValueError):
    """The decision names no call of the run, or its edited input is not valid input for
    the tool (HTTP 400). Nothing ran; the run still waits."""


class Runs(Protocol):
    """Where a server's runs happen. Two implementations: agents in this process (a
    SQLite or memory store), and a cluster (``PostgresStore``).

    A conversation is ``(agent, agent_id)``: the agent is opened on first use, under the
    server's supervisor, and closed when idle.
    """

    @property
    def agents(self) -> Mapping[str, type[Agent[Any]]]:
        """The served agent classes, by ``Agent.name``."""
        ...

    async def start(
        self, agent: str, agent_id: str, prompt: str, *, if_busy: IfBusy = "enqueue"
    ) -> RunView:
        """Start a run that the server owns and return it as it stands (``queued`` or
        ``running``; with ``if_busy="interrupt"`` and a run in progress, that run, now
        steered with ``prompt``).

        Raises:
            UnknownAgent: no served agent is named ``agent``.
            Busy: ``if_busy="reject"`` and a run is in progress.
            ValueError: the prompt is empty or not text.
        """
        ...

    async def wait(self, run_id: str) -> RunView:
        """The run once it has ended or paused awaiting approval. Cancelling the caller
        cancels the wait, not the run.

        Raises:
            UnknownRun: no such run.
        """
        ...

    async def get(self, run_id: str) -> RunView:
        """The run as it stands now.

        Raises:
            UnknownRun: no such run.
        """
        ...

    def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[RunEvent]:
        """The run's events numbered above ``after``: those already past, then each as
        it happens. It ends after the event that ends the run or pauses it (``RunEnd``);
        a run resumed after approval goes on numbering where it left off.

        Raises:
            UnknownRun: no such run (raised on the first ``__anext__``).
        """
        ...

    async def cancel(self, run_id: str) -> RunView:
        """End the run as ``cancelled`` (queued, running or paused) and return it; an
        ended run is returned as it is.

        Raises:
            UnknownRun: no such run.
        """
        ...

    async def runs(
        self, agent: str | None = None, agent_id: str | None = None, *, limit: int = 100
    ) -> list[RunView]:
        """Runs, newest first, of one served agent and one conversation when given."""
        ...

    async def messages(self, agent: str, agent_id: str) -> list[dict[str, Any]]:
        """The stored conversation, as Messages API JSON (``{"role", "content"}``); empty
        for a conversation that never ran.

        Raises:
            UnknownAgent: no served agent is named ``agent``.
        """
        ...

    async def pending(self, agent: str | None = None) -> list[PendingView]:
        """Every call waiting for a decision, oldest run first (of one agent if given)."""
        ...

    async def decide(self, run_id: str, call_id: str, decision: Approve | Deny) -> RunView | None:
        """Decide one waiting call (``decision.by`` says who). Once every pending call
        of the run is decided, the run resumes with those decisions and this returns
        it as ``start`` would; before that it returns None. A decision survives a
        restart of the server.

        The same decision again, for a call decided already, resumes a run whose every
        call is decided but whose resume failed on the store (``NotResumed``); any
        other second decision is ``AlreadyDecided``.

        Raises:
            UnknownRun: no such run.
            AlreadyDecided: the call was decided already, or the run no longer waits.
            BadDecision: no such call in the run, or edited input the tool refuses.
            NotResumed: the store failed as the run was to resume; it still waits.
        """
        ...

    async def ready(self) -> bool:
        """True once the store is open and answers."""
        ...
