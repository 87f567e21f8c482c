"""What one run of an agent needs from it: the one object through which the run's phases
(``_run`` and the phase modules it drives) reach the agent.

The actor builds one for each run. The run reads its agent's declaration, model and
tools here, edits the conversation and writes to the store through the objects held
here, and never sees the actor itself: what the actor does between runs (serving its
mailbox, restarting tool servers, resets) stays the actor's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from ..models import Model, ModelLimiter
    from ..store import RunRecord
    from ..tools import Approver
    from ._agent import AgentSpec
    from ._conversation import Conversation, Steering
    from ._persist import Persistence
    from ._toolbox import Toolbox
    from ._verifiers import VerifyContext

__all__ = ["RunContext"]


@attrs.frozen(kw_only=True, eq=False)
class RunContext:
    """One run's view of its agent.

    Attributes:
        spec: The agent's declaration (name, system prompt, limits, output type, ...).
        agent_id: The agent's id in the store.
        is_current: True while this incarnation is the agent's newest (a supervisor's
            fencing token).
        model: The model the agent calls.
        model_id: The model's id as requests send it (an alias resolved).
        limiter: The model configuration's limiter; None without limits.
        conversation: The agent's messages, edited by the run.
        steering: Messages the user sent meanwhile, read by the run between turns.
        persistence: The agent's store writer; None without a store.
        interrupted: The agent's runs a stop interrupted, not resumed yet; a run that
            resumes or goes past one takes it out (in place: the actor's list).
        tools: The runner and the schemas sent to the model.
        approver: Who decides calls that need approval; None: the store or a denial.
        tool_context: The context mapping the tools are given.
        handle: What tools see as ``ctx.agent``.
        verifiers: The checks run when the model ends its turn.
        working_dir: The tools' working directory, for verifiers.
        context_extra: The rest of the tools' context, for verifiers.
    """

    spec: AgentSpec
    agent_id: str
    is_current: Callable[[], bool]
    model: Model
    model_id: str
    limiter: ModelLimiter | None
    conversation: Conversation
    steering: Steering
    persistence: Persistence | None
    interrupted: list[RunRecord]
    tools: Toolbox
    approver: Approver | None
    tool_context: Mapping[str, Any]
    handle: object
    verifiers: Sequence[Callable[[VerifyContext], Any]]
    working_dir: Path
    context_extra: Mapping[str, Any]
