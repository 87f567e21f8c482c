"""The gather phase of a run: one model call, admitted by the configuration's limiter,
streamed to the run's events, its response checked and its calls given ids of their own,
then added to the conversation."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..models import (
    ContextWindowExceeded,
    ModelRequest,
    ModelResponse,
    checked_response,
    context_window_for,
    estimate_input_tokens,
)
from . import _spending, _tracing
from ._budget import budgeted
from ._compaction import Compaction, compacted
from ._events import ModelRetry, ModelWaitEnd, ModelWaitStart, TextDelta, ThinkingDelta, TurnEnd
from ._history import choose, fixed_size
from ._ids import unique_ids
from ._prefix import watch_system

if TYPE_CHECKING:
    from ..models import ModelLimiter, Permit
    from ._runstate import Run

__all__ = ["EMPTY_RESPONSE_TEXT", "call", "commit_response", "prepare"]

# What the history keeps for a response with no content at all: the API refuses an empty
# message, and without an assistant message here the next prompt would be glued onto the
# unanswered one.
EMPTY_RESPONSE_TEXT = "(no response)"


class _Listener:
    """What the model tells the run while it answers (``ModelListener``)."""

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def wants_deltas(self) -> bool:
        # Deltas reach only a run's event sink (a callback, agent.stream, a live view),
        # and one that says so (_job.WatchedEvents: a node's recorder, while watched).
        sink = self.run.job.sink
        return sink is not None and bool(getattr(sink, "wants_deltas", True))

    def text(self, delta: str) -> None:
        run = self.run
        if run.job.sink is not None:
            run.emit(run.event(TextDelta, text=delta))

    def thinking(self, delta: str) -> None:
        run = self.run
        if run.job.sink is not None:
            run.emit(run.event(ThinkingDelta, text=delta))

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
        run.emit(run.event(ModelRetry, attempt=attempt, delay=delay, reason=reason))

    def retry_after(self, seconds: float) -> None:
        """The API asked to wait ``seconds`` before the next request: every user of the
        configuration waits that long (docs/limits.md)."""
        limiter = self.run.ctx.limiter
        if limiter is not None:
            limiter.pause(seconds)


async def prepare(run: Run) -> tuple[ModelRequest, _spending.Held | None]:
    """The request of the run's next model call, and what its budgets hold for it (None
    without a budget): to pass to ``call`` at once. Two steps, not one coroutine calling
    the other: the run's task is resumed many times in a model call, each frame of the
    chain with it.

    Raises:
        BudgetExceeded: the call would pass a budget; it is not sent (the run fails).
        ConfigurationError: the agent has a budget, and the model no prices.
        ContextWindowExceeded: the request would pass the model's context window.
    """
    if run.job.wait_for_reader is not None:
        # Before the call, not inside it: the events of a turn come synchronously.
        await run.job.wait_for_reader()
    ctx = run.ctx
    spec = ctx.spec
    conversation = ctx.conversation
    tools_box = ctx.tools
    tools_box.refresh()  # an MCP server may have announced new tools since
    tools: tuple[Mapping[str, Any], ...] = tools_box.schemas
    if run.output_spec is not None:
        tools = (*tools, run.output_spec.tool)
    memo = conversation.trim
    # The tokens per character of the last request, before this one's size replaces it.
    rate = memo.rate(conversation.last_usage)
    fixed_chars = fixed_size(memo, spec.system, tools)
    history = spec.history
    if isinstance(history, Compaction):
        messages = await compacted(run, history, tools, fixed_chars, rate)
    else:
        messages = choose(
            history, tuple(conversation.messages), conversation.last_usage, memo, fixed_chars
        )
    if spec.cache is not None:
        watch_system(spec.origin, spec.name, spec.system)
    request = ModelRequest(
        model=ctx.model_id,
        system=spec.system,
        messages=tuple(messages),
        tools=tools,
        max_tokens=spec.max_tokens,
        cache=spec.cache,
    )
    # The request's input tokens, estimated from its size and the API's last count.
    estimate = memo.sent_chars * rate
    window = context_window_for(ctx.model_id)
    if window is not None:
        _check_window(run, window, estimate)
    # Without a budget, nothing reserved (BudgetExceeded: the call is not sent).
    held = await _spending.reserve(run, request, estimate) if budgeted(spec.budget) else None
    return request, held


async def call(run: Run, request: ModelRequest, held: _spending.Held | None) -> ModelResponse:
    """The model's checked response to ``request`` (from ``prepare``), admitted by the
    limiter; its cost settled in place of ``held``.

    Raises:
        ModelError: what the model's retries could not cure (the run fails).
    """
    ctx = run.ctx
    conversation = ctx.conversation
    try:
        # Without limits, no limiter: nothing awaited or allocated for them.
        permit = None if ctx.limiter is None else await _admit(run, ctx.limiter, request)
        try:
            with _tracing.start_chat(request) as chat:
                run.chat = chat
                if permit is not None:
                    _tracing.waited(chat, permit.waited)
                response = checked_response(await ctx.model.respond(request, _Listener(run)))
                # The one point every response passes, whichever Model made it: from
                # here on (runner, events, journal, history) its calls have their own ids.
                response = unique_ids(response, conversation.taken_ids.of(conversation.messages))
                _tracing.end_chat(chat, response)
        finally:
            if permit is not None:
                run.permit = None
                permit.release()
        if permit is not None:
            permit.settle(response.usage)
        run.usage = run.usage + response.usage
        conversation.last_usage = response.usage
    except BaseException:
        if held is not None:
            await _spending.settle(run, held, None)  # the reservation given back
        raise
    if held is not None:
        await _spending.settle(run, held, response.usage)
    return response


def _check_window(run: Run, window: int, estimate: float) -> None:
    """Fail the call before it is sent if the request would pass the model's context
    window: counted by the API when a ``Compaction(count="api")`` just did, else the
    estimate (only an estimate past the window fails here: the API's own answer stands
    for a request the estimate let through).

    Raises:
        ContextWindowExceeded: it would.
    """
    ctx = run.ctx
    counted = ctx.conversation.compaction.api_tokens
    if isinstance(ctx.spec.history, Compaction) and counted is not None:
        if counted > window:
            raise ContextWindowExceeded(ctx.model_id, counted, window, "api")
    elif estimate > window:
        raise ContextWindowExceeded(ctx.model_id, math.ceil(estimate), window, "estimate")


async def _admit(run: Run, limiter: ModelLimiter, request: ModelRequest) -> Permit:
    """The call's permit from its configuration's limiter, once there is room: at
    once if there is, else after waiting in its queue, between ModelWaitStart and
    ModelWaitEnd events. Cancelled while it waits, the run holds no slot."""
    cost = estimate_input_tokens(request) if limiter.counts_tokens else 0
    permit = limiter.admit_nowait(cost)
    if permit is None:
        reason = limiter.blocked(cost) or "its turn"
        queued = limiter.statistics().waiting + 1
        run.emit(run.event(ModelWaitStart, reason=reason, queued=queued))
        permit = await limiter.admit(cost)
        sent = False
        try:
            run.emit(run.event(ModelWaitEnd, seconds=permit.waited))
            sent = True
        finally:
            if not sent:
                permit.release()  # an event sink that raised: the slot is not kept
    run.permit = permit
    return permit


def commit_response(run: Run, response: ModelResponse) -> None:
    """Add the response to the conversation (its calls now wait for results), and end
    the turn's events."""
    if response.content:
        run.commit_assistant(response.content)
        # unique_ids gave this content its ids, from the set of the history before it.
        conversation = run.ctx.conversation
        conversation.taken_ids.committed(conversation.messages)
        # The n-th call is the n-th tool_use block, with its id (unique_ids checked).
        run.pending = [call.id for call in response.calls]
    elif not run.paused:
        run.commit_assistant([{"type": "text", "text": EMPTY_RESPONSE_TEXT}])
    run.paused = response.stop_reason == "pause_turn"
    run.emit(run.event(TurnEnd, usage=response.usage, stop_reason=response.stop_reason))
