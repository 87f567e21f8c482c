"""``satsuma demo``: tools running under supervision, offline, in a couple of seconds.

One model turn asks for seven tool calls at once; the runner runs them in parallel,
each under its own deadline, and every call comes back as exactly one outcome: a
success, progress from a long tool, a crash that is captured, a hang that times out, an
invalid argument, an unknown tool, and a command-level failure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import trio

from .tools import (
    ToolCall,
    ToolCallEnd,
    ToolCallStart,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    ToolProgress,
    ToolRunner,
    format_results,
    tool,
)


@tool
async def fetch_weather(city: str) -> str:
    """Look up the current weather for a city.

    Args:
        city: The city's name.
    """
    await trio.sleep(0.3)
    return f"{city}: 14°C, light rain"


@tool
async def build_report(sections: int, ctx: ToolContext) -> str:
    """Build a report, one section at a time.

    Args:
        sections: How many sections to write.
    """
    for section in range(1, sections + 1):
        ctx.progress(f"writing section {section}/{sections}")
        await trio.sleep(0.15)
    return f"report with {sections} sections"


@tool
async def flaky_lookup(key: str) -> str:
    """Look a key up in a service that has a bug.

    Args:
        key: The key.
    """
    await trio.sleep(0.1)
    raise ConnectionResetError(f"service dropped the connection while reading {key!r}")


@tool(timeout=0.5)
async def stuck_query(sql: str) -> str:
    """Run a query against a database that never answers.

    Args:
        sql: The query.
    """
    await trio.sleep_forever()
    return "unreachable"


@tool
def count_words(text: str) -> tuple[str, str, bool] | str:
    """Count the words of a text (a sync tool: it runs in a worker thread).

    Args:
        text: The text.
    """
    words = len(text.split())
    if words == 0:
        return ("ok", "no words at all", True)
    return f"{words} words"


CALLS = [
    ToolCall("toolu_01", "fetch_weather", {"city": "Lisbon"}),
    ToolCall("toolu_02", "build_report", {"sections": 4}),
    ToolCall("toolu_03", "flaky_lookup", {"key": "user:42"}),
    ToolCall("toolu_04", "stuck_query", {"sql": "select 1"}),
    ToolCall("toolu_05", "count_words", {"text": 17}),
    ToolCall("toolu_06", "send_email", {"to": "ops@example.com"}),
    ToolCall("toolu_07", "count_words", {"text": "   "}),
]


def _printer(write: Callable[[str], None], started: float) -> Callable[[ToolEvent], None]:
    def on_event(event: ToolEvent) -> None:
        at = f"{trio.current_time() - started:5.2f}s"
        if isinstance(event, ToolCallStart):
            write(f"{at}  start    {event.tool_use_id} {event.tool_name}({event.input})")
        elif isinstance(event, ToolProgress):
            write(f"{at}  progress {event.tool_use_id} {event.text}")
        elif isinstance(event, ToolCallEnd):
            kind = event.outcome.error_kind or "ok"
            write(f"{at}  end      {event.tool_use_id} {kind}")

    return on_event


def _summary(outcomes: list[ToolOutcome], wall: float) -> list[str]:
    kinds = Counter(outcome.error_kind or "ok" for outcome in outcomes)
    busy = sum(outcome.duration for outcome in outcomes)
    lines = ["", "What the model gets back (one tool_result per tool_use, in order):"]
    for block in format_results(outcomes):
        flag = "is_error" if block["is_error"] else "ok      "
        lines.append(f"  {block['tool_use_id']}  {flag}  {block['content']}")
    lines += [
        "",
        f"{'calls':<22}{len(outcomes)}",
        *(f"{'  ' + kind:<22}{count}" for kind, count in sorted(kinds.items())),
        f"{'tool time, summed':<22}{busy:.2f}s",
        f"{'wall time':<22}{wall:.2f}s (the calls ran in parallel)",
    ]
    return lines


async def run_demo(write: Callable[[str], None]) -> list[ToolOutcome]:
    """Run the demo turn, writing its lines through ``write``; return the outcomes."""
    write("satsuma demo: offline, no model needed. One turn asks for 7 tool calls.")
    runner = ToolRunner(
        [fetch_weather, build_report, flaky_lookup, stuck_query, count_words], timeout=10
    )
    started = trio.current_time()
    outcomes = await runner.execute(CALLS, events=_printer(write, started))
    for line in _summary(outcomes, trio.current_time() - started):
        write(line)
    return outcomes


def main(write: Callable[[str], Any] = print) -> int:
    trio.run(run_demo, write)
    return 0
