"""satsuma: LLM agents whose tool calls run under supervision, on trio.

This module defines nothing: it re-exports the public names of the rooms, each imported
once below, and ``__all__`` is made from them. The names of the models,
agents and supervisor rooms load on first use (PEP 562), so that ``import satsuma.tools``
alone never loads them: tools sit below them. Type checkers read those names
from the ``TYPE_CHECKING`` imports; at run time ``__getattr__`` finds their room in
``_LATER``, the same names grouped by room (tests/test_public_api.py checks that the two
agree). Every public class and function carries its public path (``satsuma.Agent``).
"""

import importlib as _importlib
import logging as _logging
import types as _types
import typing as _typing

from ._exceptions import AgentCrashed as AgentCrashed
from ._exceptions import AgentDefinitionError as AgentDefinitionError
from ._exceptions import AgentUnavailable as AgentUnavailable
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
    from .agents import Agent as Agent
    from .agents import AgentEvent as AgentEvent
    from .agents import AgentHandle as AgentHandle
    from .agents import AgentTool as AgentTool
    from .agents import HistoryProcessor as HistoryProcessor
    from .agents import JsonLinesLog as JsonLinesLog
    from .agents import KeepAll as KeepAll
    from .agents import KeepLastExchanges as KeepLastExchanges
    from .agents import ModelRetry as ModelRetry
    from .agents import ModelWaitEnd as ModelWaitEnd
    from .agents import ModelWaitStart as ModelWaitStart
    from .agents import OutputDelta as OutputDelta
    from .agents import OutputRejected as OutputRejected
    from .agents import OutputValidated as OutputValidated
    from .agents import RunEnd as RunEnd
    from .agents import RunResult as RunResult
    from .agents import RunStart as RunStart
    from .agents import RunStatus as RunStatus
    from .agents import TextDelta as TextDelta
    from .agents import ThinkingDelta as ThinkingDelta
    from .agents import TokenBudget as TokenBudget
    from .agents import TurnEnd as TurnEnd
    from .agents import Verdict as Verdict
    from .agents import Verifier as Verifier
    from .agents import VerifyContext as VerifyContext
    from .agents import event_to_json as event_to_json
    from .agents import open_agent as open_agent
    from .models import MODEL_ALIASES as MODEL_ALIASES
    from .models import AnthropicModel as AnthropicModel
    from .models import Model as Model
    from .models import ModelLimits as ModelLimits
    from .models import ModelListener as ModelListener
    from .models import ModelRequest as ModelRequest
    from .models import ModelResponse as ModelResponse
    from .models import OpenAIModel as OpenAIModel
    from .models import set_model_limits as set_model_limits
    from .supervisor import Backoff as Backoff
    from .supervisor import ChildCrashed as ChildCrashed
    from .supervisor import ChildExited as ChildExited
    from .supervisor import ChildInfo as ChildInfo
    from .supervisor import ChildRestarted as ChildRestarted
    from .supervisor import ChildSpec as ChildSpec
    from .supervisor import ChildStarted as ChildStarted
    from .supervisor import RestartType as RestartType
    from .supervisor import Supervisor as Supervisor
    from .supervisor import SupervisorEvent as SupervisorEvent
    from .supervisor import SupervisorGaveUp as SupervisorGaveUp
    from .supervisor import SupervisorStrategy as SupervisorStrategy

# Without any handler in the tree, logging's last-resort handler prints a library's
# warnings on stderr. An application turns satsuma's records on by configuring logging;
# until then they stay quiet (the logging HOWTO's advice for libraries).
_logging.getLogger("satsuma").addHandler(_logging.NullHandler())

# The names imported under TYPE_CHECKING above, by the room that loads them on first use.
_LATER: _typing.Final = {
    "satsuma.models": frozenset({
        "MODEL_ALIASES", "AnthropicModel", "Model", "ModelLimits", "ModelListener",
        "ModelRequest", "ModelResponse", "OpenAIModel", "set_model_limits",
    }),
    "satsuma.agents": frozenset({
        "Agent", "AgentEvent", "AgentHandle", "AgentTool", "HistoryProcessor", "JsonLinesLog",
        "KeepAll", "KeepLastExchanges", "ModelRetry", "ModelWaitStart", "ModelWaitEnd",
        "OutputDelta", "OutputRejected", "OutputValidated", "RunEnd", "RunResult", "RunStart",
        "RunStatus", "TextDelta", "ThinkingDelta", "TokenBudget", "TurnEnd", "Verdict",
        "Verifier", "VerifyContext", "event_to_json", "open_agent",
    }),
    "satsuma.supervisor": frozenset({
        "Backoff", "ChildCrashed", "ChildExited", "ChildInfo", "ChildRestarted", "ChildSpec",
        "ChildStarted", "RestartType", "Supervisor", "SupervisorEvent", "SupervisorGaveUp",
        "SupervisorStrategy",
    }),
}  # fmt: skip


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
    room = next((room for room, names in _LATER.items() if name in names), None)
    if room is None:
        raise AttributeError(f"module 'satsuma' has no attribute {name!r}")
    # Loading the room gives its names their public path (its __init__ calls
    # public_names), whether satsuma or another room imports it first.
    value = getattr(_importlib.import_module(room), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *globals()["__all__"]})


# Made from the imports, not written out again. Type checkers are not shown it: mypy takes
# a module's public names from a literal __all__ alone when there is one, and reads the
# explicit ``X as X`` re-exports above when there is none.
if not _typing.TYPE_CHECKING:
    __all__ = sorted(
        {
            name
            for name, value in globals().items()
            if not name.startswith("_") and not isinstance(value, _types.ModuleType)
        }.union(*_LATER.values())
    )
    _public_names("satsuma", globals())
