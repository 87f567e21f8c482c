"""One run of an agent: gather (call the model) → act (run its tool calls) → repeat until
the model ends its turn → verify. The run owns its cancel scopes; however it ends —
completed, out of iterations or time, cancelled, failed, or torn down with its agent —
the conversation it leaves is valid: every ``tool_use`` has exactly one ``tool_result``.

With an OpenTelemetry TracerProvider configured, a run is an ``invoke_agent`` span and
each model call a ``chat`` span inside it (see ``_tracing``); the runner's
``execute_tool`` spans nest under the run's span, which is current in the run's task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _telemetry
from .._exceptions import LeaseLost, ModelError, StoreClosed, StoreError
from .._messages import Message, Usage
from .._text import (
    MESSAGE_LIMIT,
    describe_exception,
    describe_exception_text,
    exception_message,
    reportable,
)
from ..models import (
    ModelLimiter,
    ModelRequest,
    ModelResponse,
    Permit,
    checked_response,
    estimate_input_tokens,
)
from ..store import ApprovalDecision, PendingApproval
from ..tools import (
    Approver,
    Deferral,
    PendingCall,
    ToolCall,
    ToolEvent,
    ToolOutcome,
    cancelled_text,
    denied_text,
    error_outcome,
    format_results,
)
from . import _tracing
from ._events import (
    AgentEvent,
    ModelRetry,
    ModelWaitEnd,
    ModelWaitStart,
    OutputDelta,
    OutputRejected,
    OutputValidated,
    RunEnd,
    RunStart,
    TextDelta,
    ThinkingDelta,
    TurnEnd,
)
from ._ids import TakenIds, unique_ids
from ._output import (
    ANSWER_TAKEN_TEXT,
    NOT_RUN_TEXT,
    ONE_ANSWER_TEXT,
    OUTPUT_TOOL,
    STEERED_TEXT,
    answer_json,
    invalid_answer_text,
    reminder_text,
)
from ._persist import (
    dangling_tool_uses,
    decided_outcome,
    gone_past,
    interrupted_outcome,
    journaled_outcome,
    own_answer,
    run_part,
    stored_answer,
)
from ._result import NO_ANSWER, RunResult, RunStatus, subagent_usage
from ._verifiers import VerifyContext, run_verifier, verification_text

if TYPE_CHECKING:
    from ._actor import Actor, Job

__all__ = ["execute_run"]

logger = logging.getLogger("satsuma.agents")

# What the history keeps for a response with no content at all: the API refuses an empty
# message, and without an assistant message here the next prompt would be glued onto the
# unanswered one.
EMPTY_RESPONSE_TEXT = "(no response)"


def loop_guard_refusal(names: str, count: int) -> str:
    return (
        f"Error: Loop guard: this same request ({names}) came {count} turns in a row, so it "
        "was not run. Repeating it will not give a different result; change the arguments "
        "or take another approach. Asking for it once more ends the run."
    )


def loop_guard_reason(names: str, count: int) -> str:
    return f"Loop guard: the same request ({names}) came {count} turns in a row"


def _signature(call: ToolCall) -> tuple[str, str]:
    try:
        arguments = json.dumps(call.input, sort_keys=True, default=repr)
    except Exception:  # RecursionError too: a hostile input is refused by the runner
        arguments = f"<unprintable {type(call.input).__name__} {id(call.input)}>"
    return call.name, arguments


@attrs.define(eq=False)
class _TurnRequest:
    """What a turn asked for, compared with the turn before it by the loop guard.

    A turn is a loop only when it repeats the previous turn's whole request: identical
    calls side by side in one turn (twenty sleeps, five dice) are ordinary work. The
    arguments are serialised only when the tool names already match, which most turns
    of a working conversation do not."""

    calls: Sequence[ToolCall]
    names: tuple[str, ...]
    _full: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def of(cls, calls: Sequence[ToolCall]) -> _TurnRequest:
        return cls(calls, tuple(sorted(call.name for call in calls)))

    def full(self) -> tuple[tuple[str, str], ...]:
        if self._full is None:
            self._full = tuple(sorted(_signature(call) for call in self.calls))
        return self._full

    def repeats(self, previous: _TurnRequest | None) -> bool:
        return (
            previous is not None and self.names == previous.names and self.full() == previous.full()
        )


def _names(calls: Sequence[ToolCall]) -> str:
    return ", ".join(dict.fromkeys(call.name for call in calls))


@attrs.define(eq=False)
class _Listener:
    run: _Run

    @property
    def wants_deltas(self) -> bool:
        # Deltas reach only a run's event sink (a callback, agent.stream, a live view).
        return self.run.job.sink is not None

    def text(self, delta: str) -> None:
        run = self.run
        if run.job.sink is not None:
            run.emit(
                TextDelta(agent=run.agent, run_id=run.run_id, iteration=run.iteration, text=delta)
            )

    def thinking(self, delta: str) -> None:
        run = self.run
        if run.job.sink is not None:
            run.emit(
                ThinkingDelta(
                    agent=run.agent, run_id=run.run_id, iteration=run.iteration, text=delta
                )
            )

    @property
    def tool_input(self) -> Callable[[str, str], None] | None:
        """Called with each piece of a tool_use's input as it streams: only when a typed
        answer is due and someone watches (the answer's JSON becomes OutputDelta)."""
        run = self.run
        if run.output_spec is None or run.job.sink is None:
            return None
        return run.answer_delta

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        run = self.run
        if run.permit is not None:
            run.permit.retried()  # one more request, charged to the configuration's rates
        _tracing.retried(run.chat, attempt, delay, reason)
        run.emit(
            ModelRetry(
                agent=run.agent,
                run_id=run.run_id,
                iteration=run.iteration,
                attempt=attempt,
                delay=delay,
                reason=reason,
            )
        )

    def retry_after(self, seconds: float) -> None:
        """The API asked to wait ``seconds`` before the next request: every user of the
        configuration waits that long (docs/limits.md)."""
        limiter = self.run.actor.limiter
        if limiter is not None:
            limiter.pause(seconds)


class _Run:
    def __init__(self, actor: Actor, job: Job) -> None:
        self.actor = actor
        self.job = job
        self.agent = actor.spec.name
        self.run_id = job.run_id
        self.iteration = 0
        self.usage = Usage()
        self.messages: list[Message] = []
        self.pending: list[str] = []  # tool_use ids in the history still without a result
        self.taken_ids = TakenIds()  # the conversation's tool_use ids, read as it grows
        self.output = ""
        self.streak_request: _TurnRequest | None = None
        self.streak = 0
        # Outcomes of this turn's calls that finished, as the model will read them: kept
        # if the turn is cancelled, so that work done is never reported as not done.
        self.finished: dict[str, ToolOutcome] = {}
        self.unjournaled: list[ToolOutcome] = []  # answers written only into the history
        self.paused = False  # the last response was a pause_turn, continued next
        self.awaiting: tuple[PendingCall, ...] = ()  # the calls the run paused on
        self.result: RunResult[Any] | None = None
        self.chat = _telemetry.null_scope()  # the model call's span, while one runs
        self.permit: Permit | None = None  # the model call's admission, with limits
        self.before: tuple[int, Message | None] | None = None
        # A typed answer (docs/output.md): the compiled output type, or None for text.
        self.output_spec, self.output_retries = (
            job.output if job.output is not None else (actor.spec.output, actor.spec.output_retries)
        )
        self.answer: Any = None  # the typed answer, once validated and verified
        self.answers_rejected = 0

    # --- events and history ---------------------------------------------------------

    def emit(self, event: AgentEvent) -> None:
        sink = self.job.sink
        if sink is not None:
            sink(event)

    def _tool_sink(self) -> Callable[[ToolEvent], None] | None:
        if self.job.sink is None:
            return None

        def forward(event: ToolEvent) -> None:
            self.emit(
                attrs.evolve(event, agent=self.agent, run_id=self.run_id, iteration=self.iteration)
            )

        return forward

    def commit(self, message: Message) -> None:
        self.actor.commit(message)
        self.messages.append(message)

    def commit_user(self, blocks: Sequence[Any]) -> None:
        """Add user content, merged into the last message when that is a user message
        too (the API wants roles to alternate)."""
        history = self.actor.history
        if history and history[-1].role == "user":
            previous = history[-1]
            merged = Message(role="user", content=[*previous.content, *blocks])
            self.actor.replace_last(merged)
            if self.messages and self.messages[-1] is previous:
                self.messages[-1] = merged
            else:
                self.messages.append(merged)
            return
        self.commit(Message(role="user", content=list(blocks)))

    def commit_assistant(self, content: Sequence[Any]) -> None:
        """Add the model's answer; the continuation of a paused turn joins the message
        it continues, as if the API had never paused."""
        history = self.actor.history
        if self.paused and history and history[-1].role == "assistant" and self.messages:
            previous = history[-1]
            merged = Message(role="assistant", content=[*previous.content, *content])
            self.actor.replace_last(merged)
            self.messages[-1] = merged
            return
        self.commit(Message(role="assistant", content=list(content)))

    def answer_delta(self, name: str, delta: str) -> None:
        if name == OUTPUT_TOOL:
            self.emit(
                OutputDelta(
                    agent=self.agent, run_id=self.run_id, iteration=self.iteration, text=delta
                )
            )

    def take_steering(self) -> list[dict[str, Any]]:
        texts = self.actor.take_steering()
        return [{"type": "text", "text": text} for text in texts]

    # --- the loop ---------------------------------------------------------------------

    async def execute(self) -> RunResult[Any]:
        spec = self.actor.spec
        self.emit(
            RunStart(agent=self.agent, run_id=self.run_id, iteration=0, prompt=self.job.prompt)
        )
        status: RunStatus = "completed"
        error: str | None = None
        deadline = (
            trio.current_time() + spec.max_duration
            if spec.max_duration is not None
            else float("inf")
        )
        with self.job.scope, trio.CancelScope(deadline=deadline) as deadline_scope:
            try:
                status, error = await self._begin_and_loop()
            except StoreError as exc:
                if isinstance(exc, (LeaseLost, StoreClosed)) and self.actor.is_current():
                    # No later write of this agent can succeed (another owner has it, or
                    # the store is done): the agent stops, rather than go on serving runs
                    # whose writes are refused or lost. Its callers get AgentCrashed
                    # naming this. (An incarnation a supervisor replaced just ends the
                    # run: the newer one serves on.)
                    raise
                # What was committed stays; the run ends here with the store's reason.
                status, error = "failed", _said(exc)
                self.job.store_error = exc
                self._answer_pending("the run failed on a store error")
        if self.job.scope.cancelled_caught:
            status, error = "cancelled", None
            self._answer_pending("the run was cancelled")
        elif deadline_scope.cancelled_caught:
            status, error = "deadline_exceeded", f"max_duration of {spec.max_duration:g}s exceeded"
            self._answer_pending("the run passed its max_duration")
        return self.finish(status, error)

    async def _begin_and_loop(self) -> tuple[RunStatus, str | None]:
        actor = self.actor
        history = actor.history
        if self.job.decisions is not None:
            # Going on with a run paused awaiting approval (claimed by the actor).
            assert self.job.resume is not None
            self.usage = self.job.resume.usage
            problem = await self._run_decided()
            if problem is not None:
                return "failed", problem
        elif self.job.resume is not None:
            # Resumed now: no later run may close it as abandoned.
            actor.interrupted = [r for r in actor.interrupted if r.run_id != self.run_id]
            assert actor.persistence is not None
            runs = await actor.persistence.store.runs(actor.agent_id)
            if self.output_spec is not None:
                # A typed answer taken before the end could be recorded: the run's.
                found = stored_answer(run_part(self.job.resume, history))
                if found is not None:
                    try:
                        self.answer = self.output_spec.from_input(found[0])
                    except ValueError as exc:
                        return "failed", _said(exc)
                    return "completed", None
            try:
                answer = own_answer(self.job.resume, runs, history)
            except ValueError as exc:
                return "failed", _said(exc)
            if answer is not None:
                # The run had its answer; only its end was not recorded.
                self.output = answer
                return "completed", None
            await self._repair(self.run_id, rerun=True)
            last = history[-1] if history else None
            if last is not None and last.role == "assistant":
                if self.output_spec is not None:
                    # It ended a turn in text where a typed answer was due.
                    self.commit_user([{"type": "text", "text": reminder_text()}])
                    return await self._loop()
                self.output = last.text  # its calls were all answered by the journal
                return "completed", None
        else:
            dangling = bool(dangling_tool_uses(history))
            # Which runs wait is read from the store now, not remembered: a decision
            # taken elsewhere, a restart or a prune cannot leave a stale list.
            left = (
                await actor.persistence.runs_left(self.run_id, claimed=dangling)
                if actor.persistence is not None
                else []
            )
            if dangling and left:
                # The calls a paused run waits on: no one decided them before this run
                # (or someone did through the store, and nothing ran them).
                await self._repair(
                    left[-1].run_id,
                    rerun=False,
                    undecided=f"no decision was made before run {self.run_id} started",
                    taken=left[-1].status == "running",
                )
            elif dangling:
                previous = actor.interrupted[-1].run_id if actor.interrupted else ""
                await self._repair(previous, rerun=False)
            if actor.persistence is not None:
                # A new run goes past the paused ones: they can no longer be resumed.
                for record in left:
                    await actor.persistence.end_run(
                        record.run_id,
                        "cancelled",
                        record.usage,
                        gone_past(record, f"before run {self.run_id} started"),
                    )
            if actor.persistence is not None and actor.interrupted:
                # A new run goes past the interrupted ones: they can no longer be resumed.
                for record in actor.interrupted:
                    await actor.persistence.end_run(
                        record.run_id,
                        "cancelled",
                        record.usage,
                        f"interrupted, and not resumed before run {self.run_id} started",
                    )
                actor.interrupted = []
            self._drop_unanswered_prompt()
            # What the conversation was before this run, to go back to if the model never
            # answers it (see _roll_back).
            self.before = (len(history), history[-1] if history else None)
            self.commit_user([{"type": "text", "text": self.job.prompt}, *self.take_steering()])
            if actor.persistence is not None:
                # The prompt and the run record in one transaction: a kill never leaves a
                # prompt without its run.
                await actor.persistence.start_run(self.run_id, self.job.prompt, history)
        return await self._loop()

    def _drop_unanswered_prompt(self) -> None:
        """Take out of the conversation the text that ends it unanswered: the prompt (and
        steering) of a run that was interrupted and not resumed, or that a store of an
        older satsuma kept without its run. It is never sent again: the new run's
        prompt would otherwise be joined to it. Tool results stay (they answer calls)."""
        history = self.actor.history
        if not history or history[-1].role != "user":
            return
        last = history[-1]
        kept = [block for block in last.content if block.get("type") == "tool_result"]
        if len(kept) == len(last.content):
            return
        logger.warning(
            "agent %s: run %s does not send the unanswered prompt that ended the "
            "conversation (%r): its run was not resumed",
            self.actor.agent_id,
            self.run_id,
            last.text[:200],
        )
        if kept:
            self.actor.replace_last(Message(role="user", content=kept))
        else:
            history.pop()
            self.actor.changed_from(len(history))

    async def _repair(
        self, run_id: str, *, rerun: bool, undecided: str | None = None, taken: bool = False
    ) -> None:
        """Answer the calls a crash or a kill left without a result: a finished call with
        its journaled outcome; an unfinished one by running it again if ``rerun`` and its
        tool is idempotent, else with the fixed Interrupted text (saying the decision, for
        a call decided in the store). With ``undecided``, the run paused awaiting
        approval: its pending calls never ran, and are denied with that reason. With
        ``taken``, the run was taken up through the store without the agent's lease: its
        decided calls never ran, and say so."""
        actor = self.actor
        tool_uses = dangling_tool_uses(actor.history)
        if not tool_uses:
            return
        journal = {}
        waiting: set[str] = set()
        decided: dict[str, ApprovalDecision] = {}
        if actor.persistence is not None and run_id:
            store = actor.persistence.store
            journal = {e.tool_use_id: e for e in await store.calls(run_id)}
            if undecided is not None:
                pending = await store.pending_calls(run_id)
                waiting = {call.tool_use_id for call in pending}
            # Calls decided in the store whose run was then never run on: taken up
            # without the agent's lease, or stopped between its claim and its calls.
            decided = {
                a.tool_use_id: a.decision
                for a in await store.approvals(run_id)
                if a.decision is not None
            }
        idempotent = {d.name for d in actor.runner.definitions if d.idempotent}
        answers: dict[str, ToolOutcome] = {}
        again: list[ToolCall] = []
        for block in tool_uses:
            entry = journal.get(block["id"])
            if undecided is not None and block["id"] in waiting:
                answers[block["id"]] = error_outcome(
                    block["id"], block.get("name", ""), "denied", denied_text(undecided)
                )
            elif entry is not None and entry.finished:
                answers[block["id"]] = journaled_outcome(entry)
            elif block["id"] in decided and (taken or decided[block["id"]].verdict == "denied"):
                answers[block["id"]] = decided_outcome(block, decided[block["id"]], never_run=taken)
            elif rerun and block.get("name") in idempotent:
                again.append(ToolCall(block["id"], block["name"], block.get("input", {})))
            elif block["id"] in decided:
                answers[block["id"]] = decided_outcome(block, decided[block["id"]], never_run=False)
            else:
                answers[block["id"]] = interrupted_outcome(block)
        if again:
            if actor.persistence is not None:
                await actor.persistence.calls_started(self.run_id, again)
            for outcome in await actor.runner.execute(
                again,
                actor.context,
                events=self._tool_sink(),
                agent=actor.handle,
                on_outcome=self._journal,
            ):
                answers[outcome.tool_use_id] = outcome
        self.commit_user(format_results([answers[block["id"]] for block in tool_uses]))
        await actor.flush()

    async def _run_decided(self) -> str | None:
        """Answer the calls of the turn a run paused on: those that needed no decision
        with their journaled outcomes (they ran before the pause, and do not run again),
        the pending ones by running them with their decisions. A reason when the run
        cannot go on."""
        actor = self.actor
        assert actor.persistence is not None and self.job.decisions is not None
        tool_uses = dangling_tool_uses(actor.history)
        pending = {call.tool_use_id: call for call in self.job.pending}
        if not pending.keys() <= {block["id"] for block in tool_uses}:
            return f"run {self.run_id}: the conversation no longer ends with its pending calls"
        journal = {e.tool_use_id: e for e in await actor.persistence.store.calls(self.run_id)}
        answers: dict[str, ToolOutcome] = {}
        decided: list[ToolCall] = []
        for block in tool_uses:
            waiting = pending.get(block["id"])
            entry = journal.get(block["id"])
            if waiting is not None:
                decided.append(ToolCall(waiting.tool_use_id, waiting.tool_name, waiting.input))
            elif entry is not None and entry.finished:
                answers[block["id"]] = journaled_outcome(entry)
            else:
                answers[block["id"]] = interrupted_outcome(block)
        # Should the run be cancelled now, the calls that have answers keep them.
        self.pending = [block["id"] for block in tool_uses]
        self.finished = dict(answers)
        if decided:
            await actor.persistence.calls_started(self.run_id, decided)
            for outcome in await actor.runner.execute(
                decided,
                actor.context,
                events=self._tool_sink(),
                agent=actor.handle,
                on_outcome=self._finished,
                decisions=self.job.decisions,
            ):
                answers[outcome.tool_use_id] = outcome
                nested = subagent_usage(outcome.details)
                if nested is not None:
                    self.usage = self.usage + nested
        self.pending = []
        self.finished = {}
        self.commit_user(format_results([answers[block["id"]] for block in tool_uses]))
        await actor.flush()
        return None

    async def _loop(self) -> tuple[RunStatus, str | None]:
        spec = self.actor.spec
        while True:
            steering = self.take_steering()
            if steering:
                self.commit_user(steering)
            if self.iteration >= spec.max_iterations:
                return "max_iterations", f"max_iterations ({spec.max_iterations}) reached"
            self.iteration += 1
            # Committed before every model call: a kill now loses nothing sent so far.
            await self.actor.flush()
            try:
                response = await self._gather()
            except ModelError as exc:
                # What retries could not cure fails the run; anything else raised by the
                # model is a bug, and crashes the agent (a supervisor restarts it).
                return "failed", _said(exc)
            if response.content:
                self.commit_assistant(response.content)
                self.pending = [
                    block["id"] for block in response.content if block.get("type") == "tool_use"
                ]
            elif not self.paused:
                self.commit_assistant([{"type": "text", "text": EMPTY_RESPONSE_TEXT}])
            self.paused = response.stop_reason == "pause_turn"
            self.emit(
                TurnEnd(
                    agent=self.agent,
                    run_id=self.run_id,
                    iteration=self.iteration,
                    usage=response.usage,
                    stop_reason=response.stop_reason,
                )
            )
            if response.stop_reason == "pause_turn":
                continue  # the API paused a long turn: send it back as it is to go on
            if response.calls:
                if self.output_spec is not None and any(
                    call.name == OUTPUT_TOOL for call in response.calls
                ):
                    ended = await self._take_answer(response.calls)
                    if ended is not None:
                        return ended
                    if self.awaiting:
                        return "awaiting_approval", None
                    continue
                tripped = await self._act(response.calls)
                if tripped is not None:
                    return "failed", tripped
                if self.awaiting:
                    return "awaiting_approval", None
                continue
            self.output = response.text if response.content else ""
            if self.actor.has_steering():
                continue  # the user spoke while the model answered: that is the next turn
            if self.output_spec is not None:
                # A typed answer is due, and the model ended its turn in text.
                failed = self._reject(
                    [f"the turn ended without a {OUTPUT_TOOL} call"],
                    lambda: (
                        f"the model ended its turn without calling {OUTPUT_TOOL}; its last "
                        f"text: {self.output[:2000]!r}"
                    ),
                )
                if failed is not None:
                    return "failed", failed
                self.commit_user([{"type": "text", "text": reminder_text()}])
                continue
            reason = await self._verify(self.output)
            if reason is None:
                return "completed", None
            self.commit_user([{"type": "text", "text": verification_text(reason)}])

    async def _gather(self) -> ModelResponse:
        if self.job.wait_for_reader is not None:
            # Before the call, not inside it: the events of a turn come synchronously.
            await self.job.wait_for_reader()
        actor = self.actor
        spec = actor.spec
        messages = actor.spec.history.process(tuple(actor.history), actor.last_usage)
        actor.refresh_tools()  # an MCP server may have announced new tools since
        tools: tuple[Mapping[str, Any], ...] = actor.tool_schemas
        if self.output_spec is not None:
            tools = (*tools, self.output_spec.tool)
        request = ModelRequest(
            model=actor.model_id,
            system=spec.system,
            messages=tuple(messages),
            tools=tools,
            max_tokens=spec.max_tokens,
        )
        # Without limits, no limiter: nothing awaited or allocated for them.
        permit = None if actor.limiter is None else await self._admit(actor.limiter, request)
        try:
            with _tracing.start_chat(request) as chat:
                self.chat = chat
                if permit is not None:
                    _tracing.waited(chat, permit.waited)
                response = checked_response(await actor.model.respond(request, _Listener(self)))
                # The one point every response passes, whichever Model made it: from
                # here on (runner, events, journal, history) its calls have their own ids.
                response = unique_ids(response, self.taken_ids.of(actor.history))
                _tracing.end_chat(chat, response)
        finally:
            if permit is not None:
                self.permit = None
                permit.release()
        if permit is not None:
            permit.settle(response.usage)
        self.usage = self.usage + response.usage
        actor.last_usage = response.usage
        return response

    async def _admit(self, limiter: ModelLimiter, request: ModelRequest) -> Permit:
        """The call's permit from its configuration's limiter, once there is room: at
        once if there is, else after waiting in its queue, between ModelWaitStart and
        ModelWaitEnd events. Cancelled while it waits, the run holds no slot."""
        cost = estimate_input_tokens(request) if limiter.counts_tokens else 0
        permit = limiter.admit_nowait(cost)
        if permit is None:
            reason = limiter.blocked(cost) or "its turn"
            queued = limiter.statistics().waiting + 1
            self.emit(
                ModelWaitStart(
                    agent=self.agent,
                    run_id=self.run_id,
                    iteration=self.iteration,
                    reason=reason,
                    queued=queued,
                )
            )
            permit = await limiter.admit(cost)
            sent = False
            try:
                self.emit(
                    ModelWaitEnd(
                        agent=self.agent,
                        run_id=self.run_id,
                        iteration=self.iteration,
                        seconds=permit.waited,
                    )
                )
                sent = True
            finally:
                if not sent:
                    permit.release()  # an event sink that raised: the slot is not kept
        self.permit = permit
        return permit

    def _reject(self, errors: list[str], why: Callable[[], str]) -> str | None:
        """Count an answer that is not one (invalid, or missing); the reason the run
        fails when no retry is left, else None (the model tries again)."""
        self.answers_rejected += 1
        left = self.output_retries - self.answers_rejected
        self.emit(
            OutputRejected(
                agent=self.agent,
                run_id=self.run_id,
                iteration=self.iteration,
                errors=tuple(errors),
                retries_left=max(left, 0),
            )
        )
        if left >= 0:
            return None
        return f"no valid answer after {self.output_retries} retries (output_retries): {why()}"

    async def _take_answer(self, calls: Sequence[ToolCall]) -> tuple[RunStatus, str | None] | None:
        """A turn with a final_answer call. A valid answer that the verifiers pass ends
        the run (the turn's other calls are not run: each reads NOT_RUN_TEXT); otherwise
        the answer's tool_result says what is wrong, the other calls run as in any turn,
        and the loop goes on. Only the first final_answer call of a turn is read. The
        status and error when the run ends, else None."""
        assert self.output_spec is not None
        first = next(call for call in calls if call.name == OUTPUT_TOOL)
        others = [call for call in calls if call.name != OUTPUT_TOOL]
        answered: dict[str, ToolOutcome] = {
            call.id: error_outcome(call.id, OUTPUT_TOOL, "skipped", ONE_ANSWER_TEXT)
            for call in calls
            if call.name == OUTPUT_TOOL and call is not first
        }
        value, errors = (
            (None, [first.refused])
            if first.refused is not None
            else self.output_spec.parse(first.input)
        )
        ended: tuple[RunStatus, str | None] | None = None
        if errors:
            failed = self._reject(
                errors,
                lambda: (
                    # A refused answer is {} here: what JSON could not carry is not shown.
                    "the last answer"
                    + ("" if first.refused is not None else f", {answer_json(first.input)},")
                    + " is invalid: "
                    + "; ".join(errors)
                ),
            )
            answered[first.id] = error_outcome(
                first.id, OUTPUT_TOOL, "invalid_args", invalid_answer_text(errors)
            )
            if failed is not None:
                ended = ("failed", failed)
        elif self.actor.has_steering():
            # The user spoke while the model answered: the answer may no longer hold, so
            # it is not taken (nor counted), and the model answers again after reading it.
            answered[first.id] = error_outcome(first.id, OUTPUT_TOOL, "skipped", STEERED_TEXT)
        else:
            self.emit(
                OutputValidated(
                    agent=self.agent, run_id=self.run_id, iteration=self.iteration, output=value
                )
            )
            reason = await self._verify(value)
            if reason is None:
                self.answer = value
                answered[first.id] = ToolOutcome(
                    tool_use_id=first.id,
                    tool_name=OUTPUT_TOOL,
                    content=ANSWER_TAKEN_TEXT,
                    is_error=False,
                )
                ended = ("completed", None)
            else:
                answered[first.id] = error_outcome(
                    first.id, OUTPUT_TOOL, "failed", verification_text(reason)
                )
        if ended is not None:
            # The run ends here: the other calls are answered, never run.
            for call in others:
                answered[call.id] = error_outcome(call.id, call.name, "skipped", NOT_RUN_TEXT)
            self.pending = []
            self.finished = {}
            self.commit_user(format_results([answered[call.id] for call in calls]))
            return ended
        if not others:
            self.pending = []
            self.commit_user(format_results([answered[call.id] for call in calls]))
            return None
        if self.actor.persistence is not None:
            # Journaled like the turn's other calls, so that a pause on one of them
            # (awaiting approval) or a kill is resumed with the answer's own result.
            answers = [call for call in calls if call.name == OUTPUT_TOOL]
            # The turn is stored before its calls are journaled, as in _act: a journal
            # record then always belongs to a call the stored conversation holds.
            await self.actor.flush()
            await self.actor.persistence.calls_started(self.run_id, answers)
            for call in answers:
                await self.actor.persistence.call_finished(self.run_id, answered[call.id])
        tripped = await self._act(others, answered=answered, order=calls)
        return ("failed", tripped) if tripped is not None else None

    async def _act(
        self,
        calls: Sequence[ToolCall],
        *,
        answered: dict[str, ToolOutcome] | None = None,
        order: Sequence[ToolCall] = (),
    ) -> str | None:
        """Run one turn's calls and commit their results; a loop-guard reason if the run
        must stop. ``answered``: outcomes of other calls of the turn (a final answer's),
        committed with these in the turn's ``order``."""
        actor = self.actor
        guard = actor.spec.loop_guard
        request = _TurnRequest.of(calls)
        if request.repeats(self.streak_request):
            self.streak += 1
        else:
            self.streak = 1
        # The newest of equal requests is kept: its full signature is made already.
        self.streak_request = request
        stopped: str | None = None
        outcomes: list[ToolOutcome]
        if guard is not None and self.streak > guard:
            # The first time the guard fires the model is told and may change course; the
            # run fails only if it asks for the same again.
            if self.streak > guard + 1:
                stopped = loop_guard_reason(_names(calls), self.streak)
                text = f"Error: {stopped}; the run is stopped."
            else:
                text = loop_guard_refusal(_names(calls), self.streak)
            outcomes = [error_outcome(call.id, call.name, "denied", text) for call in calls]
        else:
            # The assistant's tool_use message is committed before any call starts, and
            # each call journaled as started: a kill from here on leaves calls to repair.
            await actor.flush()
            if actor.persistence is not None:
                await actor.persistence.calls_started(self.run_id, calls)
            self.finished = {}
            # Without an approver, an agent with a store pauses on the calls that need a
            # decision; one without either denies them (the runner's default).
            approver: Approver | Deferral | None = actor.approver
            deferral = None
            if approver is None and actor.persistence is not None:
                approver = deferral = Deferral()
            outcomes = await actor.runner.execute(
                calls,
                actor.context,
                interrupt=actor.steer_event,
                events=self._tool_sink(),
                agent=actor.handle,
                # Without a store there is nothing to await: a plain callback costs the
                # call no shielded step.
                on_outcome=self._finished if actor.persistence is not None else self._keep,
                approver=approver,
                approval_timeout=actor.spec.approval_timeout,
            )
            if deferral is not None and deferral.pending:
                await self._pause(deferral.pending, outcomes)
                return None
        for outcome in outcomes:
            nested = subagent_usage(outcome.details)
            if nested is not None:
                self.usage = self.usage + nested
        self.pending = []
        self.finished = {}
        if answered:
            answered.update((outcome.tool_use_id, outcome) for outcome in outcomes)
            outcomes = [answered[call.id] for call in order]
        self.commit_user(format_results(outcomes))
        return stopped

    async def _pause(self, pending: Sequence[PendingCall], outcomes: Sequence[ToolOutcome]) -> None:
        """End the turn waiting for decisions on ``pending``: the other calls ran and are
        journaled; the tool_use message stays unanswered until the run is resumed.

        Raises:
            StoreError: the pause could not be recorded (the run fails; the calls that
                ran keep their outcomes, the pending ones are answered as cancelled).
        """
        actor = self.actor
        assert actor.persistence is not None
        waiting = {call.id for call in pending}
        for outcome in outcomes:
            nested = subagent_usage(outcome.details)
            if outcome.tool_use_id not in waiting and nested is not None:
                self.usage = self.usage + nested
        await actor.flush()
        await actor.persistence.pause_run(
            self.run_id,
            [
                PendingApproval(
                    run_id=self.run_id,
                    tool_use_id=call.id,
                    tool_name=call.tool_name,
                    input=call.input,
                    reason=call.reason,
                )
                for call in pending
            ],
            self.usage,
        )
        # Recorded: from here on nothing answers these calls but a resume with decisions
        # (or a later run that goes past this one).
        self.pending = []
        self.finished = {}
        self.awaiting = tuple(pending)

    def _keep(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """A call's final outcome, kept for the history whatever happens to the turn now."""
        self.finished[call.id] = outcome

    async def _finished(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """A call's final outcome: kept, then journaled (a store that cannot record it is
        logged; on resume the call counts as unfinished)."""
        self.finished[call.id] = outcome
        await self._journal(call, outcome)

    async def _journal(self, call: ToolCall, outcome: ToolOutcome) -> None:
        if self.actor.persistence is not None:
            await self.actor.persistence.call_finished(self.run_id, outcome)

    async def _verify(self, output: Any) -> str | None:
        actor = self.actor
        if not actor.verifiers:
            return None
        ctx = VerifyContext(
            agent=self.agent,
            run_id=self.run_id,
            output=output,
            messages=tuple(actor.history),
            iteration=self.iteration,
            working_dir=actor.working_dir,
            extra=actor.context_extra,
        )
        for check in actor.verifiers:
            reason = await run_verifier(check, ctx)
            if reason is not None:
                return reason
        return None

    # --- ending -----------------------------------------------------------------------

    def _answer_pending(self, why: str) -> None:
        """Give every tool_use still without a result one, so the history stays valid: a
        call that finished its real outcome, any other the cancellation text."""
        if not self.pending:
            return
        names = {
            block["id"]: block.get("name", "")
            for message in self.messages
            if message.role == "assistant"
            for block in message.content
            if block.get("type") == "tool_use"
        }
        outcomes = []
        for call_id in self.pending:
            outcome = self.finished.get(call_id)
            if outcome is None:
                outcome = error_outcome(
                    call_id, names.get(call_id, ""), "cancelled", cancelled_text(why)
                )
                self.unjournaled.append(outcome)
            outcomes.append(outcome)
        self.pending = []
        self.finished = {}
        self.commit_user(format_results(outcomes))

    def _roll_back(self) -> None:
        """Take this run's prompt out of the conversation again when the model never
        answered it (the run failed, crashed or was cancelled before any answer).

        Otherwise the prompt would stay, and the next run's prompt would be joined to it
        in one user message: a prompt that is too long, or that crashes the model, would
        fail every run after it.
        """
        if self.before is None or any(m.role == "assistant" for m in self.messages):
            return
        length, last = self.before
        history = self.actor.history
        del history[length:]
        if last is not None and history and history[-1] is not last:
            history[-1] = last  # the prompt had been merged into this user message
        self.actor.changed_from(len(history) - 1 if last is not None else 0)
        self.messages = []

    def finish(self, status: RunStatus, error: str | None) -> RunResult[Any]:
        if status != "completed":
            self._roll_back()
        output: Any
        if self.output_spec is not None:
            output = self.answer if status == "completed" else NO_ANSWER
        else:
            if not self.output:
                for message in reversed(self.messages):
                    if message.role == "assistant" and message.text not in (
                        "",
                        EMPTY_RESPONSE_TEXT,
                    ):
                        self.output = message.text
                        break
            output = self.output
        result: RunResult[Any] = RunResult(
            run_id=self.run_id,
            output=output,
            status=status,
            messages=tuple(self.messages),
            usage=self.usage,
            iterations=self.iteration,
            error=error,
            pending=self.awaiting,
        )
        self.result = result
        self.emit(
            RunEnd(agent=self.agent, run_id=self.run_id, iteration=self.iteration, result=result)
        )
        return result


async def execute_run(actor: Actor, job: Job) -> RunResult[Any]:
    """Run one job to its end. If the agent itself is being torn down (an outer
    cancellation) or crashes, the run still ends — ``cancelled`` or ``failed`` — with a
    valid history, and the cancellation or the crash goes on. With a store, the
    conversation and the run record are written at the end in every case."""
    run = _Run(actor, job)
    with _tracing.start_run(
        agent=run.agent,
        model=actor.model_id,
        agent_id=actor.agent_id,
        run_id=run.run_id,
        parent=job.trace_context,
    ) as span:
        try:
            return await _execute(actor, run)
        finally:
            # Before the span's exit, which then adds a crash's exception (or marks an
            # outer cancellation) on top of what the result says.
            if run.result is not None:
                _tracing.end_run(span, run.result)


def _said(exc: BaseException) -> str:
    """An exception's message for a run's error; a custom Model's or store's exception
    whose ``__str__`` raises is named by its type (``satsuma._text``)."""
    message = exception_message(exc)
    return message if message is not None else describe_exception_text(exc)


async def _execute(actor: Actor, run: _Run) -> RunResult[Any]:
    try:
        return await run.execute()
    except Exception as exc:
        if run.result is None:
            run._answer_pending("the agent crashed")
            run.finish(
                "failed", f"the agent crashed: {describe_exception(exc, limit=MESSAGE_LIMIT)}"
            )
        printable = reportable(exc)
        if printable is not exc:
            raise printable from exc
        raise
    finally:
        if run.result is None:
            run._answer_pending("the agent stopped")
            run.finish("cancelled", "the agent stopped")
        if actor.persistence is not None:
            await _save_end(actor, run)


async def _save_end(actor: Actor, run: _Run) -> None:
    # Shielded, so that a cancelled run is recorded too; bounded, so that a stuck disk
    # cannot hold a shutdown forever.
    assert actor.persistence is not None and run.result is not None
    with trio.move_on_after(_SAVE_SECONDS, shield=True):
        for outcome in run.unjournaled:
            # The journal agrees with the history: these calls ended cancelled.
            await actor.persistence.call_finished(run.run_id, outcome)
        try:
            await actor.flush()
            result = run.result
            if result.status != "awaiting_approval":  # a pause is recorded by _pause
                await actor.persistence.end_run(
                    result.run_id, result.status, result.usage, result.error
                )
        except StoreError:
            logger.warning(
                "agent %s: could not record the end of run %s",
                actor.agent_id,
                run.run_id,
                exc_info=True,
            )


_SAVE_SECONDS = 10.0
