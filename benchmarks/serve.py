"""What serving agents over HTTP costs: satsuma's API next to the same runs in process,
and next to the floor HTTP itself sets: a bare ASGI app on the same hypercorn.

Every server is a process of its own, and so is every load generator (see
``_serve_roles``): a client sharing the server's trio thread, on two cores, spent the
server's CPU parsing its own answers. The agents' model is in process (a
``FunctionModel`` answering at once), so what is measured is the serving, not a model.

1. One run at a time: ``POST /v1/agents/echo/{id}/runs`` (waiting for the run) and an
   A2A ``SendMessage`` (``POST /a2a/echo``, its JSON-RPC body posted by httpx) on
   loopback, against ``await agent.run(prompt)`` on an open handle. Here alone the
   server is in this process, beside its client: one request at a time, their work
   never overlaps, and two processes would add two wake-ups by the scheduler per
   round trip, which on a busy two-core machine cost milliseconds that are no server's.
   Medians over interleaved rounds. Bars (issue 31): at most 1.5 ms more per run, 2 ms
   more per ``SendMessage`` (p50).
2. Many runs at once: 200 conversations, each running R runs in a row, all at once:
   through the API (200 keep-alive connections of a load generator process), in process
   (a process opening 200 agents at once) and, through the same load generator, the
   floor answering each POST with a run's JSON. Runs per second, medians over
   interleaved rounds (floor, API, in process, floor, ...). Bar: the API reaches 0.8x.
3. Event subscribers: S streams of one run's events held open by a subscriber process
   (plain sockets under one epoll), the run's tool reporting the time every half
   second: the RSS the server adds per stream, and for each report the time until the
   last stream had it (the 99th percentile over the reports). The floor, in the same
   rounds: the bare app holding S streams and sending each of them the time every half
   second as one chunk. Bars: at most 50 KiB each, 50 ms.

Figures are printed, never asserted: the exit status is 0 whatever they are.

    python benchmarks/serve.py [--quick] [--rounds N] [--subscribers S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import trio
from _harness import header, median, ratio, table
from _serve_agents import Echo, echo
from _serve_roles import Ticks, floor_app, read_answer

import satsuma
from satsuma.serve import Server
from satsuma.testing import FunctionModel

_ROLES = Path(__file__).resolve().with_name("_serve_roles.py")


def _start(role: str, *args: object) -> subprocess.Popen[str]:
    """This script as ``role``'s process; its stdin open (a server serves until it
    closes), its stdout a pipe of lines."""
    return subprocess.Popen(
        [sys.executable, str(_ROLES), role, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        # SERVE_PROFILE_API=FILE (or _FLOOR, _POST...): that role under cProfile.
        env={**os.environ, "PROFILE": os.environ.get(f"SERVE_PROFILE_{role.upper()}", "")},
    )


def _line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"{process.args[2]} ended without a word (exit {process.wait()})")
    return line.strip()


def _finish(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def _server(role: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A server process and its URL, drained when the block ends."""
    process = _start(role)
    try:
        yield process, _line(process).split()[-1]
    finally:
        _finish(process)


def _figures(role: str, *args: object) -> dict[str, object]:
    """Run a load generator to its end; its JSON line."""
    process = _start(role, *args)
    try:
        return dict(json.loads(_line(process)))
    finally:
        _finish(process)


def _cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used (user and system)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


# --- 1. one run at a time ----------------------------------------------------------------

_A2A = {"A2A-Version": "1.0"}


def _send_message(context: str) -> dict[str, object]:
    """An A2A SendMessage request: "hi" in the conversation ``context``."""
    message = {"messageId": os.urandom(8).hex(), "role": "ROLE_USER", "contextId": context,
               "parts": [{"text": "hi"}]}  # fmt: skip
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def _one_at_a_time(rounds: int, runs: int) -> dict[str, list[float]]:
    model = FunctionModel(echo, keep_requests=0)
    server = Server([Echo], port=0, model=model)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        floor, stop_floor = await _floor_in_process(nursery)
        try:
            return await _each(server.url, floor, model, rounds, runs)
        finally:
            server.shutdown()
            stop_floor.set()


