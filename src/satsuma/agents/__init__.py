"""Agents: class-declared actors running the gather → act → verify loop."""

from .._messages import Message as Message
from .._messages import Usage as Usage
from ._agent import Agent as Agent
from ._aliases import MODEL_ALIASES as MODEL_ALIASES
from ._anthropic import AnthropicModel as AnthropicModel
from ._events import AgentEvent as AgentEvent
from ._events import ModelRetry as ModelRetry
from ._events import ModelWaitEnd as ModelWaitEnd
from ._events import ModelWaitStart as ModelWaitStart
from ._events import OutputDelta as OutputDelta
from ._events import OutputRejected as OutputRejected
from ._events import OutputValidated as OutputValidated
from ._events import RunEnd as RunEnd
from ._events import RunStart as RunStart
from ._events import TextDelta as TextDelta
from ._events import ThinkingDelta as ThinkingDelta
from ._events import TurnEnd as TurnEnd
from ._events import event_to_json as event_to_json
from ._handle import AgentHandle as AgentHandle
from ._handle import open_agent as open_agent
from ._history import HistoryProcessor as HistoryProcessor
from ._history import KeepAll as KeepAll
from ._history import KeepLastExchanges as KeepLastExchanges
from ._history import TokenBudget as TokenBudget
from ._jsonlog import JsonLinesLog as JsonLinesLog
from ._limits import ModelLimits as ModelLimits
from ._limits import set_model_limits as set_model_limits
from ._model import Model as Model
from ._model import ModelListener as ModelListener
from ._model import ModelRequest as ModelRequest
from ._model import ModelResponse as ModelResponse
from ._openai import OpenAIModel as OpenAIModel
from ._result import RunResult as RunResult
from ._result import RunStatus as RunStatus
from ._subagent import AgentTool as AgentTool
from ._verifiers import Verdict as Verdict
from ._verifiers import Verifier as Verifier
from ._verifiers import VerifyContext as VerifyContext

# isort: split
# For satsuma's other rooms, not for users (none of these is in DESIGN.md): the
# supervisor runs an agent's incarnations on an Actor and a Mailbox that outlives them;
# a cluster's node runs queued runs under their own ids, and a cluster's client and
# results read agent classes, typed answers and stored runs; the CLI reads agent classes
# and typed answers.
from ._actor import Actor as Actor
from ._actor import Mailbox as Mailbox
from ._actor import new_run_id as new_run_id
from ._agent import seconds_or_none as seconds_or_none
from ._agent import spec_of as spec_of
from ._handle import resume_with_id as resume_with_id
from ._handle import run_with_id as run_with_id
from ._jsonlog import json_line as json_line
from ._output import OutputSpec as OutputSpec
from ._output import output_to_json as output_to_json
from ._persist import run_part as run_part
from ._persist import stored_answer as stored_answer
from ._result import NO_ANSWER as NO_ANSWER
from ._result import OutputT as OutputT
from ._result import raw_output as raw_output

__all__ = [
    "MODEL_ALIASES",
    "Agent",
    "AgentEvent",
    "AgentHandle",
    "AgentTool",
    "AnthropicModel",
    "HistoryProcessor",
    "JsonLinesLog",
    "KeepAll",
    "KeepLastExchanges",
    "Message",
    "Model",
    "ModelLimits",
    "ModelListener",
    "ModelRequest",
    "ModelResponse",
    "ModelRetry",
    "ModelWaitEnd",
    "ModelWaitStart",
    "OpenAIModel",
    "OutputDelta",
    "OutputRejected",
    "OutputValidated",
    "RunEnd",
    "RunResult",
    "RunStart",
    "RunStatus",
    "TextDelta",
    "ThinkingDelta",
    "TokenBudget",
    "TurnEnd",
    "Usage",
    "Verdict",
    "Verifier",
    "VerifyContext",
    "event_to_json",
    "open_agent",
    "set_model_limits",
]
