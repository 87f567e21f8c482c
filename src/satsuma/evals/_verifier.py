"""``Verifier``: an agent's own verifiers, reused to score an evaluation's runs.

A verifier (``satsuma.Verifier`` subclass or instance, or a function of a
``VerifyContext``) decides at the end of a run whether its answer is acceptable; here it
decides on each run of a case, after the fact: ``Verdict.ok()`` scores 1, a
``Verdict.retry(reason)`` scores 0 with its reason. Given an agent class, every verifier
it lists is asked, and the score is the share that passed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..agents import Agent, Verdict, VerifyContext
from ..agents import Verifier as AgentVerifier
from ._case import Case
from ._evaluators import Evaluator, Score

if TYPE_CHECKING:
    from ._report import CaseRun

__all__ = ["Verifier"]


def _checks(verifier: object) -> tuple[Callable[[VerifyContext], Any], ...]:
    if isinstance(verifier, type) and issubclass(verifier, Agent):
        checks = tuple(_check(one) for one in verifier.verifiers)
        if not checks:
            raise ValueError(f"agent {verifier.name} lists no verifiers to evaluate with")
        return checks
    return (_check(verifier),)


def _check(verifier: object) -> Callable[[VerifyContext], Any]:
    if isinstance(verifier, type) and issubclass(verifier, AgentVerifier):
        return verifier().verify
    if isinstance(verifier, AgentVerifier):
        return verifier.verify
    if callable(verifier) and not isinstance(verifier, type):
        return verifier
    raise TypeError(
        "Verifier takes a satsuma.Verifier (class or instance), a function of a "
        f"VerifyContext, or an Agent class with verifiers; got: {verifier!r}"
    )


@attrs.frozen
class Verifier(Evaluator):
    """Scores each run with an agent verifier: 1 when it passes the run's answer, 0 with
    its reason when it asks for a retry (for an agent class: the share of its
    verifiers that pass, with the reasons of those that did not).

    Args:
        verifier: A ``satsuma.Verifier`` subclass or instance, a function taking a
            ``VerifyContext`` and returning a ``Verdict`` (sync or async), or an Agent
            class, whose ``verifiers`` are all asked.
        threshold: The score a run must reach to pass.
        label: Names the evaluator in reports (default ``verifier``).

    Raises:
        TypeError: ``verifier`` is none of these.
        ValueError: an agent class that lists no verifiers.
    """

    verifier: object
    threshold: float = 1.0
    label: str = "verifier"
    _calls: tuple[Callable[[VerifyContext], Any], ...] = attrs.field(
        init=False, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_calls", _checks(self.verifier))

    @property
    def name(self) -> str:
        return self.label

    async def score(self, case: Case, run: CaseRun) -> Score:
        result = run.result
        if run.status != "completed" or result is None:
            return Score(0.0, f"no answer to verify: the run ended {run.status}")
        extra: Mapping[str, Any] = {}
        context = VerifyContext(
            agent=run.agent,
            run_id=result.run_id,
            output=result.output,
            messages=(*case.history, *result.messages),
            iteration=result.iterations,
            working_dir=Path.cwd(),
            extra=extra,
        )
        failures = []
        for call in self._calls:
            verdict = call(context)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not isinstance(verdict, Verdict):
                raise TypeError(f"the verifier returned {type(verdict).__name__}, not a Verdict")
            if not verdict.passed:
                failures.append(verdict.reason or "no reason given")
        passed = len(self._calls) - len(failures)
        if not failures:
            return Score(1.0, "the verifier passed" if passed == 1 else "every verifier passed")
        return Score(passed / len(self._calls), "; ".join(failures))
