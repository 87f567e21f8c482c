"""What serving agents over HTTP costs: satsuma's API next to the same runs in process.

Three measurements, with the agents' model in process (a ``FunctionModel`` answering at
once) so that what is measured is the serving, not a model:

1. One run at a time: ``POST /v1/agents/echo/{id}/runs`` (waiting for the run) through
   httpx on loopback, against ``await agent.run(prompt)`` on an open handle. Medians
   over interleaved rounds. Bar (issue 31): at most 1.5 ms more per run (p50).
2. Many runs at once: 200 conversations, each running R runs in a row, all at once,
   through the API and in process: runs per second. Bar: the API reaches 0.8x.
3. Event subscribers: S streams of one run's events held open (``GET .../events``), the
   server in a process of its own whose tool reports the time every half second: the
   RSS the server adds per stream, and for each report the time until the last stream
   had it (the 99th percentile over the reports). Bars: at most 50 KiB each, 50 ms.

Figures are printed, never asserted: the exit status is 0 whatever they are.

    python benchmarks/serve.py [--quick] [--rounds N] [--subscribers S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
import trio
from _harness import header, median, ratio, table

import satsuma
from satsuma.serve import Server
from satsuma.testing import FunctionModel


class Echo(satsuma.Agent):
    name = "echo"


def _echo(request: satsuma.ModelRequest) -> str:
    return f"echo: {request.messages[-1].text}"


# --- 1. one run at a time ----------------------------------------------------------------


async def _one_at_a_time(rounds: int, runs: int) -> dict[str, list[float]]:
    model = FunctionModel(_echo, keep_requests=0)
    server = Server([Echo], port=0, model=model)
    samples: dict[str, list[float]] = {"http": [], "in process": []}
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        url = server.url
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            satsuma.open_agent(Echo, model=model) as agent,
        ):
            for _ in range(3):  # warm both: imports, the pool, the agent
                await client.post("/v1/agents/echo/w/runs", json={"prompt": "warm"})
                await agent.run("warm")
            for _ in range(rounds):
                for _ in range(runs):
                    start = time.perf_counter()
                    answer = await client.post("/v1/agents/echo/b/runs", json={"prompt": "hi"})
                    samples["http"].append(time.perf_counter() - start)
                    assert answer.json()["status"] == "completed", answer.text
                for _ in range(runs):
                    start = time.perf_counter()
                    result = await agent.run("hi")
                    samples["in process"].append(time.perf_counter() - start)
                    assert result.status == "completed"
        server.shutdown()
    return samples


# --- 2. many at once ---------------------------------------------------------------------


async def _many(conversations: int, runs: int) -> dict[str, float]:
    model = FunctionModel(_echo, keep_requests=0)
    server = Server([Echo], port=0, model=model, max_runs_per_token=10**6)
    rates: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        url = server.url
        # One client (one connection) per conversation, made before the clock starts, as
        # separate callers would have: httpx's pool, shared by hundreds of requests at
        # once, spends its time matching requests to connections (quadratic), and a
        # client's making loads the system's certificates: both the caller's costs.
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
                for _ in range(conversations)
            ]

            async def over_http(n: int) -> None:
                for _ in range(runs):
                    answer = await clients[n].post(
                        f"/v1/agents/echo/m{n}/runs", json={"prompt": "hi"}
                    )
                    assert answer.status_code == 200, answer.text

            start = time.perf_counter()
            async with trio.open_nursery() as many:
                for n in range(conversations):
                    many.start_soon(over_http, n)
            rates["http"] = conversations * runs / (time.perf_counter() - start)

        async def in_process(n: int) -> None:
            async with satsuma.open_agent(Echo, model=model) as agent:
                for _ in range(runs):
                    assert (await agent.run("hi")).status == "completed"

        start = time.perf_counter()
        async with trio.open_nursery() as many:
            for n in range(conversations):
                many.start_soon(in_process, n)
        rates["in process"] = conversations * runs / (time.perf_counter() - start)
        server.shutdown()
    return rates


# --- 3. subscribers ----------------------------------------------------------------------

_SERVER = """
import sys, time
import satsuma, trio
from satsuma.serve import Server
from satsuma.testing import FunctionModel, Reply

@satsuma.tool
async def tick(ctx: satsuma.ToolContext) -> str:
    \"\"\"Report the time every half second, for an hour.\"\"\"
    for _ in range(7200):
        await trio.sleep(0.5)
        ctx.progress(repr(time.time()))
    return "done"

class Ticker(satsuma.Agent):
    name = "ticker"
    tools = [tick]

