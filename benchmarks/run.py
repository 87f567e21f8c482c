"""satsuma side by side with the libraries users would pick instead.

Contenders (``_contenders.py``): satsuma with a client passed in, as the docs show it
(model by name, one ``open_agent`` per conversation, nothing passed), and streaming every
response (``stream=True``); the anthropic
SDK's tool runner (``client.beta.messages.tool_runner`` with ``beta_async_tool``);
pydantic-ai (``Agent`` with ``Tool``s, its ``AnthropicModel``); the OpenAI Agents SDK
(``Agent``, ``function_tool``, ``Runner``, its ``OpenAIChatCompletionsModel``); and
plain hand-written loops over ``AsyncAnthropic`` as the floor (asyncio, and trio with
one nursery task per call, each whole and streaming).

Every contender has the same four tools and the same scripted conversation
(``_conversation.py``) with the same loopback servers (``_servers.py``), which run in a
thread of this process. Each contender is measured in child processes of its own, so that
its CPU time and memory are its own and no two event loops share a process. Workloads:

1. dispatch: one turn asking for 1, 2, 10, 100 no-op calls, then a text answer: the
   whole run with 1 call, and per call beyond the model round trips, (N-call run - 2-call
   run) / (N - 2), the median over repeats of each pair run back to back, which includes
   the larger second request the results make. A text-only run (one request) is shown
   for scale.
2. parallel I/O: one turn of 20 calls that each sleep 200 ms; wall time of the run.
3. conversation: 10 turns of 3 no-op calls; runs per second and CPU ms per run (runs
   one after another), and the peak memory traced by tracemalloc during one run.
4. many agents: 200, then 1,000 runs of 3 turns (2 no-op calls a turn) at once in one
   process, each in a fresh child process; wall time, and for 1,000 the CPU time and the
   peak RSS growth over the RSS before the runs (after imports and one warm-up run).
5. failure handling: one turn of 10 calls where one raises and one hangs past its 1 s
   timeout (it sleeps 5 s); the wall time, and what the server received as those two
   calls' tool results.

Figures are medians of several repetitions (``--repeats``), for workloads 1, 2, 3 and 5
pooled from ``passes`` child processes per contender taken in turns (every contender's
first, then every contender's second), so that a stretch of noise on a shared machine
does not fall on one contender only; ratios are peer / satsuma.
Nothing is asserted about the figures; a run that does not end with the scripted answer
is reported as failed.

    python benchmarks/run.py [--quick] [--repeats N] [--output docs/benchmarks.md]

``--quick`` uses tiny sizes and one repetition, and writes no file unless ``--output``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from _contenders import CONTENDERS, Contender, Sizes
from _conversation import FINAL_TEXT, prompt
from _harness import header, median, ratio, table

ROOT = Path(__file__).resolve().parent.parent
DOCS_PAGE = ROOT / "docs" / "benchmarks.md"


@attrs.frozen(kw_only=True)
class Settings:
    repeats: int = 5
    # The per-call figure is the N-call run minus the 2-call run, over N - 2: from 2
    # calls, because a run with a single call may run it without a task or a nursery
    # (satsuma does; the floor opens one), which a slope from 1 call would charge to
    # every further call. Each repeat runs every size once, back to back, and the figure
    # is the median of those paired differences: a stretch of noise then falls on both
    # ends of a difference rather than on one size's median (at 10 calls a 0.1 ms wobble
    # of one run moves the figure by 12 µs), so many samples.
    dispatch_repeats: int = 100
    dispatch_calls: tuple[int, ...] = (1, 2, 10, 100)
    extra_from: int = 2
    parallel_calls: int = 20
    conversation_turns: int = 10
    conversation_calls: int = 3
    # A sample of 20 runs lasted about 0.25 s, short enough for one stretch of noise to
    # move a whole sample (on 2026-11-27 one contender's eight ranged 0.213-0.259 s of
    # CPU): 100 runs a sample.
    conversation_runs: int = 100
    many_runs: tuple[int, ...] = (200, 1_000)
    many_turns: int = 3
    many_calls: int = 2
    many_repeats: int = 3
    passes: int = 2  # of workloads 1, 2, 3 and 5 (see measure_all)
    failure_calls: int = 10
    sizes: Sizes = attrs.field(factory=Sizes)
    # Quick mode only: workload 4 in the same child as the others (its memory is then not
    # its own), and the contenders' children all at once (their times are then not
    # comparable). Both only save time for a smoke test.
    shortcuts: bool = False


FULL = Settings()
QUICK = Settings(
    repeats=1,
    dispatch_repeats=1,
    dispatch_calls=(1, 2, 5),
    parallel_calls=4,
    conversation_turns=3,
    conversation_calls=2,
    conversation_runs=2,
    many_runs=(4, 10),
    many_repeats=1,
    passes=1,
    failure_calls=4,
    sizes=Sizes(sleep=0.05, hang=0.4, hang_timeout=0.1),
    shortcuts=True,
)


def _settings_to_json(settings: Settings) -> str:
    return json.dumps(attrs.asdict(settings))


def _settings_from_json(text: str) -> Settings:
    data = json.loads(text)
    data["sizes"] = Sizes(**data["sizes"])
    data["dispatch_calls"] = tuple(data["dispatch_calls"])
    data["many_runs"] = tuple(data["many_runs"])
    return Settings(**data)


def failure_plan(settings: Settings) -> list[tuple[str, int]]:
    """The calls of workload 5's turn: no-ops around one ``fail`` and one ``hang``."""
    rest = settings.failure_calls - 2
    return [("noop", rest // 2), ("fail", 1), ("noop", rest - rest // 2), ("hang", 1)]


# --- the child: one contender's measurements ----------------------------------------------


def _expect(output: str) -> None:
    # Not a timing check: a run that did not end as scripted measured the wrong path.
    if output != FINAL_TEXT:
        raise RuntimeError(f"the run ended with {output!r}, not {FINAL_TEXT!r}")


async def _timed(
    contender: Contender, text: str, settings: Settings, check: bool = True
) -> tuple[float, str]:
    if not settings.shortcuts:
        gc.collect()
    start = time.perf_counter()
    output = await contender.run(text)
    elapsed = time.perf_counter() - start
    if check:
        _expect(output)
    return elapsed, output


async def _measure(contender: Contender, settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    await contender.open()
    try:
        # 1. dispatch, interleaved with the one-request run it is compared to.
        text_only = prompt(1, [])
        dispatch = {calls: prompt(2, [("noop", calls)]) for calls in settings.dispatch_calls}
        samples: dict[str, list[float]] = {"text": [], **{str(c): [] for c in dispatch}}
        for text in (text_only, *dispatch.values()):
            await _timed(contender, text, settings)  # warm-up
        for _ in range(settings.dispatch_repeats):
            samples["text"].append((await _timed(contender, text_only, settings))[0])
            for calls, text in dispatch.items():
                samples[str(calls)].append((await _timed(contender, text, settings))[0])
        out["dispatch"] = samples

        # 2. parallel I/O.
        text = prompt(2, [("sleep", settings.parallel_calls)])
        out["parallel"] = [
            (await _timed(contender, text, settings))[0] for _ in range(settings.repeats)
        ]

        # 3. a conversation, one run after another.
        text = prompt(settings.conversation_turns, [("noop", settings.conversation_calls)])
        await _timed(contender, text, settings)
        walls, cpus = [], []
        for _ in range(settings.repeats):
            gc.collect()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(settings.conversation_runs):
                _expect(await contender.run(text))
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            _expect(await contender.run(text))
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        out["conversation"] = {"wall": walls, "cpu": cpus, "peak_bytes": peak}

        # 5. failure handling (the server keeps what the model was sent).
        text = prompt(2, failure_plan(settings), capture=contender.key)
        runs = [
            await _timed(contender, text, settings, check=False) for _ in range(settings.repeats)
        ]
        out["failure"] = {"wall": [wall for wall, _ in runs], "output": runs[0][1]}
        if runs[0][1] != FINAL_TEXT:
            # The raise ended the run before the model heard of the timeout: show what
            # the model gets for the timeout in a run without the raising call.
            text = prompt(2, [("noop", 1), ("hang", 1)], capture=f"{contender.key}.hang_alone")
            out["failure"]["alone_output"] = (await _timed(contender, text, settings, False))[1]
    finally:
        await contender.aclose()
    if settings.shortcuts:
        out["many"] = {
            str(runs): await _measure_many(contender, settings, runs) for runs in settings.many_runs
        }
    return out


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    # VmHWM, this process's own peak. Not getrusage's ru_maxrss: Linux carries over to a
    # child the peak of the memory it was spawned from (the parent's, whose servers grow
    # as the run goes on), so later contenders would show ever larger peaks.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def _measure_many(contender: Contender, settings: Settings, runs: int) -> dict[str, Any]:
    text = prompt(settings.many_turns, [("noop", settings.many_calls)])
    await contender.open()
    try:
        _expect(await contender.run(text))
        gc.collect()
        before = _rss_bytes()
        start, cpu = time.perf_counter(), time.process_time()
        outputs = await contender.run_many(text, runs)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        peak = _peak_rss_bytes()
    finally:
        await contender.aclose()
    if len(outputs) != runs:
        raise RuntimeError(f"{len(outputs)} of {runs} runs ended")
    for output in outputs:
        _expect(output)
    return {"wall": wall, "cpu": cpu, "rss_before": before, "rss_peak": peak}


def child_main(keys: Sequence[str], what: str, settings: Settings, urls: Sequence[str]) -> None:
    """Measure each contender of ``keys`` in turn; print the figures as one JSON line.

    ``what``: ``main`` (workloads 1, 2, 3, 5) or ``many:N`` (workload 4 with N runs)."""
    results = {}
    for key in keys:
        contender = CONTENDERS[key](settings.sizes, *urls)
        if what == "main":
            measure: Callable[[], Awaitable[Any]] = functools.partial(_measure, contender, settings)
        else:
            runs = int(what.removeprefix("many:"))
            measure = functools.partial(_measure_many, contender, settings, runs)
        if contender.flavour == "trio":
            results[key] = trio.run(measure)
        else:
            results[key] = asyncio.run(measure())
    print(json.dumps(results))


# --- the parent: children, servers, report -------------------------------------------------


def _child(
    keys: Sequence[str], what: str, settings: Settings, urls: Sequence[str]
) -> dict[str, Any]:
    """Run ``child_main`` in a fresh interpreter: figures per key, or per key an ``error``."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        ",".join(keys),
        what,
        _settings_to_json(settings),
        *urls,
    ]
    done = subprocess.run(command, capture_output=True, encoding="utf-8", check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {
            key: {"error": lines[-1] if lines else f"exit status {done.returncode}"} for key in keys
        }
    results: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def measure_all(
    settings: Settings, keys: Sequence[str], progress: Callable[[str], None]
) -> dict[str, Any]:
    """Run every workload for every contender in ``keys``; return the raw figures."""
    from _servers import serve

    results: dict[str, Any] = {}
    with serve() as servers:
        urls = (servers.anthropic_url, servers.openai_url)

        def measure(group: Sequence[str], passes: dict[str, list[Any]] | None = None) -> None:
            if passes is None:
                labels = ", ".join(CONTENDERS[key].label for key in group)
                progress(f"{labels}: workloads 1, 2, 3, 5")
                mains = _child(group, "main", settings, urls)
            else:
                mains = {key: _pooled(passes[key]) for key in group}
            for key in group:
                main = mains[key]
                if "failure" in main:
                    main["failure"]["received"] = servers.captures.get(key)
                    main["failure"]["received_alone"] = servers.captures.get(f"{key}.hang_alone")
                many: dict[str, list[Any]] = {
                    size: [run] for size, run in main.pop("many", {}).items()
                }
                for runs in [] if settings.shortcuts else settings.many_runs:
                    for repeat in range(settings.many_repeats):
                        progress(
                            f"{CONTENDERS[key].label}: workload 4, {runs:,} runs, "
                            f"{repeat + 1} of {settings.many_repeats}"
                        )
                        figures = _child([key], f"many:{runs}", settings, urls)[key]
                        many.setdefault(str(runs), []).append(figures)
                if not many:  # the main child failed before workload 4
                    many = {str(runs): [main] for runs in settings.many_runs}
                results[key] = {"main": main, "many": many}

        if settings.shortcuts:
            # One child per event loop, both at once: the interpreters' start-up and the
            # peers' imports are most of a smoke run.
            groups = [
                [key for key in keys if CONTENDERS[key].flavour == flavour]
                for flavour in ("trio", "asyncio")
            ]
            threads = [threading.Thread(target=measure, args=(group,)) for group in groups if group]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            # Workloads 1, 2, 3 and 5 in several passes over every contender, each pass a
            # fresh child per contender: a stretch of noise on this shared machine then
            # falls on several contenders' samples rather than on all of one's.
            passes: dict[str, list[Any]] = {key: [] for key in keys}
            for number in range(settings.passes):
                for key in keys:
                    progress(
                        f"{CONTENDERS[key].label}: workloads 1, 2, 3, 5, "
                        f"pass {number + 1} of {settings.passes}"
                    )
                    passes[key].append(_child([key], "main", settings, urls)[key])
            for key in keys:
                measure([key], passes)
    return {key: results[key] for key in keys}


def _pooled(passes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One contender's passes of workloads 1, 2, 3 and 5 as one set of samples (the
    first failed pass, if any)."""
    failed = [main for main in passes if "error" in main]
    if failed:
        return failed[0]
    first = passes[0]
    return {
        "dispatch": {
            size: [sample for main in passes for sample in main["dispatch"][size]]
            for size in first["dispatch"]
        },
        "parallel": [sample for main in passes for sample in main["parallel"]],
        "conversation": {
            "wall": [sample for main in passes for sample in main["conversation"]["wall"]],
            "cpu": [sample for main in passes for sample in main["conversation"]["cpu"]],
            "peak_bytes": median([main["conversation"]["peak_bytes"] for main in passes]),
        },
        "failure": {
            **first["failure"],
            "wall": [sample for main in passes for sample in main["failure"]["wall"]],
        },
    }


# --- the report ----------------------------------------------------------------------------

# Workload 3's notes: what differs in the requests themselves.
PROTOCOL_NOTES = {
    "satsuma_stream": "streams every response (SSE)",
    "openai_agents": "OpenAI Chat Completions protocol (JSON), not Messages",
    "plain_stream": "streams every response (SSE)",
}


def _cell(value: float | None, digits: int = 1) -> str:
    return "failed" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "-"
    return ratio(value, base)


def _figures(raw: dict[str, Any], settings: Settings) -> dict[str, dict[str, Any]]:
    """Medians per contender: workload -> figure, None where a run failed."""
    figures: dict[str, dict[str, Any]] = {}
    for key, result in raw.items():
        main, fig = result["main"], {}
        if "error" not in main:
            samples = main["dispatch"]
            fig["dispatch_1"] = median(samples["1"]) * 1e3
            base = samples[str(settings.extra_from)]
            for calls in _extra_sizes(settings):
                paired = [
                    more - fewer for more, fewer in zip(samples[str(calls)], base, strict=True)
                ]
                fig[f"dispatch_{calls}"] = median(paired) / (calls - settings.extra_from) * 1e6
            fig["dispatch_rt"] = median(samples["text"]) * 1e3
            fig["parallel"] = median(main["parallel"])
            conversation = main["conversation"]
            fig["runs_per_s"] = settings.conversation_runs / median(conversation["wall"])
            fig["cpu_ms"] = median(conversation["cpu"]) / settings.conversation_runs * 1e3
            fig["peak_kib"] = conversation["peak_bytes"] / 1024
            fig["failure_wall"] = median(main["failure"]["wall"])
            fig["failure_output"] = main["failure"]["output"]
            fig["received"] = main["failure"].get("received")
            fig["received_alone"] = main["failure"].get("received_alone")
        else:
            fig["error"] = main["error"]
        for runs in settings.many_runs:
            tried = result["many"].get(str(runs), [])
            many = [run for run in tried if "error" not in run]
            if not many:
                fig.setdefault("many_error", next((run["error"] for run in tried), "not run"))
                continue
            fig[f"many_wall_{runs}"] = median([run["wall"] for run in many])
            fig[f"many_cpu_{runs}"] = median([run["cpu"] for run in many])
            fig[f"many_growth_mib_{runs}"] = (
                median([run["rss_peak"] - run["rss_before"] for run in many]) / 2**20
            )
            fig[f"many_peak_mib_{runs}"] = median([run["rss_peak"] for run in many]) / 2**20
        figures[key] = fig
    return figures


def _extra_sizes(settings: Settings) -> list[int]:
    """The run sizes whose per-call figure is reported (those above ``extra_from``)."""
    return [calls for calls in settings.dispatch_calls if calls > settings.extra_from]


def _short(text: str, limit: int = 90) -> str:
    text = json.dumps(text, ensure_ascii=False)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _received_lines(received: Sequence[Sequence[Any]], where: str) -> list[str]:
    lines = []
    for name, is_error, content in received:
        if name in ("fail", "hang"):
            flag = "" if is_error is None else f" is_error={str(bool(is_error)).lower()}"
            lines.append(f"  {name}{where}:{flag} {_short(content)}")
    return lines


def report(raw: dict[str, Any], settings: Settings, keys: Sequence[str]) -> list[str]:
    figures = _figures(raw, settings)
    base = figures.get("satsuma", {})
    labels = {key: CONTENDERS[key].label for key in keys}
    lines: list[str] = []

    def section(title: str, columns: Sequence[str], rows: list[list[str]]) -> None:
        lines.extend(["", title, "", *table(columns, rows)])

    def pair(key: str, name: str, digits: int = 1) -> list[str]:
        value, reference = figures[key].get(name), base.get(name)
        return [_cell(value, digits), "" if key == "satsuma" else _ratio(value, reference)]

    calls = _extra_sizes(settings)
    rows = []
    for key in keys:
        row = [labels[key], *pair(key, "dispatch_1", 2)]
        for count in calls:
            row += pair(key, f"dispatch_{count}")
        row += [_cell(figures[key].get("dispatch_rt"), 2), figures[key].get("error", "")]
        rows.append(row)
    columns = ["library", "1-call run (ms)", "ratio"]
    for count in calls:
        columns += [f"{count} calls (µs/extra call)", "ratio"]
    start = settings.extra_from
    section(
        "1. dispatch: a run of two model requests with 1 no-op call between them; the time"
        f" each further call adds (the N-call run minus the {start}-call run, over N - {start};"
        " the median of those differences, each pair run back to back)",
        [*columns, "text-only run (ms)", "notes"],
        rows,
    )

    rows = []
    for key in keys:
        note = "sequential: calls run one at a time" if key == "anthropic" else ""
        rows.append([labels[key], *pair(key, "parallel", 3), note])
    section(
        f"2. parallel I/O: {settings.parallel_calls} calls sleeping "
        f"{settings.sizes.sleep * 1000:g} ms each, one turn, wall time",
        ["library", "wall (s)", "ratio", "notes"],
        rows,
    )

    rows = []
    for key in keys:
        rows.append(
            [
                labels[key],
                *pair(key, "runs_per_s", 1),
                *pair(key, "cpu_ms", 1),
                *pair(key, "peak_kib", 0),
                PROTOCOL_NOTES.get(key, ""),
            ]
        )
    section(
        f"3. conversation: {settings.conversation_turns} turns x "
        f"{settings.conversation_calls} no-op calls, runs one after another",
        [
            "library",
            "runs/s",
            "ratio",
            "CPU ms/run",
            "ratio",
            "peak traced KiB/run",
            "ratio",
            "notes",
        ],
        rows,
    )

    rows = []
    *smaller, largest = settings.many_runs
    for key in keys:
        fig = figures[key]
        row = [labels[key]]
        for runs in smaller:
            row += pair(key, f"many_wall_{runs}", 2)
        row += [
            *pair(key, f"many_wall_{largest}", 2),
            *pair(key, f"many_cpu_{largest}", 2),
            *pair(key, f"many_growth_mib_{largest}", 1),
            _cell(fig.get(f"many_peak_mib_{largest}"), 1),
            fig.get("many_error", ""),
        ]
        rows.append(row)
    counts = " and ".join(f"{runs:,}" for runs in settings.many_runs)
    section(
        f"4. many agents: {counts} concurrent {settings.many_turns}-turn runs "
        f"({settings.many_calls} no-op calls a turn), one process each",
        [
            "library",
            *[column for runs in smaller for column in (f"{runs:,}: wall (s)", "ratio")],
            f"{largest:,}: wall (s)",
            "ratio",
            "CPU (s)",
            "ratio",
            "RSS growth (MiB)",
            "ratio",
            "peak RSS (MiB)",
            "notes",
        ],
        rows,
    )

    rows = []
    texts = []
    for key in keys:
        fig = figures[key]
        timeout = "no per-tool timeout: waited for the hang" if key == "anthropic" else ""
        output = fig.get("failure_output")
        if output is not None and output != FINAL_TEXT:
            timeout = ", ".join(
                filter(None, [timeout, f"run did not complete: {_short(output, 60)}"])
            )
        rows.append([labels[key], *pair(key, "failure_wall", 3), timeout])
        texts.append(f"{labels[key]}:")
        received = fig.get("received")
        if received is None:
            texts.append(
                "  the model got no tool results; the run returned: "
                + _short(str(fig.get("failure_output")))
            )
        texts.extend(_received_lines(received or [], ""))
        texts.extend(_received_lines(fig.get("received_alone") or [], " (a run without fail)"))
    sizes = settings.sizes
    section(
        f"5. failure handling: {settings.failure_calls} calls, one raises, one sleeps "
        f"{sizes.hang:g} s past its {sizes.hang_timeout:g} s timeout; wall time",
        ["library", "wall (s)", "ratio", "notes"],
        rows,
    )
    lines.extend(
        [
            "",
            "5. what the server received as the tool results of the two failing calls:",
            "",
            *texts,
        ]
    )
    if DEFAULT in figures and FLOOR in figures:
        section(
            f"6. the bars: {labels[DEFAULT]} against the {labels[FLOOR]} (the floor), "
            "ratio = satsuma / floor",
            ["figure", "satsuma", "floor", "ratio", "bar", "held"],
            _bar_rows(figures[DEFAULT], figures[FLOOR], settings),
        )
    return lines


DEFAULT, FLOOR = "satsuma_default", "plain_trio_whole"


def _bar_rows(ours: dict[str, Any], floor: dict[str, Any], settings: Settings) -> list[list[str]]:
    """Issue 36's bars, each figure of the default path next to the floor's."""
    rows: list[list[str]] = []

    def bar(name: str, key: str, digits: int, most: float | None, least: float | None) -> None:
        value, reference = ours.get(key), floor.get(key)
        if value is None or reference is None or value <= 0 or reference <= 0:
            rows.append([name, _cell(value, digits), _cell(reference, digits), "", "", "no"])
            return
        share = value / reference
        held = (most is None or share <= most) and (least is None or share >= least)
        limit = f"<= {most:g}x" if most is not None else f">= {least:g}x"
        row = [_cell(value, digits), _cell(reference, digits), f"{share:.2f}x", limit]
        rows.append([name, *row, "yes" if held else "no"])

    bar("first round trip, no tools (ms)", "dispatch_rt", 2, 1.15, None)
    bar("a run with 1 call (ms)", "dispatch_1", 2, 1.15, None)
    for calls in _extra_sizes(settings):
        bar(f"per extra call, {calls} calls (µs)", f"dispatch_{calls}", 1, 1.1, None)
    bar(f"{settings.parallel_calls} parallel calls, one turn (s)", "parallel", 3, 1.1, None)
    bar(f"{settings.conversation_turns}-turn conversation (runs/s)", "runs_per_s", 1, None, 0.95)
    bar(f"{settings.conversation_turns}-turn conversation (CPU ms/run)", "cpu_ms", 1, 1.1, None)
    *smaller, largest = settings.many_runs
    for runs in smaller:
        bar(f"{runs:,} concurrent agents (wall s)", f"many_wall_{runs}", 2, 1.0, None)
    wall = ours.get(f"many_wall_{largest}")
    reference = floor.get(f"many_wall_{largest}")
    held = "yes" if wall is not None and wall < 10 else "no"
    rows.append(
        [
            f"{largest:,} concurrent agents (wall s)",
            _cell(wall, 2),
            _cell(reference, 2),
            f"{wall / reference:.2f}x" if wall and reference else "",
            "< 10 s",
            held,
        ]
    )
    return rows


def machine_lines(keys: Sequence[str]) -> list[str]:
    versions = sorted(
        {CONTENDERS[key].version() for key in keys if CONTENDERS[key].distribution != "satsuma"}
    )
    return header("satsuma side by side with peer libraries", *versions)


# The page run.py writes; {command} and {report} are filled in. Its Python block runs as a
# test (tests/test_docs.py runs every ```python block of docs/*.md).
_PAGE = """\
# Benchmarks

satsuma side by side with the libraries users would pick instead, measured in one run on
one machine. Every library gets the same four tools (`noop`, `sleep`, `fail`, `hang`) and
the same scripted conversation, played by loopback servers in the parent process; each
library is measured in child processes of its own, so that its CPU time and memory are its
own. Ratios are peer / satsuma: above 1 the peer takes longer, uses more CPU or memory
(or, for runs/s, does more runs).

The figures below are one full run; to reproduce them:

```sh
{command}
```

`--quick` runs tiny sizes once (the test suite does, to keep the harness working); how
each figure is taken is described at the top of `benchmarks/run.py`.

## The contenders

| library | how it runs here |
| --- | --- |
| satsuma | an `Agent` with the four tools, `open_agent(..., model=AnthropicModel(client))` per run, a client passed by hand; whole responses, since nothing watches the text as it comes |
| satsuma, as the docs show it | the agent declares `model = "claude-sonnet-4-5"`, each run is `open_agent(BenchAgent)` with nothing passed: the shared default model and client, from `ANTHROPIC_BASE_URL` |
| satsuma, stream=True | as the first, with `AnthropicModel(client, stream=True)`: every response streamed, as when the run's text is watched live |
| anthropic tool_runner | `client.beta.messages.tool_runner(...)` with `beta_async_tool` tools, `thread=False`, `until_done()` |
| pydantic-ai | `Agent(AnthropicModel(..., provider=AnthropicProvider(anthropic_client=client)), tools=[Tool(...)])`, `agent.run` |
| openai-agents | `Agent(model=OpenAIChatCompletionsModel(...), tools=[function_tool(...)])`, `Runner.run`; tracing off |
| plain asyncio loop | a hand-written loop over `AsyncAnthropic.messages.create`: `asyncio.gather` of the turn's calls, each under `asyncio.wait_for` and `try`/`except` |
| plain loop, streaming | the same loop over `messages.stream(...)` |
| plain trio loop | the minimal floor on trio: `messages.create`, one nursery task per call, each under `trio.move_on_after` and `try`/`except` |
| plain trio loop, streaming | the same over `messages.stream(...)` |

What to keep in mind when reading the tables:

- The OpenAI Agents SDK speaks OpenAI's protocol, so it talks to a small loopback Chat
  Completions endpoint (`benchmarks/_servers.py`, JSON answers) rather than to satsuma's
  `MessagesServer`; it still makes every HTTP round trip.
- Nothing watches the text live here, so satsuma asks for whole responses, as the
  anthropic tool runner, pydantic-ai's `agent.run` and the plain loops do; the plain
  trio loop is the floor to compare satsuma with. With `stream=True` (or a run with an
  event listener) it streams (Server-Sent Events), which costs more to parse: compare
  it with the streaming plain loops.
- The anthropic SDK's tool runner runs a turn's calls one after another (the `for` loop
  over the reply's `tool_use` blocks in `_generate_tool_call_response`, anthropic
  `lib/tools/_beta_runner.py`, which awaits each call), and neither `tool_runner` nor
  `beta_async_tool` takes a per-tool timeout (the only timeout is the HTTP request's):
  its workload 2 is sequential, and in workload 5 it waits for the hanging call to end.
  It runs with `thread=False` (the whole history in each request, as everyone else
  sends it), since its default server-side thread is not something the loopback server
  implements.
- pydantic-ai (`Tool(..., timeout=)`) and openai-agents (`function_tool(..., timeout=)`)
  have per-tool timeouts. A tool that raises ends a pydantic-ai run with the exception
  (only `ModelRetry` goes back to the model); openai-agents sends the model a fixed
  text that hides the exception unless a `failure_error_function` is given.
- Every HTTP client gets a 600 s timeout for each phase of a request: with the SDKs'
  default 5 s connect timeout, some of pydantic-ai's 1,000 concurrent runs failed on a
  loaded machine, their event loop too busy to finish a loopback connect in time.
- The machine is small and may be shared with other work: expect 10-20 %
  noise between runs, more for the sub-millisecond figures of workload 1.

## What satsuma returns in workload 5

Whatever a call does, the model gets exactly one `tool_result` for it; a raise and a
timeout read as below, and the other calls of the turn are untouched:

```python
import trio

import satsuma


@satsuma.tool
async def fail(n: int) -> str:
    \"\"\"Fail.

    Args:
        n: A number.
    \"\"\"
    raise RuntimeError("disk on fire")


@satsuma.tool(timeout=0.1)
async def hang(n: int) -> str:
    \"\"\"Hang for longer than the timeout.

    Args:
        n: A number.
    \"\"\"
    await trio.sleep(5)
    return "woke up"


async def failure_turn() -> None:
    runner = satsuma.ToolRunner([fail, hang])
    calls = [
        {{"id": "toolu_1", "name": "fail", "input": {{"n": 1}}}},
        {{"id": "toolu_2", "name": "hang", "input": {{"n": 2}}}},
    ]
    outcomes = await runner.execute(calls)
    assert [outcome.content for outcome in outcomes] == [
        "Error: Tool crashed: RuntimeError: disk on fire",
        "Error: Tool timed out after 0.1s",
    ]
    assert [outcome.error_kind for outcome in outcomes] == ["crashed", "timeout"]


trio.run(failure_turn)
```

## The default path against the floor

Table 6 holds satsuma as the docs show it (model by name, one `open_agent` per
conversation, nothing passed) to the plain trio loop, the minimal hand-written floor
(`messages.create`, one task and one `trio.move_on_after` per call), with the bar each
figure must keep. Two differences in how they are built show in the figures:

- The shared client that agents declared by name use splits its connections into 16
  pools of 64 (see [Agents](agents.md)). Every other contender here, and satsuma with a
  client passed by hand, uses the SDK's one pool of up to 1,000 connections, in which
  httpx looks at every connection each time a request starts or ends: with 1,000
  conversations in flight that scan is most of the CPU of workload 4, which is why the
  default path does it in less time than the floor and than satsuma with a client of
  its own (a client passed by hand keeps the pool it was built with).
- Per tool call, satsuma does what the loop does not: it checks the arguments against
  the tool's schema and that they are JSON, runs the call in its own task under a
  cancel scope with its own deadline, keeps its outcome for the history (shielded and
  journaled when the agent has a store), and reports events to whoever listens. This
  now costs about what the loop's own per-call work does (workload 1: within 2% at 100
  calls a turn, within 20% at 10); the JSON checks and the scope are the part left.

Where satsuma is still slower, and why:

- **A conversation's first request** (the text-only run, the round trip) costs about
  0.5 ms more: opening the agent (its task tree and mailbox), the run's records and
  events, and closing the agent after it; the loop has none of these.
- **Streaming**, when it is asked for: with `stream=True`, or when the run has an event
  listener, each response is read as Server-Sent Events, which costs several times a
  whole JSON response per tool call (satsuma's stream reader still costs less than the
  SDK's, in the streaming plain loops). Without a listener satsuma asks for whole
  responses.
- **A store**: with one, each call's start and outcome are journaled (see
  `benchmarks/store.py`); none of the contenders here keeps anything.

What a service holding many conversations pays is measured by
`benchmarks/default_path.py` (in `make bench`), on the same default path: 1,000 agents
opened and held open at once cost 0.07-0.09 ms to open and 8-10 KiB of RSS each (bars:
0.5 ms and 20 KiB), and over 10,000 conversations in a row, one `open_agent` each, the
process's RSS after the first thousand stays flat within 2.5% (bar: 5%), by name or
streaming every response, as a hand-written loop over one client does.

## Figures

```text
{report}
```

## The cluster

`benchmarks/cluster.py` (`make bench-cluster`) measures a [cluster](cluster.md) as users
run it: node processes serving an agent class under a `Supervisor`, the agent's model by
name pointed at a loopback `MessagesServer` (a process of its own) that answers at once,
two tool calls per run that sleep 50 ms each, side by side, and runs submitted from the
benchmark's process with `Cluster`, 32 callers at once, each `cluster.run` after the
other. PostgreSQL 18.6 runs on the same machine (a throwaway server, Unix socket, fsync
on). Every figure is next to a floor measured in the same run: a hand-written queue on
psycopg (INSERT and NOTIFY, a worker thread claiming with `SKIP LOCKED` and answering
with a NOTIFY: the least any PostgreSQL queue pays), and the same runs in one process
with `open_agent` on `SQLiteStore` and on `PostgresStore`, no cluster. The CPU time of
each kind of process is read from `/proc`.

The figures below are from one full run on 2026-11-25, 16:46 to 16:50 UTC, on a 2-CPU
Linux VM with nothing else running (load average 0.42 when it started; the 3.9 at the
end is the benchmark's own). An earlier run the same day on the machine busy with other
test runs (load 3 to 7, CPUs 95 to 100% busy) gave 30 to 33 runs/s for the cluster rows
and 62 ms for one `cluster.run`: a run that hops between three processes waits for a
CPU at each hop when the CPUs are full. Since that run, the waits of a process share one
LISTEN connection instead of opening one each (a new PostgreSQL server process per
`cluster.run`); the run below has that change.

What they mean:

- **Two cores cannot show scaling.** The throughput rows with two and three nodes had
  both CPUs 99% busy: a cluster run costs 22 to 28 ms of CPU in all (nodes 14 to 18 ms,
  PostgreSQL 5 to 7 ms, the caller 1.5 ms, the model server 1.4 ms), so these two CPUs
  can do 73 to 91 runs a second whatever the number of nodes, and 1, 2 and 3 nodes did
  71, 73 and 71. A second node on the same two CPUs adds only its own overhead (a
  node's CPU per run grows from 14 to 18 ms with three, each heartbeating, listening and
  claiming). Nodes on machines of their own add their CPUs; this run cannot say how far
  that goes before the database is the limit: PostgreSQL's share per run (5 to 7 ms
  here) is what bounds one server.
- **What a cluster run costs beyond one process**: the same runs in one process took
  14.2 ms of CPU each on `PostgresStore` (98 runs/s) and 6.9 ms on `SQLiteStore` (138
  runs/s). The cluster adds about 8 ms: the queue's transactions (submit, claim,
  running, end, with their NOTIFYs), the run's recorded events, and the hop from the
  caller to a node and back.
- **Latency**: one `cluster.run` after another took 14.0 ms at the median (the model
  answering at once, no tools), against 6.7 ms for `open_agent` and `run` in one process
  on PostgreSQL, 3.8 ms on SQLite, and 1.6 ms for the raw queue round trip.
- **Takeover** after a SIGKILL, with `lease_seconds=2` (5 kills, 23 runs taken over) and
  the default 15 (1 kill): the other node claimed the first of the dead node's runs 1.7 s
  after the kill at the median, 2.2 s at most (bound 2.67 s), and 19.6 s after (bound
  20 s), and finished one about 0.6 s later (re-running its idempotent call of 0.5 s; the
  other call in doubt was answered "not re-run"). The formula is in
  [When a node dies](cluster.md#when-a-node-dies).
- **Per agent turn** (`postgres_store.turn_latency`: two no-op calls, six writes a turn)
  PostgreSQL cost 4.6 ms against SQLite's 1.3 ms and memory's 0.2 ms.

```text
satsuma cluster benchmark
CPython 3.11.7, trio 0.35.0, satsuma 0.1.0.dev0, psycopg 3.3.9, PostgreSQL 18 (embedded, Unix socket)
machine: Linux-6.18.44-fc-v669-x86_64-with-glibc2.36, 2 CPUs
load before: 0.42; after: 3.92 (1 min)

1. latency: one caller, runs one after another, the model answers at once (median of 100)

                              ms/run  p90 ms  vs raw queue
----------------------------  ------  ------  ------------
raw queue round trip (floor)     1.6     2.2         1.00x
open_agent, SQLiteStore          3.8     4.2         2.38x
open_agent, PostgresStore        6.7     7.2         4.18x
cluster.run, 1 node             14.0    15.3         8.72x

2. throughput: 32 callers, 400 runs (each two tool calls of 50 ms at once, then the answer); medians of 5

                           runs/s  vs in-process PG  ms/run p50  CPUs busy  CPU ms/run: caller  nodes  postgres  model   all  CPU-bound runs/s
-------------------------  ------  ----------------  ----------  ---------  ------------------  -----  --------  -----  ----  ----------------
in-process, SQLiteStore     138.4             1.41x       232.9        48%                 6.1    0.0       0.0    0.8   6.9  289
in-process, PostgresStore    98.2             1.00x       315.7        71%                10.2    0.0       3.0    0.9  14.2  141
cluster, 1 node              71.4             0.73x       427.1        81%                 1.5   13.8       5.3    1.4  22.0  91
cluster, 2 nodes             73.2             0.75x       415.4        99%                 1.4   16.6       6.8    1.4  26.1  77
cluster, 3 nodes             70.9             0.72x       428.9        99%                 1.5   18.0       6.6    1.4  27.5  73

CPU-bound runs/s: what this machine's 2 CPUs could do at that CPU time per run, if nothing else ran on them

3. takeover: a node SIGKILLed with runs mid-tool; seconds from the kill to another node claiming / finishing the first of its runs (bound: lease_seconds + lease_seconds/3 + one claim)

                            heartbeat (s)  bound (s)  claim p50  claim max  finish p50
--------------------------  -------------  ---------  ---------  ---------  ----------  ---------------------------
takeover, lease_seconds=2            0.67       2.67       1.71       2.24        2.28  5 kills, 23 runs taken over
takeover, lease_seconds=15           5.00      20.00      19.61      19.61       20.17  1 kills, 4 runs taken over

4. per agent turn (two no-op calls), postgres_store.turn_latency, 100 turns x 7

          µs/turn  added over memory
--------  -------  -----------------
postgres    4,615             +4,402
sqlite      1,296             +1,083
memory        213                 +0

```
"""


def _markdown(lines: Sequence[str], command: str) -> str:
    return _PAGE.format(command=command, report="\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--child"]:
        keys, what, settings_json, *urls = args[1:]
        child_main(keys.split(","), what, _settings_from_json(settings_json), urls)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--repeats", type=int, help="repetitions of each figure")
    parser.add_argument("--only", nargs="+", choices=sorted(CONTENDERS), help="contenders to run")
    parser.add_argument("--raw", type=Path, help="also write the raw figures to this JSON file")
    parser.add_argument(
        "--report-from",
        type=Path,
        help="measure nothing: report the raw figures of an earlier --raw file",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"the Markdown page to write (default: {DOCS_PAGE.relative_to(ROOT)}, not with --quick)",
    )
    options = parser.parse_args(args)
    settings = QUICK if options.quick else FULL
    if options.repeats:
        settings = attrs.evolve(settings, repeats=options.repeats)
    keys = [key for key in CONTENDERS if options.only is None or key in options.only]
    if "satsuma" not in keys:
        keys.insert(0, "satsuma")
    output = options.output or (None if options.quick else DOCS_PAGE)

    if options.report_from is not None:
        saved = json.loads(options.report_from.read_text(encoding="utf-8"))
        raw, took = saved["raw"], saved["took"]
        settings = _settings_from_json(saved["settings"])
        keys = list(raw)
    else:
        started = time.perf_counter()
        raw = measure_all(
            settings, keys, lambda text: print(f"... {text}", file=sys.stderr, flush=True)
        )
        took = time.perf_counter() - started
        if options.raw is not None:
            options.raw.write_text(
                json.dumps({"raw": raw, "took": took, "settings": _settings_to_json(settings)}),
                encoding="utf-8",
            )
    lines = [
        *machine_lines(keys),
        f"repetitions: {settings.repeats} (dispatch: {settings.dispatch_repeats}) in each of "
        f"{settings.passes} passes over the contenders, workload 4: {settings.many_repeats}; "
        f"medians; took {took:.0f} s",
        *report(raw, settings, keys),
    ]
    print("\n".join(lines))
    if output is not None:
        command = "uv run --locked python benchmarks/run.py"
        output.write_text(_markdown(lines, command), encoding="utf-8")
        print(f"\nwritten to {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
