"""The ``satsuma`` command: ``demo``, ``run``, ``chat``, ``runs``, ``resume``,
``fake-server``, ``store prune``, and for a cluster ``node`` and ``cluster status``.

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
from pathlib import Path
from typing import IO, Any, cast

__all__ = ["main"]

_LOG_LEVELS = ("debug", "info", "warning", "error")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="satsuma", description="LLM agents whose tool calls run under supervision."
    )
    parser.add_argument(
        "-V", "--version", action="version", version=f"satsuma {_installed_version()}"
    )
    parser.add_argument(
        "--log-level",
        choices=_LOG_LEVELS,
        default="error",
        help="show satsuma's log records from this level on, on stderr (default: error)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo",
        help="a supervised team of agents, live; offline unless ANTHROPIC_API_KEY is set",
    )
    target_help = (
        "MODULE:AgentClass or path/to/file.py:AgentClass (default: a plain assistant with "
        "the --tools given)"
    )
    run = commands.add_parser("run", help="run an agent once on a prompt")
    run.add_argument(
        "words", nargs="+", metavar="[TARGET] PROMPT", help=f"{target_help}; the user's message"
    )
    run.add_argument("--json", action="store_true", help="print events as JSON lines")
    chat = commands.add_parser("chat", help="talk with an agent")
    chat.add_argument("target", nargs="?", help=target_help)
    runs = commands.add_parser("runs", help="list the runs of an agent's conversation in a store")
    runs.add_argument("target", nargs="?", help=target_help)
    runs.add_argument(
        "--store", required=True, help="the store: a SQLite file or a postgresql:// URL"
    )
    runs.add_argument(
        "--agent-id", help="the conversation's id in the store (default: the agent's name)"
    )
    resume = commands.add_parser(
        "resume",
        help="go on with a run that a crash or a kill interrupted, or decide the calls of "
        "a run awaiting approval",
    )
    resume.add_argument(
        "words", nargs="+", metavar="[TARGET] RUN_ID", help=f"{target_help}; the run's id"
    )
    resume.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="CALL_ID",
        help="let a pending call of a run awaiting approval run (repeat for more)",
    )
    resume.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="CALL_ID[:REASON]",
        help="refuse a pending call; the model reads 'Error: Denied: REASON' (repeat for more)",
    )
    for command in (chat, resume):
        command.add_argument(
            "--by",
            metavar="NAME",
            help="who decides, recorded with each decision (ApprovalDecided.decided_by, "
            "and by resume in the store); default: the OS user name; --by '' for none",
        )
    fake = commands.add_parser(
        "fake-server",
        help="serve the Messages API on localhost with the offline fake model's answers",
    )
    fake.add_argument("--host", default="127.0.0.1", help="the address (default: 127.0.0.1)")
    fake.add_argument(
        "--port", type=_port, default=8765, help="the port (default: 8765; 0 for any free one)"
    )
    node = commands.add_parser(
        "node",
        help="serve a cluster's queued runs of some agent classes, until SIGTERM or Ctrl-C",
    )
    node.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="MODULE:AgentClass or path/to/file.py:AgentClass, one for each class served",
    )
    node.add_argument(
        "--store", required=True, help="the cluster's database: postgresql://USER@HOST/DBNAME"
    )
    node.add_argument("--name", help="the node's name (default: the host and the pid)")
    node.add_argument(
        "--max-agents", type=_positive, help="agents open at once at most (default: 100)"
    )
    node.add_argument(
        "--max-runs", type=_positive, help="runs at once at most (default: --max-agents)"
    )
    node.add_argument(
        "--lease-seconds",
        type=_seconds,
        help="the node counts as dead after this long without a heartbeat (default: 15)",
    )
    node.add_argument(
        "--drain-timeout",
        type=_seconds,
        help="on SIGTERM, how long runs in flight have to end before they are handed back "
        "(default: 3)",
    )
    node.add_argument(
        "--poll-interval",
        type=_seconds,
        help="how often to look for work besides the database's notifications (default: 2)",
    )
    cluster = commands.add_parser("cluster", help="look at a cluster: cluster status")
    cluster_commands = cluster.add_subparsers(
        dest="cluster_command", required=True, metavar="COMMAND"
    )
    status = cluster_commands.add_parser(
        "status", help="the nodes, leases, queue depth and runs in flight of a cluster"
    )
    status.add_argument(
        "--store", required=True, help="the cluster's database: postgresql://USER@HOST/DBNAME"
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument(
        "--limit",
        type=_positive,
        default=20,
        help="leases and runs in flight listed at most (default: 20; all are counted)",
    )
    store = commands.add_parser("store", help="look after a store: store prune")
    store_commands = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    prune = store_commands.add_parser(
        "prune",
        help="delete the run records, journals, approvals and events of runs that ended "
        "before a cut; conversations only with --conversations",
    )
    prune.add_argument(
        "--store",
        required=True,
        help="a SQLite file, or a cluster's database: postgresql://USER@HOST/DBNAME",
    )
    prune.add_argument(
        "--older-than",
        type=_duration,
        required=True,
        metavar="AGE",
        help="how long ended runs are kept: 30d, 12h, 90m, 45s, 2w (0s: every ended run)",
    )
    prune.add_argument(
        "--conversations",
        action="store_true",
        help="also delete the conversations of agents left with no run (all ended before "
        "the cut), that no process holds open and with nothing queued",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="delete nothing; print what would be deleted"
    )
    for command in (run, chat):
        command.add_argument(
            "--past-interrupted",
            action="store_true",
            help="run even though the conversation has interrupted runs: their open calls "
            "are answered 'Interrupted' and they can no longer be resumed",
        )
        command.add_argument(
            "--past-paused",
            action="store_true",
            help="run even though the conversation has runs awaiting approval: they can "
            "then no longer be decided",
        )
    for command in (run, chat, resume, node):
        command.add_argument(
            "--model",
            help="a model alias or id, instead of the class's; 'fake' for the offline fake "
            "model (no key, no network)",
        )
        command.add_argument(
            "--allow",
            action="append",
            choices=_CAPABILITIES,
            default=[],
            help="grant the tools a capability (repeat for more); none by default, so "
            "file, shell and network tools are denied",
        )
        command.add_argument(
            "--workdir",
            type=Path,
            help="the tools' working directory: every path resolves inside it "
            "(default: the current directory)",
        )
    for command in (run, chat, resume):
        command.add_argument(
            "--tools",
            type=_names,
            default=(),
            help="built-in tools to add, comma-separated (read_file, write_file, edit_file, "
            "list_dir, search, bash, http_fetch, date_resolver)",
        )
        command.add_argument(
            "--max-iterations", type=_positive, help="model calls per run, instead of the class's"
        )
        command.add_argument(
            "--store",
            help="where the conversation is kept across runs: a SQLite file, or a "
            "postgresql:// URL",
        )
        command.add_argument(
            "--agent-id", help="the conversation's id in the store (default: the agent's name)"
        )
    return parser


_CAPABILITIES = ("read", "write", "shell", "network")


def _installed_version() -> str:
    # The installed distribution's, as pip and uv report it (not a copy in the source).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("satsuma")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected tool names, comma-separated")
    return names


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535, got: {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got: {value}")
    return value


def _duration(text: str) -> float:
    from ._store_commands import parse_duration

    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got: {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status."""
    args = _parser().parse_args(argv)
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
