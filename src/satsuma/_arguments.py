"""The ``satsuma`` command's arguments: the parser of every subcommand, and the types of
their options (a value that does not fit is argparse's error: one line, exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["command_parser", "token_parser"]

_LOG_LEVELS = ("debug", "info", "warning", "error")


def command_parser() -> argparse.ArgumentParser:
    """The parser of the ``satsuma`` command and every subcommand."""
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
    serve = commands.add_parser(
        "serve",
        help="serve agent classes over HTTP (satsuma's API, A2A, AG-UI, MCP) until SIGTERM "
        "or Ctrl-C; `satsuma serve token create` makes a token",
        description="Serve agent classes over HTTP until SIGTERM or Ctrl-C, which drain it. "
        "Make a token with: satsuma serve token create --token-file tokens.txt --scopes "
        "run,read [--agents NAME,...] --name NAME",
    )
    serve.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="MODULE:AgentClass or path/to/file.py:AgentClass, one for each class served",
    )
    serve.add_argument(
        "--store",
        help="where conversations, runs and approvals are kept: a SQLite file, or a "
        "postgresql:// URL, which makes this server a front of the cluster on that "
        "database (default: in memory, lost when the server stops)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=_port, default=8000, help="the port (default: 8000; 0 for any free one)"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        help="the bearer tokens accepted (their hashes, from `satsuma serve token create`); "
        "without it every request has every scope, and only loopback is served",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve a host other than loopback without tokens: anyone who reaches it may "
        "run the agents",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let browser pages from this origin call the server, e.g. "
        "https://app.example.com (repeat for more; none by default)",
    )
    serve.add_argument("--certfile", type=Path, help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--keyfile", type=Path, help="the certificate's private key (PEM)")
    serve.add_argument(
        "--node",
        action="store_true",
        help="also serve a cluster's queued runs in this process (with a PostgreSQL --store)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, how long requests and connections in flight are given to end "
        "before the rest are cut (default: 30)",
    )
    serve.add_argument(
        "--model",
        help="a model alias or id, instead of the classes'; 'fake' for the offline fake "
        "model (no key, no network)",
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
    evals = commands.add_parser(
        "eval",
        help="evaluate an agent on cases (a file, or a store's runs replayed without side "
        "effects): exit 1 when a case fails or regresses",
    )
    evals.add_argument("target", help="MODULE:AgentClass or path/to/file.py:AgentClass")
    source = evals.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", type=Path, help="a file of cases (JSON, or YAML)")
    source.add_argument(
        "--from-store", metavar="STORE", help="a SQLite file or a postgresql:// URL"
    )
    evals.add_argument(
        "--agent",
        metavar="NAME",
        help="with --from-store: the agent class (its name) whose completed runs are the "
        "cases (default: the evaluated class's, unless --agent-id is given)",
    )
    evals.add_argument(
        "--agent-id",
        action="append",
        default=[],
        help="with --from-store: a conversation whose completed runs are the cases "
        "(repeat for more; runs recorded before satsuma kept their class are found only so)",
    )
    evals.add_argument("--limit", type=_positive, help="with --from-store: the newest N runs")
    evals.add_argument(
        "--since",
        type=_duration,
        metavar="AGE",
        help="with --from-store: only runs started within AGE of now: 7d, 24h, 90m, 2w",
    )
    evals.add_argument("--repeat", type=_positive, default=1, help="runs per case (default 1)")
    evals.add_argument(
        "--pass-share",
        type=_share,
        default=1.0,
        help="the share of a case's runs that must pass each check (default 1.0)",
    )
    evals.add_argument(
        "--check",
        action="append",
        choices=_CHECKS,
        default=[],
        help="what each run is scored on (repeat for more; default: tools and output)",
    )
    evals.add_argument(
        "--tools",
        choices=("replay", "live"),
        default="replay",
        help="replay: answer tool calls from the record and run nothing (default); live: "
        "run the tools",
    )
    evals.add_argument("--concurrency", type=_positive, default=8, help="runs at once")
    evals.add_argument("--baseline", type=Path, help="a report to compare with")
    evals.add_argument("--report", type=Path, help="where to write this report (JSON)")
    evals.add_argument(
        "--model",
        help="a model alias or id, instead of the class's; 'fake' for the offline fake model",
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
_CHECKS = (
    "tools",
    "tools-inputs",
    "tools-in-order",
    "tools-any-order",
    "output",
    "output-contains",
    "verifiers",
)


def token_parser() -> argparse.ArgumentParser:
    """The parser of ``satsuma serve token create`` (apart from ``serve``'s, whose
    positional targets would take ``token`` for an agent)."""
    parser = argparse.ArgumentParser(
        prog="satsuma serve token",
        description="Make a bearer token for `satsuma serve`: it is printed once, on "
        "stdout, and only its hash is appended to the token file.",
    )
    commands = parser.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    create = commands.add_parser(
        "create", help="make a token, print it once and append its hash to the token file"
    )
    create.add_argument(
        "--token-file", type=Path, required=True, help="the file (created, mode 0600)"
    )
    create.add_argument(
        "--scopes",
        required=True,
        help="what it may do, comma-separated: run, read, approve, admin (admin: all)",
    )
    create.add_argument(
        "--agents",
        default="*",
        help="the agent names it reaches, comma-separated (default: *, every agent)",
    )
    create.add_argument(
        "--name", required=True, help="its name, in logs and errors (unique in the file)"
    )
    return parser


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


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a {what}: {text!r}") from None


def _port(text: str) -> int:
    value = _integer(text, "port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535, got: {value}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 1, got: {text}")
    return value


def _positive(text: str) -> int:
    value = _integer(text, "whole number")
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
