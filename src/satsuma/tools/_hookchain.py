"""A runner's hooks at work around each call: ``before_call`` in order (allow, rewrite,
deny, ask), ``after_call`` in order (replace the outcome), each within the hook deadline;
failing closed (see ``_hooks`` for what a hook is).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, final

import attrs
import trio

from .._text import MESSAGE_LIMIT, describe_exception
from ._calls import ToolCall
from ._context import ToolContext
from ._gate import plain_outcome
from ._hooks import Ask, CompiledHook, Deny, Rewrite, compile_hooks
from ._propagation import raise_propagating
from ._results import ToolOutcome, crash_details, error_outcome
from ._texts import denied_text, short_repr, withheld_text

__all__ = ["HookChain"]

logger = logging.getLogger("satsuma.tools")


@final
@attrs.frozen
class HookChain:
    """The compiled hooks of a runner, and the deadline of each hook call."""

    before: tuple[CompiledHook, ...]
    after: tuple[CompiledHook, ...]
    timeout: float

    @classmethod
    def of(cls, hooks: object, timeout: float) -> HookChain:
        """The chain of the given hooks (see ``compile_hooks``).

        Raises:
            TypeError: a hook has neither ``before_call`` nor ``after_call``.
        """
        before, after = compile_hooks(hooks)
        return cls(before, after, timeout)

    async def _call(self, hook: CompiledHook, *args: Any) -> tuple[object, BaseException | None]:
        """What the hook returned, or what it failed with (its own exceptions, whatever
        their class, and overrunning ``hook_timeout``); only what must go on is raised."""
        try:
            with trio.fail_after(self.timeout):
                return await hook(*args), None
        except BaseException as exc:  # TooSlowError included: the hook overran
            raise_propagating(exc)
            return None, exc

    async def run_before(
        self, call: ToolCall, ctx: ToolContext
    ) -> tuple[ToolCall | ToolOutcome, str | None]:
        """The call as the hooks leave it (rewritten or not), or the denial; and the
        reasons of the hooks that asked for a person's decision, if any did."""
        asked: list[str] = []
        for hook in self.before:
            decision, failure = await self._call(hook, call, ctx)
            if failure is not None:
                return self._failed(call, hook, "before_call", failure), None
            if decision is None:
                continue
            if isinstance(decision, Deny):
                return error_outcome(
                    call.id, call.name, "denied", denied_text(decision.reason)
                ), None
            if isinstance(decision, Rewrite) and isinstance(decision.input, Mapping):
                call = attrs.evolve(call, input=dict(decision.input))
                continue
            if isinstance(decision, Ask) and isinstance(decision.reason, str):
                asked.append(decision.reason)
                continue
            return self._failed(
                call,
                hook,
                "before_call",
                TypeError(f"returned {decision!r}, not None, Rewrite, Deny or Ask"),
            ), None
        return call, "; ".join(asked) if asked else None

    async def run_after(self, call: ToolCall, outcome: ToolOutcome) -> ToolOutcome:
        for hook in self.after:
            replaced, failure = await self._call(hook, call, outcome)
            if failure is not None:
                return self._failed(call, hook, "after_call", failure, duration=outcome.duration)
            if replaced is None:
                continue
            if not issubclass(type(replaced), ToolOutcome):
                return self._failed(
                    call,
                    hook,
                    "after_call",
                    TypeError(f"returned {type(replaced).__name__}, not None or a ToolOutcome"),
                    duration=outcome.duration,
                )
            # Through the results gate too: what a hook puts in place of the result
            # reaches the same events, journal and model.
            try:
                outcome = plain_outcome(replaced)  # type: ignore[arg-type]
            except ValueError as exc:
                return self._failed(call, hook, "after_call", exc, duration=outcome.duration)
        return outcome

    def _failed(
        self,
        call: ToolCall,
        hook: CompiledHook,
        stage: str,
        exc: BaseException,
        duration: float = 0.0,
    ) -> ToolOutcome:
        # Fails closed: whatever the hook was guarding, the call does not go through. After
        # the call, closed means withheld: the model reads that the tool did run.
        if isinstance(exc, trio.TooSlowError):
            problem = f"{stage} hook timed out after {self.timeout:g}s"
        else:
            # Not the tool's output, which truncation bounds: said within MESSAGE_LIMIT.
            problem = f"{stage} hook failed: {describe_exception(exc, limit=MESSAGE_LIMIT)}"
        logger.warning("tool %s (call %s): %s", call.name, call.id, problem, exc_info=exc)
        text = denied_text(problem) if stage == "before_call" else withheld_text(call.name, problem)
        return error_outcome(
            call.id,
            call.name,
            "denied",
            text,
            duration=duration,
            details={"hook": short_repr(hook.owner), **crash_details(exc)},
        )
