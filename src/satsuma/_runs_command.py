"""``satsuma runs`` and ``satsuma resume``: the runs of an agent's conversation in a store,
listed; an interrupted run resumed, or the pending calls of a paused one decided.
"""

from __future__ import annotations

import getpass

import trio
from rich.console import Console

from ._command_error import CommandError
from ._commands import Assistant, RunOptions
from ._live import open_live_view
from ._run_command import open_for_command, run_lines, shown_store
from ._store_option import StoreOption, open_store
from ._terminal import say, visible
from .agents import Agent, AgentHandle, RunResult
from .store import RunRecord, Store
from .tools import Approve, Deny

__all__ = [
    "decider",
    "decisions_from",
    "list_runs",
    "resume_run",
]


async def list_runs(
    agent: type[Agent] | None, where: StoreOption, agent_id: str | None, *, console: Console
) -> int:
    """Print the runs of an agent's conversation in a store, oldest first."""
    if not where.postgres and not await trio.Path(where.path).is_file():
        raise CommandError(f"no such store: {where.shown}")
    which = agent_id or (agent.name if agent is not None else Assistant.name)
    store = await open_store(where)
    try:
        records = await store.runs(which)
        if not records:
            say(console, f"agent {visible(which)} has no runs in {visible(where.shown)}")
            return 0
        say(console, f"runs of agent {visible(which)} in {visible(where.shown)}:")
        for record in records:
            for line in await run_lines(record, store):
                say(console, line)
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
    return 0


def decider(by: str | None) -> str | None:
    """Who the person deciding approvals is: ``--by NAME`` (``--by ''``: no one named),
    else the OS user name, else (a user without a name, in a container) no one."""
    if by is not None:
        return by.strip() or None
    try:
        return getpass.getuser() or None
    except (OSError, KeyError):  # no LOGNAME, USER..., and no passwd entry for the uid
        return None


def decisions_from(
    approve: list[str], deny: list[str], *, by: str | None = None
) -> dict[str, Approve | Deny]:
    """The decisions of ``resume --approve CALL_ID --deny CALL_ID[:REASON]``, made ``by``.

    Raises:
        CommandError: a call is decided twice.
    """
    decisions: dict[str, Approve | Deny] = {}
    given: list[tuple[str, Approve | Deny]] = [(call_id, Approve(by=by)) for call_id in approve]
    for text in deny:
        call_id, _, reason = text.partition(":")
        given.append((call_id, Deny(reason.strip() or "the user said no", by=by)))
    for call_id, decision in given:
        if call_id in decisions:
            raise CommandError(f"call {call_id} is decided twice")
        decisions[call_id] = decision
    return decisions


async def resume_run(
    agent: type[Agent],
    run_id: str,
    options: RunOptions,
    decisions: dict[str, Approve | Deny] | None = None,
    *,
    console: Console,
) -> RunResult:
    """Resume an interrupted run, or (with ``decisions``) a run awaiting approval,
    live on ``console``."""
    if options.store is None:
        raise CommandError("resume needs the --store the run is in")
    async with open_for_command(agent, options, resuming=True) as (handle, store):
        assert store is not None
        record = await store.get_run(run_id)
        if (
            record is not None
            and record.agent_id == handle.agent_id
            and record.status == "awaiting_approval"
        ):
            await _check_decisions(store, run_id, decisions or {})
            async with open_live_view(console) as view:
                return await handle.resume(
                    run_id, decisions=decisions or {}, events=view.agent_event
                )
        if decisions:
            where = f"{record.status}, not awaiting approval" if record else "not found"
            raise CommandError(
                f"run {visible(run_id)} is {where}: --approve and --deny decide the calls of "
                "a paused run"
            )
        if run_id not in {record.run_id for record in handle.interrupted}:
            raise CommandError(_not_resumable(handle, record, run_id, options))
        async with open_live_view(console) as view:
            return await handle.resume(run_id, events=view.agent_event)


async def _check_decisions(store: Store, run_id: str, decisions: dict[str, Approve | Deny]) -> None:
    """Every pending call of the paused run decided, and nothing else."""
    pending = [call.tool_use_id for call in await store.pending_calls(run_id)]
    unknown = [visible(call_id) for call_id in decisions if call_id not in pending]
    if unknown:
        waiting = ", ".join(visible(call_id) for call_id in pending)
        raise CommandError(
            f"run {visible(run_id)} has no pending call {unknown[0]} (it waits on: {waiting})"
        )
    missing = [visible(call_id) for call_id in pending if call_id not in decisions]
    if missing:
        raise CommandError(
            f"call {missing[0]} of run {visible(run_id)} needs a decision: --approve "
            f"{missing[0]} or --deny {missing[0]}:REASON"
        )


def _not_resumable(
    handle: AgentHandle, record: RunRecord | None, run_id: str, options: RunOptions
) -> str:
    if record is None or record.agent_id != handle.agent_id:
        return (
            f"agent {visible(handle.agent_id)} has no run {visible(repr(run_id))} in "
            f"{visible(shown_store(options))}"
        )
    if record.status == "interrupted":
        return f"run {visible(run_id)} can no longer be resumed: a later run went past it"
    return f"run {visible(run_id)} ended {record.status}; only an interrupted run can be resumed"
