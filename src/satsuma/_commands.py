"""``satsuma run`` and ``satsuma chat``: one agent, from the user's own code.

The agent is named ``MODULE:AgentClass`` (imported with the current directory on the
path, as ``python -m`` would) or ``path/to/file.py:AgentClass``. Every mistake a user can
make here — no such module, no such class, not an Agent, no key — is a ``CommandError``
with one line of explanation; cli.py prints it without a traceback.
"""

from __future__ import annotations

import getpass
import importlib
import importlib.util
import json
import os
import signal
import stat
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import attrs
import trio
from rich.console import Console

from ._command_error import CommandError
from ._exceptions import AgentDefinitionError
from ._live import open_live_view
from ._store_option import StoreOption, open_store
from ._terminal import json_safe, say, visible
from .agents import Agent, AgentHandle, JsonLinesLog, RunResult
from .agents import open_agent as _open_agent
from .agents._agent import spec_of
from .agents._output import output_to_json
from .models import AnthropicModel, Model
from .store import RunRecord, Store
from .testing import FakeModel
from .tools import Approve, Approver, Deny, PendingCall

__all__ = [
    "FAKE_MODEL",
    "Assistant",
    "CommandError",
    "RunOptions",
    "builtin_tools",
    "capability_warnings",
    "chat",
    "decider",
    "decisions_from",
    "fake_server",
    "list_runs",
    "load_agent",
    "resume_run",
    "run_once",
]


FAKE_MODEL = "fake"


@attrs.frozen(kw_only=True)
class RunOptions:
    """What ``run`` and ``chat`` share: overrides of the agent class, the tools' context
    and the store.

    ``model`` ``"fake"`` is the offline FakeModel (no key, no network). ``tools`` are
    names of built-in tools added to the agent's; ``allow`` the capabilities granted to
    tools (none by default, as in the library); ``workdir`` the tools' working
    directory (the current one by default); ``store`` the ``--store`` given, if any.
    """

    model: str | None = None
    max_iterations: int | None = None
    store: StoreOption | None = None
    agent_id: str | None = None
    tools: tuple[str, ...] = ()
    allow: frozenset[str] = frozenset()
    workdir: Path | None = None
    past_interrupted: bool = False
    past_paused: bool = False
    decided_by: str | None = None  # who decides approvals (chat's answers, resume's)


class Assistant(Agent):
    """The agent of ``satsuma run`` and ``satsuma chat`` without a target: a plain
    assistant with the built-in tools given by ``--tools``."""

    name = "assistant"
    system = "You are a helpful assistant. Use the tools you have when they help."


def builtin_tools() -> dict[str, type[Any]]:
    """The built-in tools by name."""
    from .tools import builtin

    classes = [
        builtin.ReadFile,
        builtin.WriteFile,
        builtin.EditFile,
        builtin.ListDir,
        builtin.Search,
        builtin.Bash,
        builtin.HttpFetch,
        builtin.DateResolver,
    ]
    return {str(cls.name): cls for cls in classes}


def capability_warnings(agent: type[Agent], options: RunOptions) -> list[str]:
    """A line for each tool of ``agent`` that needs a capability ``options`` do not grant:
    its calls will be denied (the model is told so)."""
    lines = []
    for definition in spec_of(agent).make_runner(with_sources=False).definitions:
        missing = sorted(definition.capabilities - options.allow)
        if missing:
            flags = " ".join(f"--allow {name}" for name in missing)
            lines.append(f"{definition.name} needs {flags}; without it its calls are denied")
    return lines


# --- finding the agent -----------------------------------------------------------------


def load_agent(target: str | None, options: RunOptions = RunOptions()) -> type[Agent]:
    """The Agent subclass ``target`` names (``Assistant`` for None), with the options'
    overrides applied.

    Raises:
        CommandError: the target is malformed, cannot be imported, or is not an Agent;
            a tool named in the options is not a built-in tool.
    """
    found = Assistant if target is None else _find(target)
    overrides: dict[str, Any] = {}
    if options.model is not None and options.model != FAKE_MODEL:
        overrides["model"] = options.model
    if options.max_iterations is not None:
        overrides["max_iterations"] = options.max_iterations
    if options.tools:
        available = builtin_tools()
        unknown = [name for name in options.tools if name not in available]
        if unknown:
            raise CommandError(
                f"no built-in tool named {unknown[0]!r} (there are: {', '.join(available)})"
            )
        added = [available[name] for name in dict.fromkeys(options.tools)]
        overrides["tools"] = [*found.tools, *added]
    if not overrides:
        return found
    try:
        return type(found.__name__, (found,), {"__module__": found.__module__, **overrides})
    except AgentDefinitionError as error:
        raise CommandError(str(error)) from None


def _find(target: str) -> type[Agent]:
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
    return found


def _import(where: str) -> Any:
    is_file = where.endswith(".py") or os.sep in where
    try:
        if is_file:
            path = Path(where)
            if not path.is_file():
                raise CommandError(f"no such file: {where}")
            # As `python path/file.py` would: the file's directory first on the path, so
            # that the modules beside it import.
            _first_on_path(str(path.resolve().parent))
            name = f"satsuma_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
                raise CommandError(f"cannot import {where}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
        _first_on_path(os.getcwd())  # as `python -m` would
        return importlib.import_module(where)
    except CommandError:
        raise
    except ModuleNotFoundError as error:
        missing = error.name
        if not is_file and missing is not None and f"{where}.".startswith(f"{missing}."):
            # The target itself (or its package) is not there: a typo, or the wrong
            # directory. A module it imports that is missing is the module's own news.
            raise CommandError(f"no module named {missing!r}") from None
        raise _import_failed(where, error) from None
    except Exception as error:
        raise _import_failed(where, error) from None


def _first_on_path(directory: str) -> None:
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)


