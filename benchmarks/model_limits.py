"""Limits on model calls: many agents sharing one ``max_concurrency`` against the Messages
API over loopback.

N agents (500 by default), each declaring its model by name, share
``ModelLimits(max_concurrency=C)`` (20 by default) set with ``satsuma.set_model_limits``;
satsuma's ``MessagesServer`` runs in a child process of its own and answers every request
after a fixed delay D (0.1 s by default), so the ideal throughput is C / D requests a
second: the limit is always full, and nothing else waits. Each agent makes R runs (one
request each) in a row; the throughput is the requests divided by the time from the
first request to the last answer. Printed next to it: the ideal, the peak of calls in
progress at once (sampled), and the slots left in use once every agent has closed
(leaked: must be 0). The floor beside it: C agents without limits making the same
requests back to back, which is the same number of calls in progress done by hand; what
both miss of the ideal is the client's own time per request (building it, reading the
answer, the run around it), which a single trio thread spends one request at a time.

A second phase starts a run on every agent and cancels half of them while most wait in
the limiter's queue (and some hold slots): the slots in use and the waiters left must
both come back to 0.

Figures are printed, never asserted: the exit status is 0 whatever they are (it is not 0
when the benchmark itself goes wrong, e.g. a run did not complete).

    python benchmarks/model_limits.py [--quick] [--agents N] [--limit C] [--delay D] [--runs R]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import trio
from _harness import header, table

import satsuma
from satsuma.models._limiter import ModelLimiter
from satsuma.testing import Failure, MessagesServer


class Chatter(satsuma.Agent):
    name = "chatter"
    model = "sonnet"


async def _serve(port_file: str, delay: float) -> None:
    def answer(body: dict[str, Any]) -> Failure:
        server.requests.clear()  # a long run's bodies would otherwise all be kept
        return Failure.slow("ok", delay)

    server = MessagesServer(then=answer)
    async with server:
        await trio.Path(port_file + ".part").write_text(server.base_url, encoding="utf-8")
        os.replace(port_file + ".part", port_file)
        await trio.sleep_forever()


def _limiter(agent: satsuma.AgentHandle[Any]) -> ModelLimiter:
    actor = agent._target.current_actor()  # type: ignore[attr-defined]
    assert actor is not None and actor.limiter is not None
    limiter: ModelLimiter = actor.limiter
    return limiter


async def _measure(agents: int, runs: int, limit: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        handles: list[satsuma.AgentHandle[Any]] = []

        async def keep_open(opened: trio.Event, done: trio.Event) -> None:
            async with satsuma.open_agent(Chatter) as agent:
                handles.append(agent)
                opened.set()
                await done.wait()

        done = trio.Event()
        for _ in range(agents):
            opened = trio.Event()
            nursery.start_soon(keep_open, opened, done)
            await opened.wait()
        limiter = _limiter(handles[0])
        peak = 0

        async def sample(stop: trio.Event) -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, limiter.statistics().in_use)
                await trio.sleep(0.005)

        async def conversation(agent: satsuma.AgentHandle[Any]) -> None:
            for _ in range(runs):
                result = await agent.run("Hello")
                if result.status != "completed":
                    raise SystemExit(f"a run ended {result.status}: {result.error}")

        stop = trio.Event()
        nursery.start_soon(sample, stop)
        start = trio.current_time()
        async with trio.open_nursery() as runs_nursery:
            for agent in handles:
                runs_nursery.start_soon(conversation, agent)
        figures["seconds"] = trio.current_time() - start
        stop.set()
        figures["peak"] = peak

        cancelled = started_waiting = 0
        most_wait = trio.Event()

        def seen(event: satsuma.AgentEvent) -> None:
            nonlocal started_waiting
            if isinstance(event, satsuma.ModelWaitStart):
                started_waiting += 1
                if started_waiting >= (len(handles) - limit) * 0.9:
                    most_wait.set()

        async def run_once(agent: satsuma.AgentHandle[Any]) -> None:
            nonlocal cancelled
            result = await agent.run("Hello", events=seen)
            cancelled += result.status == "cancelled"

        async with trio.open_nursery() as phase:
            for agent in handles:
                phase.start_soon(run_once, agent)
            # Cancelled once most wait in the queue (and the others hold slots).
            with trio.move_on_after(10):
                await most_wait.wait()
            figures["waiting_at_cancel"] = limiter.statistics().waiting
            for agent in handles[::2]:
                await agent.cancel()
        figures["cancelled"] = cancelled
        statistics = limiter.statistics()
        figures["in_use_after"] = statistics.in_use
        figures["waiting_after"] = statistics.waiting
        done.set()
    return figures


async def _floor(agents: int, requests: int) -> float:
    """Requests a second of ``agents`` agents without limits, each running back to back."""
    async with trio.open_nursery() as nursery:
        handles: list[satsuma.AgentHandle[Any]] = []
        done = trio.Event()

        async def keep_open(opened: trio.Event) -> None:
            async with satsuma.open_agent(Chatter) as agent:
                handles.append(agent)
                opened.set()
                await done.wait()

        for _ in range(agents):
            opened = trio.Event()
            nursery.start_soon(keep_open, opened)
            await opened.wait()

        async def conversation(agent: satsuma.AgentHandle[Any], runs: int) -> None:
            for _ in range(runs):
                await agent.run("Hello")

        start = trio.current_time()
        async with trio.open_nursery() as runs_nursery:
            for agent in handles:
                runs_nursery.start_soon(conversation, agent, requests // agents)
        seconds = trio.current_time() - start
        done.set()
    return (requests // agents) * agents / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a test")
    parser.add_argument("--agents", type=int, default=500, help="agents sharing the limit")
    parser.add_argument("--limit", type=int, default=20, help="max_concurrency")
    parser.add_argument("--delay", type=float, default=0.1, help="the server's answer time (s)")
    parser.add_argument("--runs", type=int, default=4, help="runs (one request each) per agent")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child process's mode
    args = parser.parse_args()
    if args.serve:
        trio.run(_serve, args.serve, args.delay)
        return
    # The SDK warns, once per process, that a model id is near its end of life.
    warnings.simplefilter("ignore", DeprecationWarning)
    if args.quick:
        args.agents, args.limit, args.delay, args.runs = 30, 5, 0.02, 2
    requests = args.agents * args.runs
    with _server(args.delay) as base_url:
        os.environ["ANTHROPIC_BASE_URL"] = base_url
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        trio.run(_floor, 2, 2)  # warms the imports and the connection code
        floor = trio.run(_floor, args.limit, requests)
        satsuma.set_model_limits("sonnet", satsuma.ModelLimits(max_concurrency=args.limit))
        figures = trio.run(_measure, args.agents, args.runs, args.limit)
    ideal = args.limit / args.delay
    measured = requests / figures["seconds"]
    lines = header(
        f"Model limits: {args.agents} agents sharing max_concurrency={args.limit}, "
        f"answers after {args.delay * 1e3:g} ms, {args.runs} runs each"
    )
    rows = [
        [
            "throughput (requests/s)",
            f"{measured:.1f}",
            f"{ideal:.1f}",
            f"{measured / ideal:.1%} of the ideal, {requests} requests in "
            f"{figures['seconds']:.2f} s",
        ],
        [
            "floor, no limits (requests/s)",
            f"{floor:.1f}",
            f"{ideal:.1f}",
            f"{floor / ideal:.1%} of the ideal: {args.limit} agents without limits, back to back",
        ],
        ["peak calls in progress", f"{figures['peak']:.0f}", f"{args.limit}", "sampled"],
        ["leaked slots", f"{figures['in_use_after']:.0f}", "0", "after every run ended"],
        [
            "waiters left after cancels",
            f"{figures['waiting_after']:.0f}",
            "0",
            f"{figures['cancelled']:.0f} runs cancelled with "
            f"{figures['waiting_at_cancel']:.0f} waiting",
        ],
    ]
    lines += ["", *table(["", "measured", "ideal", "notes"], rows)]
    print("\n".join(lines))


class _server:
    """MessagesServer in a child process; its base URL while the block runs."""

    def __init__(self, delay: float) -> None:
        self._delay = delay

    def __enter__(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        port_file = os.path.join(self._dir.name, "url")
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--serve", port_file, "--delay", str(self._delay)]
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the MessagesServer child did not start")
            time.sleep(0.05)
        with open(port_file, encoding="utf-8") as source:
            return source.read()

    def __exit__(self, *exc: object) -> None:
        self._process.kill()
        self._process.wait()
        self._dir.cleanup()


if __name__ == "__main__":
    main()
