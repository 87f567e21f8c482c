"""Untrusted text on the terminal: every command, the live view and the log lines show
model text, tool output, tool names and inputs, agent ids, reasons and error messages
with their control characters made visible (satsuma/_terminal.py), and never read as
rich markup.

(The rules of ``visible`` itself are tested in tests/test_terminal.py.) The commands
run as real processes, against a MessagesServer through the real SDK or
with the offline fake model; their whole stdout and stderr are searched for any
character that could command a terminal.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
import trio
from rich.console import Console

from satsuma import (
    ApprovalDecided,
    ApprovalRequested,
    ChildCrashed,
    ChildExited,
    ModelRetry,
    ModelWaitStart,
    NestedEvent,
    PendingCall,
    RunEnd,
    RunResult,
    RunStart,
    SupervisorGaveUp,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolOutcome,
    ToolProgress,
    TurnEnd,
    Usage,
)
from satsuma._live import LiveView
from satsuma.testing import Failure, MessagesServer, Reply

# Every character that must not reach a terminal as itself: C0 controls but "\n" and
# "\t", DEL, C1 controls, bidi controls, the line and paragraph separators, surrogates.
RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\u2028\u2029\ud800-\udfff]"
)
MARKUP = "[bold red]red[/] [link=https://evil.example]click[/link]"
CONTROLS = (
    "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: write the clipboard
    "\x1b[1A\x1b[2KFAKE LINE"  # cursor up, erase the line, a forged line
    "\rover"  # a bare carriage return
    "\u202eevil\u202c \u2066iso\u2069 \u200e\u200f\u061c"  # bidi overrides, isolates, marks
    "\x9b31m\x85\x7f\x00\x08\x0c"  # CSI and NEL (C1), DEL, NUL, backspace, form feed
    "\u2028\u2029\ud800"  # separators, a lone surrogate (JSON can carry one)
)
HOSTILE = f"{MARKUP} {CONTROLS}"
# Passes unchanged: accents, combining marks, CJK, emoji with joiners and flags.
NICE = "café e\u0301 中文 한국어 👩\u200d💻 🇯🇵 ✓ — ½"


def assert_clean(output: str) -> None:
    found = sorted({f"U+{ord(char):04X}" for char in RAW.findall(output)})
    assert not found, f"raw control characters reached the output: {found}\n{output!r}"


# --- the live view ------------------------------------------------------------------------

RUN = {"agent": f"agent{CONTROLS}", "run_id": "run_1", "iteration": 1}


def hostile_events() -> list[object]:
    call = {**RUN, "tool_use_id": "t1", "tool_name": f"tool{CONTROLS}"}
    outcome = ToolOutcome(
        tool_use_id="t1",
        tool_name=call["tool_name"],  # type: ignore[arg-type]
        content=f"{HOSTILE}\n{NICE}",
        is_error=False,
        duration=0.1,
    )
    pending = PendingCall(id=f"id{CONTROLS}", tool_name=f"pay{CONTROLS}", input={}, reason="r")
    result = RunResult(
        run_id="run_1",
        output=HOSTILE,
        status="awaiting_approval",
        usage=Usage(),
        error=HOSTILE,
        pending=(pending,),
    )
    return [
        RunStart(**RUN, prompt=HOSTILE),
        ModelRetry(**RUN, attempt=1, delay=0.5, reason=HOSTILE),
        TextDelta(**RUN, text=f"{HOSTILE}\n{NICE}"),
        ModelWaitStart(**RUN, reason=HOSTILE, queued=1),
        ToolCallStart(**call, input={HOSTILE: HOSTILE, "nice": NICE}),
        ToolProgress(**call, text=HOSTILE),
        NestedEvent(**call, event=ToolProgress(**call, text=HOSTILE)),
        ApprovalRequested(**call, input={HOSTILE: HOSTILE}, reason=HOSTILE),
        ApprovalDecided(
            **call, approved=False, input={HOSTILE: 1}, reason=HOSTILE, decided_by=HOSTILE
        ),
        ToolCallEnd(**call, outcome=outcome),
        TurnEnd(**RUN, usage=Usage(), stop_reason="end_turn"),  # type: ignore[arg-type]
        RunEnd(**RUN, result=result),  # type: ignore[arg-type]
    ]


def supervisor_events() -> list[object]:
    where = {"supervisor": f"team{CONTROLS}", "child_id": f"child{CONTROLS}"}
    return [
        ChildCrashed(**where, error=HOSTILE, traceback=HOSTILE),
        ChildExited(**where, reason="normal"),
        SupervisorGaveUp(**where, reason=HOSTILE),
    ]


def drive(view: LiveView) -> None:
    for event in hostile_events():
        view.agent_event(event)  # type: ignore[arg-type]
        view.refresh()
    for supervisor_event in supervisor_events():
        view.supervisor_event(supervisor_event)  # type: ignore[arg-type]
    view.say(HOSTILE)


async def test_the_live_view_on_a_terminal_shows_every_field_visibly() -> None:
    out = io.StringIO()
    console = Console(record=True, width=400, force_terminal=True, color_system=None, file=out)
    view = LiveView(console, live=True)
    drive(view)
    text = console.export_text()
    assert_clean(text)
    assert MARKUP in text  # as text, not as styles
    assert NICE in text
    assert "\\x1b]52;c;ZXZpbA==\\x07\\x1b[1A\\x1b[2KFAKE LINE\\rover\\u202eevil" in text
    # What went to the terminal holds no escape sequence but rich's own redraws of the
    # area (cursor up, erase line, carriage return, cursor shown or hidden).
    redraws = re.compile(r"\x1b\[(?:\d*A|2K|\?25[lh])|\r")
    assert_clean(redraws.sub("", out.getvalue()))


async def test_the_live_view_in_plain_lines_shows_every_field_visibly() -> None:
    out = io.StringIO()
    console = Console(width=400, force_terminal=False, file=out)
    drive(LiveView(console, live=False))
    lines = out.getvalue()
    assert_clean(lines)
    assert MARKUP in lines and NICE in lines
    # A one-line field never starts a line of its own: each line is the view's.
    for line in lines.splitlines():
        assert not line.startswith(("FAKE", "over", "evil", "second")), line


async def test_the_live_view_keeps_an_answer_split_across_deltas_in_its_lines() -> None:
    out = io.StringIO()
    view = LiveView(Console(width=200, force_terminal=False, file=out), live=False)
    run = {"agent": "a", "run_id": "r", "iteration": 1}
    view.agent_event(RunStart(**run, prompt="p"))
    for delta in ("first line\r", "\nsecond\x1b", "[2K line"):
        view.agent_event(TextDelta(**run, text=delta))
    view.agent_event(TurnEnd(**run, usage=Usage(), stop_reason="end_turn"))  # type: ignore[arg-type]
    assert out.getvalue().splitlines()[1:] == ["a: first line", "second\\x1b[2K line"]


# --- the commands -------------------------------------------------------------------------

# What crosses the model's wire: no lone surrogate, which the request's encoding refuses
# (a crash of the agent's own, outside the terminal's business).
WIRE_CONTROLS = CONTROLS.replace("\ud800", "")
WIRE = f"{MARKUP} {WIRE_CONTROLS}"
AGENTS = f'''
import json
import logging

import satsuma

HOSTILE = json.loads({json.dumps(json.dumps(WIRE))})
NICE = json.loads({json.dumps(json.dumps(NICE))})
logger = logging.getLogger("satsuma.hostile")


@satsuma.tool
async def echo(text: str) -> str:
    """Say the text back, and more.

    Args:
        text: What to say back.
    """
    logger.warning("echo was given %s", text)
    try:
        raise ValueError(text)
    except ValueError:
        logger.error("and raised", exc_info=True)
    return f"{{NICE}} {{HOSTILE}} {{text}}\\nsecond line {{HOSTILE}}"


@satsuma.tool
async def pay(to: str) -> str:
    """Pay someone.

    Args:
        to: Who.
    """
    return f"paid {{to}}"


class AskFirst(satsuma.ToolHook):
    def before_call(self, call, ctx):
        if call.name == "pay":
            return satsuma.Ask(f"paying {{call.input['to']}} {{HOSTILE}}")
        return None


class Shell(satsuma.Agent):
    name = "shell"
    tools = [echo, pay]
    hooks = [AskFirst()]
'''
WIRE_ID = "agent\x1b]52;c;ZXZpbA==\x07\nFAKE\u202e"  # no NUL: it goes through argv


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", **extra}


async def satsuma_command(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: bytes = b""
) -> tuple[int, str, str]:
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", *args],
        cwd=cwd,
        env=env or environment(),
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    # Decoded as the terminal would; a lone surrogate would have failed to print.
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hostile_agents.py").write_text(AGENTS)
    return tmp_path


def asks(tool: str, **arguments: str) -> str:
    """A prompt that makes the fake model call ``tool``: JSON, so ASCII on argv."""
    return f"{tool} {json.dumps(arguments)}"


async def test_run_shows_hostile_model_text_tool_output_names_and_logs_visibly(
    project: Path,
) -> None:
    script = [
        Reply(
            text=f"{WIRE}\n{NICE}",
            tool_calls=[("echo", {"text": WIRE}), (f"no{WIRE_CONTROLS}", {WIRE: WIRE})],
        ),
        f"{NICE}\n{WIRE}",
    ]
    async with MessagesServer(script) as server:
        env = environment(ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=server.base_url)
        status, out, err = await satsuma_command(
            "--log-level", "info", "run", "hostile_agents:Shell", "go", cwd=project, env=env
        )
    assert status == 0, err
    assert_clean(out)
    assert_clean(err)
    assert MARKUP in out and NICE in out
    assert "unknown_tool" in out  # the hostile tool name was shown, escaped
    # The answer keeps its own lines; the text within them is escaped.
    assert f"shell: {NICE}\n{MARKUP} \\x1b]52;c;ZXZpbA==\\x07" in out
    assert "echo was given" in err and "ValueError" in err and MARKUP in err


async def test_run_json_is_lossless_and_safe(project: Path) -> None:
    status, out, err = await satsuma_command(
        "run", "hostile_agents:Shell", asks("echo", text=WIRE), "--model", "fake", "--json",
        cwd=project,
    )  # fmt: skip
    assert status == 0, err
    assert_clean(out)
    events = [json.loads(line) for line in out.splitlines()]
    [end] = [event for event in events if event["type"] == "ToolCallEnd"]
    assert end["outcome"]["content"] == f"{NICE} {WIRE} {WIRE}\nsecond line {WIRE}"


async def test_a_failed_run_shows_the_apis_hostile_message_visibly(project: Path) -> None:
    async with MessagesServer([Failure.bad_request(WIRE)]) as server:
        env = environment(ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=server.base_url)
        status, out, err = await satsuma_command(
            "run", "hostile_agents:Shell", "go", cwd=project, env=env
        )
    assert status == 1
    assert_clean(out + err)
    assert err.startswith("satsuma: run failed: ") and MARKUP in err


async def test_chat_asks_about_a_hostile_call_on_one_visible_line(project: Path) -> None:
    typed = f"{asks('pay', to=WIRE)}\ny\n{asks('echo', text=WIRE)}\n".encode()
    status, out, err = await satsuma_command(
        "chat", "hostile_agents:Shell", "--model", "fake", cwd=project, stdin=typed
    )
    assert status == 0, err
    assert_clean(out + err)  # err: the echo tool's own log records
    [asked] = [line for line in out.splitlines() if line.startswith("approve pay(")]
    # The whole question is one line: input and reason, escaped, then the choices.
    assert asked.startswith('approve pay({"to": "[bold red]red[/] [link=https://evil.example]')
    assert f"? (paying {MARKUP} \\x1b]52;c;ZXZpbA==\\x07" in asked
    assert "\\x1b]52;c;ZXZpbA==\\x07\\x1b[1A\\x1b[2KFAKE LINE\\rover" in asked
    assert "[y/n/e]" in asked
    assert NICE in out


async def test_runs_and_resume_show_a_hostile_agent_id_and_calls_visibly(project: Path) -> None:
    offline = ("--model", "fake", "--store", "s.db", "--agent-id", WIRE_ID)
    status, out, err = await satsuma_command(
        "run", "hostile_agents:Shell", asks("pay", to=WIRE), *offline, cwd=project
    )
    assert status == 1, err
    assert_clean(out + err)
    call_id = re.search(r"  (\S+)  pay\(", err).group(1)  # type: ignore[union-attr]
    run_id = re.search(r"run (run_\w+) is awaiting", err).group(1)  # type: ignore[union-attr]

    # A new run is refused: the message lists the paused run, and names the agent.
    status, out, err = await satsuma_command(
        "run", "hostile_agents:Shell", asks("echo", text=WIRE), *offline, cwd=project
    )
    assert status == 2
    assert_clean(out + err)
    assert "agent agent\\x1b]52;c;ZXZpbA==\\x07\\nFAKE\\u202e has runs awaiting approval" in err

    status, out, err = await satsuma_command(
        "runs", "hostile_agents:Shell", "--store", "s.db", "--agent-id", WIRE_ID, cwd=project
    )
    assert status == 0, err
    assert_clean(out + err)
    # The heading, the run, its pending call, its tokens and cost: no more.
    assert len(out.splitlines()) == 4, out

    # A decision on a call that is not pending names the ids, visibly.
    status, out, err = await satsuma_command(
        "resume", "hostile_agents:Shell", run_id, *offline, "--approve", f"x{WIRE_CONTROLS[:8]}",
        cwd=project,
    )  # fmt: skip
    assert status == 2
    assert_clean(out + err)

    status, out, err = await satsuma_command(
        "resume", "hostile_agents:Shell", run_id, *offline, "--approve", call_id, cwd=project
    )
    assert status == 0, err
    assert_clean(out + err)
    assert MARKUP in out


async def test_command_errors_show_hostile_text_visibly(project: Path) -> None:
    # A module that fails to import: its traceback and message.
    (project / "broken.py").write_text(f"raise RuntimeError({WIRE!r})\n")
    status, out, err = await satsuma_command("run", "broken.py:Agent", "hi", cwd=project)
    assert status == 2
    assert_clean(out + err)
    assert "Traceback" in err and MARKUP in err
    # A store that is not a database, named by a hostile path.
    name = f"s{WIRE_CONTROLS[:20]}.db"
    (project / name).write_text("not a database " * 20)
    status, out, err = await satsuma_command(
        "run", "hi", "--model", "fake", "--store", name, cwd=project
    )
    assert status == 2
    assert_clean(out + err)
    assert "is not a SQLite database" in err
    # An exception no handler expects (here from the user's module): its traceback.
    (project / "odd.py").write_text(f"def __getattr__(name):\n    raise RuntimeError({WIRE!r})\n")
    status, out, err = await satsuma_command("run", "odd.py:Agent", "hi", cwd=project)
    assert status == 1
    assert_clean(out + err)
    assert "Traceback" in err and f"RuntimeError: {MARKUP}" in err
