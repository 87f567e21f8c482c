"""Declaring agents: ``class X(satsuma.Agent)`` with class attributes, checked once when
the class is created."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Generic, TypeVar, get_args, get_origin

import attrs

from .._exceptions import AgentDefinitionError, ToolDefinitionError
from .._frozen import freeze
from ..models import CACHE_MODES, CacheMode, import_sdk_in_background, model_problem
from ..tools import (
    DEFAULT_APPROVAL_TIMEOUT,
    Approver,
    PreparedTools,
    ToolRunner,
    ToolServer,
    as_strategy,
    prepare_tools,
)
from ._budget import Budget
from ._history import HistoryProcessor, KeepAll
from ._output import OUTPUT_TOOL, OutputSpec, compile_output
from ._result import OutputT
from ._verifiers import as_check

__all__ = ["Agent", "AgentSpec"]

_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")


# attrs (>= 23.2) turns functools.cached_property into a slot that a frozen instance may
# fill once: tool_schemas below.
@attrs.frozen(kw_only=True)
class AgentSpec:
    """An Agent subclass's declaration, checked."""

    name: str
    model: str
    tools: tuple[object, ...]
    system: str | None
    max_iterations: int
    max_duration: float | None
    tool_timeout: float | None
    verifiers: tuple[object, ...]
    max_tokens: int
    runner_options: Mapping[str, Any]
    loop_guard: int | None
    history: HistoryProcessor
    mailbox_size: int
    resume_interrupted: bool = False
    approver: Approver | None = None
    approval_timeout: float | None = DEFAULT_APPROVAL_TIMEOUT
    output: OutputSpec | None = None  # the compiled output_type; None: the final text
    output_retries: int = 2
    cache: CacheMode | None = "auto"
    budget: Budget | None = None
    origin: str = ""  # the class's module and qualified name (for warnings about it)

    @functools.cached_property
    def tool_sources(self) -> tuple[ToolServer, ...]:
        """The tools entries that are servers of tools (MCP servers, A2A agents)."""
        return tuple(item for item in self.tools if isinstance(item, ToolServer))

    @functools.cached_property
    def prepared_tools(self) -> PreparedTools:
        """The tools that are not from tool servers and the runner's options, checked
        once per class (the tools expanded, their definitions read): every agent's
        runner is built from them, with its own instances of tool classes."""
        return prepare_tools(
            [item for item in self.tools if not isinstance(item, ToolServer)],
            timeout=self.tool_timeout,
            **self.runner_options,
        )

    @functools.cached_property
    def tool_schemas(self) -> tuple[Mapping[str, Any], ...]:
        """The Anthropic definitions of the tools that are not from tool servers, made
        once per class: they depend on the declaration only, and every agent of the
        class sends them with each request: frozen, so that no model can change them
        for the others."""
        entries = self.prepared_tools.entries.values()
        return tuple(freeze(entry.definition.schema()) for entry in entries)

    def with_approval_timeout(self, seconds: float | None) -> AgentSpec:
        """This declaration with another ``approval_timeout`` (an ``open_agent`` or a
        supervisor's child that sets its own), keeping what was prepared once for the
        class: its tools depend on nothing the timeout changes, and preparing them again
        for every such open would cost each one what the class paid once."""
        spec = attrs.evolve(self, approval_timeout=seconds)
        for name in ("tool_sources", "prepared_tools", "tool_schemas"):
            # attrs keeps a cached_property's value in a slot of its own name.
            object.__setattr__(spec, name, getattr(self, name))
        return spec

    def make_runner(self, *, with_sources: bool = True) -> ToolRunner:
        """A fresh runner, with fresh instances of tool classes, for one agent.
        ``with_sources=False`` leaves out the tools of tool servers (which list their
        tools only once running)."""
        if with_sources and self.tool_sources:
            return ToolRunner(self.tools, timeout=self.tool_timeout, **self.runner_options)
        return ToolRunner(self.prepared_tools)


