"""ToolRunner: runs a turn's tool calls under supervision and answers each exactly once.

Each call runs in its own task (one nursery per unit of the strategy) and its own cancel
scope, whose deadline is the tool's ``timeout`` or else the runner's. Whatever happens
inside — a return of any form, ToolError, a crash, an exception group, a hang, a result
that is not a result — becomes one ToolOutcome; nothing a tool does reaches its siblings.
``KeyboardInterrupt``, ``SystemExit`` and a ``trio.Cancelled`` that belongs to a scope
really being cancelled are never captured; any other BaseException a tool raises
(``asyncio.CancelledError``, ``GeneratorExit``, a stale ``Cancelled`` re-raised while
nothing is cancelling the call) is that call's crash. ``docs/failure-semantics.md`` lists
every case and what the model reads.

With an OpenTelemetry TracerProvider configured, each call is an ``execute_tool`` span
(``_spans``), current while the call's hooks and tool run.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any, final

import trio

from .. import _telemetry
from .._jsonvalue import expected_text
from ._approval import (
    DEFAULT_APPROVAL_TIMEOUT,
    Approver,
    Decision,
    Deferral,
    approval_reason,
    consult,
)
from ._calls import ToolCall, admitted, decoded
from ._ending import failed_outcome
from ._environment import (
    Environment,
    Interrupt,
    OutcomeCallback,
    finish_report,
    outcome_not_taken,
    parse_context,
    positive_or_none,
)
from ._events import ChannelEmitter, EventSink, ToolCallEnd, ToolCallStart, make_emitter
from ._gate import gate_call, normalise
from ._prepared import prepare_tools
from ._propagation import raise_propagating
from ._results import ToolOutcome, crash_details, error_outcome
from ._schedule import run_units
from ._strategies import Strategy, StrategyName
from ._texts import (
    SKIPPED_TEXT,
    cancelled_text,
    capability_denied_text,
    crashed_text,
    denied_text,
    invalid_args_text,
    unknown_tool_text,
)
from ._tool import ToolDefinition, takes_context
from ._truncation import truncate

__all__ = ["ToolRunner"]

logger = logging.getLogger("satsuma.tools")

# What the ToolCallEnd of a call cancelled in flight says; an agent answers the model with
# its own words for why (the run was cancelled, passed its max_duration...).
_CANCELLED_IN_FLIGHT = cancelled_text("the call was cancelled")


@final
class ToolRunner:
    """Runs tool calls, each in its own task and cancel scope, and returns one ToolOutcome
    per call, in call order.

    Args:
        tools: Tool classes, Tool instances, ``@tool`` functions and Toolsets.
        timeout: Deadline in seconds for tools that declare none; None for no deadline.
        max_concurrency: At most this many calls run at once (across every ``execute``
            of this runner); None for no cap.
        strategy: ``"parallel"`` (default), ``"sequential"`` or ``Batched(n)``.
        hooks: A ToolHook (or any object with ``before_call``/``after_call``) or a list.
        hook_timeout: Deadline in seconds for each hook call; past it the call is denied.
        max_result_chars: Content longer than this is cut (head and tail kept, with a
            marker saying how much was cut; the full text goes to ``details``). None
            keeps everything.
        max_threads: At most this many worker threads for sync tools. A sync tool that
            hangs past its deadline is abandoned but keeps its thread until it returns.
        events: The default event sink for ``execute`` (see ``execute``).

    Raises:
        ToolDefinitionError: a tool is not a tool, or two tools share a name.
        ValueError: an option is out of range.
    """

    def __init__(
        self,
        tools: Iterable[object],
        *,
        timeout: float | None = 120.0,
        max_concurrency: int | None = None,
        strategy: StrategyName | Strategy = "parallel",
        hooks: object = None,
        hook_timeout: float = 10.0,
        max_result_chars: int | None = 100_000,
        max_threads: int = 40,
        events: EventSink | None = None,
    ) -> None:
        prepared = prepare_tools(
            tools,  # an agent's come prepared, checked once per class (see _prepared)
            timeout=timeout,
            max_concurrency=max_concurrency,
            strategy=strategy,
            hooks=hooks,
            hook_timeout=hook_timeout,
            max_result_chars=max_result_chars,
            max_threads=max_threads,
            events=events,
        )
        self._entries, self._limiter, self._thread_limiter = prepared.for_runner()
        self._timeout, self._max_result_chars = prepared.timeout, prepared.max_result_chars
        self._strategy, self._hooks = prepared.strategy, prepared.hooks
        self._events = prepared.events

    @functools.cached_property
    def _seeing(self) -> frozenset[str]:
        """The names of the tools that can see their ToolContext; the calls of the
        others (``@tool`` functions without ``ctx``) build none unless a hook reads it."""
        return frozenset(
            name for name, entry in self._entries.items() if takes_context(entry.instance)
        )

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The compiled definitions of this runner's tools, in the order given."""
        return tuple(entry.definition for entry in self._entries.values())

    def schemas(self) -> list[dict[str, Any]]:
        """The Anthropic tool definitions to send with a request."""
        return [entry.definition.schema() for entry in self._entries.values()]

    async def execute(
        self,
        calls: Iterable[object],
        context: Mapping[str, Any] | None = None,
        *,
        interrupt: Interrupt | None = None,
        events: EventSink | None = None,
        agent: Any = None,
        on_outcome: OutcomeCallback | None = None,
        approver: Approver | Deferral | None = None,
        approval_timeout: float | None = DEFAULT_APPROVAL_TIMEOUT,
        decisions: Mapping[str, Decision] | None = None,
    ) -> list[ToolOutcome]:
        """Run the calls and return one outcome per call, in call order.

        Args:
            calls: ToolCalls, dicts with ``id``/``name``/``input``, or the Anthropic SDK's
                ``ToolUseBlock``s.
            context: ``working_dir`` and ``capabilities`` fill the ToolContext fields of
                those names; every other key goes to ``ctx.extra``.
            interrupt: Checked as each call starts; once set, calls not yet started are
                answered ``Error: Skipped due to queued user message.``
            events: A callback or a trio MemorySendChannel receiving ToolCallStart,
                ToolProgress, ToolUpdate and ToolCallEnd (overrides the runner's).
            agent: The agent handle given to tools as ``ctx.agent``.
            on_outcome: Called with each call and its final outcome as soon as that is
                known, before its ToolCallEnd, so that a caller keeps every outcome of a
                call that finished even when ``execute`` is then cancelled (an agent
                journals them this way). A plain function or an async one; an async
                one is awaited shielded from cancellation (for at most 10 seconds).
                What it raises is logged and does not change the outcome.
            approver: Asked (``PendingCall -> Approve | Deny``) about each call that
                needs a decision (its tool ``requires_approval``, or a hook returned
                ``Ask``), after the hooks and the validation of its arguments. Without
                one, such calls are denied. A ``Deferral`` (as an agent with a store
                gives) collects them instead, unrun.
            approval_timeout: Seconds the approver has for each call; past them (or if
                it raises) the call is denied. None: no limit.
            decisions: Decisions already made, by call id, for calls collected by a
                ``Deferral`` and now run again: their before_call hooks are not run a
                second time (they ran when the call was first made), and the decision
                stands in for the approver's.

        Cancelling ``execute`` cancels every call still running and returns nothing;
        each call cancelled in flight still gets its ToolCallEnd (``error_kind``
        ``cancelled``), and calls that had finished keep the outcome given to
        ``on_outcome``.

        Raises:
            TypeError: a call, the context or the event sink has the wrong shape.
        """
        # The one JSON gate of values: what every later step sees is plain.
        call_list = admitted(calls)
        working_dir, capabilities, extra = parse_context(context)
        emitter = make_emitter(events if events is not None else self._events)
        env = Environment(
            working_dir=working_dir,
            capabilities=capabilities,
            extra=extra,
            agent=agent,
            emitter=emitter,
            interrupt=interrupt,
            trio_thread=threading.get_ident(),
            trio_token=trio.lowlevel.current_trio_token(),
            tracer=_telemetry.tracer(),
            on_outcome=on_outcome,
            approver=approver,
            approval_timeout=positive_or_none("approval_timeout", approval_timeout),
            decisions=decisions if decisions is not None else {},
            now=trio.lowlevel.current_clock().current_time,
        )
        outcomes: list[ToolOutcome | None] = [None] * len(call_list)
        if isinstance(emitter, ChannelEmitter):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(emitter.pump)
                try:
                    await run_units(
                        self._run_supervised,
                        self._strategy,
                        self._limiter,
                        call_list,
                        env,
                        outcomes,
                    )
                finally:
                    emitter.close()
        else:
            await run_units(
                self._run_supervised, self._strategy, self._limiter, call_list, env, outcomes
            )
        if isinstance(approver, Deferral):
            # In call order, as the model asked for them (the calls ran at once, and
            # reached the Deferral in whatever order their tasks did).
            order = {call.id: index for index, call in enumerate(call_list)}
            approver.pending.sort(key=lambda pending: order.get(pending.id, len(order)))
        return outcomes  # type: ignore[return-value]  # every slot is filled by now

    async def _run_supervised(
        self, call: ToolCall, env: Environment, outcomes: list[ToolOutcome | None], index: int
    ) -> ToolOutcome:
        """The call's final outcome (after truncation and the after_call hooks), given to
        ``on_outcome``, ended for whoever watches, put in ``outcomes[index]`` and
        returned; a Deferral's denial "awaiting a decision" when one took it. One
        coroutine, not one per step: this is every call."""
        emitter = env.emitter
        if emitter is not None:
            emitter.emit(ToolCallStart(tool_use_id=call.id, tool_name=call.name, input=call.input))
        given = call
        try:
            start = env.now()
            outcome: ToolOutcome | None
            if env.interrupt is not None and env.interrupt.is_set():
                outcome = error_outcome(call.id, call.name, "skipped", SKIPPED_TEXT)
            else:
                try:
                    outcome, call = await self._attempt(call, env, start)
                except Exception as exc:
                    # Not the tool's failure (that is captured inside): a value nothing
                    # foresaw broke satsuma's own handling of this call. It still gets its
                    # one outcome, and its siblings theirs.
                    logger.error(
                        "tool %s (call %s): satsuma failed", call.name, call.id, exc_info=exc
                    )
                    outcome = error_outcome(
                        call.id,
                        call.name,
                        "crashed",
                        crashed_text(exc),
                        duration=env.now() - start,
                        details=crash_details(exc),
                    )
            if outcome is None:
                # Deferred, not ended: its ToolCallEnd comes when it is run with a decision.
                outcome = error_outcome(
                    call.id, call.name, "denied", denied_text("awaiting a decision")
                )
                outcomes[index] = outcome
                return outcome
            limit = self._max_result_chars
            # A short text (the common result) is judged here, without truncate's call.
            content = outcome.content
            if limit is not None and (type(content) is not str or len(content) > limit):
                outcome = truncate(outcome, limit)
            # The tool has ended: what it did stays true even if the call is cancelled
            # now, so the finishing steps are shielded (each one bounded).
            if self._hooks.after:
                with trio.CancelScope(shield=True):
                    outcome = await self._hooks.run_after(call, outcome)
            if env.on_outcome is not None:
                # Called here, not in a coroutine of its own: an agent's is a plain function.
                try:
                    pending = env.on_outcome(call, outcome)
                except Exception:
                    outcome_not_taken(call)
                else:
                    if pending is not None:
                        await finish_report(pending, call)
        except BaseException:
            # Cancelled in flight (or KeyboardInterrupt): the call still ends, for whoever
            # watches, before the cancellation goes on.
            if emitter is not None:
                cancelled = error_outcome(given.id, given.name, "cancelled", _CANCELLED_IN_FLIGHT)
                emitter.emit(
                    ToolCallEnd(tool_use_id=given.id, tool_name=given.name, outcome=cancelled)
                )
            raise
        if emitter is not None:
            emitter.emit(ToolCallEnd(tool_use_id=call.id, tool_name=call.name, outcome=outcome))
        outcomes[index] = outcome
        return outcome

    async def _attempt(
        self, call: ToolCall, env: Environment, start: float
    ) -> tuple[ToolOutcome | None, ToolCall]:
        """The call's outcome (None: deferred), and the call as it was finally made
        (decoded, rewritten, edited by its approver)."""
        try:
            entry = self._entries[call.name]  # a subscript: no call, unlike .get
        except KeyError:
            return error_outcome(
                call.id, call.name, "unknown_tool", unknown_tool_text(call.name)
            ), call
        if call.refused is not None:
            return error_outcome(
                call.id, call.name, "invalid_args", invalid_args_text([call.refused])
            ), call
        text = isinstance(call.input, (str, bytes, bytearray))
        if text:
            call, problem = decoded(call)
            if problem is not None:
                return error_outcome(
                    call.id, call.name, "invalid_args", invalid_args_text([problem])
                ), call
        definition = entry.definition
        # Fails closed before anything else looks at the call: hooks and validation
        # included, a tool the context does not allow never gets further.
        missing = definition.capabilities - env.capabilities
        if missing:
            return error_outcome(
                call.id, call.name, "denied", capability_denied_text(min(missing))
            ), call
        if text:
            # Only decoded text is new here (values passed execute's gate): NaN or too
            # deep, it would poison the history and every later request.
            call, refused = gate_call(call)
            if refused is not None:
                return refused, call
        arguments = call.input
        # The clock read when the call began stands for the tool's entry until something
        # is awaited before it (a hook, an approval): one read fewer per call.
        awaited = False
        # A context only where someone can see it: a hook, or a tool that takes one.
        ctx = env.context_for(call) if self._hooks.before or call.name in self._seeing else None
        preset = env.decisions.get(call.id) if env.decisions else None
        asked = approval_reason(call.name) if definition.requires_approval else None
        # A call decided after a pause had its hooks run when it was first made: run again,
        # an Ask would only ask again, and a Rewrite rewrite what was already rewritten.
        if self._hooks.before and preset is None:
            if not isinstance(arguments, Mapping):
                errors = [expected_text("arguments", "object", arguments)]
                return error_outcome(
                    call.id, call.name, "invalid_args", invalid_args_text(errors)
                ), call
            assert ctx is not None
            decided, hook_asked = await self._hooks.run_before(call, ctx)
            awaited = True
            if isinstance(decided, ToolOutcome):
                return decided, call
            if decided is not call:
                decided, refused = gate_call(decided)
                if refused is not None:
                    return refused, decided
            call = decided
            arguments = call.input
            if hook_asked is not None:
                asked = hook_asked if asked is None else f"{asked}; {hook_asked}"
        args, errors = definition.check(arguments)
        if errors:
            return error_outcome(
                call.id, call.name, "invalid_args", invalid_args_text(errors)
            ), call
        if preset is not None or asked is not None:
            approved = await consult(
                call,
                asked,
                preset,
                env.approver,
                env.approval_timeout,
                env.emitter,
                traced=env.tracer is not None,
            )
            awaited = True
            if not isinstance(approved, ToolCall):
                return approved, call  # denied, or deferred (None)
            if approved is not call:  # its input edited by the approver: checked again
                call, refused = gate_call(approved)
                if refused is not None:
                    return refused, call
                args, errors = definition.check(call.input)
                if errors:
                    return error_outcome(
                        call.id, call.name, "invalid_args", invalid_args_text(errors)
                    ), call

        timeout = definition.timeout if definition.timeout is not None else self._timeout
        # The tool's deadline counts from when it is entered: hooks have their own.
        deadline = math.inf if timeout is None else (env.now() if awaited else start) + timeout
        crash: BaseException | None = None
        raw: object = None
        finished = False
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                if ctx is not None:
                    ctx._scope = scope
                # ctx is None only for a tool that never reads it (takes_context).
                if entry.direct is not None:
                    raw = await entry.direct(**args)
                elif definition.is_async:
                    raw = await entry.instance.run(args, ctx)  # type: ignore[arg-type]
                else:
                    raw = await trio.to_thread.run_sync(
                        entry.instance.run,  # type: ignore[arg-type]
                        args,
                        ctx,
                        abandon_on_cancel=True,
                        limiter=self._thread_limiter,
                    )
            finished = True
        except BaseException as exc:
            raise_propagating(exc)
            # The tool's own failure, whatever its class: an exception group from its
            # own nursery (what is left once our scope took its Cancelled out),
            # asyncio.CancelledError, GeneratorExit, a stale trio.Cancelled...
            crash = exc
            finished = True
        finally:
            late = scope.cancel_called  # read once: a property, on every call
            if ctx is not None:
                ctx._end(abandoned=not finished or late)

        duration = env.now() - start
        # After the scope exits, cancel_called means our own deadline (an outer cancel
        # raises past here): a tool that swallowed the Cancelled and returned is late.
        if late or crash is not None:
            return failed_outcome(
                call, None if late else crash, timeout, duration, traced=env.tracer is not None
            ), call
        if type(raw) is str and str.isascii(raw):
            # The common result, judged here as normalise judges it first, without its call.
            return ToolOutcome(
                tool_use_id=call.id,
                tool_name=call.name,
                content=raw,
                is_error=False,
                duration=duration,
            ), call
        return normalise(raw, call.id, call.name, duration), call
