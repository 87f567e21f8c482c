"""What an evaluation costs next to running the same runs directly, side by side.

N cases (1,000 by default), each a stored-looking run: a conversation of two earlier
messages, a prompt, and one recorded tool call. Both sides play the same model (a
``FunctionModel`` that asks for the tool once, then answers) in one trio run, in
alternating rounds:

1. the floor: each case run directly, ``open_agent`` with the case's history in a
   MemoryStore and ``run(prompt)``, 8 at once, the tool really running (it does nothing);
2. ``evaluate(Agent, dataset, [ToolTrajectory(inputs=True), OutputMatches()],
   tools="replay", max_concurrency=8)``: the same runs with the tool answered from the
   record, each run scored.

Printed: the wall time of each side per case (medians of the rounds), their ratio, and
the RSS after each round of the evaluation. Then one more evaluation, untimed, under
``tracemalloc``: the memory held (traced, and the process's current RSS) once 250, 500
and 1,000 cases have finished, and what each case adds (the report's row: flat means
no conversation, result or task is kept per case).
Bar (issue 35): the evaluation at most 1.5x the direct runs; memory flat.

    python benchmarks/evals.py [--quick] [--cases N]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tracemalloc
from typing import Any

import trio
from _harness import header, median, ratio, spread, table

import satsuma
from satsuma.evals import Case, Dataset, OutputMatches, RecordedCall, ToolTrajectory, evaluate
from satsuma.models import ModelRequest
from satsuma.store import MemoryStore
from satsuma.testing import FunctionModel, Reply

ROUNDS = 3
QUICK_CASES = 20
BAR = 1.5


@satsuma.tool
async def lookup(order: str) -> str:
    """Read an order."""
    return f"order {order}: shipped"


class Support(satsuma.Agent):
    name = "support"
    system = "You help customers."
    tools = [lookup]


def reply(request: ModelRequest) -> Reply | str:
    last = request.messages[-1]
    if any(block.get("type") == "tool_result" for block in last.content):
        return "It has shipped."
    return Reply(tool_calls=[("lookup", {"order": "A1"})])


def dataset(n: int) -> Dataset:
    history = [
        satsuma.Message.user("hello"),
        satsuma.Message(role="assistant", content=[{"type": "text", "text": "Hi!"}]),
    ]
    return Dataset(
        Case(
            id=f"case-{i}",
            prompt="Where is order A1?",
            history=history,
            recorded=[RecordedCall("lookup", {"order": "A1"}, "order A1: shipped")],
            output="It has shipped.",
        )
        for i in range(n)
    )


async def direct(cases: Dataset, model: Any) -> float:
    store = MemoryStore()
    limit = trio.Semaphore(8)

    async def one(case: Case) -> None:
        async with limit:
            agent_id = f"direct/{case.id}"
            await store.write_tail(agent_id, 0, case.history)
            async with satsuma.open_agent(
                Support, model=model, store=store, agent_id=agent_id
            ) as agent:
                result = await agent.run(case.prompt)
                assert result.status == "completed"

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for case in cases:
            nursery.start_soon(one, case)
    return time.perf_counter() - start


async def evaluated(cases: Dataset, model: Any) -> float:
    start = time.perf_counter()
    report = await evaluate(
        Support,
        cases,
        [ToolTrajectory(inputs=True), OutputMatches()],
        model=model,
        max_concurrency=8,
    )
    took = time.perf_counter() - start
    assert report.passed, report.markdown()
    return took


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def memory(cases: Dataset, model: Any) -> list[tuple[int, float, float]]:
    """The memory held once each quarter-way mark of cases has finished: (cases,
    traced MiB above the start, current RSS MiB)."""
    marks = {len(cases) // 4, len(cases) // 2, len(cases)}
    seen: list[tuple[int, float, float]] = []
    done = 0

    def finished(case: Any) -> None:
        nonlocal done
        done += 1
        if done in marks:
            current, _ = tracemalloc.get_traced_memory()
            seen.append((done, (current - start) / 2**20, current_rss_mib()))

    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    try:
        report = await evaluate(
            Support, cases, [ToolTrajectory(inputs=True), OutputMatches()], model=model,
            max_concurrency=8, on_case=finished,
        )  # fmt: skip
    finally:
        tracemalloc.stop()
    assert report.passed
    return seen


async def main(n: int, rounds: int) -> None:
    cases = dataset(n)
    model = FunctionModel(reply, keep_requests=0)
    await direct(dataset(min(n, 20)), model)  # warm-up: imports, caches
    direct_times, eval_times, rss = [], [], []
    for _ in range(rounds):
        direct_times.append(await direct(cases, model) / n)
        eval_times.append(await evaluated(cases, model) / n)
        rss.append(rss_mib())
    held = await memory(cases, model)
    floor, figure = median(direct_times), median(eval_times)
    (first, first_traced, _), (last, last_traced, _) = held[0], held[-1]
    per_case_kib = (last_traced - first_traced) * 1024 / max(last - first, 1)
    verdict = "target met" if figure <= BAR * floor else "target MISSED"
    lines = header("satsuma.evals against running the same runs directly, one run")
    lines.append(f"{n} cases, {rounds} rounds alternating; medians (min-max)")
    lines.append("")
    lines += table(
        ["figure", "direct runs", "evaluate (replay)", "ratio", "bar"],
        [
            [
                "wall time per case (ms)",
                f"{floor * 1e3:.2f} ({spread(direct_times, 1e3, 2)})",
                f"{figure * 1e3:.2f} ({spread(eval_times, 1e3, 2)})",
                ratio(figure, floor),
                f"<= {BAR}x: {verdict}",
            ],
            [
                "peak RSS after each round (MiB)",
                "",
                " / ".join(f"{value:.0f}" for value in rss),
                "",
                "flat: nothing grows with the rounds",
            ],
            [
                "traced memory held at "
                + " / ".join(f"{c:,}" for c, _, _ in held)
                + " cases (MiB)",
                "",
                " / ".join(f"{traced:.1f}" for _, traced, _ in held),
                "",
                f"flat: {per_case_kib:.1f} KiB per case (its report row)",
            ],
            [
                "current RSS at the same marks (MiB)",
                "",
                " / ".join(f"{rss:.0f}" for _, _, rss in held),
                "",
                "",
            ],
        ],
    )
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run that checks it works")
    parser.add_argument("--cases", type=int, default=1000)
    args = parser.parse_args()
    trio.run(main, QUICK_CASES if args.quick else args.cases, 2 if args.quick else ROUNDS)
