"""``satsuma serve`` and ``satsuma serve token create``: agents over HTTP from the command
line, and the tokens that reach them.

Every mistake a user can make here (the serve extra missing, ``--node`` without a
PostgreSQL store, a host beyond loopback without tokens, a bad token file, a port
taken) is a ``CommandError`` with one line of explanation;
cli.py prints it without a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
from rich.console import Console

from ._command_error import CommandError
from ._commands import FAKE_MODEL, RunOptions, check_key, load_agent
from ._store_option import open_store, store_option
from ._terminal import say, visible
from .agents import Agent
from .models import AnthropicModel, Model
from .store import Store
from .testing import FakeModel

__all__ = ["create_token_command", "serve_command"]

_EXTRA = "satsuma serve needs the serve extra: pip install 'satsuma[serve]'"


def _check_extra() -> None:
    for module in ("hypercorn", "mcp"):
        if importlib.util.find_spec(module) is None:
            raise CommandError(f"{_EXTRA} ({module} is not installed)")


def create_token_command(argv: Sequence[str]) -> int:
    """``satsuma serve token create ...`` (``argv`` after ``serve token``): print the new
    token, its only line on stdout."""
    from ._arguments import token_parser

    args = token_parser().parse_args(argv)
    # The token file's rules live with the server; the serve room is imported only here.
    from .serve import TokenFileError, create_token

    agents = None if args.agents.strip() == "*" else args.agents.split(",")
    try:
        token = create_token(
            args.token_file, name=args.name, scopes=args.scopes.split(","), agents=agents
        )
    except TokenFileError as error:
        raise CommandError(str(error)) from None
    sys.stdout.write(token + "\n")
    sys.stdout.flush()
    return 0


def serve_command(args: argparse.Namespace, console: Console, errors: Console) -> int:
    """``satsuma serve TARGET...``: serve until SIGTERM or SIGINT, which drain (within
    ``--drain-timeout``, then the connections left are cut); exit 0."""
    _check_extra()
    where = store_option(args.store) if args.store is not None else None
    if args.node and (where is None or not where.postgres):
        raise CommandError(
            "--node runs a cluster node beside this front: it needs --store postgresql://..."
        )
    options = RunOptions(model=args.model)
    agents = [load_agent(target, options) for target in args.targets]
    from .serve import Server, TokenFileError

    settings: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "tokens": args.token_file,
        "insecure": args.insecure,
        "cors_origins": args.cors_origin,
        "certfile": args.certfile,
        "keyfile": args.keyfile,
        "node": args.node,
        "drain_timeout": args.drain_timeout,
    }
    try:
        # Built before the store is opened or a key is asked for: its refusals (a host
        # beyond loopback without tokens, two classes with one name) come first.
        Server(agents, **{**settings, "node": False})
    except (ValueError, TokenFileError) as error:
        raise CommandError(str(error)) from None
    for path in (args.certfile, args.keyfile):
        if path is not None and not Path(path).is_file():
            raise CommandError(f"no such file: {path}")
    model: Model | None = None
    if args.model == FAKE_MODEL:
        model = FakeModel()
    else:
        check_key()
    status: int = trio.run(_serve, agents, settings, where, model, console, errors)
    return status


async def _serve(
    agents: list[type[Agent[Any]]],
    settings: dict[str, Any],
    where: Any,
    model: Model | None,
    console: Console,
    errors: Console,
) -> int:
    from .serve import Server

    store: Store | None = await open_store(where) if where is not None else None
    try:
        server = Server(agents, store=store, model=model, **settings)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    await nursery.start(server.serve)
                except OSError as error:
                    raise CommandError(
                        f"cannot listen on {settings['host']}:{settings['port']}: "
                        f"{error.strerror or error}"
                    ) from None
                names = ", ".join(visible(name) for name in server.agents)
                say(console, f"listening on {server.url}")
                say(errors, f"satsuma serve: serving {names}; SIGTERM or Ctrl-C drains it")
                async for received in signals:
                    say(errors, f"satsuma serve: {signal.Signals(received).name}: draining")
                    server.shutdown()
                    break
        if server.connections_cut:
            say(
                errors,
                f"satsuma serve: {server.connections_cut} connection(s) still open after "
                f"the drain's {server.drain_timeout:g}s were cut",
            )
        say(errors, "satsuma serve: stopped")
        return 0
    finally:
        with trio.CancelScope(shield=True):
            if isinstance(model, AnthropicModel):
                await model.aclose()
            if store is not None:
                await store.aclose()
