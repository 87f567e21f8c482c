"""The cluster benchmark's child processes: the model server and the nodes, each
``python benchmarks/cluster.py`` in a mode of its own and a session of its own, stopped
at the end (and by themselves when the benchmark dies); and its progress lines."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import trio
from _cluster_agent import Courier, respond

import satsuma
from satsuma.cluster import Node
from satsuma.store import PostgresStore
from satsuma.testing import MessagesServer

SCRIPT = Path(__file__).with_name("cluster.py")  # what each child runs

_START = time.perf_counter()


def progress(what: str) -> None:
    """A line on stderr: where a run of several minutes is."""
    sys.stderr.write(f"[{time.perf_counter() - _START:6.1f} s] {what}\n")
    sys.stderr.flush()


def _say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()


async def _orphan_watch(parent: int) -> None:
    """Stop this child (as SIGTERM does) once the benchmark that started it is gone."""
    while os.getppid() == parent:  # noqa: ASYNC110  (no event tells of a parent's death)
        await trio.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


async def serve_model(parent: int) -> None:
    async with MessagesServer(then=respond, keep_requests=0) as server, trio.open_nursery() as n:
        n.start_soon(_orphan_watch, parent)
        _say("READY", server.base_url)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        n.cancel_scope.cancel()


async def serve_node(dsn: str, parent: int, lease_seconds: float, event_log: bool) -> None:
    # The SDK is imported when a node opens its first agent (some 2 s here): imported
    # before READY, so that this start-up cost, paid once in a node's life, is not
    # counted in the first runs the benchmark times.
    import anthropic  # noqa: F401

    async with PostgresStore(dsn) as store, trio.open_nursery() as nursery:
        nursery.start_soon(_orphan_watch, parent)
        node = Node(
            store,
            agents=[Courier],
            lease_seconds=lease_seconds,
            **({} if event_log else {"event_log": None}),
        )
        async with satsuma.Supervisor() as sup:
            await sup.start_child(node)
            _say("READY", node.node_id)
            await sup.serve_until_signalled()
        nursery.cancel_scope.cancel()


class Child:
    """A child process in a session of its own (a terminal's Ctrl-C reaches only the
    benchmark, which stops it), whose first line on stdout is ``READY <word>``."""

    def __init__(self, args: Sequence[str], label: str) -> None:
        self.label = label
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args, "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )
        self.word = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def ready(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if line[:1] != ["READY"]:
            raise SystemExit(f"{self.label} did not start (exit {self.process.wait()})")
        self.word = line[1]
        return self.word

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a node drains), then SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.contextmanager
def children() -> Iterator[list[Child]]:
    """A list to start children into; every one still running is stopped at the end."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:  # all at once: nodes drain side by side
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in started:
            child.stop()


def spawn_nodes(
    started: list[Child], dsn: str, count: int, lease_seconds: float, *, event_log: bool = True
) -> list[Child]:
    """Start ``count`` node processes at once (``ready_nodes`` waits for them)."""
    flags = [] if event_log else ["--no-event-log"]
    nodes = [
        Child(
            ["--node", dsn, "--lease", str(lease_seconds), *flags], f"node {len(started) + index}"
        )
        for index in range(count)
    ]
    started.extend(nodes)
    return nodes


def ready_nodes(nodes: list[Child]) -> list[Child]:
    for node in nodes:  # each says READY with its node id
        node.ready()
    progress(f"{len(nodes)} node(s) serving")
    return nodes
