"""Evaluators: each scores one run of a case in [0, 1], with a reason.

An evaluator has a ``name``, a ``threshold`` (a run passes it with a score at or above
it) and ``score(case, run)``. The built-in ones compare what the agent did with what the
case expects: the tools it called (``ToolTrajectory``), its answer (``OutputMatches``),
and what the run cost in tokens and time (``MaxTokens``, ``MaxLatency``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..tools import unstructure
from ._case import Case, _same_json

if TYPE_CHECKING:
    from ._report import CaseRun

__all__ = [
    "Evaluator",
    "MaxCost",
    "MaxLatency",
    "MaxTokens",
    "OutputMatches",
    "Score",
    "ToolTrajectory",
]


def _unit(value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ValueError(f"a score is a number in [0, 1], got: {value!r}")
    return float(value)


@attrs.frozen
class Score:
    """One evaluator's verdict on one run: ``value`` in [0, 1] and why."""

    value: float = attrs.field(converter=_unit)
    reason: str


class Evaluator:
    """The base of evaluators: a ``name`` (unique in an evaluation), a ``threshold`` (a
    run passes with a score at or above it) and ``score(case, run)``. Subclass it for
    an evaluator of your own."""

    threshold: float = 1.0

    @property
    def name(self) -> str:
        """Names the evaluator in reports (unique in an evaluation)."""
        raise NotImplementedError

    def score(self, case: Case, run: CaseRun) -> Score | Awaitable[Score]:
        """The run's score, and why (or an awaitable of it: a judge asks a model)."""
        raise NotImplementedError


def _threshold(value: float) -> float:
    return _unit(value)


TrajectoryMode = Literal["exact", "in_order", "any_order"]


@attrs.frozen
class ToolTrajectory(Evaluator):
    """The tools the run called against the tools the case expects (``expected_tools``,
    else the recorded run's calls).

    Args:
        mode: ``exact`` (the same calls, in order, nothing more: 1 or 0), ``in_order``
            (the expected calls appear in that order, others may come between: the share
            found), ``any_order`` (each expected call appears, in any order: the share found).
        inputs: Compare the calls' inputs too (with the recorded calls' inputs; a case
            written with ``expected_tools`` only has names to compare).
        threshold: The score a run must reach to pass.
    """

    mode: TrajectoryMode = attrs.field(default="exact")
    inputs: bool = False
    threshold: float = attrs.field(default=1.0, converter=_threshold)

    @mode.validator
    def _check_mode(self, _: object, value: object) -> None:
        if value not in ("exact", "in_order", "any_order"):
            raise ValueError(f"mode must be 'exact', 'in_order' or 'any_order', got: {value!r}")

    @property
    def name(self) -> str:
        return f"tools_{self.mode}" + ("_inputs" if self.inputs else "")

    def score(self, case: Case, run: CaseRun) -> Score:
        expected = self._expected(case)
        if expected is None:
            return Score(1.0, "the case expects no particular tools")
        actual = [self._key(name, arguments) for name, arguments in run.tool_calls]
        shown = ", ".join(name for name, _ in run.tool_calls) or "no tools"
        wanted = ", ".join(str(key[0]) for key in expected) or "no tools"
        if self.mode == "exact":
            same = len(actual) == len(expected) and all(map(_same_key, actual, expected))
            return Score(1.0 if same else 0.0, f"called {shown}; expected {wanted}")
        if not expected:
            return Score(1.0, f"called {shown}; none expected")
        if self.mode == "in_order":
            found = _common_in_order(actual, expected)
        else:
            found = _common_any_order(actual, expected)
        return Score(
            found / len(expected),
            f"{found} of {len(expected)} expected calls ({wanted}) made; called {shown}",
        )

    def _expected(self, case: Case) -> list[tuple[str, Any]] | None:
        if self.inputs and case.expected_tools is None and case.recorded:
            return [(call.name, call.input) for call in case.recorded]
        names = case.trajectory
        return None if names is None else [self._key(name, None) for name in names]

    def _key(self, name: str, arguments: Any) -> tuple[str, Any]:
        return (name, arguments if self.inputs else None)


