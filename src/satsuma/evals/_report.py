"""Reports: what each run of each case did and scored, saved as versioned JSON, rendered
as a Markdown table, and compared with a baseline report case by case."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .._exceptions import SatsumaError
from .._messages import Usage
from ..agents import RunResult

__all__ = ["NOT_RUN", "CaseReport", "CaseRun", "Comparison", "Report", "ReportError"]

REPORT_VERSION = 1
EVALUATOR_FAILED = "the evaluator failed: "
"""How the reason of a score starts when its evaluator raised: such a run never passes it."""


class ReportError(SatsumaError, ValueError):
    """A report file that cannot be read: the message names the file and the problem."""


@attrs.frozen
class CaseRun:
    """One run of a case (one repeat).

    Attributes:
        status: How the run ended (``completed``, ``failed``, ...), or ``crashed`` when
            the agent itself failed (``error`` says how).
        output: The run's answer (a typed output as its JSON value), or None.
        tool_calls: The calls the model made, in order: ``(name, input)``.
        usage: Tokens over the run.
        latency: Seconds from the prompt to the run's end, on trio's clock.
        error: What ended a failed or crashed run, else None.
        scores: Each evaluator's score, by evaluator name: ``(value, reason)``.
        replayed: Calls answered with a recorded outcome.
        missed: Calls that matched no recorded one.
        result: The run's ``RunResult`` while its evaluators score it (a ``Verifier``
            reads its typed answer and messages); None once scored, and in a loaded
            report: a report keeps no conversation, so its memory stays flat.
        agent: The evaluated agent's name, while scored.
    """

    status: str
    output: Any
    tool_calls: tuple[tuple[str, Any], ...] = ()
    usage: Usage = attrs.Factory(Usage)
    latency: float = 0.0
    error: str | None = None
    scores: Mapping[str, tuple[float, str]] = attrs.Factory(dict)
    replayed: int = 0
    missed: int = 0
    result: RunResult[Any] | None = attrs.field(default=None, eq=False, repr=False)
    agent: str = attrs.field(default="", eq=False, repr=False)

    @property
    def tokens(self) -> int:
        """Every token read and written."""
        return self.usage.total_input_tokens + self.usage.output_tokens


NOT_RUN = "not run: the evaluation was stopped before this case's runs ended"
"""The reason of a case an evaluation stopped before (its ``finished`` is False)."""


@attrs.frozen
class CaseReport:
    """A case's runs and verdict. ``passed``: every run completed, and
    every evaluator reached its threshold in at least the share of runs asked for.
    ``finished`` is False for a case a stopped evaluation did not finish: ``runs`` then
    holds the repeats that ended (maybe none), and it has not passed."""

    case_id: str
    runs: tuple[CaseRun, ...]
    passed: bool
    reasons: tuple[str, ...] = ()
    finished: bool = True

    def mean(self, evaluator: str) -> float | None:
        values = [run.scores[evaluator][0] for run in self.runs if evaluator in run.scores]
        return statistics.fmean(values) if values else None


@attrs.frozen
class Comparison:
    """A report against its baseline, case by case (matched by case id)."""

    regressed: tuple[str, ...]
    improved: tuple[str, ...]
    new: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """No case regressed."""
        return not self.regressed


@attrs.frozen
class Report:
    """What ``evaluate`` found.

    Attributes:
        agent: The evaluated agent's name.
        evaluators: The evaluators' names, in order, with their thresholds.
        cases: One CaseReport per case, in the dataset's order.
        repeat: Runs per case.
    """

    agent: str
    evaluators: tuple[tuple[str, float], ...]
    cases: tuple[CaseReport, ...]
    repeat: int = 1
    complete: bool = True

    @property
    def passed(self) -> bool:
        """Every case passed, and the evaluation ran to its end."""
        return self.complete and all(case.passed for case in self.cases)

    @property
    def finished(self) -> tuple[CaseReport, ...]:
        """The cases whose runs all ended (every case, unless the evaluation was stopped)."""
        return tuple(case for case in self.cases if case.finished)

    @property
    def not_run(self) -> tuple[str, ...]:
        """The ids of the cases a stopped evaluation did not finish."""
        return tuple(case.case_id for case in self.cases if not case.finished)

    @property
    def pass_rate(self) -> float:
        return sum(c.passed for c in self.cases) / len(self.cases) if self.cases else 0.0

    @property
    def scores(self) -> dict[str, tuple[float, float]]:
        """Per evaluator, the mean and the standard deviation of its scores over every run."""
        result = {}
        for name, _ in self.evaluators:
            values = [r.scores[name][0] for c in self.cases for r in c.runs if name in r.scores]
            if values:
                spread = statistics.pstdev(values) if len(values) > 1 else 0.0
                result[name] = (statistics.fmean(values), spread)
        return result

    @property
    def usage(self) -> Usage:
        total = Usage()
        for case in self.cases:
            for run in case.runs:
                total = total + run.usage
        return total

    def compare(self, baseline: Report) -> Comparison:
        """The cases that regressed (passed in the baseline, not now; or a lower mean
        score on an evaluator both ran), improved, are new, or are missing."""
        before = {case.case_id: case for case in baseline.cases}
        now = {case.case_id: case for case in self.cases}
        regressed, improved = [], []
        for case_id, case in now.items():
            old = before.get(case_id)
            if old is None or not case.finished or not old.finished:
                continue  # a case not run says nothing of the agent
            if old.passed and not case.passed:
                regressed.append(case_id)
            elif case.passed and not old.passed:
                improved.append(case_id)
            else:
                deltas = [
                    (case.mean(name) or 0.0) - (old.mean(name) or 0.0)
                    for name, _ in self.evaluators
                    if case.mean(name) is not None and old.mean(name) is not None
                ]
                if any(d < -1e-9 for d in deltas):
                    regressed.append(case_id)
                elif any(d > 1e-9 for d in deltas):
                    improved.append(case_id)
        return Comparison(
            regressed=tuple(regressed),
            improved=tuple(improved),
            new=tuple(c for c in now if c not in before),
            missing=tuple(c for c in before if c not in now),
        )

    def markdown(self) -> str:
        """The report as a Markdown table: a row per case, a column per evaluator."""
        names = [name for name, _ in self.evaluators]
        lines = [
            "| case | passed | " + " | ".join(names) + " | tokens |",
            "| --- | --- | " + " | ".join("---" for _ in names) + " | --- |",
        ]
        for case in self.cases:
            cells = [_cell(case.mean(name)) for name in names]
            tokens = sum(run.tokens for run in case.runs)
            verdict = "yes" if case.passed else "**no**" if case.finished else "not run"
            lines.append(
                f"| {_escape(case.case_id)} | {verdict} | " + " | ".join(cells) + f" | {tokens} |"
            )
        means = self.scores
        lines.append(
            f"| **all** ({len(self.cases)} cases x {self.repeat}) | {self.pass_rate:.0%} | "
            + " | ".join(_cell(means[n][0]) if n in means else "-" for n in names)
            + f" | {sum(sum(r.tokens for r in c.runs) for c in self.cases)} |"
        )
        if not self.complete:
            lines.append(
                f"\nThe evaluation was stopped before its end: {len(self.finished)} of "
                f"{len(self.cases)} cases ran; the others are marked not run."
            )
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the report as JSON (``Report.load`` reads it back)."""
        Path(path).write_text(
            json.dumps(report_json(self), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """Read a report ``save`` wrote.

        Raises:
            ReportError: the file cannot be read, is not JSON, or is not a report of this version.
        """
        where = Path(path)
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ReportError(f"{where}: cannot be read ({exc})") from None
        except json.JSONDecodeError as exc:
            raise ReportError(f"{where}: line {exc.lineno}: not JSON ({exc.msg})") from None
        try:
            return _report_from(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ReportError(
                f"{where}: not a satsuma evals report of version {REPORT_VERSION} ({exc!r})"
            ) from None


def _cell(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report_json(report: Report) -> dict[str, Any]:
    return {
        "version": REPORT_VERSION,
        "agent": report.agent,
        "repeat": report.repeat,
        "complete": report.complete,
        "evaluators": [{"name": n, "threshold": t} for n, t in report.evaluators],
        "passed": report.passed,
        "cases": [
            {
                "id": case.case_id,
                "passed": case.passed,
                "reasons": list(case.reasons),
                "finished": case.finished,
                "runs": [_run_json(run) for run in case.runs],
            }
            for case in report.cases
        ],
    }


def _run_json(run: CaseRun) -> dict[str, Any]:
    return {
        "status": run.status,
        "output": run.output,
        "tool_calls": [{"name": n, "input": i} for n, i in run.tool_calls],
        "usage": attrs.asdict(run.usage),
        "latency": run.latency,
        "error": run.error,
        "scores": {k: {"value": v, "reason": r} for k, (v, r) in run.scores.items()},
        "replayed": run.replayed,
        "missed": run.missed,
    }


def _report_from(data: Any) -> Report:
    if not isinstance(data, Mapping):
        raise TypeError(f"a report is a JSON object, got: {type(data).__name__}")
    if data.get("version") != REPORT_VERSION:
        raise ValueError(f"version {data.get('version')!r}")
    cases = []
    for case in data["cases"]:
        runs = tuple(
            CaseRun(
                status=str(run["status"]),
                output=run["output"],
                tool_calls=tuple((c["name"], c["input"]) for c in run["tool_calls"]),
                usage=Usage(**run["usage"]),
                latency=float(run["latency"]),
                error=run["error"],
                scores={k: (float(v["value"]), str(v["reason"])) for k, v in run["scores"].items()},
                replayed=int(run["replayed"]),
                missed=int(run["missed"]),
            )
            for run in case["runs"]
        )
        finished = bool(case.get("finished", True))  # absent: written before stopping was
        cases.append(
            CaseReport(
                str(case["id"]), runs, bool(case["passed"]), tuple(case["reasons"]), finished
            )
        )
    return Report(
        agent=str(data["agent"]),
        evaluators=tuple((str(e["name"]), float(e["threshold"])) for e in data["evaluators"]),
        cases=tuple(cases),
        repeat=int(data["repeat"]),
        complete=bool(data["complete"]),
    )


def summary_reasons(
    runs: Sequence[CaseRun], evaluators: Sequence[tuple[str, float]], share: float
) -> tuple[bool, tuple[str, ...]]:
    """Whether a case's runs pass, and why not."""
    reasons = []
    unfinished = [run for run in runs if run.status != "completed"]
    if unfinished:
        first = unfinished[0]
        why = f": {first.error}" if first.error else ""
        reasons.append(
            f"{len(unfinished)} of {len(runs)} runs did not complete ({first.status}{why})"
        )
    for name, threshold in evaluators:
        passes = [_passes(run, name, threshold) for run in runs]
        passing = sum(passes)
        if passing < share * len(runs) - 1e-9:
            failing = runs[passes.index(False)]
            why = failing.scores[name][1] if name in failing.scores else "not scored"
            reasons.append(f"{name}: {passing} of {len(runs)} runs reached {threshold:g} ({why})")
    return not reasons, tuple(reasons)


def _passes(run: CaseRun, name: str, threshold: float) -> bool:
    if name not in run.scores:
        return False
    value, reason = run.scores[name]
    return value >= threshold and not reason.startswith(EVALUATOR_FAILED)
