"""``open_agent``: an agent started inside the caller's structured concurrency, its
handle yielded to the block, and what leaving the block raises when the agent crashed."""

from __future__ import annotations

import enum
import itertools
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, final

import trio

from .._exceptions import AgentCrashed, AgentUnavailable, ConfigurationError
from ..models import Model, shared_model
from ..store import Store, Taken
from ..tools import Approver
from ._actor import Actor
from ._agent import Agent, seconds_or_none, spec_of
from ._compaction import Compaction
from ._handle import AgentHandle
from ._result import OutputT

__all__ = ["CLASS_DEFAULT", "open_agent", "open_taken"]

_agent_numbers = itertools.count(1)


@final
class _ClassDefault(enum.Enum):
    """``approval_timeout``'s default, where None already means "no limit"."""

    TOKEN = enum.auto()


CLASS_DEFAULT: Final = _ClassDefault.TOKEN


def open_agent(
    agent: type[Agent[OutputT]],
    *,
    model: Model | None = None,
    context: Mapping[str, Any] | None = None,
    agent_id: str | None = None,
    store: Store | None = None,
    approver: Approver | None = None,
    approval_timeout: float | _ClassDefault | None = CLASS_DEFAULT,
) -> AbstractAsyncContextManager[AgentHandle[OutputT]]:
    """Start an agent inside the caller's structured concurrency.

    ``async with satsuma.open_agent(CodingAgent) as agent: await agent.run("...")``. The
    agent runs until the block exits; a run still in progress then ends ``cancelled``.
    For an agent declared ``satsuma.Agent[Invoice]`` the handle is an
    ``AgentHandle[Invoice]`` (see docs/output.md).

    Args:
        agent: An Agent subclass.
        model: The model provider. By default, the ``AnthropicModel`` that every agent
            of this trio run without one shares (one client and connection pool per
            ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN and ANTHROPIC_BASE_URL, closed when
            the run ends). Tests pass a ScriptedModel.
        context: The tools' context mapping (``working_dir``, ``capabilities``, extras).
        agent_id: This agent's id (made up if not given). With a store, the id under
            which its conversation is kept: an agent started again with the same id
            loads it and goes on.
        store: Where the conversation, the run records and the tool-call journal are
            kept (a SQLiteStore, a MemoryStore); none by default.
        approver: Asked (``PendingCall -> Approve | Deny``) about each call that needs a
            person's decision, while the run waits (within the class's
            ``approval_timeout``); default: the class's ``approver``. With neither, an
            agent with a store pauses such a run ``awaiting_approval`` (see
            ``resume``), and one without a store denies the calls.
        approval_timeout: Seconds the approver has for each call, past which the call
            is denied; None: no limit. Default: the class's ``approval_timeout`` (300).

    Raises:
        TypeError: ``agent`` is not a concrete Agent subclass.
        ValueError: ``approval_timeout`` is not a positive number or None.
        ConfigurationError: no model is passed and the environment has no API key, or
            the agent's history is a ``Compaction`` and the model compacts on the API's
            side too (``ContextEditing(compact=True)``).
    """
    return _open_agent(
        agent,
        model=model,
        context=context,
        agent_id=agent_id,
        store=store,
        approver=approver,
        approval_timeout=approval_timeout,
    )


def open_taken(
    agent: type[Agent[OutputT]],
    taken: Taken,
    *,
    store: Store,
    model: Model | None = None,
    context: Mapping[str, Any] | None = None,
) -> AbstractAsyncContextManager[AgentHandle[OutputT]]:
    """``open_agent`` for an agent whose lease and state its caller took already, in
    ``store`` (a cluster's node, with its run's claim): the agent starts from ``taken``
    rather than taking and loading its own, and lets the lease go as it closes."""
    return _open_agent(
        agent,
        model=model,
        context=context,
        agent_id=taken.lease.agent_id,
        store=store,
        approver=None,
        approval_timeout=CLASS_DEFAULT,
        taken=taken,
    )


