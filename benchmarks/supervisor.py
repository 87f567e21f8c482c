"""What a restart costs under a Supervisor, and what many supervised children weigh.

Two measurements, on the real clock, against models that answer at once (no network):

1. Restart latency, median over many crashes, each next to a floor measured in the same
   ``trio.run`` and interleaved with it (each sample, and each floor sample, is taken just
   after a ``gc.collect()``: one cold restart, as a rare crash is, not a hot loop):

   * a supervised agent (a ``FunctionModel`` that raises RuntimeError on a marker
     prompt, a bug in the model code that crashes the agent): from the moment the model
     raises to the next ``await handle.run(...)`` returning, which waits for the restart
     and then runs one turn. Floor: a fresh agent, from entering ``open_agent`` to its
     first ``run`` returning (the same one turn).
   * a plain service child (``async def serve(self, *, task_status)``) that raises when
     told to: from the moment it raises to the supervisor's ChildStarted event for the
     next incarnation. Floor: ``nursery.start(service.serve)`` of the same service, no
     supervisor.

2. Many idle children: N idle agents (sharing one ``ScriptedModel([])``) started one by
   one with ``start_child`` under one Supervisor: the time to start them (µs per child),
   the memory traced by ``tracemalloc`` while they run, per child (KiB, in a separate
   run, so that tracing does not slow the timed one), and the time for the supervisor to
   shut down (children stopped one at a time, last started first). Floor: N idle agents
   opened with ``open_agent`` in one ``AsyncExitStack`` (time to open, memory, time to
   close).

The issue sets no target for these: every figure is printed next to its floor, for
information. Figures are never asserted: the exit status is 0 whatever they are (it is not
0 when the benchmark itself goes wrong, e.g. an agent did not come back after a crash).
The supervisor's crash warnings go to a NullHandler: the log records are still made.

    python benchmarks/supervisor.py [--quick]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any

import attrs
import trio
import trio.testing

from satsuma import (
    Agent,
    AgentCrashed,
    AgentHandle,
    ChildStarted,
    ModelRequest,
    Supervisor,
    open_agent,
)
from satsuma.supervisor import SupervisorEvent
from satsuma.testing import FunctionModel, ScriptedModel

FULL_CRASHES = 50
FULL_CHILDREN = 10_000
QUICK_CRASHES = 5
QUICK_CHILDREN = 200
WARM_UP_CRASHES = 3

CRASH_MARKER = "please crash"
ANSWER = "ok"


class CrashyAgent(Agent):
    name = "crashy"


class IdleAgent(Agent):
    name = "idle"


# --- 1. restart latency -----------------------------------------------------------------


@attrs.define
class _Marks:
    crashed_at: float = 0.0


def crashy_model(marks: _Marks) -> FunctionModel:
    """Answers at once; on the marker prompt, notes the time and raises (a model bug)."""

    def reply(request: ModelRequest) -> str:
        # The newest block only: a crashed run's prompt stays in the history, and the
        # next prompt joins it in the same user message.
        text = request.messages[-1].content[-1].get("text", "")
        if CRASH_MARKER in text:
            marks.crashed_at = time.perf_counter()
            raise RuntimeError("benchmark crash")
        return ANSWER

    return FunctionModel(reply)


def _check_answer(result: Any) -> None:
    # Not a timing check: a run that did not complete measured the wrong path.
    if result.status != "completed" or result.output != ANSWER:
        raise RuntimeError(f"run ended {result.status!r} with {result.output!r}: {result.error}")


async def _crash(handle: AgentHandle) -> None:
    try:
        await handle.run(CRASH_MARKER)
    except AgentCrashed:
        return
    raise RuntimeError("the agent did not crash on the marker prompt")


async def _agent_restart(handle: AgentHandle, marks: _Marks) -> float:
    """One crash of the supervised agent; seconds from the model raising to the next run
    returning."""
    await _crash(handle)
    result = await handle.run("hello")
    elapsed = time.perf_counter() - marks.crashed_at
    _check_answer(result)
    return elapsed


async def _agent_floor(model: FunctionModel) -> float:
    """Seconds from entering ``open_agent`` to the first run returning."""
    gc.collect()
    start = time.perf_counter()
    async with open_agent(CrashyAgent, model=model) as agent:
        result = await agent.run("hello")
        elapsed = time.perf_counter() - start
    _check_answer(result)
    return elapsed


class Service:
    """A service child that raises when told to, noting the time it does."""

    def __init__(self) -> None:
        self.crashed_at = 0.0
        self._crash = trio.Event()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        crash = self._crash = trio.Event()
        task_status.started()
        await crash.wait()
        self.crashed_at = time.perf_counter()
        raise RuntimeError("benchmark crash")

    def crash(self) -> None:
        self._crash.set()


@attrs.define
class _StartWatch:
    """The supervisor's ``events`` callback: notes when each incarnation started."""

    started_at: dict[int, float] = attrs.Factory(dict)
    changed: trio.Event = attrs.Factory(trio.Event)

    def __call__(self, event: SupervisorEvent) -> None:
        if isinstance(event, ChildStarted):
            self.started_at[event.incarnation] = time.perf_counter()
            self.changed.set()
            self.changed = trio.Event()

    async def wait_for(self, incarnation: int) -> float:
        while incarnation not in self.started_at:
            await self.changed.wait()
        return self.started_at[incarnation]