def model(request):
    return Reply(tool_calls=[("tick", {})]) if len(request.messages) == 1 else "done"

async def main():
    server = Server([Ticker], port=0, model=FunctionModel(model), max_subscribers=100_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print("listening on", server.url, flush=True)

trio.run(main)
"""


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


async def _subscribers(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        script = trio.Path(folder, "ticker.py")
        await script.write_text(_SERVER)
        process = await trio.lowlevel.open_process(
            [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        try:
            return await _subscribe(process, count)
        finally:
            process.kill()
            await process.wait()


async def _subscribe(process: trio.Process, count: int) -> dict[str, float]:
    assert process.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        line += await process.stdout.receive_some(1)
    url = line.decode().split()[-1]
    limits = httpx.Limits(max_connections=count + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        started = await client.post(
            "/v1/agents/ticker/s/runs", json={"prompt": "tick", "wait": False}
        )
        run_id = started.json()["run_id"]
        await trio.sleep(1.0)
        before = _rss_kib(process.pid)
        delays: dict[float, list[float]] = {}  # a tick's time -> each subscriber's delay
        measuring = math.inf
        ready = 0
        all_open = trio.Event()

        async def follow() -> None:
            nonlocal ready
            async with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
                ready += 1
                if ready == count:
                    all_open.set()
                async for text in stream.aiter_lines():
                    if text.startswith("data: ") and '"ToolProgress"' in text:
                        sent = float(json.loads(text[6:])["text"])
                        if sent >= measuring:  # a tick from before the streams opened: replayed
                            delays.setdefault(sent, []).append(time.time() - sent)

        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(follow)
            with trio.move_on_after(120):
                await all_open.wait()
            measuring = time.time()
            await trio.sleep(3.0)  # six ticks reach every stream
            after = _rss_kib(process.pid)
            nursery.cancel_scope.cancel()
    # The delay of a tick is the time until the last stream had it.
    whole = [max(got) for got in delays.values() if len(got) == ready]
    p99 = (
        statistics.quantiles(whole, n=100)[98] if len(whole) >= 2 else (whole or [float("nan")])[0]
    )
    return {
        "per stream KiB": (after - before) / max(1, ready),
        "open": ready,
        "reach p99 ms": p99 * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--subscribers", type=int, default=1000)
    args = parser.parse_args()
    rounds, runs = (1, 5) if args.quick else (args.rounds, 200)
    conversations, each = (5, 2) if args.quick else (200, 5)
    subscribers = 20 if args.quick else args.subscribers

    lines = header(
        "satsuma serve: a run over HTTP next to the same run in process",
        f"httpx {httpx.__version__}",
    )
    samples = trio.run(_one_at_a_time, rounds, runs)
    http, local = median(samples["http"]) * 1000, median(samples["in process"]) * 1000
    p99 = (
        statistics.quantiles(samples["http"], n=100)[98] * 1000
        if len(samples["http"]) >= 100
        else float("nan")
    )
    verdict = "target met" if http - local <= 1.5 else "target MISSED"
    lines += ["", *table(
        ["figure", "over HTTP", "in process", "difference", "bar"],
        [["one run, p50 (ms)", f"{http:.2f}", f"{local:.2f}", f"+{http - local:.2f}", f"<= +1.5 ms: {verdict}"],
         ["one run, p99 over HTTP (ms)", f"{p99:.2f}", "-", "-", ""]],
    )]  # fmt: skip
    rates = trio.run(_many, conversations, each)
    verdict = "target met" if rates["http"] >= 0.8 * rates["in process"] else "target MISSED"
    lines += ["", *table(
        ["figure", "over HTTP", "in process", "ratio", "bar"],
        [[f"{conversations} conversations at once (runs/s)", f"{rates['http']:.0f}",
          f"{rates['in process']:.0f}", ratio(rates["http"], rates["in process"]), f">= 0.8x: {verdict}"]],
    )]  # fmt: skip
    held = trio.run(_subscribers, subscribers)
    per, reach = held["per stream KiB"], held["reach p99 ms"]
    lines += ["", *table(
        ["figure", "value", "bar"],
        [[f"{held['open']:.0f} event streams held: server RSS per stream (KiB)", f"{per:.1f}",
          "<= 50 KiB: " + ("target met" if per <= 50 else "target MISSED")],
         ["an event reaching them all, p99 (ms)", f"{reach:.1f}",
          "<= 50 ms: " + ("target met" if reach <= 50 else "target MISSED")]],
    )]  # fmt: skip
    print("\n".join(lines))


if __name__ == "__main__":
    main()
