"""The ``satsuma`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="satsuma", description="LLM agents whose tool calls run under supervision."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run tools under supervision, offline")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import main as demo

        return demo(lambda line: print(line, flush=True))
    parser.error(f"unknown command {args.command!r}")  # argparse exits; never returns


if __name__ == "__main__":
    sys.exit(main())
