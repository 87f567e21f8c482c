"""The live view, rendered to text by rich's recording console: what a user sees."""

from __future__ import annotations

import io
import re

import trio
from rich.console import Console

import satsuma
from satsuma import (
    ApprovalDecided,
    ApprovalRequested,
    Approve,
    ChildCrashed,
    ChildRestarted,
    Deny,
    RunEnd,
    RunResult,
    RunStart,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolOutcome,
    ToolProgress,
    TurnEnd,
    Usage,
)
from satsuma._live import LiveView, open_live_view
from satsuma.store import MemoryStore
from satsuma.testing import Reply, ScriptedModel

RUN = {"agent": "researcher", "run_id": "run_1", "iteration": 1}


def recording_console() -> Console:
    return Console(
        record=True, width=100, force_terminal=True, color_system=None, file=io.StringIO()
    )


def start(view: LiveView, call_id: str, name: str, arguments: dict[str, object]) -> None:
    view.agent_event(ToolCallStart(**RUN, tool_use_id=call_id, tool_name=name, input=arguments))


def end(view: LiveView, call_id: str, name: str, **outcome: object) -> None:
    result = ToolOutcome(tool_use_id=call_id, tool_name=name, **outcome)  # type: ignore[arg-type]
    view.agent_event(ToolCallEnd(**RUN, tool_use_id=call_id, tool_name=name, outcome=result))


def text_of(console: Console) -> list[str]:
    # Spinner frames depend on the wall clock: every frame reads as "*".
    frames = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    lines = console.export_text().splitlines()
    return [re.sub(f"[{frames}]", "*", line).rstrip() for line in lines]


async def test_a_run_in_progress_is_a_tree_of_calls_with_spinners_and_outcomes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = recording_console()
    view = LiveView(console, live=True)
    view.agent_event(RunStart(**RUN, prompt="Prepare the notes"))
    start(view, "t1", "fetch_weather", {"city": "Lisbon"})
    start(view, "t2", "draft_agenda", {"days": 3})
    start(view, "t3", "hotel_rates", {"city": "Lisbon"})
    start(view, "t4", "check_venue", {"name": "LX"})
    view.agent_event(TextDelta(**RUN, text="Looking it all up."))
    await trio.sleep(0.5)
    view.agent_event(
        ToolProgress(**RUN, tool_use_id="t2", tool_name="draft_agenda", text="day 2/3")
    )
    end(view, "t1", "fetch_weather", content="Lisbon: sunny, 19°C", is_error=False, duration=0.4)
    end(
        view,
        "t3",
        "hotel_rates",
        content="Error: Tool timed out after 1s",
        is_error=True,
        error_kind="timeout",
        duration=1.0,
    )
    end(
        view,
        "t4",
        "check_venue",
        content="Error: Tool crashed: ConnectionResetError: dropped",
        is_error=True,
        error_kind="crashed",
        duration=0.2,
    )
    console.print(view.renderable())
    lines = text_of(console)
    assert lines[0] == "researcher ← Prepare the notes"
    assert lines[1:] == [
        "researcher  0.5s",
        "├── Looking it all up.",
        '├── ✓ fetch_weather(city="Lisbon")  0.40s  ok  Lisbon: sunny, 19°C',
        "├── * draft_agenda(days=3)  0.5s  day 2/3",
        '├── ✗ hotel_rates(city="Lisbon")  1.00s  timeout  Error: Tool timed out after 1s',
        '└── ✗ check_venue(name="LX")  0.20s  crashed  Error: Tool crashed: ConnectionResetError: dropped',
    ]


