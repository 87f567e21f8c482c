"""What serving agents over HTTP costs: satsuma's API next to the same runs in process.

Three measurements, with the agents' model in process (a ``FunctionModel`` answering at
once) so that what is measured is the serving, not a model:

1. One run at a time: ``POST /v1/agents/echo/{id}/runs`` (waiting for the run) and an
   A2A ``SendMessage`` (``POST /a2a/echo``, its JSON-RPC body posted by httpx) on
   loopback, against ``await agent.run(prompt)`` on an open handle. Medians over
   interleaved rounds. Bars (issue 31): at most 1.5 ms more per run, 2 ms more per
   ``SendMessage`` (p50).
2. Many runs at once: 200 conversations, each running R runs in a row, all at once,
   through the API and in process: runs per second. Bar: the API reaches 0.8x. Beside
   them, in the same rounds, the floor that HTTP alone sets: a bare ASGI app on the same
   hypercorn answering each POST with a run's JSON, through the same clients.
3. Event subscribers: S streams of one run's events held open (``GET .../events``), the
   server in a process of its own whose tool reports the time every half second: the
   RSS the server adds per stream, and for each report the time until the last stream
   had it (the 99th percentile over the reports). Bars: at most 50 KiB each, 50 ms.
   The streams are read by plain sockets (as a load generator does): httpx's own work
   on a thousand streams in this process, on the same two cores, took longer than the
   server's.

Figures are printed, never asserted: the exit status is 0 whatever they are.

    python benchmarks/serve.py [--quick] [--rounds N] [--subscribers S]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

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

_A2A = {"A2A-Version": "1.0"}


def _send_message(context: str) -> dict[str, object]:
    """An A2A SendMessage request: "hi" in the conversation ``context``."""
    message = {"messageId": os.urandom(8).hex(), "role": "ROLE_USER", "contextId": context,
               "parts": [{"text": "hi"}]}  # fmt: skip
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def _one_at_a_time(rounds: int, runs: int) -> dict[str, list[float]]:
    model = FunctionModel(_echo, keep_requests=0)
    server = Server([Echo], port=0, model=model)
    samples: dict[str, list[float]] = {"http": [], "a2a": [], "in process": []}
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        url = server.url
        async with (
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            satsuma.open_agent(Echo, model=model) as agent,
        ):
            for _ in range(3):  # warm them all: imports, the pool, the agent
                await client.post("/v1/agents/echo/w/runs", json={"prompt": "warm"})
                await client.post("/a2a/echo", headers=_A2A, json=_send_message("w"))
                await agent.run("warm")
            for _ in range(rounds):
                for _ in range(runs):
                    start = time.perf_counter()
                    answer = await client.post("/v1/agents/echo/b/runs", json={"prompt": "hi"})
                    samples["http"].append(time.perf_counter() - start)
                    assert answer.json()["status"] == "completed", answer.text
                for _ in range(runs):
                    body = _send_message("a")
                    start = time.perf_counter()
                    answer = await client.post("/a2a/echo", headers=_A2A, json=body)
                    samples["a2a"].append(time.perf_counter() - start)
                    state = answer.json()["result"]["task"]["status"]["state"]
                    assert state == "TASK_STATE_COMPLETED", answer.text
                for _ in range(runs):
                    start = time.perf_counter()
                    result = await agent.run("hi")
                    samples["in process"].append(time.perf_counter() - start)
                    assert result.status == "completed"
        server.shutdown()
    return samples


# --- 2. many at once ---------------------------------------------------------------------


# What the floor answers: a run's JSON as the API answers it, of the same size.
_RUN_JSON = json.dumps({
    "run_id": "run_0123456789ab", "agent": "echo", "agent_id": "m0", "status": "completed",
    "prompt": "hi", "output": "echo: hi", "error": None,
    "usage": {"input_tokens": 24, "output_tokens": 2, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 0},
    "pending": [], "started_at": 1795745021.7910123, "ended_at": 1795745021.7916987,
}).encode()  # fmt: skip


async def _floor(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app on hypercorn can do for a POST: read it, answer JSON."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].removeprefix("lifespan.")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    while (await receive()).get("more_body", False):
        pass
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(_RUN_JSON)).encode())]  # fmt: skip
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _RUN_JSON})


async def _over_http(url: str, path: str, conversations: int, runs: int) -> float:
    """Runs per second: ``conversations`` clients at once, each posting ``runs`` times in
    a row to ``path`` (``{n}``: the conversation's number)."""
    # One client (one connection) per conversation, made before the clock starts, as
    # separate callers would have: httpx's pool, shared by hundreds of requests at once,
    # spends its time matching requests to connections (quadratic), and a client's
    # making loads the system's certificates: both the caller's costs. Made anew each
    # round: hypercorn closes a connection idle for 5 s, and a client that sends on one
    # as it closes gets no answer.
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60))
            for _ in range(conversations)
        ]

        async def conversation(n: int) -> None:
            for _ in range(runs):
                answer = await clients[n].post(path.format(n=n), json={"prompt": "hi"})
                assert answer.status_code == 200, answer.text

        start = time.perf_counter()
        async with trio.open_nursery() as many:
            for n in range(conversations):
                many.start_soon(conversation, n)
        return conversations * runs / (time.perf_counter() - start)


