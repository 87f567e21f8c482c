"""``evaluate``: run every case of a dataset (``repeat`` times), score each run, report.

Each run is a fresh agent with the case's conversation before it, in a store of the
evaluation's own (by default a MemoryStore per run, let go when it ends): a replay never
writes the production store, and a long evaluation keeps only its report rows. Runs
go concurrently, at most ``max_concurrency`` at once, under the model's own limits. A run
that crashes fails its case, not the evaluation.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Literal

import trio

from ..agents import Agent, open_agent
from ..models import Model
from ..store import MemoryStore, Store
from ..tools import unstructure
from ._case import Case
from ._dataset import Dataset
from ._evaluators import Evaluator, Score
from ._replay import RECORDING_KEY, Recording, replaying, tool_calls
from ._report import EVALUATOR_FAILED, NOT_RUN, CaseReport, CaseRun, Report, summary_reasons

__all__ = ["evaluate"]

ToolsMode = Literal["replay", "live"]


async def evaluate(
    agent: type[Agent[Any]],
    dataset: Dataset | Sequence[Case],
    evaluators: Sequence[Evaluator],
    *,
    repeat: int = 1,
    tools: ToolsMode = "replay",
    max_concurrency: int = 8,
    model: Model | Callable[[Case], Model] | None = None,
    store: Store | None = None,
    context: dict[str, Any] | None = None,
    pass_share: float = 1.0,
    on_case: Callable[[CaseReport], object] | None = None,
    stop: trio.Event | None = None,
) -> Report:
    """Evaluate ``agent`` on every case of ``dataset``.

    Args:
        agent: The agent class (as it is now: its prompt, model and tools).
        dataset: The cases.
        evaluators: What scores each run.
        repeat: Runs per case (models vary: a case can pass 2 runs out of 3).
        tools: ``replay`` answers calls with the recorded outcomes and runs nothing
            (an ``idempotent`` tool runs when no recorded call matches); ``live`` runs
            the tools.
        max_concurrency: Runs at once.
        model: The model for every run, or a function of the case giving one (a
            scripted model per case in tests); None: the agent's own.
        store: Where the runs are stored. By default each run has a MemoryStore of its
            own, let go when it ends: nothing of a run is kept but its report row, so
            the memory of a long evaluation stays flat.
        context: The agents' context (as ``open_agent`` takes it).
        pass_share: The share of a case's runs that must reach each evaluator's
            threshold for the case to pass (1.0: every run).
        on_case: Called with each case's report as it finishes (a progress bar).
        stop: Set it to stop the evaluation: the runs in flight are cancelled, no other
            starts, and the report returned is partial (``complete`` False), the cases
            that did not finish marked as not run (``CaseReport.finished`` False). A
            cancellation from outside (a cancel scope, a deadline) propagates as ever,
            with no report; ``on_case`` has seen the cases that finished.

    Raises:
        ValueError: a bad argument (named).
    """
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise ValueError(f"repeat must be an int >= 1, got: {repeat!r}")
    if (
        not isinstance(max_concurrency, int)
        or isinstance(max_concurrency, bool)
        or max_concurrency < 1
    ):
        raise ValueError(f"max_concurrency must be an int >= 1, got: {max_concurrency!r}")
    if tools not in ("replay", "live"):
        raise ValueError(f"tools must be 'replay' or 'live', got: {tools!r}")
    if not (isinstance(pass_share, (int, float)) and 0.0 < pass_share <= 1.0) or math.isnan(
        pass_share
    ):
        raise ValueError(f"pass_share must be in (0, 1], got: {pass_share!r}")
    cases = list(dataset)
    names = [evaluator.name for evaluator in evaluators]
    if len(set(names)) != len(names):
        raise ValueError(f"two evaluators share a name ({names}); give each its own")
    evaluated = replaying(agent, cases) if tools == "replay" else agent
    runs: dict[str, list[CaseRun | None]] = {case.id: [None] * repeat for case in cases}
    thresholds = tuple((e.name, float(e.threshold)) for e in evaluators)
    reports: dict[str, CaseReport] = {}

    async def one(case: Case, index: int) -> None:
        where = store if store is not None else MemoryStore()
        run = await _run_case(evaluated, case, index, model, where, context or {}, tools)
        scored = await _scored(run, case, evaluators)
        runs[case.id][index] = scored
        done = runs[case.id]
        if all(r is not None for r in done):
            finished = [r for r in done if r is not None]
            passed, reasons = summary_reasons(finished, thresholds, pass_share)
            reports[case.id] = CaseReport(case.id, tuple(finished), passed, reasons)
            if on_case is not None:
                on_case(reports[case.id])

    runs_scope = trio.CancelScope()
    async with trio.open_nursery() as watching:
        if stop is not None:
            watching.start_soon(_stop_when_set, stop, runs_scope)
        with runs_scope:
            async with trio.open_nursery() as nursery:
                # Workers, each taking the next run in the dataset's order: runs start in
                # that order, and a task exists per run in flight, not per run to come.
                queue = iter([(case, index) for case in cases for index in range(repeat)])
                for _ in range(min(max_concurrency, len(cases) * repeat)):
                    nursery.start_soon(_worker, queue, one)
        watching.cancel_scope.cancel()  # the watch ends with the runs
    return Report(
        agent=agent.name,
        evaluators=thresholds,
        cases=tuple(reports.get(case.id) or _not_run(case.id, runs[case.id]) for case in cases),
        repeat=repeat,
        complete=not runs_scope.cancelled_caught,
    )


async def _worker(
    queue: Iterator[tuple[Case, int]], one: Callable[[Case, int], Awaitable[None]]
) -> None:
    for case, index in queue:  # shared: each item goes to one worker
        await one(case, index)


async def _stop_when_set(stop: trio.Event, runs: trio.CancelScope) -> None:
    await stop.wait()
    runs.cancel()


def _not_run(case_id: str, runs: list[CaseRun | None]) -> CaseReport:
    ended = tuple(run for run in runs if run is not None)
    reason = NOT_RUN if not ended else f"{NOT_RUN} ({len(ended)} of {len(runs)} runs ended)"
    return CaseReport(case_id, ended, passed=False, reasons=(reason,), finished=False)


async def _run_case(
    agent: type[Agent[Any]],
    case: Case,
    index: int,
    model: Model | Callable[[Case], Model] | None,
    store: Store,
    context: dict[str, Any],
    tools: ToolsMode,
) -> CaseRun:
    agent_id = f"eval/{case.id}/{index}"
    recording = Recording(case.recorded)
    started = trio.current_time()
    try:
        chosen = model if model is None or hasattr(model, "respond") else model(case)
        if case.history:
            await store.write_tail(agent_id, 0, case.history)
        async with open_agent(
            agent,
            model=chosen,
            agent_id=agent_id,
            store=store,
            context={**context, RECORDING_KEY: recording} if tools == "replay" else context,
        ) as handle:
            result = await handle.run(case.prompt)
    except Exception as exc:  # a crash fails this case, not the evaluation
        return CaseRun(
            status="crashed",
            output=None,
            latency=trio.current_time() - started,
            error=f"{type(exc).__name__}: {exc}",
            replayed=recording.replayed,
            missed=recording.missed,
        )
    output = unstructure(result.output) if result.status == "completed" else None
    return CaseRun(
        status=result.status,
        output=output,
        tool_calls=tuple(tool_calls(result.messages)),
        usage=result.usage,
        latency=trio.current_time() - started,
        error=result.error,
        replayed=recording.replayed,
        missed=recording.missed,
        result=result,
        agent=agent.name,
    )


async def _scored(run: CaseRun, case: Case, evaluators: Sequence[Evaluator]) -> CaseRun:
    scores: dict[str, tuple[float, str]] = {}
    for evaluator in evaluators:
        try:
            score = evaluator.score(case, run)
            if inspect.isawaitable(score):
                score = await score
            if not isinstance(score, Score):
                raise TypeError(f"returned {type(score).__name__}, not a Score")
            scores[evaluator.name] = (score.value, score.reason)
        except Exception as exc:  # an evaluator that fails scores 0, said why: never a pass
            scores[evaluator.name] = (0.0, f"{EVALUATOR_FAILED}{type(exc).__name__}: {exc}")
    # Scored: the run's result (its messages) is let go, so a long evaluation's
    # memory holds only what the report shows.
    return CaseRun(
        status=run.status,
        output=run.output,
        tool_calls=run.tool_calls,
        usage=run.usage,
        latency=run.latency,
        error=run.error,
        scores=scores,
        replayed=run.replayed,
        missed=run.missed,
    )
