"""Holds agent 'a''s lease in a SQLite file until its stdin closes: a process of another
PID namespace (tests/store/test_lease_host.py starts it under unshare)."""

from __future__ import annotations

import os
import sys

import trio

from satsuma.store import Owner, SQLiteStore


async def main(path: str) -> None:
    async with SQLiteStore(path) as store:
        await store.acquire_lease("a", Owner.new(), seconds=600)
        sys.stdout.write(f"held by pid {os.getpid()}\n")
        sys.stdout.flush()
        await trio.to_thread.run_sync(sys.stdin.read)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
