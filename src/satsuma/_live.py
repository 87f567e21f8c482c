"""The live view of the ``satsuma`` command: what agents, tools and supervisors are doing.

On a terminal it is a rich ``Live`` area: each run in progress is a tree (the agent and
its prompt, the text it streams, its tool calls with spinners, elapsed time and the
latest progress line). What is done is printed above the area for good, in the order a
transcript reads: the prompt, a turn's text, the tree of that turn's calls (each
outcome coloured by kind) once the model has their results, the text that follows them,
and the run's end. Supervisor events are printed as lines as they come.

A run whose model call waits for its model's limits (docs/limits.md) shows it
(``⏳ waiting for the model: 20 of 20 slots in use``) until the call is sent.

A call that waits for a person's decision shows it (``⏸ ... awaiting approval: reason``)
instead of a spinner, and its decision (``approved by alice``, ``denied: reason``) stays
beside it; a run that pauses ``awaiting_approval`` ends with the calls it waits on.

Anywhere else (a pipe, a file, CI) it degrades to plain lines, one per event worth
reading, with no escape codes and no redraws.

Every text an event brings (the prompt, model text, tool names and inputs, outcomes,
progress, reasons, who decided, agent ids, errors) is shown through ``_terminal.visible``:
its control characters, ESC and bidi controls escaped (``\x1b``), never read as rich
markup, and a one-line field never broken into two. As a last guard, every ``Text`` the
view prints or draws goes through ``_terminal.visible_text`` again.

The area is refreshed by a trio task at 8 Hz, not by rich's refresh thread, so the view
owns no thread that could outlive it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text
from rich.tree import Tree

from . import supervisor
from ._terminal import show, visible, visible_text
from .agents import (
    AgentEvent,
    BudgetWarning,
    ModelRetry,
    ModelWaitEnd,
    ModelWaitStart,
    RunEnd,
    RunStart,
    TextDelta,
    TurnEnd,
)
from .tools import (
    ApprovalDecided,
    ApprovalRequested,
    NestedEvent,
    ToolCallEnd,
    ToolCallStart,
    ToolOutcome,
    ToolProgress,
)

__all__ = ["LiveView", "cost_text", "open_live_view", "outcome_style"]

# One style per outcome kind; a kind not listed here is shown as a failure.
_STYLES: Final[dict[str, str]] = {
    "ok": "green",
    "is_error": "yellow",
    "timeout": "bright_yellow",
    "crashed": "bold red",
    "failed": "red",
    "invalid_args": "magenta",
    "unknown_tool": "magenta",
    "invalid_result": "magenta",
    "denied": "bright_red",
    "cancelled": "bright_black",
    "skipped": "bright_black",
    "interrupted": "bright_black",
}
_RUN_STYLES: Final[dict[str, str]] = {
    "completed": "green",
    "cancelled": "bright_black",
    "awaiting_approval": "yellow",
}
_REFRESH: Final = 1 / 8
_ARGUMENTS_SHOWN: Final = 60
_RESULT_SHOWN: Final = 80
_PROMPT_SHOWN: Final = 120


def cost_text(cost_usd: float | None) -> str:
    """A cost as the terminal shows it: ``$0.0123``, to a millionth of a dollar below a
    cent, or ``cost unknown`` for a model without prices (never a made-up $0)."""
    if cost_usd is None:
        return "cost unknown"
    return f"${cost_usd:.4f}" if cost_usd >= 0.01 else f"${cost_usd:.6f}"


def outcome_kind(outcome: ToolOutcome) -> str:
    """``ok``, ``is_error`` (the tool ran but says it failed) or the error kind."""
    if outcome.error_kind is not None:
        return outcome.error_kind
    return "is_error" if outcome.is_error else "ok"


def outcome_style(kind: str) -> str:
    """The colour an outcome kind is shown in."""
    return _STYLES.get(kind, "red")


def _decision(event: ApprovalDecided, edited: bool, *, with_reason: bool) -> str:
    """``approved``, ``approved with an edit``, ``denied: reason``; ``by`` whom if known."""
    what = ("approved with an edit" if edited else "approved") if event.approved else "denied"
    if event.decided_by is not None:
        what += f" by {visible(event.decided_by)}"
    if with_reason and not event.approved and event.reason:
        what += f": {_shorten(event.reason, _RESULT_SHOWN)}"
    return what


def _shorten(text: str, limit: int) -> str:
    """One line: runs of whitespace (line breaks too) become one space, what else could
    command the terminal is made visible, and the line is cut at ``limit``."""
    collapsed = " ".join(text.split())
    # Cut before escaping (escapes only lengthen): the view redraws 8 times a second,
    # and a tool's output may be megabytes.
    shown = visible(collapsed[:limit])
    if len(collapsed) <= limit and len(shown) <= limit:
        return shown
    return shown[: limit - 1] + "…"


def _arguments(value: Any) -> str:
    if isinstance(value, dict):
        shown = ", ".join(f"{key}={json.dumps(item)}" for key, item in value.items())
    else:
        shown = json.dumps(value) if not isinstance(value, str) else value
    return _shorten(shown, _ARGUMENTS_SHOWN)


@attrs.define
class _Call:
    name: str
    arguments: str
    started: float
    progress: str | None = None
    outcome: ToolOutcome | None = None
    awaiting: str | None = None  # why it waits for a person's decision, while it does
    decision: str | None = None  # "approved by alice", "denied: not today"


@attrs.define
class _Run:
    agent: str
    prompt: str
    started: float
    text: str = ""
    calls: dict[str, _Call] = attrs.Factory(dict)
    waiting: tuple[str, float] | None = None  # why its model call waits, and since when


@attrs.define(eq=False)
class LiveView:
    """Shows agent and supervisor events on a console.

    Feed it with ``agent_event`` (an agent run's ``events=``) and ``supervisor_event``
    (a Supervisor's ``events=``); ``say`` prints a line of narration. ``live`` is True
    for the redrawn area, False for plain lines (the default: whether the console is a
    terminal). ``echo_prompts`` False leaves out the line that repeats a run's prompt
    (in a chat, the user just typed it). Use it through ``open_live_view``, which
    refreshes the area.
    """

    console: Console
    live: bool
    echo_prompts: bool = True
    _runs: dict[str, _Run] = attrs.Factory(dict)
    _area: Live | None = None

    # --- events in -----------------------------------------------------------------

    def agent_event(self, event: AgentEvent) -> None:
        """Take one event of an agent run."""
        if isinstance(event, NestedEvent):
            inner = event.event
            if isinstance(inner, ToolProgress | ToolCallStart):
                what = inner.text if isinstance(inner, ToolProgress) else inner.tool_name
                self._progress(event.run_id, event.tool_use_id, f"{event.tool_name}: {what}")
            return
        if isinstance(event, RunStart):
            agent = visible(event.agent)
            self._runs[event.run_id] = _Run(agent, event.prompt, trio.current_time())
            if self.echo_prompts:
                prompt = _shorten(event.prompt, _PROMPT_SHOWN)
                self._line(Text.assemble((agent, "bold cyan"), " ← ", prompt))
            return
        run = self._runs.get(event.run_id or "")
        if run is None:
            return  # a run that began before the view was attached
        if isinstance(event, TextDelta):
            run.text += event.text
        elif isinstance(event, ModelRetry):
            run.text = ""  # what the failed attempt streamed is not part of the answer
            self._line(
                Text(
                    f"{run.agent}: model call retried in {event.delay:.1f}s "
                    f"({visible(event.reason)})",
                    "yellow",
                )
            )
        elif isinstance(event, BudgetWarning):
            self._line(
                Text(
                    f"{run.agent}: {event.spent_usd / event.limit_usd:.0%} of its budget "
                    f"{event.budget} spent (${event.spent_usd:.4f} of ${event.limit_usd:.4f})",
                    "yellow",
                )
            )
        elif isinstance(event, ModelWaitStart):
            reason = visible(event.reason)
            run.waiting = (reason, trio.current_time())
            if not self.live:
                self._line(Text(f"  {run.agent} ⏳ waiting for the model: {reason}", "yellow"))
        elif isinstance(event, ModelWaitEnd):
            run.waiting = None
            if not self.live:
                self._line(Text(f"  {run.agent} waited {event.seconds:.1f}s for the model"))
        elif isinstance(event, TurnEnd):
            # The calls of the turn before were answered before this model call: their
            # tree goes above the text they led to, not below the final answer.
            self._print_calls(run)
            if run.text.strip():
                # The model's answer spans lines as written; nothing else passes.
                answer = visible(run.text.strip(), lines=True)
                self._line(Text.assemble((f"{run.agent}", "bold cyan"), ": ", answer))
            run.text = ""
        elif isinstance(event, ToolCallStart):
            started = _Call(visible(event.tool_name), _arguments(event.input), trio.current_time())
            run.calls[event.tool_use_id] = started
            if not self.live:
                self._line(Text(f"  {run.agent} → {started.name}({started.arguments})"))
        elif isinstance(event, ToolProgress):
            self._progress(event.run_id, event.tool_use_id, event.text)
        elif isinstance(event, ApprovalRequested):
            call = run.calls.get(event.tool_use_id)
            reason = visible(event.reason)
            if call is not None:
                call.awaiting = reason
            if not self.live:
                # With its arguments: the calls of a turn run at once, and two calls of
                # one tool would otherwise read alike.
                shown = f"{visible(event.tool_name)}({_arguments(event.input)})"
                self._line(Text(f"  {run.agent} ⏸ {shown} awaits approval: {reason}", "yellow"))
        elif isinstance(event, ApprovalDecided):
            call = run.calls.get(event.tool_use_id)
            asked = call.arguments if call is not None else None
            edited = event.approved and asked is not None and _arguments(event.input) != asked
            if call is not None:
                call.awaiting = None
                # The outcome beside it says the denial's reason already.
                call.decision = _decision(event, edited, with_reason=False)
                if edited:
                    call.arguments = _arguments(event.input)  # what it runs with
            if not self.live:
                mark, style = ("✓", "green") if event.approved else ("✗", "bright_red")
                name = visible(event.tool_name)
                shown = f"{name}({call.arguments})" if call else name
                decision = _decision(event, edited, with_reason=True)
                self._line(Text(f"  {run.agent} {mark} {shown} {decision}", style))
        elif isinstance(event, ToolCallEnd):
            call = run.calls.get(event.tool_use_id)
            if call is not None:
                call.outcome = event.outcome
            if not self.live:
                name = visible(event.tool_name)
                self._line(Text("  ").append(self._outcome_text(name, event.outcome)))
        elif isinstance(event, RunEnd):
            del self._runs[event.run_id]
            self._print_calls(run, ended=True)
            result = event.result
            usage = result.usage
            waiting = ", ".join(
                f"{visible(call.tool_name)} ({visible(call.id)})" for call in result.pending
            )
            self._line(
                Text.assemble(
                    (f"{run.agent}", "bold cyan"),
                    " run ",
                    (result.status, _RUN_STYLES.get(result.status, "red")),
                    f" after {result.iterations} model call{'s' * (result.iterations != 1)},"
                    f" {usage.input_tokens} in / {usage.output_tokens} out tokens,"
                    f" {cost_text(usage.cost_usd)}",
                    f": {visible(str(result.error))}" if result.error else "",
                    (f"; waiting for a decision on {waiting}", "yellow") if waiting else "",
                )
            )

    def supervisor_event(self, event: supervisor.SupervisorEvent) -> None:
        """Take one event of a supervisor."""
        # A supervisor left with its default name is not "supervisor supervisor".
        name = visible(event.supervisor)
        who = "supervisor" if name == "supervisor" else f"supervisor {name}"
        where = f"{who}: {visible(str(event.child_id))}"
        if isinstance(event, supervisor.ChildStarted):
            text = Text(
                f"{where} started" + (f" (#{event.incarnation})" if event.incarnation > 1 else ""),
                "blue",
            )
        elif isinstance(event, supervisor.ChildCrashed):
            text = Text(f"{where} crashed: {visible(event.error, lines=True)}", "bold red")
        elif isinstance(event, supervisor.ChildRestarted):
            text = Text(f"{where} restarted (restart {event.restarts})", "bold blue")
        elif isinstance(event, supervisor.ChildExited):
            text = Text(f"{where} exited ({visible(str(event.reason))})", "blue")
        elif isinstance(event, supervisor.SupervisorGaveUp):
            text = Text(
                f"{where} made the supervisor give up: {visible(str(event.reason))}", "bold red"
            )
        else:  # pragma: no cover - the union is closed
            return
        self._line(text)

    def say(self, text: str | Text) -> None:
        """Print a line of narration (above the live area on a terminal). A ``str`` is
        plain text, never markup, and shown through ``visible`` (its lines kept)."""
        self._line(Text(visible(text, lines=True)) if isinstance(text, str) else text)

    # --- rendering -----------------------------------------------------------------

    def renderable(self) -> RenderableType:
        """What the live area shows now: one tree per run in progress."""
        return Group(*(self._tree(run, final=False) for run in self._runs.values()))

    def _tree(self, run: _Run, *, final: bool) -> Tree:
        now = trio.current_time()
        elapsed = now - run.started
        label = Text.assemble((run.agent, "bold cyan"), f"  {elapsed:.1f}s")
        tree = _SafeTree(visible_text(label), guide_style="bright_black")
        if run.text.strip() and not final:
            tree.add(Text(_shorten(run.text.strip(), 100), "italic"))
        if run.waiting is not None and not final:
            reason, since = run.waiting
            tree.add(Text(f"⏳ waiting for the model: {reason}  {now - since:.1f}s", "yellow"))
        for call in run.calls.values():
            if call.outcome is not None:
                line = self._outcome_text(call.name, call.outcome, call.arguments)
                if call.decision is not None:
                    line.append(f"  ({call.decision})", "bright_black")
                tree.add(line)
            elif call.awaiting is not None:
                # No spinner: nothing runs, a person is being asked (or will be).
                tree.add(
                    Text.assemble(
                        (f"⏸ {call.name}({call.arguments})", "yellow"),
                        "" if final else f"  {now - call.started:.1f}s",
                        (f"  awaiting approval: {call.awaiting}", "yellow"),
                    )
                )
            else:
                line = Text(f"{call.name}({call.arguments})  {now - call.started:.1f}s")
                if call.decision is not None:
                    line.append(f"  {call.decision}", "bright_black")
                if call.progress:
                    line.append(f"  {call.progress}", "cyan")
                tree.add(Spinner("dots", text=line, style="cyan") if not final else line)
        return tree

    @staticmethod
    def _outcome_text(name: str, outcome: ToolOutcome, arguments: str | None = None) -> Text:
        kind = outcome_kind(outcome)
        style = outcome_style(kind)
        mark = "✓" if kind == "ok" else "✗"
        call = f"{name}({arguments})" if arguments is not None else name
        return Text.assemble(
            (f"{mark} {call}", style),
            f"  {outcome.duration:.2f}s  ",
            (kind, style),
            "  ",
            (_shorten(outcome.text, _RESULT_SHOWN), "bright_black" if kind == "ok" else style),
        )

    def _print_calls(self, run: _Run, *, ended: bool = False) -> None:
        """Print the run's calls for good (on a terminal; plain lines said each already)
        once they are all done, or the run has ended, and take them off the area."""
        if not self.live or not run.calls:
            return
        if not ended and any(call.outcome is None for call in run.calls.values()):
            return
        self._line(self._tree(run, final=True))
        run.calls.clear()

    def _progress(self, run_id: str | None, tool_use_id: str, text: str) -> None:
        run = self._runs.get(run_id or "")
        call = run.calls.get(tool_use_id) if run is not None else None
        if call is None or run is None:
            return
        call.progress = visible(text)
        if not self.live:
            self._line(Text(f"  {run.agent} … {call.name}: {call.progress}", "cyan"))

    def _line(self, renderable: RenderableType) -> None:
        # Printed through the console: on a terminal, Live draws its area again below
        # it, so the area is brought up to date first (a run that just ended must not
        # be drawn again from the last timed refresh).
        if self._area is not None:
            self._area.update(self.renderable(), refresh=True)
        show(self.console, renderable, soft_wrap=not self.live)

    def refresh(self) -> None:
        """Redraw the live area now."""
        if self._area is not None:
            self._area.update(self.renderable(), refresh=True)


class _SafeTree(Tree):
    """A Tree whose every ``Text`` node goes through ``visible_text``, the last guard."""

    def add(self, label: RenderableType, **options: Any) -> Tree:
        if isinstance(label, Text):
            label = visible_text(label)
        elif isinstance(label, Spinner) and isinstance(label.text, Text):
            label.text = visible_text(label.text)
        return super().add(label, **options)


@asynccontextmanager
async def open_live_view(
    console: Console | None = None, *, live: bool | None = None, echo_prompts: bool = True
) -> AsyncIterator[LiveView]:
    """A LiveView for the block; on a terminal, its area is redrawn until the block ends.

    Args:
        console: Where to draw (default: a Console on stdout).
        live: Force the redrawn area on or off (default: on for a terminal).
        echo_prompts: Print a line with each run's prompt (not in a chat, where the
            user has just typed it).
    """
    console = console or Console()
    view = LiveView(
        console, console.is_terminal if live is None else live, echo_prompts=echo_prompts
    )
    if not view.live:
        yield view
        return
    with Live(view.renderable(), console=console, auto_refresh=False, transient=True) as area:
        view._area = area
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_keep_refreshing, view)
                try:
                    yield view
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            view._area = None
            area.update(Group(), refresh=True)


async def _keep_refreshing(view: LiveView) -> None:
    while True:
        view.refresh()
        await trio.sleep(_REFRESH)
