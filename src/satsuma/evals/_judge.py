"""``Judge``: a model scores a run against a rubric, with a typed, validated answer.

The judge is an agent of its own whose answer is a ``Grade`` (a score in [0, 1] and a
reason), checked as any typed output is. A judge that does not answer (its run fails,
runs out of turns, or gives no valid verdict) raises, and ``evaluate`` records that as a
score of 0 with the reason: a judge that could not judge never lets a run pass.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from .._exceptions import SatsumaError
from ..agents import Agent, open_agent
from ..models import Model
from ._case import Case
from ._evaluators import Evaluator, Score

if TYPE_CHECKING:
    from ._report import CaseRun

__all__ = ["Judge", "JudgeFailed", "Grade"]

_SYSTEM = (
    "You grade an AI agent's answer against a rubric. Read the rubric, the user's "
    "request, the tools the agent called and its answer. Give a score from 0 (fails the "
    "rubric) to 1 (meets it fully) and a short reason naming what decided the score."
)


@attrs.frozen
class Grade:
    """A judge's answer.

    Attributes:
        score: From 0 (fails the rubric) to 1 (meets it fully).
        reason: What decided the score, in a sentence or two.
    """

    score: float
    reason: str


class JudgeFailed(SatsumaError):
    """The judge gave no valid verdict (its run did not complete, or its score was not in [0, 1])."""


class _Judging(Agent[Grade]):
    name = "judge"
    system = _SYSTEM
    max_iterations = 3


@attrs.frozen
class Judge(Evaluator):
    """A model grades each run against ``rubric``.

    Args:
        rubric: What a good answer does, in plain words.
        model: The judge's model: a model id or alias, or a Model (a scripted one in
            tests); None: the judge's default (``sonnet``).
        threshold: The score a run must reach to pass.
        label: Names the evaluator in reports (default ``judge``).
    """

    rubric: str
    model: str | Model | None = None
    threshold: float = 0.5
    label: str = "judge"

    @property
    def name(self) -> str:
        return self.label

    async def score(self, case: Case, run: CaseRun) -> Score:
        judging: type[Agent[Grade]] = _Judging
        given: Model | None = None
        if isinstance(self.model, str):
            judging = type("_Judging", (_Judging,), {"model": self.model, "__module__": __name__})
        else:
            given = self.model
        async with open_agent(judging, model=given) as judge:
            result = await judge.run(self._prompt(case, run))
        if result.status != "completed":
            raise JudgeFailed(
                f"the judge's run ended {result.status}: {result.error or 'no verdict'}"
            )
        grade = result.output
        if not 0.0 <= grade.score <= 1.0:
            raise JudgeFailed(f"the judge's score {grade.score!r} is not in [0, 1]")
        return Score(grade.score, grade.reason)

    def _prompt(self, case: Case, run: CaseRun) -> str:
        calls = [{"tool": name, "input": arguments} for name, arguments in run.tool_calls]
        parts: list[tuple[str, Any]] = [
            ("Rubric", self.rubric),
            ("The user's request", case.prompt),
            ("The tools the agent called", json.dumps(calls, ensure_ascii=False)),
            (
                "The agent's answer",
                run.output if isinstance(run.output, str) else json.dumps(run.output),
            ),
        ]
        if case.expected_output is not None:
            parts.append(
                ("A reference answer", json.dumps(case.expected_output, ensure_ascii=False))
            )
        return "\n\n".join(f"## {title}\n{text}" for title, text in parts)
