"""satsuma: LLM agents whose tool calls run under supervision, on trio.

This module defines nothing: it re-exports the public names of the private modules.
"""

from ._exceptions import SatsumaError as SatsumaError
from ._exceptions import ToolDefinitionError as ToolDefinitionError
from ._exceptions import ToolError as ToolError
from .tools import Batched as Batched
from .tools import Deny as Deny
from .tools import ErrorKind as ErrorKind
from .tools import EventSink as EventSink
from .tools import FunctionTool as FunctionTool
from .tools import HookDecision as HookDecision
from .tools import Interrupt as Interrupt
from .tools import Parallel as Parallel
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
from .tools import ToolRunner as ToolRunner
from .tools import Toolset as Toolset
from .tools import ToolUpdate as ToolUpdate
from .tools import format_results as format_results
from .tools import get_errors as get_errors
from .tools import has_errors as has_errors
from .tools import tool as tool

__version__ = "0.1.0.dev0"

__all__ = [
    "Batched",
    "Deny",
    "ErrorKind",
    "EventSink",
    "FunctionTool",
    "HookDecision",
    "Interrupt",
    "Parallel",
    "Rewrite",
    "SatsumaError",
    "Sequential",
    "Strategy",
    "Tool",
    "ToolCall",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolError",
    "ToolEvent",
    "ToolHook",
    "ToolOutcome",
    "ToolProgress",
    "ToolResult",
    "ToolRunner",
    "ToolUpdate",
    "Toolset",
    "format_results",
    "get_errors",
    "has_errors",
    "tool",
]