async def _many(conversations: int, runs: int, rounds: int) -> dict[str, list[float]]:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    model = FunctionModel(_echo, keep_requests=0)
    server = Server([Echo], port=0, model=model, max_runs_per_token=10**6)
    rates: dict[str, list[float]] = {"floor": [], "http": [], "in process": []}
    stop = trio.Event()
    config = Config()
    config.bind, config.accesslog, config.backlog = ["127.0.0.1:0"], None, 4096
    config.errorlog = logging.getLogger("floor")  # not its "Running on" line
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        floor_url = (await nursery.start(
            functools.partial(serve, _floor, config, shutdown_trigger=stop.wait, mode="asgi")
        ))[0]  # fmt: skip

        async def in_process(n: int) -> None:
            async with satsuma.open_agent(Echo, model=model) as agent:
                for _ in range(runs):
                    assert (await agent.run("hi")).status == "completed"

        for round_ in range(rounds):
            rates["floor"].append(await _over_http(floor_url, "/runs", conversations, runs))
            # New conversations each round, as in process opens new agents.
            path = f"/v1/agents/echo/r{round_}-{{n}}/runs"
            rates["http"].append(await _over_http(server.url, path, conversations, runs))
            start = time.perf_counter()
            async with trio.open_nursery() as many:
                for n in range(conversations):
                    many.start_soon(in_process, n)
            rates["in process"].append(conversations * runs / (time.perf_counter() - start))
        stop.set()
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
    host, port = url.removeprefix("http://").rsplit(":", 1)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
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
        request = f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()

        async def follow() -> None:
            # A plain socket, its lines split as they come: the chunked encoding's size
            # lines are lines too, and never start with "data: ".
            nonlocal ready
            stream = await trio.open_tcp_stream(host, int(port))
            async with stream:
                await stream.send_all(request)
                rest, opened = b"", False
                while chunk := await stream.receive_some(65536):
                    now = time.time()
                    if not opened:  # the answer's head: the server holds the stream
                        opened, ready = True, ready + 1
                        if ready == count:
                            all_open.set()
                    *lines, rest = (rest + chunk).split(b"\n")
                    for text in lines:
                        if text.startswith(b"data: ") and b'"ToolProgress"' in text:
                            sent = float(json.loads(text[6:])["text"])
                            if sent >= measuring:  # older ticks are replayed to a new stream
                                delays.setdefault(sent, []).append(now - sent)

        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(follow)
            with trio.move_on_after(120):
                await all_open.wait()
            measuring = time.time()
            await trio.sleep(5.0)  # ten ticks reach every stream
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
    local = median(samples["in process"]) * 1000
    rows = []
    for key, name, bar in (("http", "one run", 1.5), ("a2a", "A2A SendMessage", 2.0)):
        over = median(samples[key]) * 1000
        verdict = "target met" if over - local <= bar else "target MISSED"
        rows.append([f"{name}, p50 (ms)", f"{over:.2f}", f"{local:.2f}", f"+{over - local:.2f}",
                     f"<= +{bar} ms: {verdict}"])  # fmt: skip
    p99 = (
        statistics.quantiles(samples["http"], n=100)[98] * 1000
        if len(samples["http"]) >= 100
        else float("nan")
    )
    rows.append(["one run, p99 over HTTP (ms)", f"{p99:.2f}", "-", "-", ""])
    lines += ["", *table(["figure", "over HTTP", "in process", "difference", "bar"], rows)]
    many = trio.run(_many, conversations, each, rounds)
    rates = {key: median(values) for key, values in many.items()}
    verdict = "target met" if rates["http"] >= 0.8 * rates["in process"] else "target MISSED"
    lines += ["", *table(
        ["figure", "over HTTP", "in process", "ratio", "bar"],
        [[f"{conversations} conversations at once (runs/s)", f"{rates['http']:.0f}",
          f"{rates['in process']:.0f}", ratio(rates["http"], rates["in process"]), f">= 0.8x: {verdict}"],
         ["floor: a bare ASGI app on hypercorn (answers/s)", f"{rates['floor']:.0f}",
          f"{rates['in process']:.0f}", ratio(rates["floor"], rates["in process"]), ""],
         ["the API against that floor", f"{rates['http']:.0f}", f"{rates['floor']:.0f}",
          ratio(rates["http"], rates["floor"]), ""]],
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
