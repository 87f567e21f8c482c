"""Agents: class-declared actors running the gather → act → verify loop."""

from .._public import public_names as _public_names

# satsuma's other rooms (the supervisor, the cluster, the CLI) reach the few internals
# they need through this one namespace: satsuma.agents.internal, not for users (not in
# DESIGN.md, nor in __all__).
from . import _internal as internal  # noqa: F401  (for other rooms, see above)
from ._agent import Agent as Agent
from ._budget import Budget as Budget
from ._budget import set_budget as set_budget
from ._compaction import Compaction as Compaction
from ._events import AgentEvent as AgentEvent
from ._events import BudgetWarning as BudgetWarning
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
from ._open import open_agent as open_agent
from ._result import RunResult as RunResult
from ._result import RunStatus as RunStatus
from ._subagent import AgentTool as AgentTool
from ._verifiers import Verdict as Verdict
from ._verifiers import Verifier as Verifier
from ._verifiers import VerifyContext as VerifyContext

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentHandle",
    "AgentTool",
    "Compaction",
    "Budget",
    "BudgetWarning",
    "HistoryProcessor",
    "JsonLinesLog",
    "KeepAll",
    "KeepLastExchanges",
    "ModelRetry",
    "ModelWaitEnd",
    "ModelWaitStart",
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
    "Verdict",
    "Verifier",
    "VerifyContext",
    "event_to_json",
    "open_agent",
    "set_budget",
]

# Users import these names from satsuma: they carry that path (tracebacks, reprs, pickles).
_public_names("satsuma", globals())
