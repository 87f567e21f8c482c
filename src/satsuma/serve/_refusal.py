"""Starting a served conversation's agent, and why it could not start as the answer a
client gets.

Each conversation's agent runs under a supervisor of its own (3 restarts within 5 s),
itself a ``temporary`` child of the server's: a conversation whose agent keeps crashing
stops only itself (its queued runs fail, saying why, and its next run opens it anew),
and no client, however many conversations it crashes, can use up a restart intensity
shared by every conversation and take the server down.

``Supervisor.start_child`` wraps what stopped the agent in ``SupervisorFailed``. Two
causes are the store's, and neither is a bug of the server: the store failed (a full
disk, a file that cannot be written: its ``StoreError``, which the app answers 503) or
another process holds the conversation (a second server on the same SQLite file: the
store gives an agent one owner at a time, so this server answers 409 until the other
closes the conversation).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import trio

from .._exceptions import StoreError, SupervisorFailed
from ..agents import Agent, AgentHandle
from ..supervisor import Supervisor
from ._runs import Busy

__all__ = ["CONVERSATION_RESTARTS", "is_open", "refusal", "start_agent"]

CONVERSATION_RESTARTS = (3, 5.0)
"""A conversation's own restart intensity: restarts allowed, within seconds."""

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
    """Start the agent of ``conversation`` (its name and agent_id) under a supervisor of
    its own, a temporary child of ``supervisor`` registered by the stored id
    (``options["agent_id"]``), or raise what ``refusal`` says."""
    sid = options["agent_id"]
    restarts, within = CONVERSATION_RESTARTS
    own = Supervisor(max_restarts=restarts, within=within, name=sid)
    await supervisor.start_child(own, id=sid, name=sid, restart="temporary")
    try:
        handle: AgentHandle[Any] = await own.start_child(cls, id=sid, **options)
    except BaseException as error:
        with trio.CancelScope(shield=True), suppress(KeyError):  # gone if it gave up
            await supervisor.terminate_child(sid)
            await supervisor.delete_child(sid)
        if isinstance(error, SupervisorFailed):
            raise refusal(*conversation, error) from None
        raise
    return handle


def is_open(supervisor: Supervisor, sid: str) -> bool:
    """Whether the conversation's own supervisor still runs (one that gave up is
    forgotten by the server's: it was temporary)."""
    try:
        supervisor.lookup(sid)
    except KeyError:
        return False
    return True
