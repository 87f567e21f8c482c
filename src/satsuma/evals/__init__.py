"""Evals: turn cases (written by hand, or taken from a store's runs) into regression
suites: replay them on an agent as it is now, score each run, compare with a baseline.

    from satsuma.evals import Dataset, OutputMatches, ToolTrajectory, evaluate

    dataset = await Dataset.from_store(store, "t-42")
    report = await evaluate(Support, dataset, [ToolTrajectory(), OutputMatches()])
"""

from .._public import public_names as _public_names
from ._case import Case as Case
from ._case import RecordedCall as RecordedCall
from ._dataset import Dataset as Dataset
from ._dataset import DatasetError as DatasetError
from ._dataset_format import DATASET_SCHEMA as DATASET_SCHEMA
from ._evaluate import evaluate as evaluate
from ._evaluators import Evaluator as Evaluator
from ._evaluators import MaxCost as MaxCost
from ._evaluators import MaxLatency as MaxLatency
from ._evaluators import MaxTokens as MaxTokens
from ._evaluators import OutputMatches as OutputMatches
from ._evaluators import Score as Score
from ._evaluators import ToolTrajectory as ToolTrajectory
from ._judge import Grade as Grade
from ._judge import Judge as Judge
from ._judge import JudgeFailed as JudgeFailed
from ._report import CaseReport as CaseReport
from ._report import CaseRun as CaseRun
from ._report import Comparison as Comparison
from ._report import Report as Report
from ._report import ReportError as ReportError
from ._verifier import Verifier as Verifier

__all__ = [
    "DATASET_SCHEMA",
    "Case",
    "CaseReport",
    "CaseRun",
    "Comparison",
    "Dataset",
    "DatasetError",
    "Evaluator",
    "Judge",
    "JudgeFailed",
    "MaxCost",
    "MaxLatency",
    "MaxTokens",
    "OutputMatches",
    "RecordedCall",
    "Report",
    "ReportError",
    "Score",
    "ToolTrajectory",
    "Grade",
    "Verifier",
    "evaluate",
]
_public_names(__name__, globals())
