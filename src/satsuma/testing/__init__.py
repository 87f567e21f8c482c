"""Helpers for testing your tools and agents without a network.

The pytest plugin (fixtures ``tool_workspace``, ``tool_context``, ``tool_events``) is
registered automatically when satsuma is installed.
"""

from .._public import public_names as _public_names
from ._chat_server import ChatCompletionsServer as ChatCompletionsServer
from ._fake import FakeModel as FakeModel
from ._fake import fake_reply as fake_reply
from ._messages_server import MessagesServer as MessagesServer
from ._script import Failure as Failure
from ._script import Reply as Reply
from ._scripted import FunctionModel as FunctionModel
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import check_conversation as check_conversation
from ._tools import EventRecorder as EventRecorder
from ._tools import run_tool as run_tool
from ._tools import tool_call as tool_call

__all__ = [
    "ChatCompletionsServer",
    "EventRecorder",
    "FakeModel",
    "Failure",
    "FunctionModel",
    "MessagesServer",
    "Reply",
    "ScriptedModel",
    "check_conversation",
    "fake_reply",
    "run_tool",
    "tool_call",
]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
