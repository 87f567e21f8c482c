"""Helpers for testing your tools (and, later, agents) without a network.

The pytest plugin (fixtures ``tool_workspace``, ``tool_context``, ``tool_events``) is
registered automatically when satsuma is installed.
"""

from ._tools import EventRecorder as EventRecorder
from ._tools import run_tool as run_tool
from ._tools import tool_call as tool_call

__all__ = ["EventRecorder", "run_tool", "tool_call"]
