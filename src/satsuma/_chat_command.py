"""``satsuma chat``: an interactive session with an agent at the terminal, whose person
approves, denies or edits the calls that need approval; Ctrl-C cancels a run, and a
second one (or the input's end) ends the session.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
from rich.console import Console

from ._commands import RunOptions
from ._live import open_live_view
from ._run_command import open_for_command
from ._terminal import say, visible
from .agents import Agent, AgentHandle
from .tools import Approve, Approver, Deny, PendingCall

__all__ = [
    "chat",
]


@attrs.define
class _Session:
    running: bool = False
    cancelling: bool = False
    interrupted: bool = False


async def chat(agent: type[Agent], options: RunOptions, *, console: Console) -> int:
    """An interactive session: a prompt, a live answer; Ctrl-C cancels the run in
    progress, and a Ctrl-C with no run to cancel (or Ctrl-D) ends the session.

    Returns the exit status: 0 at end of input, 130 after Ctrl-C.
    """
    async with (
        _stdin_lines() as lines,
        open_for_command(agent, options, approver=_asking(lines, console, options.decided_by)) as (
            handle,
            _,
        ),
    ):
        return await _chat(handle, lines, console)


def _asking(lines: Callable[[], Any], console: Console, by: str | None) -> Approver:
    """An approver that asks the person at the terminal about each call: y runs it, n
    (or ``n: reason``) denies it, e edits its JSON input first. The person's decisions
    are made ``by`` them; a call denied for want of an answer names no one."""

    async def ask(call: PendingCall) -> Approve | Deny:
        # The person decides on what this line shows: a field of the call must not move
        # the cursor, erase what is above, or end the line early.
        arguments = visible(json.dumps(call.input, ensure_ascii=False, default=repr))
        say(
            console,
            f"approve {visible(call.tool_name)}({arguments})? ({visible(call.reason)}) [y/n/e] ",
            end="",
        )
        while True:
            line = await lines()
            if line is None:
                return Deny("no answer: the input ended")
            answer, _, reason = line.strip().partition(":")
            if answer.strip().lower() in ("y", "yes"):
                return Approve(by=by)
            if answer.strip().lower() in ("n", "no"):
                return Deny(reason.strip() or "the user said no", by=by)
            if answer.strip().lower() in ("e", "edit"):
                edited = await _edited_input(lines, console)
                if edited is None:
                    return Deny("no answer: the input ended")
                return Approve(input=edited, by=by)
            say(console, "answer y, n (or n: reason) or e: ", end="")

    return ask


async def _edited_input(lines: Callable[[], Any], console: Console) -> dict[str, Any] | None:
    """A JSON object read from the person, asked again until it is one."""
    say(console, "new input (JSON, on one line): ", end="")
    while True:
        line = await lines()
        if line is None:
            return None
        try:
            value = json.loads(line)
        except ValueError as error:
            value, problem = None, f"not JSON ({error})"
        else:
            problem = "not a JSON object"
        if isinstance(value, dict):
            return value
        say(console, f"{visible(problem)}; again: ", end="")


async def _chat(handle: AgentHandle, lines: Callable[[], Any], console: Console) -> int:
    session = _Session()
    say(
        console,
        f"chatting with {visible(handle.name)} (Ctrl-C cancels a run; Ctrl-C again or "
        "Ctrl-D quits)",
    )
    with trio.open_signal_receiver(signal.SIGINT) as interrupts:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch, interrupts, handle, session, nursery.cancel_scope, console)
            while True:
                say(console, ("you>", "bold"), " ", end="")
                line = await lines()
                if line is None:
                    say(console, "")
                    break
                if not line.strip():
                    continue
                session.running, session.cancelling = True, False
                try:
                    # A terminal shows what the user typed: no need to repeat it.
                    echo = not os.isatty(0)
                    async with open_live_view(console, echo_prompts=echo) as view:
                        await handle.run(line, events=view.agent_event)
                finally:
                    session.running = False
            nursery.cancel_scope.cancel()
    return 130 if session.interrupted else 0


async def _watch(
    interrupts: Any,
    handle: AgentHandle,
    session: _Session,
    scope: trio.CancelScope,
    console: Console,
) -> None:
    async for _ in interrupts:
        if session.running and not session.cancelling:
            session.cancelling = True
            say(console, "^C: cancelling the run (Ctrl-C again quits)", style="yellow")
            await handle.cancel()
            continue
        session.interrupted = True
        say(console, "\n", ("^C: bye", "yellow"))
        scope.cancel()
        return


@asynccontextmanager
async def _stdin_lines() -> AsyncIterator[Callable[[], Any]]:
    """A function that reads the next line of standard input (None at its end),
    without blocking trio: through an FdStream on a duplicate of fd 0, whose blocking
    mode — shared with the terminal and the shell — is put back on exit."""
    if stat.S_ISREG(os.fstat(0).st_mode):
        # A regular file never blocks (and epoll refuses it): read it plainly.
        stream = sys.stdin

        async def from_file() -> str | None:
            await trio.lowlevel.checkpoint()
            line = stream.readline()
            return line.rstrip("\n") if line else None

        yield from_file
        return
    was_blocking = os.get_blocking(0)
    fdstream = trio.lowlevel.FdStream(os.dup(0))
    buffer = bytearray()

    async def read_line() -> str | None:
        while b"\n" not in buffer:
            data = await fdstream.receive_some(4096)
            if not data:
                if not buffer:
                    return None
                rest = buffer.decode(errors="replace")
                buffer.clear()
                return rest
            buffer.extend(data)
        end = buffer.index(b"\n")
        line = buffer[:end].decode(errors="replace")
        del buffer[: end + 1]
        return line

    try:
        yield read_line
    finally:
        with trio.CancelScope(shield=True):
            await fdstream.aclose()
        os.set_blocking(0, was_blocking)