@asynccontextmanager
async def _open_agent(
    agent: type[Agent[Any]],
    *,
    model: Model | None,
    context: Mapping[str, Any] | None,
    agent_id: str | None,
    store: Store | None,
    approver: Approver | None,
    approval_timeout: float | _ClassDefault | None,
    taken: Taken | None = None,
) -> AsyncIterator[AgentHandle[Any]]:
    spec = spec_of(agent)
    if not isinstance(approval_timeout, _ClassDefault):
        if not seconds_or_none(approval_timeout):
            raise ValueError(
                "approval_timeout must be a positive number of seconds or None, got: "
                f"{approval_timeout!r}"
            )
        seconds = None if approval_timeout is None else float(approval_timeout)
        spec = spec.with_approval_timeout(seconds)
    if model is None:
        model = await shared_model(spec.name, spec.model)
    editing = getattr(model, "context_editing", None)
    if isinstance(spec.history, Compaction) and getattr(editing, "compact", False) is True:
        # Two summarisers of one conversation: satsuma's would fold the API's compaction
        # blocks into its own summary, and the API's would summarise satsuma's.
        raise ConfigurationError(
            f"agent {spec.name!r} compacts its history twice: its history is a "
            "satsuma.Compaction and its model's ContextEditing has compact=True",
            "Use one of them: history = satsuma.KeepAll() with the API's compaction, "
            "or ContextEditing(compact=False) with satsuma's",
        )
    if store is not None and agent_id is None:
        raise ValueError("an agent with a store needs an agent_id, to find its conversation again")
    if store is not None:
        await store.open()  # a bad file is a plain StoreError here, before anything starts
    if approver is not None and not callable(approver):
        raise TypeError(f"approver must be an async function, got: {approver!r}")
    actor = Actor(
        spec,
        model,
        context,
        agent_id or f"{spec.name}-{next(_agent_numbers)}",
        store=store,
        approver=approver,
        taken=taken,
    )
    handle: AgentHandle[Any] = AgentHandle(actor)
    actor.handle = handle
    started = False
    body_error: BaseException | None = None
    plain: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            if actor.starts_at_once:
                # Nothing can fail its start: waiting for it would only cost the
                # conversation two scheduler batches before its first request.
                nursery.start_soon(actor.serve)
            else:
                await nursery.start(actor.serve)
            started = True
            try:
                yield handle
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                if not actor.stop_if_idle():
                    nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # A start that failed (a tool server that cannot start) is one plain exception,
        # as a bad store is: the block never ran.
        if not started and len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        plain = _plainly(group, body_error, actor)
        if plain is group:
            raise
    finally:
        # The actor's task has ended. The actor and its handle refer to each other: a
        # cycle that only the garbage collector would free (with the whole actor: its
        # conversation, runner, mailbox), and that every conversation would leave.
        actor.handle = None
    if plain is not None:
        # Raised here, outside the handler, so that its own cause and context stay as
        # they were rather than becoming the group.
        raise plain


def _plainly(
    group: BaseExceptionGroup[BaseException], body_error: BaseException | None, actor: Actor
) -> BaseException:
    """What leaving ``open_agent`` raises instead of the nursery's group, where one error
    says it all: the block's own exception as it was raised; or, when the agent crashed
    (which cancels the block, as a nursery's failing task does), an ``AgentCrashed``
    whose cause is the crash, once, however often the block was told of it."""
    body = set(map(id, _leaves(body_error))) if body_error is not None else set()
    crashes = [
        leaf
        for leaf in _leaves(group)
        if id(leaf) not in body and not isinstance(leaf, trio.Cancelled)
    ]
    if not crashes:
        return body_error if body_error is not None else group
    if len(crashes) > 1:
        return group
    (crash,) = crashes
    told = [
        leaf
        for leaf in (_leaves(body_error) if body_error is not None else [])
        if not isinstance(leaf, trio.Cancelled)
        and not (
            isinstance(leaf, (AgentCrashed, AgentUnavailable)) and leaf.agent == actor.spec.name
        )
    ]
    if told:
        return group  # the block failed of its own accord too: both are news
    if isinstance(crash, AgentCrashed):
        return crash
    crashed = AgentCrashed(actor.spec.name, crash, agent_id=actor.agent_id)
    crashed.__cause__ = crash
    return crashed


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