async def _service_floor() -> float:
    """Seconds for ``nursery.start(service.serve)``, no supervisor."""
    service = Service()
    async with trio.open_nursery() as nursery:
        gc.collect()
        start = time.perf_counter()
        await nursery.start(service.serve)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return elapsed


async def _restart_samples(crashes: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        "agent": [],
        "agent_floor": [],
        "service": [],
        "service_floor": [],
    }
    total = crashes + WARM_UP_CRASHES
    marks = _Marks()
    model = crashy_model(marks)
    floor_model = crashy_model(_Marks())
    service = Service()
    watch = _StartWatch()
    async with (
        Supervisor(max_restarts=2 * total + 10, within=3600, name="agents") as agents,
        Supervisor(
            max_restarts=2 * total + 10, within=3600, name="services", events=watch
        ) as services,
    ):
        handle = await agents.start_child(CrashyAgent, model=model)
        await services.start_child(service, id="service")
        _check_answer(await handle.run("hello"))
        incarnation = 1
        for index in range(total):
            timed = index >= WARM_UP_CRASHES
            # Interleaved, and in turn reversed, so that no measurement always goes first.
            order = ("agent", "service") if index % 2 == 0 else ("service", "agent")
            for name in order:
                if name == "agent":
                    floor = await _agent_floor(floor_model)
                    gc.collect()
                    sample = await _agent_restart(handle, marks)
                else:
                    floor = await _service_floor()
                    gc.collect()
                    await trio.testing.wait_all_tasks_blocked()
                    service.crash()
                    incarnation += 1
                    sample = await watch.wait_for(incarnation) - service.crashed_at
                if timed:
                    samples[name].append(sample)
                    samples[f"{name}_floor"].append(floor)
        # Not a timing check: the supervisors restarted every crash, and nothing else.
        if agents.count_children()["active"] != 1 or services.count_children()["active"] != 1:
            raise RuntimeError("a supervised child is not running after its crashes")
    return samples


def measure_restarts(crashes: int) -> dict[str, Any]:
    """Crash a supervised agent and a supervised service ``crashes`` times each (after a
    few untimed ones), each crash next to a floor sample, in one ``trio.run``.

    Returns the medians in µs (``agent_us``, ``agent_floor_us``, ``service_us``,
    ``service_floor_us``) and every sample in seconds (``samples``: name to list).
    """
    if crashes < 1:
        raise ValueError("crashes must be at least 1")
    samples = trio.run(_restart_samples, crashes)
    result: dict[str, Any] = {"crashes": crashes, "samples": samples}
    for name, values in samples.items():
        result[f"{name}_us"] = statistics.median(values) * 1e6
    return result