async def _floor_in_process(nursery: trio.Nursery) -> tuple[str, trio.Event]:
    """The floor app (``_serve_roles``) on hypercorn in this process, as ``Server``
    configures it; its URL, and the event that stops it."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind, config.accesslog, config.backlog = ["127.0.0.1:0"], None, 4096
    config.errorlog = logging.getLogger("floor")
    stop = trio.Event()
    app = floor_app(Ticks())
    binds = await nursery.start(
        lambda task_status: serve(
            app, config, shutdown_trigger=stop.wait, mode="asgi", task_status=task_status
        )
    )
    return binds[0], stop


async def _each(
    url: str, floor: str, model: FunctionModel, rounds: int, runs: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"http": [], "a2a": [], "floor": [], "in process": []}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        httpx.AsyncClient(base_url=floor, timeout=30) as bare,
        satsuma.open_agent(Echo, model=model) as agent,
    ):
        for _ in range(3):  # warm them all: imports, the connections, the agent
            await client.post("/v1/agents/echo/w/runs", json={"prompt": "warm"})
            await client.post("/a2a/echo", headers=_A2A, json=_send_message("w"))
            await bare.post("/runs", json={"prompt": "warm"})
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
                answer = await bare.post("/runs", json={"prompt": "hi"})
                samples["floor"].append(time.perf_counter() - start)
                assert answer.json()["status"] == "completed", answer.text
            for _ in range(runs):
                start = time.perf_counter()
                result = await agent.run("hi")
                samples["in process"].append(time.perf_counter() - start)
                assert result.status == "completed"
    return samples


class _Counts(trio.abc.Instrument):
    """Tasks spawned and task steps (passes of trio's scheduler), and with
    ``sys.setprofile`` the Python function calls (and resumptions of coroutines)."""

    def __init__(self) -> None:
        self.spawned = self.steps = self.calls = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def profile(self, frame: object, event: str, arg: object) -> None:
        if event == "call":
            self.calls += 1


async def _exact_counts(times: int) -> dict[str, tuple[float, float, float]]:
    """Per request (or run), over ``times``: tasks spawned, task steps, function calls,
    for the API's run, the floor's answer and the run in process. The client is a
    plain socket writing the request and reading the answer (as the load generator
    does), the same few calls for the API and the floor: what differs is the server's.
    Exact, whatever else the machine runs."""
    model = FunctionModel(echo, keep_requests=0)
    server = Server([Echo], port=0, model=model)
    counted: dict[str, tuple[float, float, float]] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        floor, stop_floor = await _floor_in_process(nursery)
        try:
            async with satsuma.open_agent(Echo, model=model) as agent:
                targets = {
                    "API run": _poster(server.url, "/v1/agents/echo/c/runs"),
                    "floor": _poster(floor, "/runs"),
                    "in process": lambda: agent.run("hi"),
                }
                for key, one in targets.items():
                    for _ in range(5):  # warm: the connection, the conversation
                        await one()
                    counts = _Counts()
                    trio.lowlevel.add_instrument(counts)
                    sys.setprofile(counts.profile)
                    try:
                        for _ in range(times):
                            await one()
                    finally:
                        sys.setprofile(None)
                        trio.lowlevel.remove_instrument(counts)
                    counted[key] = (
                        counts.spawned / times,
                        counts.steps / times,
                        counts.calls / times,
                    )
        finally:
            server.shutdown()
            stop_floor.set()
    return counted


def _poster(url: str, path: str) -> Any:
    """An async function posting ``{"prompt": "hi"}`` to ``path`` on one keep-alive
    connection of plain socket calls, and reading the answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = b'{"prompt": "hi"}'
    request = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body
    held: list[trio.SocketStream] = []
    buffer = bytearray()

    async def post() -> None:
        if not held:
            held.append(await trio.open_tcp_stream(host, int(port)))
        await held[0].send_all(request)
        status = await read_answer(held[0], buffer)
        assert status == b"200", (status, bytes(buffer))

    return post


# --- 2. many at once ---------------------------------------------------------------------


Process = tuple[subprocess.Popen[str], str]  # a server's process and its URL


def _many(
    api: Process, floor: Process, conversations: int, runs: int, rounds: int
) -> dict[str, list[float]]:
    """Runs per second and CPU ms per run, each a list over the rounds: ``floor``,
    ``http``, ``in process`` and their ``... cpu``. A server's CPU is read from /proc
    around its load: on a busy machine it tells what the server costs better than a rate
    does, which is as much the other processes' as the server's."""
    figures: dict[str, list[float]] = {}

    def post(key: str, server: Process, path: str) -> None:
        before = _cpu_seconds(server[0].pid)
        rate = _figures("post", server[1], path, conversations, runs)["rate"]
        cpu = _cpu_seconds(server[0].pid) - before
        figures.setdefault(key, []).append(float(rate))  # type: ignore[arg-type]
        figures.setdefault(f"{key} cpu", []).append(cpu * 1000 / (conversations * runs))

    for round_ in range(rounds):
        post("floor", floor, "/runs")
        # New conversations each round, as in process opens new agents.
        post("http", api, f"/v1/agents/echo/r{round_}-{{n}}/runs")
        local = _figures("in-process", conversations, runs)
        figures.setdefault("in process", []).append(float(local["rate"]))  # type: ignore[arg-type]
        figures.setdefault("in process cpu", []).append(float(local["cpu ms"]))  # type: ignore[arg-type]
    return figures


# --- 3. subscribers ----------------------------------------------------------------------


def _hold(server: Process, path: str, count: int) -> tuple[float, list[float], float]:
    """``count`` streams of ``path`` held by a subscriber process: the server's RSS added
    per stream (KiB), each whole tick's reach (s), and the server's CPU per tick per
    stream (µs) while they were measured."""
    before = _rss_kib(server[0].pid)
    subscriber = _start("subscribe", server[1], path, count, 5.0)
    try:
        opened = _line(subscriber)
        if opened != f"open {count}":
            raise RuntimeError(f"the subscriber said: {opened}")
        cpu = _cpu_seconds(server[0].pid)
        figures = json.loads(_line(subscriber))
        cpu = _cpu_seconds(server[0].pid) - cpu
        after = _rss_kib(server[0].pid)  # the streams are still held
    finally:
        _finish(subscriber)
    per_event = cpu * 1e6 / (max(1, figures["ticks"]) * count)
    return (after - before) / count, list(figures["reach"]), per_event


def _subscribers(api: Process, floor: Process, count: int, rounds: int) -> dict[str, list[float]]:
    held: dict[str, list[float]] = {}
    for round_ in range(rounds):
        # A new run each round: a new stream of an old one is first sent its history.
        started = httpx.post(f"{api[1]}/v1/agents/ticker/s{round_}/runs",
                             json={"prompt": "tick", "wait": False}, timeout=60)  # fmt: skip
        run_id = started.json()["run_id"]
        time.sleep(1.0)  # its first tick is under way
        for key, server, path in (
            ("", api, f"/v1/runs/{run_id}/events"),
            ("floor ", floor, "/events"),
        ):
            per, reach, cpu = _hold(server, path, count)
            if round_ == 0:  # later rounds reuse what the first one's streams freed
                held[f"{key}rss"] = [per]
            held.setdefault(f"{key}reach", []).extend(reach)
            held.setdefault(f"{key}cpu", []).append(cpu)
        httpx.post(f"{api[1]}/v1/runs/{run_id}/cancel", timeout=60)
    return held


def _p99(samples: list[float]) -> float:
    if len(samples) >= 2:
        return statistics.quantiles(samples, n=100)[98]
    return samples[0] if samples else float("nan")


def _verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--subscribers", type=int, default=1000)
    args = parser.parse_args()
    rounds, runs = (1, 5) if args.quick else (args.rounds, 200)
    conversations, each = (5, 2) if args.quick else (200, 5)
    subscribers, sub_rounds = (20, 1) if args.quick else (args.subscribers, 3)

    lines = header(
        "satsuma serve: a run over HTTP next to the same run in process",
        f"httpx {httpx.__version__}",
        f"load average {os.getloadavg()[0]:.1f} at the start",
    )
    samples = trio.run(_one_at_a_time, rounds, runs)
    counted = trio.run(_exact_counts, 20 if args.quick else 200)
    with _server("api") as api, _server("floor") as floor:
        many = _many(api, floor, conversations, each, rounds)
        held = _subscribers(api, floor, subscribers, sub_rounds)
    local = median(samples["in process"]) * 1000
    rows = []
    for key, name, bar in (("http", "one run", 1.5), ("a2a", "A2A SendMessage", 2.0)):
        over = median(samples[key]) * 1000
        rows.append([f"{name}, p50 (ms)", f"{over:.2f}", f"{local:.2f}", f"+{over - local:.2f}",
                     f"<= +{bar} ms: {_verdict(over - local <= bar)}"])  # fmt: skip
    floor_ms = median(samples["floor"]) * 1000
    rows.append([
        "floor: a bare ASGI app's round trip, same client, p50 (ms)", f"{floor_ms:.2f}",
        f"{local:.2f}", f"+{floor_ms - local:.2f}",
        f"HTTP alone; the API adds {median(samples['http']) * 1000 - floor_ms:+.2f} ms to it",
    ])  # fmt: skip
    rows.append(
        ["one run, p99 over HTTP (ms)", f"{_p99(samples['http']) * 1000:.2f}", "-", "-", ""]
    )
    lines += ["", *table(["figure", "over HTTP", "in process", "difference", "bar"], rows)]
    lines += ["", *table(
        ["per request, exact (plain-socket client)", "tasks spawned", "task steps",
         "function calls"],
        [[key, f"{spawned:.2f}", f"{steps:.2f}", f"{calls:.0f}"]
         for key, (spawned, steps, calls) in counted.items()],
    )]  # fmt: skip
    rates = {key: median(values) for key, values in many.items()}
    # The most a server can do on this hypercorn: the floor's answer and the run, one
    # after the other, as a served run is (1 / (1/floor + 1/in process)).
    serial = 1 / (1 / rates["floor"] + 1 / rates["in process"])
    lines += ["", *table(
        ["figure", "over HTTP", "in process", "ratio", "bar"],
        [[f"{conversations} conversations at once (runs/s)", f"{rates['http']:.0f}",
          f"{rates['in process']:.0f}", ratio(rates["http"], rates["in process"]),
          f">= 0.8x: {_verdict(rates['http'] >= 0.8 * rates['in process'])}"],
         ["floor: a bare ASGI app on hypercorn (answers/s)", f"{rates['floor']:.0f}",
          f"{rates['in process']:.0f}", ratio(rates["floor"], rates["in process"]),
          "the most HTTP allows here"],
         ["the API against that floor", f"{rates['http']:.0f}", f"{rates['floor']:.0f}",
          ratio(rates["http"], rates["floor"]), ""],
         ["the API against floor and run in series (runs/s)", f"{rates['http']:.0f}",
          f"{serial:.0f}", ratio(rates["http"], serial),
          f">= 0.8x (restated bar): {_verdict(rates['http'] >= 0.8 * serial)}"]],
    )]  # fmt: skip
    # CPU per run: a rate on a shared machine is as much the other processes' figure.
    api_cpu, floor_cpu, local_cpu = (rates[f"{key} cpu"] for key in ("http", "floor", "in process"))
    lines += ["", *table(
        ["CPU per run (ms)", "API server", "floor server", "in process", "note"],
        [[f"{conversations} conversations at once", f"{api_cpu:.3f}", f"{floor_cpu:.3f}",
          f"{local_cpu:.3f}",
          f"the API above floor + in process: {api_cpu - floor_cpu - local_cpu:+.3f} ms; "
          f"0.8x leaves HTTP {local_cpu / 0.8 - local_cpu:.3f} ms"]],
    )]  # fmt: skip
    per, floor_per = median(held["rss"]), median(held["floor rss"])
    reach, floor_reach = _p99(held["reach"]) * 1000, _p99(held["floor reach"]) * 1000
    reach50 = median(held["reach"] or [math.nan]) * 1000
    floor_reach50 = median(held["floor reach"] or [math.nan]) * 1000
    cpu, floor_event_cpu = median(held["cpu"]), median(held["floor cpu"])
    lines += ["", *table(
        ["figure", "satsuma", "floor", "bar"],
        [[f"{subscribers} event streams held: server RSS per stream (KiB)", f"{per:.1f}",
          f"{floor_per:.1f}", f"<= 50 KiB: {_verdict(per <= 50)}"],
         ["an event reaching them all, p99 (ms)", f"{reach:.1f}", f"{floor_reach:.1f}",
          f"<= 50 ms: {_verdict(reach <= 50)}"],
         ["  the same, p50 (ms): a typical event, not the worst moment", f"{reach50:.1f}",
          f"{floor_reach50:.1f}", ""],
         ["  the floor against the same bar", "", f"{floor_reach:.1f}",
          "above it: no server on this hypercorn meets it here" if floor_reach > 50
          else "within it"],
         ["  satsuma against the floor (p99)", ratio(reach, floor_reach), "1.00x",
          f"<= 1.2x (restated bar): {_verdict(reach <= 1.2 * floor_reach)}"],
         ["server CPU per event per stream (µs)", f"{cpu:.0f}", f"{floor_event_cpu:.0f}",
          f"x {subscribers} streams: {cpu * subscribers / 1000:.0f} ms, floor "
          f"{floor_event_cpu * subscribers / 1000:.0f} ms"]],
    )]  # fmt: skip
    lines.append(f"load average {os.getloadavg()[0]:.1f} at the end")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
