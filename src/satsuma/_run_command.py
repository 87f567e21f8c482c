"""``satsuma run``: the agent opened as the command's options say (its model, its store,
its tools' context), refused while its conversation has runs that were interrupted or
await approval unless told to go past them, and run once on a prompt.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, Any

import trio
from rich.console import Console

from ._command_error import CommandError
from ._commands import FAKE_MODEL, RunOptions, check_key, tools_context
from ._live import cost_text, open_live_view
from ._store_option import open_store
from ._terminal import json_safe, say, visible
from .agents import Agent, AgentHandle, JsonLinesLog, RunResult, internal
from .agents import open_agent as _open_agent
from .models import AnthropicModel, Model
from .store import RunRecord, Store
from .testing import FakeModel
from .tools import Approver

__all__ = [
    "open_for_command",
    "run_lines",
    "run_once",
    "shown_store",
]


@asynccontextmanager
async def open_for_command(
    agent: type[Agent],
    options: RunOptions,
    *,
    resuming: bool = False,
    approver: Approver | None = None,
) -> AsyncIterator[tuple[AgentHandle, Store | None]]:
    """The agent, opened as the options say, and its store (None without ``--store``).
    Unless ``resuming`` (or told to go past them), a conversation with interrupted runs
    is not run on: a new run would answer their open calls ``Interrupted`` for good, so
    the user is shown them and asked."""
    context = tools_context(options)
    if options.model == FAKE_MODEL:
        model: Model = FakeModel()
    else:
        check_key()
        model = AnthropicModel()
    store: Store | None = None
    try:
        # Opened here, not by the agent: a database that cannot be reached is a
        # mistake in --store (exit 2), not a failed run.
        store = await open_store(options.store) if options.store is not None else None
        agent_id = options.agent_id or (agent.name if store is not None else None)
        async with _open_agent(
            agent, model=model, context=context, store=store, agent_id=agent_id, approver=approver
        ) as handle:
            if (
                handle.interrupted
                and store is not None
                and not (resuming or options.past_interrupted)
            ):
                raise CommandError(await _interrupted_text(handle, store, options))
            if store is not None and not (resuming or options.past_paused):
                assert agent_id is not None
                paused = [
                    record
                    for record in await store.runs(agent_id)
                    if record.status == "awaiting_approval"
                ]
                if paused:
                    raise CommandError(await _paused_text(agent_id, paused, store, options))
            yield handle, store
    finally:
        if isinstance(model, AnthropicModel):
            with trio.CancelScope(shield=True):
                await model.aclose()
        if store is not None:
            with trio.CancelScope(shield=True):
                await store.aclose()


async def _interrupted_text(handle: AgentHandle, store: Store, options: RunOptions) -> str:
    lines = [
        f"agent {visible(handle.agent_id)} has runs that were interrupted (a crash or a kill):"
    ]
    for record in handle.interrupted:
        lines.extend(await run_lines(record, store))
    where = f" --store {options.store.shown}" if options.store is not None else ""
    lines.append(
        f"resume one with `satsuma resume TARGET RUN_ID{where}`, or start anyway with "
        "--past-interrupted (their open calls are then answered 'Interrupted' and they "
        "can no longer be resumed)"
    )
    return "\n".join(lines)


async def _paused_text(
    agent_id: str, paused: list[RunRecord], store: Store, options: RunOptions
) -> str:
    lines = [f"agent {visible(agent_id)} has runs awaiting approval:"]
    for record in paused:
        lines.extend(await run_lines(record, store))
    lines.append(
        f"decide with `satsuma resume TARGET RUN_ID --store {shown_store(options)} --approve "
        "CALL_ID ... --deny CALL_ID[:REASON] ...`, or start anyway with --past-paused "
        "(they can then no longer be decided)"
    )
    return "\n".join(lines)


async def run_lines(record: RunRecord, store: Store) -> list[str]:
    """A run of ``satsuma runs``: id, status, when, the prompt; for a run that did not
    end, its calls in doubt (started, no outcome recorded: they may or may not have
    happened); for a run awaiting approval, its pending calls and why they wait; for a failed run, its error; last,
    its tokens and their cost (once it paused or ended having called the model).
    Each field from the store is one line, made ``visible``."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at))
    prompt = _shortened(record.prompt, 60)
    lines = [f"  {visible(record.run_id)}  {record.status:<17} {started}  {visible(repr(prompt))}"]
    if record.status in ("running", "interrupted"):
        for entry in await store.calls(record.run_id):
            state = "finished" if entry.finished else "in doubt"
            lines.append(
                f"      {state:<9} {_call_text(entry.tool_name, entry.input)}  "
                f"{visible(entry.tool_use_id)}"
            )
    if record.status == "awaiting_approval":
        for pending in await store.pending_calls(record.run_id):
            lines.append(
                f"      pending   {_call_text(pending.tool_name, pending.input)}  "
                f"{visible(pending.tool_use_id)}  ({visible(pending.reason)})"
            )
    if record.status == "failed" and record.error:
        # What ended it (a BudgetExceeded names the budget and what was spent).
        lines.append(f"      error: {visible(_shortened(record.error, 300))}")
    usage = record.usage  # as of its pause or end
    if not usage.is_empty:
        lines.append(
            f"      {usage.input_tokens} in / {usage.output_tokens} out tokens"
            f" ({usage.cache_creation_input_tokens} written to the cache,"
            f" {usage.cache_read_input_tokens} read), {cost_text(usage.cost_usd)}"
        )
    return lines


def _shortened(text: str, most: int) -> str:
    """``text``, cut to ``most`` characters (the last three ``...``) when it is longer."""
    return text if len(text) <= most else text[: most - 3] + "..."


def _call_text(tool_name: str, input: Any) -> str:
    """A call as a listed run shows it: ``name({...})``, its arguments at most 80
    characters of JSON, each part made ``visible``."""
    arguments = _shortened(json.dumps(input, ensure_ascii=False, default=repr), 80)
    return f"{visible(tool_name)}({visible(arguments)})"


async def run_once(
    agent: type[Agent],
    prompt: str,
    options: RunOptions,
    *,
    console: Console,
    json_lines: IO[str] | None = None,
) -> RunResult:
    """Run ``agent`` once on ``prompt``: live on ``console``, or, with ``json_lines``,
    each event as one line of JSON written to that file."""
    async with open_for_command(agent, options) as (handle, _):
        if json_lines is not None:
            with JsonLinesLog(json_lines) as log:
                return await handle.run(prompt, events=log)
        async with open_live_view(console) as view:
            result = await handle.run(prompt, events=view.agent_event)
        _print_answer(result, console)
        return result


def _print_answer(result: RunResult[Any], console: Console) -> None:
    """A typed answer (an agent with an output_type), as JSON on stdout: the live view
    showed the text only. With --json, the RunEnd line carries it already."""
    if result.status == "completed" and not isinstance(result.output, str):
        # Lossless and valid JSON: C1 and bidi controls in its strings become \u escapes.
        answer = json.dumps(internal.output_to_json(result.output), ensure_ascii=False, indent=2)
        say(console, json_safe(answer))


def shown_store(options: RunOptions) -> str:
    return options.store.shown if options.store is not None else ""