def _import_failed(where: str, error: Exception) -> CommandError:
    """The user's module raised while it was imported: its own bug, shown as Python
    would show it (the traceback from the user's code on), then said in one line."""
    tb = error.__traceback__
    # Leave out the frames of this module and of importlib's machinery.
    machinery = os.path.dirname(importlib.__file__) + os.sep
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == __file__
        or tb.tb_frame.f_code.co_filename.startswith(("<frozen importlib", machinery))
    ):
        tb = tb.tb_next
    details = "".join(traceback.format_exception(type(error), error, tb))
    return CommandError(
        f"importing {where} failed: {type(error).__name__}: {error}", details=details.rstrip()
    )


def _check_key() -> None:
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        raise CommandError(
            "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=sk-ant-..., or try "
            "offline with --model fake (`satsuma demo` runs offline too)"
        )


def _context(options: RunOptions) -> dict[str, Any]:
    workdir = options.workdir if options.workdir is not None else Path.cwd()
    if not workdir.is_dir():
        raise CommandError(f"--workdir {workdir}: no such directory")
    return {"working_dir": workdir.resolve(), "capabilities": options.allow}


@asynccontextmanager
async def _open(
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
    context = _context(options)
    if options.model == FAKE_MODEL:
        model: Model = FakeModel()
    else:
        _check_key()
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
        lines.extend(await _run_lines(record, store))
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
        lines.extend(await _run_lines(record, store))
    lines.append(
        f"decide with `satsuma resume TARGET RUN_ID --store {_shown(options)} --approve "
        "CALL_ID ... --deny CALL_ID[:REASON] ...`, or start anyway with --past-paused "
        "(they can then no longer be decided)"
    )
    return "\n".join(lines)


async def _run_lines(record: RunRecord, store: Store) -> list[str]:
    """A run of ``satsuma runs``: id, status, when, the prompt; for a run that did not
    end, its calls in doubt (started, no outcome recorded: they may or may not have
    happened); for a run awaiting approval, its pending calls and why they wait.
    Each field from the store is one line, made ``visible``."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at))
    prompt = record.prompt if len(record.prompt) <= 60 else record.prompt[:57] + "..."
    lines = [f"  {visible(record.run_id)}  {record.status:<17} {started}  {visible(repr(prompt))}"]
    if record.status in ("running", "interrupted"):
        for entry in await store.calls(record.run_id):
            state = "finished" if entry.finished else "in doubt"
            arguments = json.dumps(entry.input, ensure_ascii=False, default=repr)
            if len(arguments) > 80:
                arguments = arguments[:77] + "..."
            lines.append(
                f"      {state:<9} {visible(entry.tool_name)}({visible(arguments)})  "
                f"{visible(entry.tool_use_id)}"
            )
    if record.status == "awaiting_approval":
        for pending in await store.pending_calls(record.run_id):
            arguments = json.dumps(pending.input, ensure_ascii=False, default=repr)
            if len(arguments) > 80:
                arguments = arguments[:77] + "..."
            lines.append(
                f"      pending   {visible(pending.tool_name)}({visible(arguments)})  "
                f"{visible(pending.tool_use_id)}  ({visible(pending.reason)})"
            )
    return lines


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
            for line in await _run_lines(record, store):
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
    async with _open(agent, options, resuming=True) as (handle, store):
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
            f"{visible(_shown(options))}"
        )
    if record.status == "interrupted":
        return f"run {visible(run_id)} can no longer be resumed: a later run went past it"
    return f"run {visible(run_id)} ended {record.status}; only an interrupted run can be resumed"


def _shown(options: RunOptions) -> str:
    return options.store.shown if options.store is not None else ""


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
    async with _open(agent, options) as (handle, _):
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
        answer = json.dumps(output_to_json(result.output), ensure_ascii=False, indent=2)
        say(console, json_safe(answer))


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
    async with (
        _stdin_lines() as lines,
        _open(agent, options, approver=_asking(lines, console, options.decided_by)) as (handle, _),
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


# --- fake-server -----------------------------------------------------------------------


async def fake_server(host: str, port: int, *, console: Console) -> int:
    """Serve the Messages API with the fake model's answers until SIGINT or SIGTERM."""
    from .testing import MessagesServer, fake_reply

    def answer(body: dict[str, Any]) -> Any:
        messages = body.get("messages")
        tools = body.get("tools")
        return fake_reply(
            messages if isinstance(messages, list) else [],
            tools if isinstance(tools, list) else [],
        )

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            server = MessagesServer(then=answer, host=host, port=port, keep_requests=0)
            async with server:
                say(
                    console,
                    f"a fake Messages API on {server.base_url} (Ctrl-C stops it); point "
                    "the SDK and satsuma at it with:",
                )
                say(
                    console,
                    f"export ANTHROPIC_BASE_URL={server.base_url} ANTHROPIC_API_KEY=fake-key",
                )
                async for _ in signals:
                    return 0
        except OSError as error:
            raise CommandError(
                f"cannot listen on {host}:{port}: {error.strerror or error}"
            ) from None
    return 0  # pragma: no cover - the signal loop only ends by returning
