"""``satsuma run`` and ``satsuma chat``: one agent, from the user's own code.

The agent is named ``MODULE:AgentClass`` (imported with the current directory on the
path, as ``python -m`` would) or ``path/to/file.py:AgentClass``. Every mistake a user can
make here — no such module, no such class, not an Agent, no key — is a ``CommandError``
with one line of explanation; cli.py prints it without a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import attrs
import trio
from rich.console import Console

from ._exceptions import AgentDefinitionError
from ._live import open_live_view
from .agents import Agent, AgentHandle, AnthropicModel, JsonLinesLog, RunResult
from .agents import open_agent as _open_agent
from .store import SQLiteStore

__all__ = ["CommandError", "RunOptions", "chat", "load_agent", "run_once"]


class CommandError(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""


@attrs.frozen(kw_only=True)
class RunOptions:
    """What ``run`` and ``chat`` share: overrides of the agent class and the store."""

    model: str | None = None
    max_iterations: int | None = None
    store: Path | None = None
    agent_id: str | None = None


# --- finding the agent -----------------------------------------------------------------


def load_agent(target: str, options: RunOptions = RunOptions()) -> type[Agent]:
    """The Agent subclass ``target`` names, with the options' overrides applied.

    Raises:
        CommandError: the target is malformed, cannot be imported, or is not an Agent.
    """
    where, colon, attribute = target.rpartition(":")
    if not colon or not where or not attribute:
        raise CommandError(
            f"expected MODULE:AgentClass or path/to/file.py:AgentClass, got: {target!r}"
        )
    module = _import(where)
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise CommandError(f"{where} has no attribute {attribute!r}") from None
    if not (isinstance(found, type) and issubclass(found, Agent)):
        raise CommandError(f"{target} is not an Agent subclass (it is {found!r})")
    if found.__satsuma_agent__ is None:
        raise CommandError(f"{target} is an abstract Agent: name a concrete subclass")
    overrides: dict[str, Any] = {}
    if options.model is not None:
        overrides["model"] = options.model
    if options.max_iterations is not None:
        overrides["max_iterations"] = options.max_iterations
    if not overrides:
        return found
    try:
        return type(found.__name__, (found,), {"__module__": found.__module__, **overrides})
    except AgentDefinitionError as error:
        raise CommandError(str(error)) from None


def _import(where: str) -> Any:
    is_file = where.endswith(".py") or os.sep in where
    try:
        if is_file:
            path = Path(where)
            if not path.is_file():
                raise CommandError(f"no such file: {where}")
            name = f"satsuma_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
                raise CommandError(f"cannot import {where}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(where)
    except CommandError:
        raise
    except ModuleNotFoundError as error:
        raise CommandError(f"no module named {error.name or where!r}") from None
    except Exception as error:
        # The user's module raised while it was imported: its own bug, said in one line.
        raise CommandError(f"importing {where} failed: {type(error).__name__}: {error}") from None


def _check_key() -> None:
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise CommandError("ANTHROPIC_API_KEY is not set (`satsuma demo` runs offline without one)")


@asynccontextmanager
async def _open(agent: type[Agent], options: RunOptions) -> AsyncIterator[AgentHandle]:
    _check_key()
    store = SQLiteStore(options.store) if options.store is not None else None
    agent_id = options.agent_id or (agent.name if store is not None else None)
    async with AnthropicModel() as model:
        try:
            async with _open_agent(agent, model=model, store=store, agent_id=agent_id) as handle:
                yield handle
        finally:
            if store is not None:
                with trio.CancelScope(shield=True):
                    await store.aclose()


# --- run -------------------------------------------------------------------------------


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
    async with _open(agent, options) as handle:
        if json_lines is not None:
            with JsonLinesLog(json_lines) as log:
                return await handle.run(prompt, events=log)
        async with open_live_view(console) as view:
            return await handle.run(prompt, events=view.agent_event)


# --- chat ------------------------------------------------------------------------------


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
    async with _open(agent, options) as handle, _stdin_lines() as lines:
        session = _Session()
        console.print(
            f"chatting with {handle.name} (Ctrl-C cancels a run; Ctrl-C again or Ctrl-D quits)"
        )
        with trio.open_signal_receiver(signal.SIGINT) as interrupts:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    _watch, interrupts, handle, session, nursery.cancel_scope, console
                )
                while True:
                    console.print("[bold]you>[/] ", end="")
                    line = await lines()
                    if line is None:
                        console.print()
                        break
                    if not line.strip():
                        continue
                    session.running, session.cancelling = True, False
                    try:
                        async with open_live_view(console) as view:
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
            console.print("[yellow]^C: cancelling the run (Ctrl-C again quits)[/]")
            await handle.cancel()
            continue
        session.interrupted = True
        console.print("\n[yellow]^C: bye[/]")
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
