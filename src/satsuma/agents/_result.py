"""RunResult: how one run of an agent ended."""

from __future__ import annotations

from typing import Any, Final, Generic, Literal

import attrs
from typing_extensions import TypeVar

from .._exceptions import NoOutput
from .._messages import Message, Usage
from ..tools import PendingCall

__all__ = [
    "NO_ANSWER",
    "SUBAGENT_USAGE",
    "OutputT",
    "RunResult",
    "RunStatus",
    "raw_output",
    "subagent_usage",
]

# What an agent answers: its output_type (see docs/output.md), the final text by default.
OutputT = TypeVar("OutputT", default=str)

# The key under which a sub-agent's tool outcome carries the sub-run's usage, which the
# parent run adds to its own.
SUBAGENT_USAGE: Final = "satsuma.subagent_usage"

RunStatus = Literal[
    "completed", "max_iterations", "deadline_exceeded", "cancelled", "failed", "awaiting_approval"
]


class _NoAnswer:
    """The output of a typed run that did not complete: reading it raises NoOutput."""

    def __repr__(self) -> str:
        return "<no typed answer>"

    def __reduce__(self) -> str:
        return "NO_ANSWER"  # one instance, also once copied


# What a typed run (an agent with an output_type) that did not complete holds as output.
NO_ANSWER: Final[Any] = _NoAnswer()


@attrs.frozen(kw_only=True)
class RunResult(Generic[OutputT]):
    """The end of a run; ``RunResult[Invoice]`` for an agent whose output_type is Invoice.

    Attributes:
        run_id: The run's id (also on every event of the run).
        output: The final assistant text ("" if there was none), however the run ended;
            for an agent with an ``output_type``, the typed answer, which a run has only
            when it ended ``completed``: on any other run, reading it raises
            ``satsuma.NoOutput`` (naming the status and the error).
        status: ``completed``, ``max_iterations``, ``deadline_exceeded``, ``cancelled``,
            ``failed``, or ``awaiting_approval`` (paused: ``pending`` calls wait for a
            person's decision; ``agent.resume(run_id, decisions=...)`` goes on).
        messages: The messages this run added to the conversation, in order.
        usage: Tokens summed over the run's model calls.
        iterations: How many model calls the run made.
        error: None, or what ended a failed run (the API's message, a loop-guard
            reason, ...).
        pending: The calls a run ``awaiting_approval`` waits on; empty otherwise.
    """

    run_id: str
    _output: OutputT = attrs.field(alias="output")
    status: RunStatus
    messages: tuple[Message, ...] = ()
    usage: Usage = attrs.Factory(Usage)
    iterations: int = 0
    error: str | None = None
    pending: tuple[PendingCall, ...] = ()

    @property
    def output(self) -> OutputT:
        value = self._output
        if value is NO_ANSWER:
            raise NoOutput(self.run_id, self.status, self.error)
        return value


def raw_output(result: RunResult[Any]) -> Any:
    """A result's output without raising: None for a typed run with no answer."""
    value = result._output
    return None if value is NO_ANSWER else value


def subagent_usage(details: object) -> Usage | None:
    """The sub-run usage carried by an outcome's details, if any."""
    if isinstance(details, dict):
        usage = details.get(SUBAGENT_USAGE)
        if isinstance(usage, Usage):
            return usage
    return None
