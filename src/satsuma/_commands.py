"""What the agent commands (``run``, ``chat``, ``runs``, ``resume``, ``node``) share: their
options, and the agent they name, from the user's own code.

The agent is named ``MODULE:AgentClass`` (imported with the current directory on the
path, as ``python -m`` would) or ``path/to/file.py:AgentClass``. Every mistake a user can
make here — no such module, no such class, not an Agent, no key — is a ``CommandError``
with one line of explanation; cli.py prints it without a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import attrs

from ._command_error import CommandError
from ._exceptions import AgentDefinitionError
from ._store_option import StoreOption
from .agents import Agent, internal

__all__ = [
    "FAKE_MODEL",
    "Assistant",
    "CommandError",
    "RunOptions",
    "builtin_tools",
    "capability_warnings",
    "check_key",
    "load_agent",
    "tools_context",
]


FAKE_MODEL = "fake"


@attrs.frozen(kw_only=True)
class RunOptions:
    """What ``run`` and ``chat`` share: overrides of the agent class, the tools' context
    and the store.

    ``model`` ``"fake"`` is the offline FakeModel (no key, no network). ``tools`` are
    names of built-in tools added to the agent's; ``allow`` the capabilities granted to
    tools (none by default, as in the library); ``workdir`` the tools' working
    directory (the current one by default); ``store`` the ``--store`` given, if any.
    """

    model: str | None = None
    max_iterations: int | None = None
    store: StoreOption | None = None
    agent_id: str | None = None
    tools: tuple[str, ...] = ()
    allow: frozenset[str] = frozenset()
    workdir: Path | None = None
    past_interrupted: bool = False
    past_paused: bool = False
    decided_by: str | None = None  # who decides approvals (chat's answers, resume's)


class Assistant(Agent):
    """The agent of ``satsuma run`` and ``satsuma chat`` without a target: a plain
    assistant with the built-in tools given by ``--tools``."""

    name = "assistant"
    system = "You are a helpful assistant. Use the tools you have when they help."


def builtin_tools() -> dict[str, type[Any]]:
    """The built-in tools by name."""
    from .tools import builtin

    classes = [
        builtin.ReadFile,
        builtin.WriteFile,
        builtin.EditFile,
        builtin.ListDir,
        builtin.Search,
        builtin.Bash,
        builtin.HttpFetch,
        builtin.DateResolver,
    ]
    return {str(cls.name): cls for cls in classes}


def capability_warnings(agent: type[Agent], options: RunOptions) -> list[str]:
    """A line for each tool of ``agent`` that needs a capability ``options`` do not grant:
    its calls will be denied (the model is told so)."""
    lines = []
    for definition in internal.spec_of(agent).make_runner(with_sources=False).definitions:
        missing = sorted(definition.capabilities - options.allow)
        if missing:
            flags = " ".join(f"--allow {name}" for name in missing)
            lines.append(f"{definition.name} needs {flags}; without it its calls are denied")
    return lines


def check_key() -> None:
    """Refuse to go on without a key for the Anthropic API, saying how to get on."""
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        raise CommandError(
            "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=sk-ant-..., or try "
            "offline with --model fake (`satsuma demo` runs offline too)"
        )


def tools_context(options: RunOptions) -> dict[str, Any]:
    """The tools' context the options give: their working directory and capabilities."""
    workdir = options.workdir if options.workdir is not None else Path.cwd()
    if not workdir.is_dir():
        raise CommandError(f"--workdir {workdir}: no such directory")
    return {"working_dir": workdir.resolve(), "capabilities": options.allow}


# --- finding the agent -----------------------------------------------------------------


def load_agent(target: str | None, options: RunOptions = RunOptions()) -> type[Agent]:
    """The Agent subclass ``target`` names (``Assistant`` for None), with the options'
    overrides applied.

    Raises:
        CommandError: the target is malformed, cannot be imported, or is not an Agent;
            a tool named in the options is not a built-in tool.
    """
    found = Assistant if target is None else _find(target)
    overrides: dict[str, Any] = {}
    if options.model is not None and options.model != FAKE_MODEL:
        overrides["model"] = options.model
    if options.max_iterations is not None:
        overrides["max_iterations"] = options.max_iterations
    if options.tools:
        available = builtin_tools()
        unknown = [name for name in options.tools if name not in available]
        if unknown:
            raise CommandError(
                f"no built-in tool named {unknown[0]!r} (there are: {', '.join(available)})"
            )
        added = [available[name] for name in dict.fromkeys(options.tools)]
        overrides["tools"] = [*found.tools, *added]
    if not overrides:
        return found
    try:
        return type(found.__name__, (found,), {"__module__": found.__module__, **overrides})
    except AgentDefinitionError as error:
        raise CommandError(str(error)) from None


def _find(target: str) -> type[Agent]:
    where, colon, attribute = target.rpartition(":")
    if not colon or not where or not attribute:
        raise CommandError(
            f"expected MODULE:AgentClass or path/to/file.py:AgentClass, got: {target!r}"
        )
    module = _import(where)
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise CommandError(f"{where} has no attribute {attribute!r}") from None
    if not (isinstance(found, type) and issubclass(found, Agent)):
        raise CommandError(f"{target} is not an Agent subclass (it is {found!r})")
    if found.__satsuma_agent__ is None:
        raise CommandError(f"{target} is an abstract Agent: name a concrete subclass")
    return found


def _import(where: str) -> Any:
    is_file = where.endswith(".py") or os.sep in where
    try:
        if is_file:
            path = Path(where)
            if not path.is_file():
                raise CommandError(f"no such file: {where}")
            # As `python path/file.py` would: the file's directory first on the path, so
            # that the modules beside it import.
            _first_on_path(str(path.resolve().parent))
            name = f"satsuma_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
                raise CommandError(f"cannot import {where}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
        _first_on_path(os.getcwd())  # as `python -m` would
        return importlib.import_module(where)
    except CommandError:
        raise
    except ModuleNotFoundError as error:
        missing = error.name
        if not is_file and missing is not None and f"{where}.".startswith(f"{missing}."):
            # The target itself (or its package) is not there: a typo, or the wrong
            # directory. A module it imports that is missing is the module's own news.
            raise CommandError(f"no module named {missing!r}") from None
        raise _import_failed(where, error) from None
    except Exception as error:
        raise _import_failed(where, error) from None


def _first_on_path(directory: str) -> None:
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)


def _import_failed(where: str, error: Exception) -> CommandError:
    """The user's module raised while it was imported: its own bug, shown as Python
    would show it (the traceback from the user's code on), then said in one line."""
    tb = error.__traceback__
    # Leave out the frames of this module and of importlib's machinery.
    machinery = os.path.dirname(importlib.__file__) + os.sep
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == __file__
        or tb.tb_frame.f_code.co_filename.startswith(("<frozen importlib", machinery))
    ):
        tb = tb.tb_next
    details = "".join(traceback.format_exception(type(error), error, tb))
    return CommandError(
        f"importing {where} failed: {type(error).__name__}: {error}", details=details.rstrip()
    )
