"""``satsuma eval``: evaluate an agent on a dataset file or on a store's completed runs,
print the table, write the report, compare with a baseline.

Exit status: 0 when every case passed and none regressed against the baseline, 1 when
one failed or regressed (a CI gate), 2 for a mistake on the command line or in a file,
130 when Ctrl-C (SIGINT) stopped it: the table and the report then hold the cases that
ran, the others marked not run.
"""

from __future__ import annotations

import argparse
import signal
import time
from typing import Any, Final

import trio
from rich.console import Console

from ._command_error import CommandError
from ._commands import FAKE_MODEL, RunOptions, check_key, load_agent
from ._eval_progress import EvalProgress
from ._store_option import open_store, store_option
from ._terminal import say, visible
from .evals import (
    Dataset,
    DatasetError,
    Evaluator,
    OutputMatches,
    Report,
    ReportError,
    ToolTrajectory,
    Verifier,
    evaluate,
)
from .models import Model
from .testing import FakeModel

__all__ = ["INTERRUPTED", "eval_command"]

INTERRUPTED: Final = 130
"""The exit status of an evaluation Ctrl-C stopped (128 + SIGINT, as a shell says)."""

_EVALUATORS: dict[str, Evaluator] = {
    "tools": ToolTrajectory(),
    "tools-inputs": ToolTrajectory(inputs=True),
    "tools-in-order": ToolTrajectory(mode="in_order"),
    "tools-any-order": ToolTrajectory(mode="any_order"),
    "output": OutputMatches(),
    "output-contains": OutputMatches(mode="contains"),
}


def eval_command(args: argparse.Namespace, console: Console, errors: Console) -> int:
    """Run ``satsuma eval``; its exit status."""
    agent = load_agent(args.target, RunOptions(model=args.model))
    baseline = _baseline(args)
    model: Model | None = None
    if args.model == FAKE_MODEL:
        model = FakeModel()
    elif ":" not in str(agent.model):  # Anthropic's API, by alias or id: it needs a key
        check_key()
    checks = args.check or ["tools", "output"]
    if "verifiers" in checks and not agent.verifiers:
        raise CommandError(f"--check verifiers: agent {agent.name} lists no verifiers")
    evaluators = [
        Verifier(agent, label="verifiers") if name == "verifiers" else _EVALUATORS[name]
        for name in dict.fromkeys(checks)
    ]
    dataset = trio.run(_dataset, args, agent.name)
    if not len(dataset):
        raise CommandError("the dataset has no cases: nothing to evaluate")
    with EvalProgress(errors, len(dataset)) as progress:
        report = trio.run(_evaluate, agent, dataset, evaluators, args, model, progress)
    interrupted = not report.complete
    console.print(
        visible(report.markdown(), lines=True), markup=False, highlight=False, soft_wrap=True
    )
    if args.report is not None:
        try:
            report.save(args.report)
        except OSError as error:
            raise CommandError(f"cannot write the report to {args.report}: {error}") from None
    if interrupted:
        ran = len(report.finished)
        say(
            errors,
            f"satsuma eval: interrupted: {ran} of {len(report.cases)} cases ran; the "
            f"{len(report.cases) - ran} others are marked not run"
            + (f" in {args.report}" if args.report is not None else ""),
        )
        return INTERRUPTED
    failed = not report.passed
    if baseline is not None:
        comparison = report.compare(baseline)
        for what, ids in (
            ("regressed", comparison.regressed),
            ("improved", comparison.improved),
            ("new", comparison.new),
            ("missing", comparison.missing),
        ):
            if ids:
                say(console, f"{what}: {visible(', '.join(ids))}")
        failed = failed or not comparison.ok
    return 1 if failed else 0


async def _evaluate(
    agent: Any,
    dataset: Dataset,
    evaluators: list[Evaluator],
    args: argparse.Namespace,
    model: Model | None,
    progress: EvalProgress,
) -> Report:
    """The report; Ctrl-C (SIGINT) stops the runs in flight and starts no more, and the
    report is then partial (``complete`` False)."""
    stop = trio.Event()
    refused: ValueError | None = None
    with trio.open_signal_receiver(signal.SIGINT) as signals:

        async def interrupt() -> None:
            async for _ in signals:
                stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(interrupt)
            nursery.start_soon(progress.redraw)
            try:
                report = await evaluate(
                    agent,
                    dataset,
                    evaluators,
                    repeat=args.repeat,
                    tools=args.tools,
                    max_concurrency=args.concurrency,
                    model=model,
                    pass_share=args.pass_share,
                    on_case=progress.case,
                    stop=stop,
                )
            except ValueError as error:  # refused before any run: said as bad input
                refused = error
            nursery.cancel_scope.cancel()
    if refused is not None:
        raise CommandError(str(refused))
    return report


def _baseline(args: argparse.Namespace) -> Report | None:
    if args.baseline is None:
        return None
    try:
        return Report.load(args.baseline)
    except ReportError as error:
        raise CommandError(str(error)) from None


async def _dataset(args: argparse.Namespace, name: str) -> Dataset:
    if args.dataset is not None:
        if args.agent_id or args.agent or args.limit is not None or args.since is not None:
            raise CommandError(
                "--agent, --agent-id, --limit and --since go with --from-store, not --dataset"
            )
        try:
            return Dataset.load(args.dataset)
        except DatasetError as error:
            raise CommandError(str(error)) from None
    where = store_option(args.from_store)
    if not where.postgres and not await trio.Path(where.path).is_file():
        raise CommandError(f"no such store: {where.shown}")
    # By default the evaluated class's own runs; --agent-id alone reaches conversations
    # whatever their class (and runs recorded before satsuma kept it).
    agent = args.agent if args.agent is not None or args.agent_id else name
    since = time.time() - args.since if args.since is not None else None
    store = await open_store(where)
    try:
        return await Dataset.from_store(
            store, args.agent_id or None, agent=agent, limit=args.limit, since=since
        )
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