class Agent(Generic[OutputT]):
    """Base class of agents. Declare one with class attributes:

    - ``name`` (required), ``model`` (an alias — ``sonnet``, ``opus``, ``haiku`` — or a
      model id; default ``sonnet``), ``system``, ``tools`` (as a ToolRunner takes them,
      and MCP servers: the agent starts one with itself unless it is already running);
    - ``max_iterations`` (model calls per run, default 10), ``max_duration`` (seconds
      per run, default none), ``max_tokens`` (per response, default 4096);
    - ``tool_timeout`` (the runner's default deadline, 120 s), ``strategy``,
      ``max_concurrency``, ``hooks``: the ToolRunner options;
    - ``verifiers``: Verifier classes or instances, or functions;
    - ``loop_guard``: after this many turns in a row with the same request (the same
      calls, the same arguments) the next such request is refused with an explanation,
      and one more ends the run as failed (default 3; None turns it off);
    - ``history``: a HistoryProcessor (default KeepAll());
    - ``cache``: prompt caching, ``"auto"`` (the default: the tools, the system prompt
      and the conversation's prefix, the last breakpoint moving with it, kept 5
      minutes), ``"1h"`` (the same, kept an hour) or None (no breakpoint). See
      docs/agents.md.
    - ``budget``: a ``satsuma.Budget``, limits on what the agent's model calls cost
      (per run, per agent id, per agent id and UTC day; default None). See docs/budgets.md.
    - ``mailbox_size``: how many requests may wait for the agent (default 16);
    - ``resume_interrupted``: with a store, resume the runs a crash or a kill
      interrupted when the agent starts again (default False);
    - ``approver``: an async function ``PendingCall -> Approve | Deny`` asked about calls
      that need a person's decision (``open_agent(approver=...)`` overrides it); without
      one, an agent with a store pauses the run ``awaiting_approval``;
      ``approval_timeout``: seconds the approver has for each call, past which the call
      is denied (default 300; None: no limit). See docs/approval.md.
    - ``output_type``: the type of the answer (an attrs class, dataclass, TypedDict,
      enum, Literal, primitive, list, or union of attrs classes); the model gives it by
      calling a ``final_answer`` tool, and ``result.output`` is the typed value. Declared
      as the type argument, ``class Extractor(satsuma.Agent[Invoice])``, type checkers
      know it too. ``output_retries``: how many invalid answers the model may correct
      before the run fails (default 2). See docs/output.md.

    Start one with ``satsuma.open_agent(X)``. A class meant only as a base for other
    agents is declared ``class Base(satsuma.Agent, abstract=True)``.

    Raises:
        AgentDefinitionError: when the class is created, for any mistake.
    """

    name: ClassVar[str]
    model: ClassVar[str] = "sonnet"
    tools: ClassVar[Sequence[object]] = ()
    system: ClassVar[str | None] = None
    max_iterations: ClassVar[int] = 10
    max_duration: ClassVar[float | None] = None
    tool_timeout: ClassVar[float | None] = 120.0
    verifiers: ClassVar[Sequence[object]] = ()
    max_tokens: ClassVar[int] = 4096
    strategy: ClassVar[Any] = "parallel"
    max_concurrency: ClassVar[int | None] = None
    hooks: ClassVar[Any] = None
    loop_guard: ClassVar[int | None] = 3
    history: ClassVar[HistoryProcessor] = KeepAll()
    cache: ClassVar[CacheMode | None] = "auto"
    budget: ClassVar[Budget | None] = None
    mailbox_size: ClassVar[int] = 16
    resume_interrupted: ClassVar[bool] = False
    approver: ClassVar[Approver | None] = None
    approval_timeout: ClassVar[float | None] = DEFAULT_APPROVAL_TIMEOUT
    output_type: ClassVar[Any] = None
    output_retries: ClassVar[int] = 2

    __satsuma_agent__: ClassVar[AgentSpec | None] = None

    def __init_subclass__(cls, *, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__satsuma_agent__ = None if abstract else _declare(cls)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def seconds_or_none(value: object) -> bool:
    """Whether ``value`` is a positive number of seconds, or None (no limit)."""
    return value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    )


