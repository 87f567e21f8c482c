"""The state of one run as its phases share it: the iteration, the usage, the messages
the run added, the calls still without a result, and the typed answer; with the small
steps every phase takes on it: sending an event, adding to the conversation, keeping
and journaling a call's outcome."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .. import _telemetry
from .._messages import Message, Usage
from .._text import describe_exception_text, exception_message
from ..tools import PendingCall, ToolCall, ToolEvent, ToolOutcome
from ._events import OutputDelta
from ._loopguard import Streak
from ._output import OUTPUT_TOOL
from ._result import RunResult, subagent_usage

if TYPE_CHECKING:
    from ..models import Permit
    from ._events import AgentEvent, _RunEvent
    from ._job import Job
    from ._runcontext import RunContext

__all__ = ["Run", "said"]

EventT = TypeVar("EventT", bound="_RunEvent")


class Run:
    """One run's state, handed from phase to phase; ``ctx`` is the agent as the run sees
    it, ``job`` the request it serves."""

    def __init__(self, ctx: RunContext, job: Job) -> None:
        self.ctx = ctx
        self.job = job
        self.agent = ctx.spec.name
        self.run_id = job.run_id
        self.iteration = 0
        self.usage = Usage()
        self.messages: list[Message] = []
        self.pending: list[str] = []  # tool_use ids in the history still without a result
        self.output = ""
        self.streak = Streak()  # the loop guard's count
        # Outcomes of this turn's calls that finished, as the model will read them: kept
        # if the turn is cancelled, so that work done is never reported as not done.
        self.finished: dict[str, ToolOutcome] = {}
        self.unjournaled: list[ToolOutcome] = []  # answers written only into the history
        self.paused = False  # the last response was a pause_turn, continued next
        self.awaiting: tuple[PendingCall, ...] = ()  # the calls the run paused on
        self.result: RunResult[Any] | None = None
        self.chat = _telemetry.null_scope()  # the model call's span, while one runs
        self.permit: Permit | None = None  # the model call's admission, with limits
        # What the run's calls cost, counted for its usd_per_run only. A resumed run
        # (after an approval, after a restart) goes on from what its record says it
        # spent: otherwise each resume would grant it its whole budget again.
        resumed = job.resume.usage.cost_usd if job.resume is not None else None
        self.spent_usd = resumed or 0.0
        self.before: tuple[int, Message | None] | None = None
        # A typed answer (docs/output.md): the compiled output type, or None for text.
        self.output_spec, self.output_retries = (
            job.output if job.output is not None else (ctx.spec.output, ctx.spec.output_retries)
        )
        self.answer: Any = None  # the typed answer, once validated and verified
        self.answers_rejected = 0

    # --- events -----------------------------------------------------------------------

    def emit(self, event: AgentEvent) -> None:
        sink = self.job.sink
        if sink is not None:
            sink(event)

    def event(self, kind: type[EventT], **fields: Any) -> EventT:
        """An event of this run at its current iteration."""
        return kind(agent=self.agent, run_id=self.run_id, iteration=self.iteration, **fields)

    def tool_sink(self) -> Callable[[ToolEvent], None] | None:
        if self.job.sink is None:
            return None

        def forward(event: ToolEvent) -> None:
            self.emit(
                attrs.evolve(event, agent=self.agent, run_id=self.run_id, iteration=self.iteration)
            )

        return forward

    def answer_delta(self, name: str, delta: str) -> None:
        if name == OUTPUT_TOOL:
            self.emit(self.event(OutputDelta, text=delta))

    # --- the conversation -------------------------------------------------------------

    def commit(self, message: Message) -> None:
        self.ctx.conversation.commit(message)
        self.messages.append(message)

    def commit_user(self, blocks: Sequence[Any]) -> None:
        """Add user content, merged into the last message when that is a user message
        too (the API wants roles to alternate)."""
        conversation = self.ctx.conversation
        history = conversation.messages
        if history and history[-1].role == "user":
            previous = history[-1]
            merged = Message(role="user", content=[*previous.content, *blocks])
            conversation.replace_last(merged)
            if self.messages and self.messages[-1] is previous:
                self.messages[-1] = merged
            else:
                self.messages.append(merged)
            return
        self.commit(Message(role="user", content=list(blocks)))

    def commit_assistant(self, content: Sequence[Any]) -> None:
        """Add the model's answer; the continuation of a paused turn joins the message
        it continues, as if the API had never paused."""
        conversation = self.ctx.conversation
        history = conversation.messages
        if self.paused and history and history[-1].role == "assistant" and self.messages:
            previous = history[-1]
            merged = Message(role="assistant", content=[*previous.content, *content])
            conversation.replace_last(merged)
            self.messages[-1] = merged
            return
        self.commit(Message(role="assistant", content=list(content)))

    def take_steering(self) -> list[dict[str, Any]]:
        texts = self.ctx.steering.take()
        return [{"type": "text", "text": text} for text in texts]

    # --- calls' outcomes --------------------------------------------------------------

    def keep(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """A call's final outcome, kept for the history whatever happens to the turn now."""
        self.finished[call.id] = outcome

    async def keep_and_journal(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """A call's final outcome: kept, then journaled (a store that cannot record it is
        logged; on resume the call counts as unfinished)."""
        self.finished[call.id] = outcome
        await self.journal(call, outcome)

    async def journal(self, call: ToolCall, outcome: ToolOutcome) -> None:
        if self.ctx.persistence is not None:
            await self.ctx.persistence.call_finished(self.run_id, outcome)

    def add_subagent_usage(self, outcomes: Iterable[ToolOutcome]) -> None:
        """Count what sub-agents run as tools spent in this run's usage."""
        for outcome in outcomes:
            # Most outcomes carry no details: they cost the turn no call.
            if outcome.details is None:
                continue
            nested = subagent_usage(outcome.details)
            if nested is not None:
                self.usage = self.usage + nested


def said(exc: BaseException) -> str:
    """An exception's message for a run's error; a custom Model's or store's exception
    whose ``__str__`` raises is named by its type (``satsuma._text``)."""
    message = exception_message(exc)
    return message if message is not None else describe_exception_text(exc)
