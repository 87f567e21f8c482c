"""Starting a served conversation's agent, and why it could not start as the answer a
client gets.

``Supervisor.start_child`` wraps what stopped the agent in ``SupervisorFailed``. Two
causes are the store's, and neither is a bug of the server: the store failed (a full
disk, a file that cannot be written: its ``StoreError``, which the app answers 503) or
another process holds the conversation (a second server on the same SQLite file: the
store gives an agent one owner at a time, so this server answers 409 until the other
closes the conversation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._exceptions import StoreError, SupervisorFailed
from ..agents import Agent, AgentHandle
from ..supervisor import Supervisor
from ._runs import Busy

__all__ = ["refusal", "start_agent"]

# The words every store refuses a second owner with (store/_lease.py's refuse_takeover).
_HELD_ELSEWHERE = "already open in"


def refusal(agent: str, agent_id: str, failed: SupervisorFailed) -> Exception:
    """What to raise for ``failed``: ``Busy`` when another process holds the
    conversation, the store's ``StoreError`` when the store failed, else ``failed``."""
    cause = failed.cause
    if type(cause) is StoreError and _HELD_ELSEWHERE in cause.problem:
        return Busy(
            f"conversation {agent_id} of {agent} is open in another process on this store; "
            "one process serves a conversation at a time (try again once it closes it)"
        )
    return cause if isinstance(cause, StoreError) else failed


async def start_agent(
    supervisor: Supervisor,
    cls: type[Agent[Any]],
    conversation: tuple[str, str],
    options: Mapping[str, Any],
) -> AgentHandle[Any]:
    """Start the agent of ``conversation`` (its name and agent_id) as a child of
    ``supervisor`` with ``options`` (its stored ``agent_id`` among them), or raise what
    ``refusal`` says."""
    try:
        handle: AgentHandle[Any] = await supervisor.start_child(
            cls, id=options["agent_id"], **options
        )
        return handle
    except SupervisorFailed as failed:
        raise refusal(*conversation, failed) from None