async def test_a_finished_run_is_printed_for_good_and_leaves_the_area(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = recording_console()
    view = LiveView(console, live=True)
    view.agent_event(RunStart(**RUN, prompt="Go"))
    start(view, "t1", "fetch_weather", {"city": "Oslo"})
    end(view, "t1", "fetch_weather", content="Oslo: 2°C", is_error=False, duration=0.25)
    view.agent_event(TextDelta(**RUN, text="Cold."))
    view.agent_event(
        TurnEnd(**RUN, usage=Usage(input_tokens=12, output_tokens=3), stop_reason="end_turn")
    )
    result = RunResult(
        run_id="run_1",
        output="Cold.",
        status="completed",
        usage=Usage(input_tokens=12, output_tokens=3),
        iterations=1,
    )
    view.agent_event(RunEnd(**RUN, result=result))
    console.print(view.renderable())
    assert text_of(console) == [
        "researcher ← Go",
        "researcher  0.0s",
        '└── ✓ fetch_weather(city="Oslo")  0.25s  ok  Oslo: 2°C',
        "researcher: Cold.",
        "researcher run completed after 1 model call, 12 in / 3 out tokens, cost unknown",
    ]


def turn_end(view: LiveView, iteration: int, stop_reason: str) -> None:
    view.agent_event(
        TurnEnd(
            **{**RUN, "iteration": iteration},
            usage=Usage(input_tokens=10, output_tokens=5),
            stop_reason=stop_reason,
        )
    )


async def test_a_transcript_reads_in_order_prompt_calls_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # As the loop sends them: a turn's text and its end, then its calls, then the next
    # turn's text (the answer). Each turn's calls are printed once the model has their
    # results, between the text that asked for them and the text that follows.
    console = recording_console()
    view = LiveView(console, live=True, echo_prompts=False)
    view.agent_event(RunStart(**RUN, prompt="Weather in Oslo and Rome?"))
    view.agent_event(TextDelta(**RUN, text="Looking up Oslo."))
    turn_end(view, 1, "tool_use")
    start(view, "t1", "fetch_weather", {"city": "Oslo"})
    end(view, "t1", "fetch_weather", content="Oslo: 2°C", is_error=False, duration=0.25)
    view.agent_event(TextDelta(**RUN, text="Now Rome."))
    turn_end(view, 2, "tool_use")
    start(view, "t2", "fetch_weather", {"city": "Rome"})
    await trio.sleep(0.5)
    end(view, "t2", "fetch_weather", content="Rome: 21°C", is_error=False, duration=0.5)
    view.agent_event(TextDelta(**RUN, text="Oslo is cold, Rome is warm."))
    turn_end(view, 3, "end_turn")
    result = RunResult(
        run_id="run_1",
        output="Oslo is cold, Rome is warm.",
        status="completed",
        usage=Usage(input_tokens=30, output_tokens=15),
        iterations=3,
    )
    view.agent_event(RunEnd(**RUN, result=result))
    view.say("you>")
    assert text_of(console) == [
        "researcher: Looking up Oslo.",
        "researcher  0.0s",
        '└── ✓ fetch_weather(city="Oslo")  0.25s  ok  Oslo: 2°C',
        "researcher: Now Rome.",
        "researcher  0.5s",
        '└── ✓ fetch_weather(city="Rome")  0.50s  ok  Rome: 21°C',
        "researcher: Oslo is cold, Rome is warm.",
        "researcher run completed after 3 model calls, 30 in / 15 out tokens, cost unknown",
        "you>",
    ]


async def test_without_a_terminal_every_event_is_one_plain_line() -> None:
    console = Console(record=True, width=100, force_terminal=False, file=io.StringIO())
    view = LiveView(console, live=False)
    view.agent_event(RunStart(**RUN, prompt="Go"))
    start(view, "t1", "draft_agenda", {"days": 2})
    view.agent_event(
        ToolProgress(**RUN, tool_use_id="t1", tool_name="draft_agenda", text="day 1/2")
    )
    end(view, "t1", "draft_agenda", content="done", is_error=False, duration=0.7)
    view.supervisor_event(
        ChildCrashed(supervisor="team", child_id="writer", error="RuntimeError: bug", traceback="")
    )
    view.supervisor_event(ChildRestarted(supervisor="team", child_id="writer", restarts=1, delay=0))
    text = console.export_text()
    assert "\x1b" not in text
    assert text.splitlines() == [
        "researcher ← Go",
        "  researcher → draft_agenda(days=2)",
        "  researcher … draft_agenda: day 1/2",
        "  ✓ draft_agenda  0.70s  ok  done",
        "supervisor team: writer crashed: RuntimeError: bug",
        "supervisor team: writer restarted (restart 1)",
    ]


async def test_outcomes_are_coloured_by_kind() -> None:
    console = Console(
        record=True, width=100, force_terminal=True, color_system="truecolor", file=io.StringIO()
    )
    view = LiveView(console, live=False)
    view.agent_event(RunStart(**RUN, prompt="Go"))
    end(view, "t1", "a", content="fine", is_error=False)
    end(view, "t2", "b", content="Error: Tool crashed: X", is_error=True, error_kind="crashed")
    html = console.export_html(inline_styles=True)
    ok_colour = re.search(r'<span style="color: (#[0-9a-f]+)[^"]*">✓ a', html)
    crash_colour = re.search(r'<span style="color: (#[0-9a-f]+)[^"]*font-weight: bold">✗ b', html)
    assert ok_colour is not None, html
    assert crash_colour is not None, html
    assert ok_colour.group(1) != crash_colour.group(1)


async def test_the_area_is_brought_up_to_date_before_each_printed_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Lines printed between two timed refreshes redraw the area below them: it must not
    # show a run that has already ended.
    console = recording_console()
    async with open_live_view(console, live=True) as view:
        view.agent_event(RunStart(**RUN, prompt="Go"))
        start(view, "t1", "slow_tool", {})
        await trio.sleep(0.5)  # timed refreshes draw the run in progress
        end(view, "t1", "slow_tool", content="done", is_error=False, duration=0.5)
        result = RunResult(run_id="run_1", output="", status="completed")
        view.agent_event(RunEnd(**RUN, result=result))
        view.say("after the run")
    text = "\n".join(text_of(console))
    assert "* slow_tool()" in text  # the area was drawn while the call ran
    after = text[text.rindex("after the run") :]
    assert "slow_tool" not in after


# --- human approval: a real agent's events --------------------------------------------


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money."""
    return f"sent {amount} to {to}"


class Banker(satsuma.Agent):
    name = "banker"
    tools = [transfer]


def payments() -> ScriptedModel:
    return ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ("transfer", {"to": "bob", "amount": 10}),
                    ("transfer", {"to": "eve", "amount": 99}),
                ]
            ),
            "Paid Bob.",
        ]
    )


async def pause_and_resume(view: LiveView) -> None:
    """A run that pauses on two calls, then resumed: one approved with an edit, one
    denied, each decision naming who made it."""
    async with (
        MemoryStore() as store,
        satsuma.open_agent(Banker, model=payments(), store=store, agent_id="b") as agent,
    ):
        first = await agent.run("Pay Bob and Eve", events=view.agent_event)
        bob, eve = first.pending
        if view.live:
            view.console.print(view.renderable())  # nothing left in the area
        decisions = {
            bob.id: Approve(input={"to": "bob", "amount": 5}, by="alice"),
            eve.id: Deny("not eve", by="carol"),
        }
        await agent.resume(first.run_id, decisions=decisions, events=view.agent_event)


async def test_calls_awaiting_approval_and_their_decisions_in_plain_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = Console(record=True, width=200, force_terminal=False, file=io.StringIO())
    await pause_and_resume(LiveView(console, live=False))
    lines = console.export_text().splitlines()
    # The calls of a turn run at once: their lines may come in either order.
    assert lines[0] == "banker ← Pay Bob and Eve"
    assert sorted(lines[1:5]) == [
        '  banker → transfer(to="bob", amount=10)',
        '  banker → transfer(to="eve", amount=99)',
        '  banker ⏸ transfer(to="bob", amount=10) awaits approval: transfer requires approval',
        '  banker ⏸ transfer(to="eve", amount=99) awaits approval: transfer requires approval',
    ]
    assert lines[5] == (
        "banker run awaiting_approval after 1 model call, 10 in / 17 out tokens, cost unknown; "
        "waiting for a decision on transfer (toolu_test_1), transfer (toolu_test_2)"
    )
    assert lines[6] == "banker ← Pay Bob and Eve"
    assert sorted(lines[7:13]) == [
        '  banker → transfer(to="bob", amount=10)',
        '  banker → transfer(to="eve", amount=99)',
        '  banker ✓ transfer(to="bob", amount=5) approved with an edit by alice',
        '  banker ✗ transfer(to="eve", amount=99) denied by carol: not eve',
        "  ✓ transfer  0.00s  ok  sent 5 to bob",
        "  ✗ transfer  0.00s  denied  Error: Denied: not eve",
    ]
    assert lines[13:] == [
        "banker: Paid Bob.",
        "banker run completed after 1 model call, 123 in / 19 out tokens, cost unknown",
    ]


async def test_a_call_awaiting_approval_shows_so_in_the_tree_then_its_decision(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = recording_console()
    await pause_and_resume(LiveView(console, live=True))
    lines = text_of(console)
    assert lines[:2] == ["banker ← Pay Bob and Eve", "banker  0.0s"]
    assert sorted(line[4:] for line in lines[2:4]) == [
        '⏸ transfer(to="bob", amount=10)  awaiting approval: transfer requires approval',
        '⏸ transfer(to="eve", amount=99)  awaiting approval: transfer requires approval',
    ]
    assert lines[4:7] == [
        "banker run awaiting_approval after 1 model call, 10 in / 17 out tokens, cost unknown; waiting for a",
        "decision on transfer (toolu_test_1), transfer (toolu_test_2)",
        "banker ← Pay Bob and Eve",
    ]
    assert sorted(line[4:] for line in lines[8:10]) == [
        '✓ transfer(to="bob", amount=5)  0.00s  ok  sent 5 to bob  (approved with an edit by alice)',
        '✗ transfer(to="eve", amount=99)  0.00s  denied  Error: Denied: not eve  (denied by carol)',
    ]
    assert lines[10:] == [
        "banker: Paid Bob.",
        "banker run completed after 1 model call, 123 in / 19 out tokens, cost unknown",
    ]


async def test_an_inline_wait_has_no_spinner_and_says_why(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = recording_console()
    view = LiveView(console, live=True)
    view.agent_event(RunStart(**RUN, prompt="Pay"))
    start(view, "t1", "transfer", {"to": "bob"})
    view.agent_event(
        ApprovalRequested(
            **RUN, tool_use_id="t1", tool_name="transfer", input={"to": "bob"}, reason="big"
        )
    )
    await trio.sleep(2)
    console.print(view.renderable())
    view.agent_event(
        ApprovalDecided(
            **RUN, tool_use_id="t1", tool_name="transfer", approved=True, input={"to": "bob"}
        )
    )
    console.print(view.renderable())
    assert text_of(console)[1:] == [
        "researcher  2.0s",
        '└── ⏸ transfer(to="bob")  2.0s  awaiting approval: big',
        "researcher  2.0s",
        '└── * transfer(to="bob")  2.0s  approved',
    ]


async def test_a_run_waiting_for_its_model_limits_shows_why_until_the_call_goes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = recording_console()
    view = LiveView(console, live=True, echo_prompts=False)
    view.agent_event(RunStart(**RUN, prompt="Go"))
    view.agent_event(satsuma.ModelWaitStart(**RUN, reason="20 of 20 slots in use", queued=3))
    await trio.sleep(1.5)
    console.print(view.renderable())
    view.agent_event(satsuma.ModelWaitEnd(**RUN, seconds=1.5))
    console.print(view.renderable())
    assert text_of(console) == [
        "researcher  1.5s",
        "└── ⏳ waiting for the model: 20 of 20 slots in use  1.5s",
        "researcher  1.5s",
    ]

    plain = Console(record=True, width=100, force_terminal=False, file=io.StringIO())
    lines = LiveView(plain, live=False, echo_prompts=False)
    lines.agent_event(RunStart(**RUN, prompt="Go"))
    lines.agent_event(satsuma.ModelWaitStart(**RUN, reason="3 calls queued before it", queued=4))
    lines.agent_event(satsuma.ModelWaitEnd(**RUN, seconds=2.5))
    assert plain.export_text().splitlines() == [
        "  researcher ⏳ waiting for the model: 3 calls queued before it",
        "  researcher waited 2.5s for the model",
    ]
