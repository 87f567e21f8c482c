"""What a supervisor supervises: child specs, the kinds of child (agent, supervisor,
service), and the record a supervisor keeps of each child across its incarnations."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeAlias

import attrs
import trio

from .._exceptions import AgentUnavailable
from .._messages import Message
from ..agents import Agent, AgentHandle, internal
from ..models import Model, shared_model
from ..store import Owner, Store
from ..tools import DEFAULT_APPROVAL_TIMEOUT, Approver

__all__ = ["Child", "ChildSpec", "RestartType", "kind_of"]

RestartType: TypeAlias = Literal["permanent", "transient", "temporary"]
_RESTARTS = ("permanent", "transient", "temporary")


def _restart_type(instance: object, attribute: object, value: str) -> None:
    if value not in _RESTARTS:
        raise ValueError(f"restart must be one of {', '.join(_RESTARTS)}, got: {value!r}")


def _timeout(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds, got: {value!r}")


@attrs.frozen(kw_only=True)
class ChildSpec:
    """How to run one child.

    Attributes:
        child: An Agent subclass, a Supervisor, or any object with
            ``async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED)``.
        id: Unique among the supervisor's children. By default the agent's name, the
            supervisor's name, or the service's class name, with ``-2``, ``-3``...
            added when that id is taken (an explicit id that is taken is refused).
        name: A name to look the child up by (``sup.lookup(name)``).
        restart: ``permanent`` (always restarted), ``transient`` (restarted after a
            crash only) or ``temporary`` (never restarted).
        shutdown_timeout: Seconds the child is given to finish once cancelled, when it
            is stopped.
        start_timeout: Seconds a start may take before the child counts as failed to
            start (its ``serve`` never called ``task_status.started()``): it is then
            cancelled, and the start fails (default 60).
        options: For an agent: ``model``, ``context``, ``agent_id``, ``store``,
            ``approver`` (as ``open_agent``) and ``approval_timeout`` (seconds the
            approver has for each call, or None; default: the class's). With a store, a
            restarted agent reloads its conversation.
    """

    child: Any = attrs.field(kw_only=False)
    id: str | None = None
    name: str | None = None
    restart: RestartType = attrs.field(default="permanent", validator=_restart_type)
    shutdown_timeout: float = attrs.field(default=5.0, validator=_timeout)
    start_timeout: float = attrs.field(default=60.0, validator=_timeout)
    options: Mapping[str, Any] = attrs.Factory(dict)


class _State(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"  # terminated by terminate_child, or by the supervisor's shutdown
    EXITED = "exited"  # ended and not to be restarted


class _Started:
    """A task_status for a child's ``serve``: the supervisor waits on ``ready``."""

    def __init__(self, child: Child) -> None:
        self._child = child

    def started(self, value: object = None) -> None:
        self._child.mark_running()


class _Kind(Protocol):
    kind: Literal["worker", "supervisor"]

    def default_id(self) -> str: ...

    def handle(self, child: Child) -> object: ...

    async def serve(self, child: Child, status: _Started) -> None: ...


@attrs.define(eq=False)
class _AgentKind:
    agent: type[Agent[Any]]
    model: Model | None
    context: Mapping[str, Any] | None
    agent_id: str | None
    store: Store | None = None
    approver: Approver | None = None
    approval_timeout: float | None = DEFAULT_APPROVAL_TIMEOUT
    kind: Literal["worker", "supervisor"] = "worker"
    # The child holds its agent's lease across restarts: a new incarnation takes it over
    # (with a new epoch, which fences the old one's writes) even while the old one is
    # still winding down.
    owner: Owner = attrs.Factory(Owner.new)

    def default_id(self) -> str:
        return internal.spec_of(self.agent).name

    def handle(self, child: Child) -> AgentHandle[Any]:
        assert isinstance(child.target, _AgentTarget)
        return AgentHandle(child.target)

    async def serve(self, child: Child, status: _Started) -> None:
        spec = internal.spec_of(self.agent).with_approval_timeout(self.approval_timeout)
        # Without a model, the run's shared one for the environment (one client and
        # connection pool for every such agent, closed when the run ends).
        model = self.model if self.model is not None else await shared_model(spec.name, spec.model)
        target = child.target
        assert isinstance(target, _AgentTarget)
        incarnation = child.incarnation
        # Each incarnation owns its conversation: it starts from a copy of what the one
        # before it left (or, if that one is still winding down, has now), and hands
        # its own back once, when it ends — only if no newer one has started since.
        previous = child.actor
        start_from = previous.history if previous is not None else child.conversation
        actor = internal.Actor(
            spec,
            model,
            self.context,
            target.agent_id,
            history=list(start_from),
            store=self.store,
            mailbox=target.mailbox,
            fence=lambda: child.incarnation == incarnation,
            owner=self.owner,
            approver=self.approver,
        )
        actor.handle = child.handle
        child.actor = actor
        try:
            await actor.serve(task_status=status)
        finally:
            if child.incarnation == incarnation:
                child.conversation = actor.history
            if child.actor is actor:
                child.actor = None  # a late old incarnation never detaches a newer one


class _Nested(Protocol):
    """What a supervisor is to its parent (the Supervisor class itself lives in
    ``_supervisor``, which imports this module)."""

    name: str

    async def serve(self, *, task_status: Any = ...) -> None: ...


@attrs.define(eq=False)
class _SupervisorKind:
    supervisor: _Nested
    kind: Literal["worker", "supervisor"] = "supervisor"

    def default_id(self) -> str:
        return self.supervisor.name

    def handle(self, child: Child) -> _Nested:
        return self.supervisor

    async def serve(self, child: Child, status: _Started) -> None:
        await self.supervisor.serve(task_status=status)


@attrs.define(eq=False)
class _ServiceKind:
    service: Any
    kind: Literal["worker", "supervisor"] = "worker"

    def default_id(self) -> str:
        return type(self.service).__name__

    def handle(self, child: Child) -> object:
        return self.service

    async def serve(self, child: Child, status: _Started) -> None:
        await self.service.serve(task_status=status)


def kind_of(spec: ChildSpec, supervisors: type[_Nested]) -> _Kind:
    """The kind of child a spec names.

    ``supervisors`` is the Supervisor class (it lives in ``_supervisor``, which imports
    this module).

    Raises:
        TypeError: it is none of an Agent subclass, a Supervisor, a serve-object; or
            options were given to a child that takes none.
    """
    child = spec.child
    options = dict(spec.options)
    if isinstance(child, type) and issubclass(child, Agent):
        internal.spec_of(child)  # a concrete, checked Agent
        unknown = set(options) - {
            "model", "context", "agent_id", "store", "approver", "approval_timeout",
        }  # fmt: skip
        if unknown:
            raise TypeError(f"unknown agent options: {', '.join(sorted(unknown))}")
        approver = options.get("approver")
        if approver is not None and not callable(approver):
            raise TypeError(f"approver must be an async function, got: {approver!r}")
        timeout = options.get("approval_timeout", internal.spec_of(child).approval_timeout)
        if not internal.seconds_or_none(timeout):
            raise ValueError(
                f"approval_timeout must be a positive number of seconds or None, got: {timeout!r}"
            )
        return _AgentKind(
            child,
            options.get("model"),
            options.get("context"),
            options.get("agent_id"),
            options.get("store"),
            approver=approver,
            approval_timeout=None if timeout is None else float(timeout),
        )
    if options:
        raise TypeError(f"options apply to agents only, got: {', '.join(sorted(options))}")
    if isinstance(child, supervisors):
        return _SupervisorKind(child)
    if callable(getattr(child, "serve", None)) and not isinstance(child, type):
        return _ServiceKind(child)
    raise TypeError(
        "a child must be an Agent subclass, a Supervisor, or an object with "
        f"async def serve(self, *, task_status), got: {child!r}"
    )


@attrs.define(eq=False)
class Child:
    """The supervisor's record of one child, across its incarnations."""

    spec: ChildSpec
    id: str
    kind: _Kind
    state: _State = _State.STARTING
    incarnation: int = 0
    scope: trio.CancelScope | None = None
    finished: trio.Event = attrs.Factory(trio.Event)
    changed: trio.Event = attrs.Factory(trio.Event)
    actor: internal.Actor | None = None
    conversation: list[Message] = attrs.Factory(list)
    last_error: BaseException | None = None
    target: object = None
    handle: object = None

    def set_state(self, state: _State) -> None:
        self.state = state
        self.changed.set()
        self.changed = trio.Event()

    def mark_running(self) -> None:
        self.set_state(_State.RUNNING)

    def end_queued(self, error: Callable[[], BaseException] | None, why: str) -> None:
        """No incarnation will serve what waits in an agent child's mailbox: answer it
        (see ``Mailbox.end_queued``)."""
        target = self.target
        if isinstance(target, _AgentTarget):
            target.mailbox.end_queued(error, why, target.name)


@attrs.define(eq=False)
class _AgentTarget:
    """What a supervised agent's handle addresses: the child, whichever incarnation is
    running now."""

    child: Child
    agent_id: str
    call_timeout: float = 30.0
    # Outlives each incarnation: a run queued behind one that crashed is served by the
    # restarted agent.
    mailbox: internal.Mailbox = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.mailbox = internal.Mailbox(internal.spec_of(self.child.spec.child).mailbox_size)

    @property
    def name(self) -> str:
        return internal.spec_of(self.child.spec.child).name

    async def acquire(self) -> internal.Actor:
        child = self.child
        with trio.move_on_after(self.call_timeout):
            while True:
                actor = child.actor
                if actor is not None and actor.alive and child.state is _State.RUNNING:
                    return actor
                if child.state in (_State.STOPPED, _State.EXITED, _State.STOPPING):
                    raise AgentUnavailable(self.name, f"it is {child.state.value}")
                await child.changed.wait()
        raise AgentUnavailable(
            self.name, f"it did not come back from a restart within {self.call_timeout:g}s"
        )

    def current_actor(self) -> internal.Actor | None:
        actor = self.child.actor
        return actor if actor is not None and actor.alive else None

    def conversation(self) -> list[Message]:
        actor = self.child.actor
        return actor.history if actor is not None else self.child.conversation
