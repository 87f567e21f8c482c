"""satsuma: LLM agents whose tool calls run under supervision, on trio.

This module defines nothing: it re-exports the public names of the rooms, each listed
once. Those of tools and the shared kernel are imported below; those of the models,
agents and supervisor rooms are each room's ``__all__``, loaded on first use (PEP 562),
so that ``import satsuma.tools`` alone never loads them: tools sit below them. Type
checkers read those from the star imports under ``TYPE_CHECKING``; at run time
``__getattr__`` looks the name up in the rooms of ``_LATER``. Every public class and
function carries its public path (``satsuma.Agent``).
"""

import importlib as _importlib
import logging as _logging
import types as _types
import typing as _typing

from ._exceptions import AgentCrashed as AgentCrashed
from ._exceptions import AgentDefinitionError as AgentDefinitionError
from ._exceptions import AgentUnavailable as AgentUnavailable
from ._exceptions import BudgetExceeded as BudgetExceeded
from ._exceptions import ConfigurationError as ConfigurationError
from ._exceptions import MCPServerError as MCPServerError
from ._exceptions import ModelError as ModelError
from ._exceptions import NoOutput as NoOutput
from ._exceptions import RunNotAwaitingApproval as RunNotAwaitingApproval
from ._exceptions import SatsumaError as SatsumaError
from ._exceptions import StoreError as StoreError
from ._exceptions import SupervisorFailed as SupervisorFailed
from ._exceptions import ToolDefinitionError as ToolDefinitionError
from ._exceptions import ToolError as ToolError
from ._messages import Message as Message
from ._messages import Usage as Usage
from ._public import public_names as _public_names
from .tools import ApprovalDecided as ApprovalDecided
from .tools import ApprovalRequested as ApprovalRequested
from .tools import Approve as Approve
from .tools import Approver as Approver
from .tools import Ask as Ask
from .tools import Batched as Batched
from .tools import Deny as Deny
from .tools import ErrorKind as ErrorKind
from .tools import EventSink as EventSink
from .tools import FunctionTool as FunctionTool
from .tools import HookDecision as HookDecision
from .tools import Interrupt as Interrupt
from .tools import NestedEvent as NestedEvent
from .tools import Parallel as Parallel
from .tools import PendingCall as PendingCall
from .tools import Rewrite as Rewrite
from .tools import Sequential as Sequential
from .tools import Strategy as Strategy
from .tools import Tool as Tool
from .tools import ToolCall as ToolCall
from .tools import ToolCallEnd as ToolCallEnd
from .tools import ToolCallStart as ToolCallStart
from .tools import ToolContext as ToolContext
from .tools import ToolDefinition as ToolDefinition
from .tools import ToolEvent as ToolEvent
from .tools import ToolHook as ToolHook
from .tools import ToolOutcome as ToolOutcome
from .tools import ToolProgress as ToolProgress
from .tools import ToolResult as ToolResult
from .tools import ToolReturn as ToolReturn
from .tools import ToolRunner as ToolRunner
from .tools import Toolset as Toolset
from .tools import ToolUpdate as ToolUpdate
from .tools import format_results as format_results
from .tools import get_errors as get_errors
from .tools import has_errors as has_errors
from .tools import tool as tool

if _typing.TYPE_CHECKING:
    __version__: str  # read from the package's metadata on first use (__getattr__)
    # The rooms loaded on first use: every name of their __all__ is satsuma's (a star
    # import re-exports them for type checkers, PEP 484).
    from .agents import *  # noqa: F403
    from .models import *  # noqa: F403
    from .supervisor import *  # noqa: F403

# Without any handler in the tree, logging's last-resort handler prints a library's
# warnings on stderr. An application turns satsuma's records on by configuring logging;
# until then they stay quiet (the logging HOWTO's advice for libraries).
_logging.getLogger("satsuma").addHandler(_logging.NullHandler())

# The rooms whose names load on first use, each room's __all__ being its list of names:
# in the order they import each other (agents imports models, the supervisor agents), so
# that looking through them loads nothing a later one would not load anyway.
_LATER: _typing.Final = ("satsuma.models", "satsuma.agents", "satsuma.supervisor")


def __getattr__(name: str) -> _typing.Any:
    if name == "cluster":
        # ``satsuma.cluster.Node`` after a bare ``import satsuma``: the subpackage loads on
        # first use, never with satsuma itself (it needs the agents and the supervisor).
        return _importlib.import_module("satsuma.cluster")
    if name == "__version__":
        # One place holds the version: pyproject.toml, read back from the installed
        # package's metadata (loaded on first use: importlib.metadata costs an import).
        from importlib import metadata

        try:
            version = metadata.version("satsuma")
        except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    if name == "__all__":
        names = _all_names()
        globals()["__all__"] = names
        return names
    if not name.startswith("__"):
        for room in _LATER:
            # Loading the room gives its names their public path (its __init__ calls
            # public_names), whether satsuma or another room imports it first.
            module = _importlib.import_module(room)
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'satsuma' has no attribute {name!r}")


def _all_names() -> list[str]:
    """``__all__``: the names imported above and those of the rooms loaded on first use
    (which it loads: ``from satsuma import *`` wants them all)."""
    eager = {
        name
        for name, value in globals().items()
        if not name.startswith("_") and not isinstance(value, _types.ModuleType)
    }
    later = (_importlib.import_module(room).__all__ for room in _LATER)
    return sorted(eager.union(*later))


def __dir__() -> list[str]:
    return sorted({*globals(), *_all_names()})


_public_names("satsuma", globals())
