"""Hooks around each call: allow, rewrite, deny or ask a person before it runs; replace
the outcome after.

A hook is an object with ``before_call`` and/or ``after_call`` methods, sync or async;
subclass ToolHook and override what you need. Hooks fail closed: a ``before_call`` that
raises (or passes the runner's ``hook_timeout``) denies the call, and an ``after_call``
that does so replaces the outcome with a denial, so content a hook was meant to redact
never reaches the model by accident.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

import attrs

from .._text import valid_str
from ._calls import ToolCall
from ._context import ToolContext
from ._results import ToolOutcome

__all__ = ["Ask", "Deny", "HookDecision", "Rewrite", "ToolHook"]


@attrs.frozen
class Deny:
    """Refuse the call; the model reads ``Error: Denied: <reason>``.

    A hook returns it from ``before_call``; an approver (or ``agent.resume(...,
    decisions=...)``) gives it as a person's decision on a call waiting for one, and may
    say who decided with ``by`` (recorded in ``ApprovalDecided.decided_by`` and on the
    call's span; a hook's ``by`` is not recorded anywhere).

    Raises:
        TypeError: ``by`` is not a str or None.
    """

    # Valid Unicode (a lone surrogate as U+FFFD): the model reads it and the store keeps it.
    reason: str = attrs.field(converter=valid_str)
    by: str | None = attrs.field(
        default=None,
        kw_only=True,
        converter=valid_str,
        validator=attrs.validators.optional(attrs.validators.instance_of(str)),
    )


@attrs.frozen
class Rewrite:
    """Run the call with these arguments instead (they are validated like the model's)."""

    input: Mapping[str, Any]


@attrs.frozen
class Ask:
    """Let the call run only once a person approves it (as if its tool declared
    ``requires_approval = True``): the approver is asked, or the agent's run pauses
    ``awaiting_approval``. ``reason`` tells the person why."""

    reason: str = attrs.field(converter=valid_str)


HookDecision: TypeAlias = Deny | Rewrite | Ask | None


class ToolHook:
    """Base class for hooks; override either method, sync or async.

    ``before_call(call, ctx)`` returns None to allow, ``Rewrite(input)``, ``Deny(reason)``
    or ``Ask(reason)`` (a person decides; later hooks still run, and one may deny). It
    sees the decoded arguments before validation. ``after_call(call, outcome)`` returns
    None to keep the outcome or a ToolOutcome to replace it (e.g. redacted). It sees every
    outcome, including unknown tools and invalid arguments.
    """

    def before_call(
        self, call: ToolCall, ctx: ToolContext
    ) -> HookDecision | Awaitable[HookDecision]:
        return None

    def after_call(
        self, call: ToolCall, outcome: ToolOutcome
    ) -> ToolOutcome | Awaitable[ToolOutcome | None] | None:
        return None


@attrs.frozen
class CompiledHook:
    """One hook method, with whether it must be awaited."""

    fn: Callable[..., Any]
    is_async: bool
    owner: object

    async def __call__(self, *args: Any) -> Any:
        result = self.fn(*args)
        if self.is_async or inspect.isawaitable(result):
            result = await result
        return result


def compile_hooks(hooks: object) -> tuple[tuple[CompiledHook, ...], tuple[CompiledHook, ...]]:
    """The overridden ``before_call`` and ``after_call`` methods of the given hooks.

    Raises:
        TypeError: a hook has neither method.
    """
    if hooks is None:
        return (), ()
    items = list(hooks) if isinstance(hooks, list | tuple) else [hooks]
    before: list[CompiledHook] = []
    after: list[CompiledHook] = []
    for hook in items:
        found = False
        for attribute, bucket in (("before_call", before), ("after_call", after)):
            method = getattr(hook, attribute, None)
            if method is None:
                continue
            found = True
            if getattr(type(hook), attribute, None) is getattr(ToolHook, attribute):
                continue  # the base class's no-op
            bucket.append(CompiledHook(method, inspect.iscoroutinefunction(method), hook))
        if not found:
            raise TypeError(f"hook {hook!r} has neither before_call nor after_call")
    return tuple(before), tuple(after)
