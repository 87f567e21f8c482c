"""``open_agent``: an agent started inside the caller's structured concurrency, its
handle yielded to the block, and what leaving the block raises when the agent crashed."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from types import TracebackType
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
    return _AgentBlock(
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
    return _AgentBlock(
        agent,
        model=model,
        context=context,
        agent_id=taken.lease.agent_id,
        store=store,
        approver=None,
        approval_timeout=CLASS_DEFAULT,
        taken=taken,
    )


async def _opened_actor(
    agent: type[Agent[Any]],
    *,
    model: Model | None,
    context: Mapping[str, Any] | None,
    agent_id: str | None,
    store: Store | None,
    approver: Approver | None,
    approval_timeout: float | _ClassDefault | None,
    taken: Taken | None = None,
) -> Actor:
    """The actor ``open_agent`` starts, once its arguments are checked (the store
    opened, the model found)."""
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
    return Actor(
        spec,
        model,
        context,
        agent_id or f"{spec.name}-{next(_agent_numbers)}",
        store=store,
        approver=approver,
        taken=taken,
    )


@final
class _AgentBlock:
    """``open_agent``'s context manager: the actor's nursery held open for the block.

    Written out, rather than made with ``contextlib.asynccontextmanager``: that wraps
    the block in an async generator, its frame and three more calls, code a
    conversation's first round trip runs cold (issue 36)."""

    __slots__ = ("_actor", "_arguments", "_manager", "_nursery")

    def __init__(self, agent: type[Agent[Any]], **arguments: Any) -> None:
        self._arguments = (agent, arguments)
        self._actor: Actor | None = None
        self._manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> AgentHandle[Any]:
        if self._manager is not None:
            raise RuntimeError("an open_agent(...) block can be entered only once")
        agent, arguments = self._arguments
        actor = await _opened_actor(agent, **arguments)
        handle: AgentHandle[Any] = AgentHandle(actor)
        actor.handle = handle
        manager = self._manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        if actor.starts_at_once:
            # Nothing can fail its start: it is served in bursts, each request sent to
            # it idle starting a task of this nursery (Actor.serve_in).
            actor.serve_in(nursery)
        else:
            try:
                await nursery.start(actor.serve)
            except BaseException as exc:
                # A start that failed (a tool server that cannot start) is one plain
                # exception, as a bad store is: the block never runs.
                try:
                    await manager.__aexit__(type(exc), exc, exc.__traceback__)
                except BaseExceptionGroup as group:
                    if len(group.exceptions) != 1:
                        raise
                    failed = group.exceptions[0]
                else:
                    failed = exc
                finally:
                    _detach(actor)
                raise failed from None
        self._actor = actor
        self._nursery = nursery
        return handle

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        actor, manager, nursery = self._actor, self._manager, self._nursery
        assert actor is not None and manager is not None and nursery is not None
        self._actor = self._nursery = None
        plain: BaseException | None = None
        try:
            if not actor.stop_if_idle():
                nursery.cancel_scope.cancel()
            try:
                suppressed = await manager.__aexit__(exc_type, exc, traceback)
            except BaseExceptionGroup as group:
                plain = _plainly(group, exc, actor)
                if plain is group:
                    raise
        finally:
            # The actor's tasks have ended. The actor and its handle refer to each
            # other: a cycle that only the garbage collector would free (with the whole
            # actor: its conversation, runner, mailbox), and that every conversation
            # would leave.
            _detach(actor)
        if plain is None:
            return bool(suppressed)
        if plain is exc:
            return False  # the block's own exception goes on as it was raised
        # Raised here, outside the handler, so that its own cause and context stay as
        # they were rather than becoming the group.
        raise plain


def _detach(actor: Actor) -> None:
    actor.handle = None
    actor.spawner = None


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