def _same_key(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return a[0] == b[0] and _same_json(a[1], b[1])


def _common_in_order(actual: Sequence[tuple[str, Any]], expected: Sequence[tuple[str, Any]]) -> int:
    # The longest common subsequence: how many expected calls appear in their order.
    previous = [0] * (len(expected) + 1)
    for call in actual:
        row = [0]
        for j, want in enumerate(expected):
            row.append(previous[j] + 1 if _same_key(call, want) else max(previous[j + 1], row[j]))
        previous = row
    return previous[-1]


def _common_any_order(
    actual: Sequence[tuple[str, Any]], expected: Sequence[tuple[str, Any]]
) -> int:
    left = list(actual)
    found = 0
    for want in expected:
        for index, call in enumerate(left):
            if _same_key(call, want):
                del left[index]
                found += 1
                break
    return found


MatchMode = Literal["equal", "contains", "regex"]
_VERBS = {
    "equal": ("equals", "equal"),
    "contains": ("contains", "contain"),
    "regex": ("matches", "match"),
}


@attrs.frozen
class OutputMatches(Evaluator):
    """The run's answer against the case's ``expected_output`` (else the recorded
    run's output).

    Args:
        mode: ``equal`` (a typed output is compared as JSON values), ``contains`` (the
            expected text appears in the answer), ``regex`` (the expected text is a
            pattern that must match somewhere in the answer).
        ignore_case: Compare text without regard to case.
        threshold: The score a run must reach to pass.
    """

    mode: MatchMode = attrs.field(default="equal")
    ignore_case: bool = False
    threshold: float = attrs.field(default=1.0, converter=_threshold)

    @mode.validator
    def _check_mode(self, _: object, value: object) -> None:
        if value not in ("equal", "contains", "regex"):
            raise ValueError(f"mode must be 'equal', 'contains' or 'regex', got: {value!r}")

    @property
    def name(self) -> str:
        return f"output_{self.mode}"

    def score(self, case: Case, run: CaseRun) -> Score:
        expected = case.expected_output if case.expected_output is not None else case.output
        if expected is None:
            return Score(1.0, "the case expects no particular output")
        if run.output is None:
            return Score(0.0, f"the run gave no output (it ended {run.status})")
        got = unstructure(run.output)
        if self.mode == "equal" and not isinstance(expected, str):
            same = _same_json(got, expected)
            return Score(
                1.0 if same else 0.0,
                "the output equals the expected value"
                if same
                else f"got {_short(got)}; expected {_short(expected)}",
            )
        if not isinstance(expected, str) or not isinstance(got, str):
            return Score(
                0.0, f"{self.mode} compares text; got {_short(got)}, expected {_short(expected)}"
            )
        text, want = (got.lower(), expected.lower()) if self.ignore_case else (got, expected)
        if self.mode == "equal":
            ok = text.strip() == want.strip()
        elif self.mode == "contains":
            ok = want in text
        else:
            try:
                ok = re.search(expected, got, re.IGNORECASE if self.ignore_case else 0) is not None
            except re.error as exc:
                return Score(0.0, f"the expected pattern is not a regex: {exc}")
        if ok:
            return Score(1.0, f"the output {_VERBS[self.mode][0]} {_short(expected)}")
        return Score(
            0.0, f"the output {_short(got)} does not {_VERBS[self.mode][1]} {_short(expected)}"
        )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@attrs.frozen
class MaxTokens(Evaluator):
    """Passes a run that read and wrote at most ``limit`` tokens in all (1 or 0)."""

    limit: int
    threshold: float = attrs.field(default=1.0, converter=_threshold)

    @property
    def name(self) -> str:
        return "max_tokens"

    def score(self, case: Case, run: CaseRun) -> Score:
        used = run.tokens
        return Score(1.0 if used <= self.limit else 0.0, f"{used} tokens (limit {self.limit})")


@attrs.frozen
class MaxLatency(Evaluator):
    """Passes a run that took at most ``seconds`` from its prompt to its end (1 or 0)."""

    seconds: float
    threshold: float = attrs.field(default=1.0, converter=_threshold)

    @property
    def name(self) -> str:
        return "max_latency"

    def score(self, case: Case, run: CaseRun) -> Score:
        took = run.latency
        return Score(1.0 if took <= self.seconds else 0.0, f"{took:.3f} s (limit {self.seconds} s)")


@attrs.frozen
class MaxCost(Evaluator):
    """Passes a run that cost at most ``usd`` (1 or 0). A run whose cost is unknown (a
    model without prices) does not pass: an unknown cost is not a small one."""

    usd: float
    threshold: float = attrs.field(default=1.0, converter=_threshold)

    @property
    def name(self) -> str:
        return "max_cost"

    def score(self, case: Case, run: CaseRun) -> Score:
        cost = run.usage.cost_usd
        if cost is None:
            return Score(0.0, "the run's cost is unknown (its model has no prices)")
        return Score(1.0 if cost <= self.usd else 0.0, f"${cost:.4f} (limit ${self.usd:.4f})")
