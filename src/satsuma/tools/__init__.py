"""Declaring tools, validating their arguments, and running them under supervision."""

from .._exceptions import ToolDefinitionError as ToolDefinitionError
from .._exceptions import ToolError as ToolError
from .._public import public_names as _public_names
from ._approval import Approve as Approve
from ._approval import Approver as Approver
from ._approval import PendingCall as PendingCall
from ._calls import ToolCall as ToolCall
from ._context import ToolContext as ToolContext
from ._environment import Interrupt as Interrupt
from ._events import ApprovalDecided as ApprovalDecided
from ._events import ApprovalRequested as ApprovalRequested
from ._events import EventSink as EventSink
from ._events import NestedEvent as NestedEvent
from ._events import ToolCallEnd as ToolCallEnd
from ._events import ToolCallStart as ToolCallStart
from ._events import ToolEvent as ToolEvent
from ._events import ToolProgress as ToolProgress
from ._events import ToolUpdate as ToolUpdate
from ._hooks import Ask as Ask
from ._hooks import Deny as Deny
from ._hooks import HookDecision as HookDecision
from ._hooks import Rewrite as Rewrite
from ._hooks import ToolHook as ToolHook
from ._results import ErrorKind as ErrorKind
from ._results import ToolOutcome as ToolOutcome
from ._results import ToolResult as ToolResult
from ._results import ToolReturn as ToolReturn
from ._results import format_results as format_results
from ._results import get_errors as get_errors
from ._results import has_errors as has_errors
from ._runner import ToolRunner as ToolRunner
from ._strategies import Batched as Batched
from ._strategies import Parallel as Parallel
from ._strategies import Sequential as Sequential
from ._strategies import Strategy as Strategy
from ._tool import FunctionTool as FunctionTool
from ._tool import Tool as Tool
from ._tool import ToolDefinition as ToolDefinition
from ._tool import Toolset as Toolset
from ._tool import tool as tool

# isort: split
# For satsuma's other rooms, not for users (none of these is in DESIGN.md): the agent
# answers calls it does not run (a cancelled run, a denied or interrupted call) with the
# runner's own fixed texts and outcomes, checks the model's calls through the same JSON
# gate (and hands the runner the calls it gated as CheckedCalls, not walked again),
# defers approvals, and declares typed output and AgentTool with the machinery of tool
# parameters (schema nodes, type hints, cattrs structuring, the declaration checks);
# the supervisor and the agent share the approval timeout's default; an agent class
# prepares its tools once for all its agents' runners; MCP servers and
# remote A2A agents are servers of tools (ToolServer) that an agent starts; the cluster's
# events and the demo read tool content.
from ._approval import DEFAULT_APPROVAL_TIMEOUT as DEFAULT_APPROVAL_TIMEOUT
from ._approval import Deferral as Deferral
from ._calls import CheckedCalls as CheckedCalls
from ._calls import checked_calls as checked_calls
from ._calls import gated as gated
from ._checkers import structure_errors as structure_errors
from ._hints import compile_hint as compile_hint
from ._hints import structure as structure
from ._hints import unstructure as unstructure
from ._prepared import PreparedTools as PreparedTools
from ._prepared import prepare_tools as prepare_tools
from ._results import Content as Content
from ._results import content_text as content_text
from ._results import error_outcome as error_outcome
from ._server import ToolServer as ToolServer
from ._spec import ObjectNode as ObjectNode
from ._spec import Property as Property
from ._spec import StringNode as StringNode
from ._spec import check_arguments as check_arguments
from ._strategies import as_strategy as as_strategy
from ._texts import INTERRUPTED_TEXT as INTERRUPTED_TEXT
from ._texts import cancelled_text as cancelled_text
from ._texts import denied_text as denied_text
from ._tool import validate_common as validate_common

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "Approve",
    "Approver",
    "Ask",
    "Batched",
    "Deny",
    "ErrorKind",
    "EventSink",
    "FunctionTool",
    "HookDecision",
    "Interrupt",
    "NestedEvent",
    "Parallel",
    "PendingCall",
    "Rewrite",
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
    "ToolReturn",
    "ToolRunner",
    "ToolUpdate",
    "Toolset",
    "format_results",
    "get_errors",
    "has_errors",
    "tool",
]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