# --- 2. many idle children --------------------------------------------------------------

TENTHS = 10


async def _supervised_children(count: int, traced: bool) -> dict[str, Any]:
    model = ScriptedModel([])
    # Warm up: the first agent loads and caches what every later one shares.
    async with Supervisor() as warm:
        await warm.start_child(IdleAgent, model=model)
    gc.collect()
    if traced:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0] if traced else 0
        marks: list[float] = []
        step = max(count // TENTHS, 1)
        start = time.perf_counter()
        async with Supervisor(name="many") as supervisor:
            for index in range(count):
                await supervisor.start_child(IdleAgent, id=f"idle-{index}", model=model)
                if (index + 1) % step == 0:
                    marks.append(time.perf_counter())
            started = time.perf_counter() - start
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0] if traced else 0
            # Not a timing check: every child must be running, none has asked its model.
            active = supervisor.count_children()["active"]
            if active != count:
                raise RuntimeError(f"{active} of {count} children running")
            stop_start = time.perf_counter()
        stopped = time.perf_counter() - stop_start
    finally:
        if traced:
            tracemalloc.stop()
    if supervisor.count_children()["active"] or model.requests:
        raise RuntimeError("a child still runs after the shutdown, or one called its model")
    tenths = [(b - a) / step for a, b in zip([start, *marks], marks, strict=False)]
    return {
        "start_seconds": started,
        "stop_seconds": stopped,
        "bytes": after - before,
        "first_tenth_us": tenths[0] * 1e6 if tenths else 0.0,
        "last_tenth_us": tenths[-1] * 1e6 if tenths else 0.0,
    }


async def _bare_agents(count: int, traced: bool) -> dict[str, Any]:
    model = ScriptedModel([])
    async with open_agent(IdleAgent, model=model):
        pass
    handles: list[AgentHandle] = []
    gc.collect()
    if traced:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0] if traced else 0
        start = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            for index in range(count):
                agent = open_agent(IdleAgent, model=model, agent_id=f"idle-{index}")
                handles.append(await stack.enter_async_context(agent))
            started = time.perf_counter() - start
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0] if traced else 0
            stop_start = time.perf_counter()
        stopped = time.perf_counter() - stop_start
    finally:
        if traced:
            tracemalloc.stop()
    if len(handles) != count or model.requests:
        raise RuntimeError("an agent did not open, or one called its model")
    return {"start_seconds": started, "stop_seconds": stopped, "bytes": after - before}


def _run(
    action: Callable[[int, bool], Awaitable[dict[str, Any]]], count: int, traced: bool
) -> dict[str, Any]:
    gc.collect()
    return trio.run(action, count, traced)


