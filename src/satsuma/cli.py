"""The ``satsuma`` command: ``demo``, ``run`` and ``chat``.

Errors a user can cause print one line on stderr and exit non-zero, never a traceback:
2 for a mistake on the command line (bad target, no key, bad option), 1 for a run that
did not complete (a bad key, an unreachable API, too many iterations).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

__all__ = ["main"]

_LOG_LEVELS = ("debug", "info", "warning", "error")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="satsuma", description="LLM agents whose tool calls run under supervision."
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
    run = commands.add_parser("run", help="run an agent of yours once on a prompt")
    run.add_argument("target", help="MODULE:AgentClass or path/to/file.py:AgentClass")
    run.add_argument("prompt", help="the user's message")
    run.add_argument("--json", action="store_true", help="print events as JSON lines")
    chat = commands.add_parser("chat", help="talk with an agent of yours")
    chat.add_argument("target", help="MODULE:AgentClass or path/to/file.py:AgentClass")
    for command in (run, chat):
        command.add_argument("--model", help="a model alias or id, instead of the class's")
        command.add_argument(
            "--max-iterations", type=_positive, help="model calls per run, instead of the class's"
        )
        command.add_argument(
            "--store", type=Path, help="a SQLite file that keeps the conversation across runs"
        )
        command.add_argument(
            "--agent-id", help="the conversation's id in the store (default: the agent's name)"
        )
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got: {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status."""
    args = _parser().parse_args(argv)
    # Imported after parsing, so that `satsuma --help` answers at once.
    import trio
    from rich.console import Console
    from rich.logging import RichHandler

    from ._commands import CommandError, RunOptions, chat, load_agent, run_once
    from ._exceptions import SatsumaError

    errors = Console(stderr=True)
    # satsuma's own records only: other libraries' (the SDK's, httpx's) stay at their
    # defaults, so --log-level debug shows what satsuma does, not every HTTP header.
    log = logging.getLogger("satsuma")
    log.setLevel(args.log_level.upper())
    log.addHandler(RichHandler(console=errors, show_path=False, show_time=False))
    console = Console()
    try:
        if args.command == "demo":
            from ._demo import DemoFailed, run_demo

            try:
                trio.run(run_demo, console)
            except DemoFailed as failure:
                errors.print(f"satsuma demo: {failure}", highlight=False, soft_wrap=True)
                return 1
            return 0
        options = RunOptions(
            model=args.model,
            max_iterations=args.max_iterations,
            store=args.store,
            agent_id=args.agent_id,
        )
        agent = load_agent(args.target, options)
        if args.command == "chat":
            status: int = trio.run(partial(chat, agent, options, console=console))
            return status
        printer = sys.stdout if args.json else None
        result = trio.run(
            partial(run_once, agent, args.prompt, options, console=console, json_lines=printer)
        )
    except CommandError as error:
        errors.print(f"satsuma: error: {error}", highlight=False, soft_wrap=True)
        return 2
    except SatsumaError as error:
        errors.print(f"satsuma: {type(error).__name__}: {error}", highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        errors.print("satsuma: interrupted", highlight=False)
        return 130
    except BaseExceptionGroup as group:
        # rich raises SystemExit(1) when stdout is a pipe whose reader has gone (`satsuma
        # demo | head`), after pointing stdout at /dev/null; from inside an event callback
        # it reaches here wrapped by the nurseries it went through. Leave as it asks.
        exits, rest = group.split(SystemExit)
        if exits is None or rest is not None:
            raise
        return _exit_status(exits)
    if result.status != "completed":
        reason = f": {result.error}" if result.error else ""
        errors.print(f"satsuma: run {result.status}{reason}", highlight=False, soft_wrap=True)
        return 1
    return 0


def _exit_status(group: BaseExceptionGroup[SystemExit]) -> int:
    first = group.exceptions[0]
    if isinstance(first, BaseExceptionGroup):
        return _exit_status(first)
    return first.code if isinstance(first.code, int) else 1


if __name__ == "__main__":
    sys.exit(main())
