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
from ._open import open_agent as open_agent
from ._openai import OpenAIModel as OpenAIModel
from ._result import RunResult as RunResult
from ._result import RunStatus as RunStatus
from ._subagent import AgentTool as AgentTool
from ._verifiers import Verdict as Verdict
from ._verifiers import Verifier as Verifier
from ._verifiers import VerifyContext as VerifyContext

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
