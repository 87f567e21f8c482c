"""Declaring tools: the Tool base class, the ``@tool`` decorator, and Toolset.

Each declaration compiles once, when the class is created or the function decorated, into
a ToolDefinition: the name, description, JSON Schema and a ``check`` function that turns
the model's raw arguments into what ``run`` receives (or into error texts). Every
declaration mistake raises ToolDefinitionError there and then.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, ClassVar, Concatenate, Final, Generic, ParamSpec, TypeVar, overload

import attrs

from .._exceptions import ToolDefinitionError
from .._shapes import anthropic_tool, openai_function
from ._checkers import Checker, function_checker, structuring_checker
from ._context import ToolContext
from ._flatspec import spec_checker
from ._hints import function_parameters, node_for_attrs_class, parse_docstring
from ._params import compile_parameters
from ._rawschema import compile_input_schema

__all__ = ["FunctionTool", "Tool", "ToolDefinition", "Toolset", "tool"]

NAME_PATTERN: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # used with fullmatch: "$" allows "\n"


@attrs.frozen(kw_only=True)
class ToolDefinition:
    """A tool's declaration, compiled and checked.

    Attributes:
        name: The name the model calls it by.
        description: What the model is told the tool does.
        label: A human-readable name for UIs (defaults to the name).
        input_schema: The JSON Schema of the arguments.
        timeout: The tool's own deadline in seconds, or None for the runner's.
        idempotent: Whether running it twice is harmless (used when resuming).
        requires_approval: Whether every call waits for a person's decision first.
        capabilities: What the context must grant before the tool may run (``read``,
            ``write``, ``shell``, ``network``, or a name of the user's own).
        is_async: Whether ``run`` is a coroutine function (else it runs in a thread).
        check: Raw arguments to ``(arguments for run, error texts)``.
    """

    name: str
    description: str
    label: str
    input_schema: Mapping[str, Any]
    timeout: float | None
    idempotent: bool
    is_async: bool
    check: Checker = attrs.field(repr=False)
    capabilities: frozenset[str] = frozenset()
    requires_approval: bool = False

    def schema(self) -> dict[str, Any]:
        return anthropic_tool(self.name, self.description, self.input_schema)

    def openai_schema(self) -> dict[str, Any]:
        return openai_function(self.name, self.description, self.input_schema)


R = TypeVar("R")
P = ParamSpec("P")
Params = ParamSpec("Params")
Owner = TypeVar("Owner")


class _DefinitionMethod(Generic[R]):
    """A method that works on a Tool class and on a tool instance alike (``Ping.schema()``
    and ``add.schema()`` for a decorated function), reading the nearest definition."""

    def __init__(self, fn: Callable[[ToolDefinition], R]) -> None:
        self._fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: object, owner: type | None = None) -> Callable[[], R]:
        target = obj if obj is not None else owner
        return partial(self._fn, definition_of(target))


def definition_of(target: object) -> ToolDefinition:
    """The compiled definition of a Tool class or tool instance."""
    definition = getattr(target, "__satsuma_definition__", None)
    if definition is None:
        name = target.__name__ if isinstance(target, type) else type(target).__name__
        raise ToolDefinitionError(name, "is an abstract tool base and has no definition")
    if not isinstance(definition, ToolDefinition):
        raise TypeError(f"{target!r} is not a satsuma tool")
    return definition


def validate_common(
    tool: str, name: object, description: object, label: object, timeout: object, idempotent: object
) -> tuple[str, str, str, float | None, bool]:
    """The checked name, description, label, timeout and idempotence of a declaration
    (a Tool class, a ``@tool`` function, an AgentTool): what every kind of tool declares.

    Raises:
        ToolDefinitionError: one of them is wrong; the message names ``tool``.
    """
    if not isinstance(name, str) or not name:
        raise ToolDefinitionError(tool, 'has an empty name; set name = "..."')
    if not NAME_PATTERN.fullmatch(name):
        raise ToolDefinitionError(
            name, "has a name the API would refuse: it must match ^[a-zA-Z0-9_-]{1,64}$"
        )
    if not isinstance(description, str) or not description.strip():
        raise ToolDefinitionError(name, "has an empty description; the model needs one")
    if label is not None and not isinstance(label, str):
        raise ToolDefinitionError(name, f"label must be a str, got: {type(label).__name__}")
    if timeout is not None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
            raise ToolDefinitionError(
                name, f"timeout must be a positive number of seconds, got: {timeout!r}"
            )
        timeout = float(timeout)
    if not isinstance(idempotent, bool):
        raise ToolDefinitionError(name, f"idempotent must be True or False, got: {idempotent!r}")
    return name, inspect.cleandoc(description), label or name, timeout, idempotent


def _validate_approval(tool: str, requires_approval: object) -> bool:
    if not isinstance(requires_approval, bool):
        raise ToolDefinitionError(
            tool, f"requires_approval must be True or False, got: {requires_approval!r}"
        )
    return requires_approval


def _validate_capabilities(tool: str, capabilities: object) -> frozenset[str]:
    if isinstance(capabilities, str) or not isinstance(capabilities, Iterable):
        raise ToolDefinitionError(
            tool, f"capabilities must be a set or list of names, got: {capabilities!r}"
        )
    names = frozenset(capabilities)
    if not all(isinstance(name, str) and name for name in names):
        raise ToolDefinitionError(
            tool, f"capabilities must be non-empty strings, got: {sorted(map(repr, names))}"
        )
    return names


class Tool:
    """Base class of tools declared as classes.

    Set ``name``, ``description`` and ``parameters`` (a spec dict or an attrs class), or
    ``input_schema`` (a raw JSON Schema) instead of ``parameters``; optionally ``label``,
    ``timeout``, ``idempotent``, ``capabilities`` (what the context must grant, e.g.
    ``{"read"}``: without it the call fails closed with ``Tool capability denied``) and
    ``requires_approval`` (every call waits for a person's decision, see
    docs/approval.md); and
    define ``async def run(self, args, ctx)`` or a
    sync ``def run`` (run in a worker thread). See docs/tools.md.

    A subclass meant only as a base for other tools is declared with
    ``class Base(Tool, abstract=True)``.

    Raises:
        ToolDefinitionError: when the class is created, for any declaration mistake.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    label: ClassVar[str | None] = None
    parameters: ClassVar[Any] = None
    input_schema: ClassVar[Mapping[str, Any] | None] = None
    timeout: ClassVar[float | None] = None
    idempotent: ClassVar[bool] = False
    capabilities: ClassVar[Iterable[str]] = frozenset()
    requires_approval: ClassVar[bool] = False

    __satsuma_definition__: ClassVar[ToolDefinition | None] = None

    def __init_subclass__(cls, *, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__satsuma_definition__ = None if abstract else _define_class(cls)

    def run(self, args: Any, ctx: ToolContext) -> Any:
        """Carry out the call. Return ``("ok", content)``, ``("ok", content, is_error)``,
        ``("error", reason)``, a str or a ToolResult, or raise ToolError."""
        raise NotImplementedError

    schema = _DefinitionMethod(ToolDefinition.schema)
    schema.__doc__ = "The Anthropic tool definition: ``{name, description, input_schema}``."
    openai_schema = _DefinitionMethod(ToolDefinition.openai_schema)
    openai_schema.__doc__ = "The OpenAI function-tool descriptor."


def _define_class(cls: type[Tool]) -> ToolDefinition:
    name, description, label, timeout, idempotent = validate_common(
        cls.__name__,
        getattr(cls, "name", None),
        getattr(cls, "description", None),
        cls.label,
        cls.timeout,
        cls.idempotent,
    )
    run = cls.run
    if run is Tool.run:
        raise ToolDefinitionError(name, "has no run method; define async def run(self, args, ctx)")
    if inspect.isasyncgenfunction(run) or inspect.isgeneratorfunction(run):
        raise ToolDefinitionError(name, "run must return a result, not be a generator")
    parameters, raw = cls.parameters, cls.input_schema
    check: Checker
    if parameters is not None and raw is not None:
        raise ToolDefinitionError(name, "has both parameters and input_schema; give one")
    if raw is not None:
        compiled = compile_input_schema(name, raw)
        input_schema: Mapping[str, Any] = dict(compiled.schema)
        check = compiled.check
    elif isinstance(parameters, type) and attrs.has(parameters):
        root = node_for_attrs_class(name, parameters, "", None)
        input_schema = root.schema()
        input_schema.pop("description", None)
        check = structuring_checker(root, parameters)
    else:
        root = compile_parameters(name, parameters)
        input_schema = root.schema()
        check = spec_checker(root)
    return ToolDefinition(
        name=name,
        description=description,
        label=label,
        input_schema=input_schema,
        timeout=timeout,
        idempotent=idempotent,
        is_async=inspect.iscoroutinefunction(run),
        check=check,
        capabilities=_validate_capabilities(name, cls.capabilities),
        requires_approval=_validate_approval(name, cls.requires_approval),
    )


class FunctionTool(Tool, Generic[P, R], abstract=True):
    """A plain function made a tool by ``@satsuma.tool``.

    Calling it calls the function, and type checkers see the function's own signature
    (``FunctionTool[P, R]`` is generic in its parameters and return type); ``schema()``
    and ``openai_schema()`` work as on a Tool class. Inside a Toolset, the function's
    ``self`` is the toolset instance.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        definition: ToolDefinition,
        *,
        context_param: str | None,
        is_method: bool,
        bound_to: object = None,
    ) -> None:
        # Called with self prepended when bound, so not as Callable[P, R] (see __get__).
        self._fn: Callable[..., R] = fn
        self._context_param = context_param
        self._is_method = is_method
        self._bound_to = bound_to
        self.__satsuma_definition__ = definition  # type: ignore[misc]
        self.__name__ = getattr(fn, "__name__", definition.name)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def definition(self) -> ToolDefinition:
        return definition_of(self)

    def run(self, args: Any, ctx: ToolContext) -> Any:
        if self._is_method and self._bound_to is None:
            raise ToolDefinitionError(
                self.definition.name,
                "is a toolset method; use it through an instance of its Toolset",
            )
        if self._context_param is None and not self._is_method:
            return self._fn(**args)  # the common case: the arguments as they are
        kwargs = dict(args)
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        if self._is_method:
            return self._fn(self._bound_to, **kwargs)
        return self._fn(**kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._is_method and self._bound_to is not None:
            return self._fn(self._bound_to, *args, **kwargs)
        return self._fn(*args, **kwargs)

    # As a function's __get__: on the class, the tool itself; on a Toolset instance, the
    # tool bound to it, whose signature lacks ``self``.
    @overload
    def __get__(self, obj: None, owner: type | None = None) -> FunctionTool[P, R]: ...

    @overload
    def __get__(
        self: FunctionTool[Concatenate[Owner, Params], R], obj: Owner, owner: type | None = None
    ) -> FunctionTool[Params, R]: ...

    def __get__(self, obj: object, owner: type | None = None) -> FunctionTool[Any, R]:
        if obj is None or not self._is_method:
            return self
        return FunctionTool(
            self._fn,
            self.definition,
            context_param=self._context_param,
            is_method=True,
            bound_to=obj,
        )

    @property
    def is_unbound_method(self) -> bool:
        return self._is_method and self._bound_to is None

    def __repr__(self) -> str:
        return f"<satsuma tool {self.definition.name!r} from {self._fn!r}>"


def takes_context(tool: Tool) -> bool:
    """Whether ``tool`` can see the ToolContext its ``run`` is given: every Tool class
    does; a ``@tool`` function only with a ``ctx: ToolContext`` parameter."""
    plain = type(tool).run is FunctionTool.run
    return not plain or tool._context_param is not None  # type: ignore[attr-defined]


def direct_function(tool: Tool) -> Callable[..., Any] | None:
    """The function that ``tool.run(args, ctx)`` calls as ``fn(**args)`` and does
    nothing else with: a ``@tool`` function without ``ctx`` that is no toolset method.
    The runner calls it without ``run``'s frame. None for every other tool."""
    if type(tool) is not FunctionTool or "run" in vars(tool):
        return None  # a subclass, or an instance whose run was replaced: its own run
    if tool._context_param is not None or tool._is_method:
        return None
    return tool._fn


def _make_function_tool(
    fn: Callable[P, R],
    *,
    name: str | None,
    description: str | None,
    label: str | None,
    timeout: float | None,
    idempotent: bool,
    capabilities: Iterable[str],
    requires_approval: bool,
) -> FunctionTool[P, R]:
    if not callable(fn):
        raise ToolDefinitionError(None, f"@tool needs a function, got: {type(fn).__name__}")
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise ToolDefinitionError(
            getattr(fn, "__name__", None), "a tool must return a result, not be a generator"
        )
    docstring = parse_docstring(fn.__doc__)
    tool_name, tool_description, tool_label, tool_timeout, tool_idempotent = validate_common(
        getattr(fn, "__name__", repr(fn)),
        name if name is not None else getattr(fn, "__name__", None),
        description if description is not None else docstring.description,
        label,
        timeout,
        idempotent,
    )
    root, context_param, to_structure, is_method = function_parameters(
        tool_name, fn, ToolContext, docstring
    )
    definition = ToolDefinition(
        name=tool_name,
        description=tool_description,
        label=tool_label,
        input_schema=root.schema(),
        timeout=tool_timeout,
        idempotent=tool_idempotent,
        is_async=inspect.iscoroutinefunction(fn),
        check=function_checker(root, to_structure),
        capabilities=_validate_capabilities(tool_name, capabilities),
        requires_approval=_validate_approval(tool_name, requires_approval),
    )
    return FunctionTool(fn, definition, context_param=context_param, is_method=is_method)


@overload
def tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    timeout: float | None = None,
    idempotent: bool = False,
    capabilities: Iterable[str] = (),
    requires_approval: bool = False,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    label: str | None = None,
    timeout: float | None = None,
    idempotent: bool = False,
    capabilities: Iterable[str] = (),
    requires_approval: bool = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a plain (async or sync) function a tool.

    The schema comes from the type hints, the description from the docstring (the text
    before its first section), each parameter's description from its ``Args:`` section.
    A parameter annotated ``ToolContext`` receives the context and is not in the schema.
    Use it bare (``@tool``) or with options (``@tool(name="...", timeout=5)``);
    ``capabilities`` names what the context must grant before the tool may run;
    ``requires_approval=True`` makes every call wait for a person's decision.

    Raises:
        ToolDefinitionError: at decoration, for any declaration mistake.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "label": label,
        "timeout": timeout,
        "idempotent": idempotent,
        "capabilities": capabilities,
        "requires_approval": requires_approval,
    }
    if fn is None:
        return lambda inner: _make_function_tool(inner, **options)
    return _make_function_tool(fn, **options)


class Toolset:
    """Several tools sharing state (a database connection, a client, a cache).

    Decorate methods with ``@satsuma.tool``; an instance's ``tools()`` returns them bound
    to the instance, and a ToolRunner or an Agent's ``tools`` accepts the instance itself.
    """

    def tools(self) -> list[Tool]:
        """This toolset's tools, bound to this instance, in declaration order."""
        found: list[Tool] = []
        seen: set[str] = set()
        for klass in type(self).__mro__:
            for attribute, value in vars(klass).items():
                if attribute in seen:
                    continue
                seen.add(attribute)
                if isinstance(value, FunctionTool):
                    found.append(value.__get__(self, type(self)))
        return found