def measure_children(count: int) -> dict[str, Any]:
    """Start ``count`` idle agents under a Supervisor, and as many bare with open_agent:
    once timed, once traced by tracemalloc, each in its own ``trio.run``.

    Returns µs per child to start (``start_us``, ``floor_start_us``), KiB per child
    (``kib``, ``floor_kib``), seconds to shut down (``stop_seconds``,
    ``floor_stop_seconds``), and the µs per child of the first and the last tenth of the
    supervised starts (``first_tenth_us``, ``last_tenth_us``).
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    floor = _run(_bare_agents, count, False)
    supervised = _run(_supervised_children, count, False)
    floor_memory = _run(_bare_agents, count, True)
    supervised_memory = _run(_supervised_children, count, True)
    return {
        "children": count,
        "start_us": supervised["start_seconds"] / count * 1e6,
        "floor_start_us": floor["start_seconds"] / count * 1e6,
        "kib": supervised_memory["bytes"] / count / 1024,
        "floor_kib": floor_memory["bytes"] / count / 1024,
        "stop_seconds": supervised["stop_seconds"],
        "floor_stop_seconds": floor["stop_seconds"],
        "first_tenth_us": supervised["first_tenth_us"],
        "last_tenth_us": supervised["last_tenth_us"],
    }


# --- report -----------------------------------------------------------------------------

NO_TARGET = "no target"


def _spread(samples: Sequence[float], scale: float, digits: int) -> str:
    return f"{min(samples) * scale:.{digits}f}-{max(samples) * scale:.{digits}f}"


def format_report(restarts: dict[str, Any], children: dict[str, Any]) -> str:
    crashes = f"{restarts['crashes']:,} crashes"
    count = f"{children['children']:,} children"

    def ratio(figure: float, floor: float) -> str:
        return f"{figure / floor:.2f}x" if floor > 0 else "-"

    header = ("measurement", "size", "satsuma", "floor", "ratio", "target", "result")
    rows = [
        (
            "agent restart latency (ms)",
            crashes,
            f"{restarts['agent_us'] / 1e3:.3f}",
            f"{restarts['agent_floor_us'] / 1e3:.3f}",
            ratio(restarts["agent_us"], restarts["agent_floor_us"]),
            "-",
            NO_TARGET,
        ),
        (
            "service restart latency (µs)",
            crashes,
            f"{restarts['service_us']:.1f}",
            f"{restarts['service_floor_us']:.1f}",
            ratio(restarts["service_us"], restarts["service_floor_us"]),
            "-",
            NO_TARGET,
        ),
        (
            "start_child, idle agent (µs/child)",
            count,
            f"{children['start_us']:.1f}",
            f"{children['floor_start_us']:.1f}",
            ratio(children["start_us"], children["floor_start_us"]),
            "-",
            NO_TARGET,
        ),
        (
            "memory per supervised child (KiB)",
            count,
            f"{children['kib']:.2f}",
            f"{children['floor_kib']:.2f}",
            ratio(children["kib"], children["floor_kib"]),
            "-",
            NO_TARGET,
        ),
        (
            "shutdown, all children (s)",
            count,
            f"{children['stop_seconds']:.3f}",
            f"{children['floor_stop_seconds']:.3f}",
            ratio(children["stop_seconds"], children["floor_stop_seconds"]),
            "-",
            NO_TARGET,
        ),
    ]
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:-1], widths[1:-1], strict=True)]
        return "  ".join([first, *rest, cells[-1]]).rstrip()

    try:
        satsuma_version = metadata.version("satsuma")
    except metadata.PackageNotFoundError:
        satsuma_version = "unknown"
    samples = restarts["samples"]
    out = [
        "satsuma Supervisor benchmark",
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"trio {trio.__version__}, satsuma {satsuma_version}",
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs",
        "restarts: median, real clock, perf_counter, one trio.run, each crash interleaved "
        "with a floor sample, each sample taken just after gc.collect(); "
        "floors: open_agent + first run (agent), nursery.start (service)",
        "children: idle agents sharing one ScriptedModel; floor: as many open_agent in one "
        "AsyncExitStack; memory by tracemalloc, in a run of its own",
        "",
        line(header),
        line(["-" * width for width in widths]),
        *(line(row) for row in rows),
        "",
        "restart min-max over the crashes: "
        f"agent {_spread(samples['agent'], 1e3, 3)} ms (floor "
        f"{_spread(samples['agent_floor'], 1e3, 3)}), "
        f"service {_spread(samples['service'], 1e6, 1)} µs (floor "
        f"{_spread(samples['service_floor'], 1e6, 1)})",
        f"start_child µs/child: first tenth {children['first_tenth_us']:.1f}, "
        f"last tenth {children['last_tenth_us']:.1f}",
        "shutdown: the supervisor stops its children one at a time, last started first; "
        "the floor closes the AsyncExitStack (also last opened first)",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    options = parser.parse_args(argv)
    crashes, children = (
        (QUICK_CRASHES, QUICK_CHILDREN) if options.quick else (FULL_CRASHES, FULL_CHILDREN)
    )
    logging.getLogger("satsuma").addHandler(logging.NullHandler())
    restarts = measure_restarts(crashes)
    many = measure_children(children)
    print(format_report(restarts, many))


if __name__ == "__main__":
    main(sys.argv[1:])
