"""The ``satsuma`` command: ``demo``, ``run``, ``chat``, ``runs``, ``resume``,
``fake-server``, ``store prune``, ``eval``, ``serve`` (and ``serve token create``), and for a
cluster ``node`` and ``cluster status``.

Errors a user can cause print one line on stderr and exit non-zero, never a traceback:
2 for a mistake on the command line (bad target, no key, bad option), 1 for a run that
did not complete (a bad key, an unreachable API, too many iterations).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from functools import partial
from typing import IO, Any, cast

from ._arguments import command_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:2] == ["serve", "token"]:
        return _token(words[2:])
    args = command_parser().parse_args(words)
    # Imported after parsing, so that `satsuma --help` answers at once.
    import trio
    from rich.console import Console

    from ._chat_command import chat
    from ._commands import CommandError, RunOptions, capability_warnings, load_agent
    from ._exceptions import SatsumaError
    from ._fake_server import fake_server
    from ._run_command import run_once
    from ._runs_command import decider, decisions_from, list_runs, resume_run
    from ._store_option import store_option
    from ._terminal import TerminalLogHandler, TerminalWriter, say, visible

    errors = Console(stderr=True)
    # satsuma's own records only: other libraries' (the SDK's, httpx's) stay at their
    # defaults, so --log-level debug shows what satsuma does, not every HTTP header.
    log = logging.getLogger("satsuma")
    log.setLevel(args.log_level.upper())
    if log.level > logging.WARNING:
        # A bash command that runs less isolated than it could is a security matter: its
        # one warning is shown at the default level too (docs/builtin-tools.md).
        logging.getLogger("satsuma.tools.isolation").setLevel(logging.WARNING)
    # Records carry agent ids, tool output and error messages: shown through visible().
    log.addHandler(TerminalLogHandler(console=errors, show_path=False, show_time=False))
    console = Console()
    try:
        if args.command == "demo":
            from ._demo import DemoFailed, run_demo

            try:
                trio.run(run_demo, console)
            except DemoFailed as failure:
                say(errors, f"satsuma demo: {failure}")
                return 1
            return 0
        if args.command == "fake-server":
            served: int = trio.run(partial(fake_server, args.host, args.port, console=console))
            return served
        if args.command == "node":
            return _node(args, console, errors)
        if args.command == "serve":
            from ._serve_command import serve_command

            return serve_command(args, console, errors)
        if args.command == "eval":
            from ._eval_command import eval_command

            return eval_command(args, console, errors)
        if args.command == "cluster":
            from ._cluster_commands import show_status

            printer = sys.stdout if args.json else None
            shown_status: int = trio.run(
                partial(
                    show_status, args.store, limit=args.limit, console=console, json_out=printer
                )
            )
            return shown_status
        if args.command == "store":
            from ._store_commands import prune_store

            pruned: int = trio.run(
                partial(
                    prune_store,
                    args.store,
                    args.older_than,
                    conversations=args.conversations,
                    dry_run=args.dry_run,
                    console=console,
                )
            )
            return pruned
        # run, chat, runs and resume: read before anything is imported or opened.
        where = store_option(args.store) if args.store is not None else None
        if args.command == "runs":
            assert where is not None  # a required option
            listed = load_agent(args.target) if args.target is not None else None
            shown: int = trio.run(partial(list_runs, listed, where, args.agent_id, console=console))
            return shown
        options = RunOptions(
            model=args.model,
            max_iterations=args.max_iterations,
            store=where,
            agent_id=args.agent_id,
            tools=args.tools,
            allow=frozenset(args.allow),
            workdir=args.workdir,
            past_interrupted=getattr(args, "past_interrupted", False),
            past_paused=getattr(args, "past_paused", False),
            decided_by=decider(getattr(args, "by", None)),
        )
        if args.command == "chat":
            target, prompt = args.target, ""
        elif len(args.words) <= 2:
            target, prompt = (None, *args.words) if len(args.words) == 1 else tuple(args.words)
        else:
            what = "RUN_ID" if args.command == "resume" else "PROMPT: quote the prompt"
            raise CommandError(f"expected [TARGET] {what}, got {len(args.words)} words")
        agent = load_agent(target, options)
        for line in capability_warnings(agent, options):
            say(errors, f"satsuma: note: {line}")
        if args.command == "chat":
            status: int = trio.run(partial(chat, agent, options, console=console))
            return status
        if args.command == "resume":
            decisions = decisions_from(args.approve, args.deny, by=options.decided_by)
            result = trio.run(
                partial(resume_run, agent, prompt, options, decisions, console=console)
            )
            return _ended(result, errors, target, where.shown if where else None)
        # JSON escapes C0 controls itself; C1 and bidi controls are escaped for it.
        # (JsonLinesLog writes and flushes its file, and TerminalWriter is all of a file
        # it needs.)
        printer = cast("IO[str]", TerminalWriter(sys.stdout)) if args.json else None
        result = trio.run(
            partial(run_once, agent, prompt, options, console=console, json_lines=printer)
        )
    except CommandError as error:
        if error.details:
            say(errors, error.details)
        say(errors, f"satsuma: error: {error}")
        return 2
    except SatsumaError as error:
        say(errors, f"satsuma: {type(error).__name__}: {visible(str(error))}")
        return 1
    except KeyboardInterrupt:
        say(errors, "satsuma: interrupted")
        return 130
    except BaseExceptionGroup as group:
        # rich raises SystemExit(1) when stdout is a pipe whose reader has gone (`satsuma
        # demo | head`), after pointing stdout at /dev/null; from inside an event callback
        # it reaches here wrapped by the nurseries it went through. Leave as it asks.
        exits, rest = group.split(SystemExit)
        if exits is not None and rest is None:
            return _exit_status(exits)
        if group.split(Exception)[1] is not None:  # a KeyboardInterrupt, say
            raise
        say(errors, _traceback(group))
        return 1
    except Exception as error:
        # A bug (satsuma's, or in the user's code) that no handler above expects: the
        # traceback Python would print, but its messages may quote a model or a tool,
        # so it goes out through say() as everything else does.
        say(errors, _traceback(error))
        return 1
    return _ended(result, errors, target, where.shown if where else None)


def _token(argv: list[str]) -> int:
    from rich.console import Console

    from ._command_error import CommandError
    from ._serve_command import create_token_command
    from ._terminal import say

    try:
        return create_token_command(argv)
    except CommandError as error:
        say(Console(stderr=True), f"satsuma: error: {error}")
        return 2


def _traceback(error: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(error)).rstrip()


def _node(args: argparse.Namespace, console: Any, errors: Any) -> int:
    import trio

    from ._cluster_commands import cluster_store, serve_node
    from ._commands import RunOptions, capability_warnings, load_agent
    from ._terminal import say

    store = cluster_store(args.store)  # a URL that is not PostgreSQL's, before any import
    options = RunOptions(model=args.model, allow=frozenset(args.allow), workdir=args.workdir)
    agents = [load_agent(target, options) for target in args.targets]
    for agent in agents:
        for line in capability_warnings(agent, options):
            say(errors, f"satsuma: note: {line}")
    given = {
        "name": args.name,
        "max_agents": args.max_agents,
        "max_runs": args.max_runs,
        "lease_seconds": args.lease_seconds,
        "drain_timeout": args.drain_timeout,
        "poll_interval": args.poll_interval,
    }
    settings = {key: value for key, value in given.items() if value is not None}
    status: int = trio.run(
        partial(
            serve_node,
            agents,
            args.targets,
            store,
            options,
            settings,
            console=console,
            errors=errors,
        )
    )
    return status


def _ended(result: Any, errors: Any, target: str | None = None, store: str | None = None) -> int:
    from ._terminal import say, visible

    if result.status == "awaiting_approval":
        command = " ".join(
            word
            for word in ("satsuma resume", target, visible(result.run_id), "--store", store)
            if word
        )
        lines = [f"satsuma: run {visible(result.run_id)} is awaiting approval of:"]
        for call in result.pending:
            arguments = visible(json.dumps(call.input, ensure_ascii=False, default=repr))
            lines.append(
                f"  {visible(call.id)}  {visible(call.tool_name)}({arguments})  "
                f"({visible(call.reason)})"
            )
        lines.append(f"decide with `{command} --approve CALL_ID ... --deny CALL_ID[:REASON] ...`")
        say(errors, "\n".join(lines))
        return 1
    if result.status != "completed":
        reason = f": {visible(str(result.error))}" if result.error else ""
        say(errors, f"satsuma: run {result.status}{reason}")
        return 1
    return 0


def _exit_status(group: BaseExceptionGroup[SystemExit]) -> int:
    first = group.exceptions[0]
    if isinstance(first, BaseExceptionGroup):
        return _exit_status(first)
    return first.code if isinstance(first.code, int) else 1


if __name__ == "__main__":
    sys.exit(main())