def _declare(cls: type[Agent[Any]]) -> AgentSpec:
    label = getattr(cls, "name", None)
    if not isinstance(label, str) or not label:
        raise AgentDefinitionError(cls.__name__, 'has no name; set name = "..."')
    if not _NAME.fullmatch(label):
        raise AgentDefinitionError(label, "name must match [a-zA-Z0-9_-]{1,64}")

    def fail(problem: str) -> AgentDefinitionError:
        return AgentDefinitionError(label, problem)

    if (problem := model_problem(cls.model)) is not None:
        raise fail(problem)
    if cls.system is not None and not isinstance(cls.system, str):
        raise fail(f"system must be a str or None, got: {type(cls.system).__name__}")
    if not _whole(cls.max_iterations) or cls.max_iterations < 1:
        raise fail(f"max_iterations must be an integer >= 1, got: {cls.max_iterations!r}")
    if not _whole(cls.max_tokens) or cls.max_tokens < 1:
        raise fail(f"max_tokens must be an integer >= 1, got: {cls.max_tokens!r}")
    if not _whole(cls.mailbox_size) or cls.mailbox_size < 1:
        raise fail(f"mailbox_size must be an integer >= 1, got: {cls.mailbox_size!r}")
    if not seconds_or_none(cls.max_duration):
        raise fail(
            f"max_duration must be a positive number of seconds or None, got: {cls.max_duration!r}"
        )
    if cls.loop_guard is not None and (not _whole(cls.loop_guard) or cls.loop_guard < 1):
        raise fail(f"loop_guard must be an integer >= 1 or None, got: {cls.loop_guard!r}")
    if not isinstance(cls.resume_interrupted, bool):
        raise fail(f"resume_interrupted must be True or False, got: {cls.resume_interrupted!r}")
    if cls.approver is not None and not callable(cls.approver):
        raise fail(f"approver must be an async function or None, got: {cls.approver!r}")
    if not seconds_or_none(cls.approval_timeout):
        raise fail(
            "approval_timeout must be a positive number of seconds or None, got: "
            f"{cls.approval_timeout!r}"
        )
    if not callable(getattr(cls.history, "process", None)):
        raise fail(f"history must be a HistoryProcessor, got: {cls.history!r}")
    if cls.cache is not None and (not isinstance(cls.cache, str) or cls.cache not in CACHE_MODES):
        raise fail(f'cache must be "auto", "1h" or None, got: {cls.cache!r}')
    if cls.budget is not None and not isinstance(cls.budget, Budget):
        raise fail(f"budget must be a satsuma.Budget or None, got: {cls.budget!r}")
    if isinstance(cls.tools, (str, bytes)) or not isinstance(cls.tools, Sequence):
        raise fail(f"tools must be a list, got: {type(cls.tools).__name__}")
    if isinstance(cls.verifiers, (str, bytes)) or not isinstance(cls.verifiers, Sequence):
        raise fail(f"verifiers must be a list, got: {type(cls.verifiers).__name__}")
    for verifier in cls.verifiers:
        if as_check(verifier) is None:
            raise fail(
                f"verifiers must be Verifier classes or instances or functions, got: {verifier!r}"
            )
    if not _whole(cls.output_retries) or cls.output_retries < 0:
        raise fail(f"output_retries must be an integer >= 0, got: {cls.output_retries!r}")
    output = _declared_output(cls, fail)
    options: dict[str, Any] = {
        "strategy": cls.strategy,
        "max_concurrency": cls.max_concurrency,
        "hooks": cls.hooks,
    }
    spec = AgentSpec(
        name=label,
        model=cls.model,
        tools=tuple(cls.tools),
        system=cls.system,
        max_iterations=cls.max_iterations,
        max_duration=None if cls.max_duration is None else float(cls.max_duration),
        tool_timeout=cls.tool_timeout,
        verifiers=tuple(cls.verifiers),
        max_tokens=cls.max_tokens,
        runner_options=options,
        loop_guard=cls.loop_guard,
        history=cls.history,
        mailbox_size=cls.mailbox_size,
        resume_interrupted=cls.resume_interrupted,
        approver=cls.approver,
        approval_timeout=None if cls.approval_timeout is None else float(cls.approval_timeout),
        output=output,
        output_retries=cls.output_retries,
        cache=cls.cache,
        budget=cls.budget,
        origin=f"{cls.__module__}.{cls.__qualname__}",
    )
    try:
        as_strategy(cls.strategy)
        runner = spec.make_runner(with_sources=False)  # every tool checked now: names, options
    except ToolDefinitionError as exc:
        raise fail(f"tools: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise fail(str(exc)) from exc
    if output is not None and any(d.name == OUTPUT_TOOL for d in runner.definitions):
        raise fail(
            f"a tool is named {OUTPUT_TOOL!r}, the tool the model gives its typed answer "
            "with: rename the tool"
        )
    # Declared at a service's start: its first conversation should not wait for the SDK.
    import_sdk_in_background(spec.model)
    return spec


def _type_argument(cls: type) -> Any:
    """X of the nearest ``Agent[X]`` among the class's bases, or None."""
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            if get_origin(base) is Agent:
                (argument,) = get_args(base)
                return argument
    return None


def _declared_output(cls: type[Agent[Any]], fail: Any) -> OutputSpec | None:
    """The compiled output type: ``output_type``, or the type argument of ``Agent[X]``;
    given both, they must agree."""
    declared = cls.output_type
    argument = _type_argument(cls)
    if isinstance(argument, TypeVar):
        argument = None  # a generic base of the user's own: Agent[T]
    if declared is not None and argument is not None and declared != argument:
        raise fail(
            f"output_type is {_text(declared)} but the class is declared "
            f"Agent[{_text(argument)}]: give one type"
        )
    hint = declared if declared is not None else argument
    try:
        return compile_output(hint)
    except TypeError as exc:
        raise fail(str(exc)) from None


def _text(hint: object) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def check_output_options(
    spec: AgentSpec, output_type: Any, output_retries: int | None
) -> tuple[OutputSpec | None, int] | None:
    """A run's own output type and retries, checked; None when the run keeps the
    agent's.

    Raises:
        TypeError: the type is not supported.
        ValueError: output_retries is not an integer >= 0, or a tool of the agent is
            named like the final-answer tool.
    """
    if output_type is _KEEP and output_retries is None:
        return None
    if output_retries is not None and (not _whole(output_retries) or output_retries < 0):
        raise ValueError(f"output_retries must be an integer >= 0, got: {output_retries!r}")
    output = spec.output
    if output_type is not _KEEP:
        try:
            output = compile_output(output_type)
        except TypeError as exc:
            raise TypeError(f"agent {spec.name}: {exc}") from None
        # The class's tool definitions, made once per class (tool servers' tools are
        # not known before they run; a final_answer among them is never run anyway).
        if output is not None and any(tool["name"] == OUTPUT_TOOL for tool in spec.tool_schemas):
            raise ValueError(
                f"agent {spec.name} has a tool named {OUTPUT_TOOL!r}, the tool the model "
                "gives its typed answer with: rename the tool to ask for a typed answer"
            )
    retries = spec.output_retries if output_retries is None else output_retries
    return output, retries


class _Keep:
    """The output type a run keeps when it names none (None already means: no type)."""

    def __repr__(self) -> str:
        return "<the agent's output_type>"


_KEEP: Final = _Keep()
KEEP_OUTPUT: Final[Any] = _KEEP


def spec_of(agent_class: object) -> AgentSpec:
    """The checked declaration of an Agent subclass.

    Raises:
        TypeError: it is not a concrete Agent subclass.
    """
    spec = getattr(agent_class, "__satsuma_agent__", None)
    if not isinstance(agent_class, type) or not issubclass(agent_class, Agent) or spec is None:
        raise TypeError(f"expected a concrete satsuma.Agent subclass, got: {agent_class!r}")
    assert isinstance(spec, AgentSpec)
    return spec
