"""Counts of what a session of the ``satsuma`` command did, and their summary table."""

from __future__ import annotations

from collections import Counter

import attrs
from rich.table import Table

from ._live import cost_text, outcome_kind, outcome_style
from ._messages import Usage
from .agents import AgentEvent, RunEnd, TurnEnd
from .supervisor import ChildCrashed, ChildRestarted, SupervisorEvent
from .tools import ToolCallEnd

__all__ = ["Tally"]


@attrs.define(eq=False)
class Tally:
    """Runs by status, tool calls by outcome kind, model calls, tokens and their cost,
    crashes."""

    runs: Counter[str] = attrs.Factory(Counter)
    tool_calls: Counter[str] = attrs.Factory(Counter)
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # The model calls' usage summed, for its cost (unknown once a call's is).
    usage: Usage = attrs.Factory(Usage)
    crashes: int = 0
    restarts: int = 0

    def agent_event(self, event: AgentEvent) -> None:
        """Count one event of an agent run."""
        if isinstance(event, ToolCallEnd):
            self.tool_calls[outcome_kind(event.outcome)] += 1
        elif isinstance(event, TurnEnd):
            self.model_calls += 1
            self.input_tokens += event.usage.input_tokens
            self.output_tokens += event.usage.output_tokens
            self.usage = self.usage + event.usage
        elif isinstance(event, RunEnd):
            self.runs[event.result.status] += 1

    def supervisor_event(self, event: SupervisorEvent) -> None:
        """Count one event of a supervisor."""
        if isinstance(event, ChildCrashed):
            self.crashes += 1
        elif isinstance(event, ChildRestarted):
            self.restarts += 1

    def table(self, wall_time: float) -> Table:
        """The summary, as a two-column table."""
        table = Table(title="summary", title_justify="left", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("runs", f"{sum(self.runs.values())}  ({_counts(self.runs)})")
        table.add_row("model calls", str(self.model_calls))
        calls = ", ".join(
            f"[{outcome_style(kind)}]{kind} {count}[/]"
            for kind, count in sorted(self.tool_calls.items())
        )
        table.add_row("tool calls", f"{sum(self.tool_calls.values())}  ({calls or 'none'})")
        table.add_row("tokens", f"{self.input_tokens} in, {self.output_tokens} out")
        table.add_row("cost", cost_text(self.usage.cost_usd))
        table.add_row("agent crashes", f"{self.crashes} ({self.restarts} restarted)")
        table.add_row("wall time", f"{wall_time:.2f}s")
        return table


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} {count}" for key, count in sorted(counter.items())) or "none"
