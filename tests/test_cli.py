"""The ``satsuma`` command, driven end to end as a subprocess, offline.

``run`` and ``chat`` talk to a MessagesServer in the test's own trio loop through the real
SDK (ANTHROPIC_BASE_URL); ``demo`` brings its own unless a key is set.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

import satsuma
from satsuma._arguments import command_parser as _parser
from satsuma._demo import scripted_answer
from satsuma.cli import main
from satsuma.store import SQLiteStore
from satsuma.testing import Failure, MessagesServer, Reply

ROOT = Path(__file__).resolve().parents[1]
AGENTS = '''
import satsuma


@satsuma.tool
async def add(a: int, b: int) -> str:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return str(a + b)


class Calc(satsuma.Agent):
    name = "calc"
    tools = [add]


class Base(satsuma.Agent, abstract=True):
    pass


not_an_agent = 3
'''


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without any Anthropic setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", **extra}


async def satsuma_command(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``python -m satsuma.cli ARGS``; its exit status, stdout and stderr."""
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", *args],
        cwd=cwd,
        env=env if env is not None else environment(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "calc_agents.py").write_text(AGENTS)
    return tmp_path


def on(server: MessagesServer, **extra: str) -> dict[str, str]:
    return environment(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=server.base_url, **extra)


# --- demo ------------------------------------------------------------------------------


def table_row(out: str, name: str) -> str:
    match = re.search(rf"│ {name}\s+│ (.*?)\s+│", out)
    assert match is not None, out
    return match.group(1)


async def test_the_demo_runs_offline_and_shows_what_satsuma_is_for() -> None:
    status, out, err = await satsuma_command("demo")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("satsuma demo: offline — no ANTHROPIC_API_KEY")
    # Parallel calls, each with its own outcome; progress from the long one.
    for expected in (
        'researcher → fetch_weather(city="Lisbon")',
        "✓ fetch_weather",
        "✓ find_flights",
        "researcher … draft_agenda: day 3/3",
        "✗ check_venue  ",
        "crashed  Error: Tool crashed: ConnectionResetError",
        "researcher run completed",
        # The verifier sends the model back; the second draft passes.
        "verifier sends the writer back: the briefing must say what weather to expect",
        "writer: Briefing: three days in Lisbon, workshops in the mornings. Weather: sunny, 19°C.",
        # The injected crash, seen by the caller and by the supervisor, then the restart.
        "the caller got AgentCrashed: Agent writer crashed: RuntimeError: simulated bug",
        "supervisor team: writer crashed: RuntimeError: simulated bug",
        "supervisor team: writer restarted (restart 1)",
        # The restarted agent still has the briefing it wrote before the crash.
        "writer: Title: Lisbon offsite — sunny, 19°C",
    ):
        assert expected in out, expected
    # The hung call is cut at its 1 s deadline; the time shown is the wall clock's, which a
    # busy machine may stretch by a few hundredths.
    assert re.search(r"✗ hotel_rates  1\.\d\ds  timeout  Error: Tool timed out after 1s", out)
    # The calls ran in parallel: all five started before the first ended.
    starts = [i for i, line in enumerate(lines) if "researcher →" in line]
    ends = [i for i, line in enumerate(lines) if line.lstrip().startswith(("✓", "✗"))]
    assert len(starts) == 5
    assert max(starts) < min(ends)
    assert table_row(out, "runs") == "4  (completed 3, failed 1)"
    assert table_row(out, "tool calls") == "5  (crashed 1, ok 3, timeout 1)"
    assert table_row(out, "model calls") == "5"
    assert table_row(out, "agent crashes") == "1 (1 restarted)"
    assert re.fullmatch(r"\d+ in, \d+ out", table_row(out, "tokens"))
    # Offline, the demo plays the Messages API in process: its calls are priced as the
    # API would price the tokens the loopback server reports.
    assert re.fullmatch(r"\$0\.\d{4,6}", table_row(out, "cost"))
    assert "Traceback" not in out + err


async def test_with_a_key_the_demo_uses_the_api_it_is_pointed_at() -> None:
    # The "real API" path, against a loopback server playing the same conversation.
    async with MessagesServer([scripted_answer] * 10) as server:
        url = server.base_url
        status, out, err = await satsuma_command("demo", env=on(server))
    assert status == 0, err
    assert out.splitlines()[0].startswith("satsuma demo: ANTHROPIC_API_KEY is set")
    assert url in out.splitlines()[0]
    assert len(server.requests) == 5
    systems = {str(request["system"]) for request in server.requests}
    assert len(systems) == 2  # both agents
    assert "writer: Title: Lisbon offsite — sunny, 19°C" in out
    # On the API the calls are priced: the summary sums what they cost.
    assert re.fullmatch(r"\$0\.\d{4,6}", table_row(out, "cost"))


async def test_the_demo_with_a_bad_key_says_so_in_one_line() -> None:
    refused = satsuma.ModelError("invalid x-api-key", status=401)
    async with MessagesServer([refused]) as server:
        status, _out, err = await satsuma_command("demo", env=on(server))
    assert status == 1
    assert err.strip().splitlines() == [
        "satsuma demo: the researcher's run failed: 401: invalid x-api-key"
    ]


def test_the_demo_piped_into_a_reader_that_leaves_exits_quietly() -> None:
    # `satsuma demo | head -2`: the pipe breaks under the live view's next line.
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "satsuma.cli", "demo"],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read()
    status = process.wait(timeout=60)
    process.stderr.close()
    assert first.startswith(b"satsuma demo: offline")
    assert status == 1
    assert b"Traceback" not in err


# --- run -------------------------------------------------------------------------------


SUM = [Reply(text="Adding.", tool_calls=[("add", {"a": 2, "b": 3})]), "The sum is 5."]


async def test_run_shows_the_run_and_its_answer(project: Path) -> None:
    async with MessagesServer(SUM) as server:
        status, out, err = await satsuma_command(
            "run", "calc_agents:Calc", "What is 2 + 3?", cwd=project, env=on(server)
        )
    assert status == 0, err
    assert out.splitlines() == [
        "calc ← What is 2 + 3?",
        "calc: Adding.",
        "  calc → add(a=2, b=3)",
        out.splitlines()[3],
        "calc: The sum is 5.",
        out.splitlines()[5],
    ]
    assert re.fullmatch(r"  ✓ add  \d\.\d\ds  ok  5", out.splitlines()[3])
    assert re.fullmatch(
        r"calc run completed after 2 model calls, \d+ in / \d+ out tokens, \$0\.\d{6}",
        out.splitlines()[5],
    )
    assert server.requests[0]["model"] == satsuma.MODEL_ALIASES["sonnet"]
    assert err == ""


async def test_run_json_prints_every_event_as_one_json_line(project: Path) -> None:
    async with MessagesServer(SUM) as server:
        status, out, err = await satsuma_command(
            "run", "calc_agents.py:Calc", "What is 2 + 3?", "--json", cwd=project, env=on(server)
        )
    assert status == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "RunStart"
    assert kinds[-1] == "RunEnd"
    assert kinds.count("TurnEnd") == 2
    assert [k for k in kinds if k.startswith("ToolCall")] == ["ToolCallStart", "ToolCallEnd"]
    end = next(event for event in events if event["type"] == "ToolCallEnd")
    assert end["outcome"]["content"] == "5"
    assert end["outcome"]["is_error"] is False
    assert events[-1]["result"]["status"] == "completed"
    assert events[-1]["result"]["output"] == "The sum is 5."
    assert {event["run_id"] for event in events} == {events[0]["run_id"]}
    assert "".join(e["text"] for e in events if e["type"] == "TextDelta") == "Adding.The sum is 5."


async def test_run_options_override_the_class(project: Path) -> None:
    loop = Reply(tool_calls=[("add", {"a": 1, "b": 1})])
    async with MessagesServer([loop, loop, loop]) as server:
        status, _out, err = await satsuma_command(
            "run",
            "calc_agents:Calc",
            "Loop",
            "--model",
            "claude-test-1",
            "--max-iterations",
            "2",
            cwd=project,
            env=on(server),
        )
    assert status == 1
    assert err.strip() == "satsuma: run max_iterations: max_iterations (2) reached"
    assert [request["model"] for request in server.requests] == ["claude-test-1"] * 2


async def test_run_with_a_store_keeps_the_conversation(project: Path) -> None:
    async with MessagesServer(["Noted: 42.", "It was 42."]) as server:
        args = ("--store", str(project / "state.db"))
        first = await satsuma_command(
            "run", "calc_agents:Calc", "Remember 42", *args, cwd=project, env=on(server)
        )
        second = await satsuma_command(
            "run", "calc_agents:Calc", "What was it?", *args, cwd=project, env=on(server)
        )
    assert first[0] == 0, first[2]
    assert second[0] == 0, second[2]
    assert "calc: It was 42." in second[1]
    texts = [str(message["content"]) for message in server.requests[1]["messages"]]
    assert len(texts) == 3
    assert "Remember 42" in texts[0]
    assert "Noted: 42." in texts[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nosuch:Calc",), "satsuma: error: no module named 'nosuch'"),
        (("calc_agents:Nope",), "satsuma: error: calc_agents has no attribute 'Nope'"),
        (
            ("calc_agents:not_an_agent",),
            "satsuma: error: calc_agents:not_an_agent is not an Agent subclass (it is 3)",
        ),
        (
            ("calc_agents:Base",),
            "satsuma: error: calc_agents:Base is an abstract Agent: name a concrete subclass",
        ),
        (
            ("calc_agents",),
            "satsuma: error: expected MODULE:AgentClass or path/to/file.py:AgentClass, "
            "got: 'calc_agents'",
        ),
        (("missing.py:Calc",), "satsuma: error: no such file: missing.py"),
        (
            ("broken:Agent",),
            "satsuma: error: importing broken failed: ZeroDivisionError: division by zero",
        ),
        (
            ("calc_agents:Calc", "--model", "no such model"),
            "satsuma: error: Agent calc: unknown model 'no such model': use an alias "
            "(sonnet, opus, haiku) or a model id (claude-...)",
        ),
    ],
    ids=["module", "attribute", "not-agent", "abstract", "no-colon", "file", "raises", "model"],
)
async def test_mistakes_are_one_line_and_exit_2(
    project: Path, args: tuple[str, ...], message: str
) -> None:
    (project / "broken.py").write_text("1 / 0\n")
    status, out, err = await satsuma_command(
        "run", args[0], "hi", *args[1:], cwd=project, env=environment(ANTHROPIC_API_KEY="k")
    )
    # The one line last (a module that raised shows its traceback before it).
    assert (status, out, err.strip().splitlines()[-1]) == (2, "", message)


# --- loading agents from files, as python would -------------------------------------------


async def test_a_file_target_imports_the_modules_beside_it(tmp_path: Path) -> None:
    package = tmp_path / "service"
    package.mkdir()
    (package / "helpers.py").write_text("GREETING = 'hello from a sibling'\n")
    (package / "agent.py").write_text(
        "import satsuma\nfrom helpers import GREETING\n\n\n"
        "class Greeter(satsuma.Agent):\n    name = 'greeter'\n    system = GREETING\n"
    )
    async with MessagesServer(["hi"]) as server:
        # From another directory, as `python service/agent.py` would find helpers.py.
        status, out, err = await satsuma_command(
            "run", "service/agent.py:Greeter", "hi", "--json", cwd=tmp_path, env=on(server)
        )
    assert (status, err) == (0, ""), err
    assert server.requests[0]["system"][0]["text"] == "hello from a sibling"
    assert out


@pytest.mark.parametrize(
    ("source", "line", "last"),
    [
        ("import satsuma\n\n\ndef f():\n    return {'a': 1\n", 5, "SyntaxError"),
        ("import satsuma\nimport not_installed_anywhere\n", 2, "ModuleNotFoundError"),
        ("import satsuma\n\nVALUE = 1\nVALUE.missing\n", 4, "AttributeError"),
    ],
    ids=["syntax", "missing import", "raises"],
)
@pytest.mark.parametrize("form", ["file", "module"])
async def test_a_broken_module_shows_its_traceback(
    tmp_path: Path, source: str, line: int, last: str, form: str
) -> None:
    (tmp_path / "broken_agents.py").write_text(source)
    target = "broken_agents.py:A" if form == "file" else "broken_agents:A"
    status, out, err = await satsuma_command(
        "run", target, "hi", cwd=tmp_path, env=environment(ANTHROPIC_API_KEY="k")
    )
    assert (status, out) == (2, "")
    assert re.search(rf'File ".*broken_agents\.py", line {line}', err), err
    assert "importlib" not in err and "_commands.py" not in err, err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"satsuma: error: importing {target.split(':')[0]} failed: {last}")
    ), err


async def test_no_key_is_one_line(project: Path) -> None:
    status, out, err = await satsuma_command("run", "calc_agents:Calc", "hi", cwd=project)
    assert (status, out) == (2, "")
    assert err.strip() == (
        "satsuma: error: ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=sk-ant-..., "
        "or try offline with --model fake (`satsuma demo` runs offline too)"
    )


async def test_a_bad_key_fails_the_run_with_the_apis_message(project: Path) -> None:
    refused = satsuma.ModelError("invalid x-api-key", status=401)
    async with MessagesServer([refused]) as server:
        status, _out, err = await satsuma_command(
            "run", "calc_agents:Calc", "hi", cwd=project, env=on(server)
        )
    assert status == 1
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith("satsuma: run failed: ")
    assert "401" in err
    assert "invalid x-api-key" in err
    assert "Traceback" not in err


async def test_an_unreachable_api_fails_after_its_retries(project: Path) -> None:
    with trio.socket.socket() as sock:  # a port that was free a moment ago
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = environment(ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}")
    status, out, err = await satsuma_command("run", "calc_agents:Calc", "hi", cwd=project, env=env)
    assert status == 1
    assert err.strip() == (
        f"satsuma: run failed: Connection error. (all attempts to connect to 127.0.0.1:{port} failed)"
    )
    assert out.count("model call retried") == 3
    assert "Traceback" not in out + err


async def test_version_prints_the_installed_version() -> None:
    for option in ("--version", "-V"):
        status, out, err = await satsuma_command(option)
        assert (status, err) == (0, "")
        assert out == f"satsuma {importlib.metadata.version('satsuma')}\n"
    assert out.split()[1][0].isdigit()
    # The installed console script too, as a user types it.
    script = Path(sys.executable).with_name("satsuma")
    done = await trio.run_process([str(script), "--version"], capture_stdout=True)
    assert done.stdout.decode() == out


async def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fly"])
    assert info.value.code == 2
    assert "invalid choice: 'fly'" in capsys.readouterr().err


async def test_a_bad_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "a:B", "hi", "--max-iterations", "0"])
    assert info.value.code == 2
    assert "must be 1 or more, got: 0" in capsys.readouterr().err


def test_the_tools_quickstart_example_runs() -> None:
    import subprocess

    result = subprocess.run(
        [sys.executable, "examples/tools_quickstart.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "'content': 'example.org: 3 replies'" in result.stdout
    assert "count must be >= 1, got: 0" in result.stdout
    assert "Error: Tool timed out after 0.2s" in result.stdout


# --- chat, through a pseudo-terminal ---------------------------------------------------

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\r")


class Terminal:
    """The user's side of a pseudo-terminal whose other side runs ``satsuma chat``."""

    def __init__(self, master: int) -> None:
        self.stream = trio.lowlevel.FdStream(master)
        self.seen = ""

    async def type(self, keys: str) -> None:
        await self.stream.send_all(keys.encode())

    async def wait_for(self, text: str, *, after: int = 0) -> int:
        """Read until ``text`` shows on screen past position ``after``; where it ends."""
        with trio.move_on_after(30):
            while (found := self.seen.find(text, after)) < 0:
                try:
                    data = await self.stream.receive_some(65536)
                except OSError:  # EIO: the child closed its side
                    data = b""
                if not data:
                    raise AssertionError(f"{text!r} never showed; the screen:\n{self.seen}")
                self.seen += _ESCAPES.sub("", data.decode(errors="replace"))
            return found + len(text)
        raise AssertionError(f"{text!r} did not show in 30 s; the screen:\n{self.seen}")


def _take_the_terminal() -> None:  # pragma: no cover - runs in the child, before exec
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@asynccontextmanager
async def open_chat(project: Path, server: MessagesServer) -> AsyncIterator[Chat]:
    """``satsuma chat`` on a pseudo-terminal; killed at the end of the block if it is
    still running."""
    master, slave = os.openpty()
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "satsuma.cli", "chat", "calc_agents:Calc"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=project,
        env=on(server, TERM="xterm-256color"),
        start_new_session=True,  # a session of its own, whose controlling terminal is ours
        preexec_fn=_take_the_terminal,
    )
    os.close(slave)
    chat = Chat(process, Terminal(master))
    try:
        yield chat
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await chat.terminal.stream.aclose()


@attrs.define
class Chat:
    process: trio.Process
    terminal: Terminal

    async def wait(self) -> int:
        with trio.fail_after(30):
            return await self.process.wait()


async def test_chat_answers_cancels_a_run_with_ctrl_c_and_quits_on_a_second(
    project: Path,
) -> None:
    script = ["Hello! I add numbers.", Failure.slow("too late", delay=60), "Still here."]
    async with MessagesServer(script) as server, open_chat(project, server) as chat:
        terminal = chat.terminal
        at = await terminal.wait_for("you>")
        await terminal.type("hi\n")
        at = await terminal.wait_for("calc: Hello! I add numbers.", after=at)
        at = await terminal.wait_for("you>", after=at)
        await terminal.type("take your time\n")
        at = await terminal.wait_for("take your time", after=at)
        with trio.fail_after(30):
            while len(server.requests) < 2:  # noqa: ASYNC110 - the server has no event for it
                await trio.sleep(0.01)
        await terminal.type("\x03")  # Ctrl-C, turned into SIGINT by the terminal
        at = await terminal.wait_for("^C: cancelling the run", after=at)
        at = await terminal.wait_for("calc run cancelled", after=at)
        at = await terminal.wait_for("you>", after=at)
        # The session goes on, with its conversation.
        await terminal.type("still there?\n")
        at = await terminal.wait_for("calc: Still here.", after=at)
        at = await terminal.wait_for("you>", after=at)
        await terminal.type("\x03")  # a Ctrl-C with no run to cancel quits
        await terminal.wait_for("^C: bye", after=at)
        status = await chat.wait()
    assert status == 130
    assert "Traceback" not in terminal.seen
    assert len(server.requests) == 3
    # The session kept its conversation; the cancelled run, which got no answer, left none
    # of itself behind.
    assert [
        [block["text"] for block in message["content"]]
        for message in server.requests[2]["messages"]
    ] == [["hi"], ["Hello! I add numbers."], ["still there?"]]


async def test_chat_ends_at_end_of_input(project: Path) -> None:
    async with MessagesServer(["Hello."]) as server, open_chat(project, server) as chat:
        terminal = chat.terminal
        at = await terminal.wait_for("you>")
        await terminal.type("hi\n")
        at = await terminal.wait_for("calc: Hello.", after=at)
        at = await terminal.wait_for("you>", after=at)
        await terminal.type("\x04")  # Ctrl-D
        status = await chat.wait()
    assert status == 0
    assert "Traceback" not in terminal.seen


def test_every_command_on_the_cli_page_parses() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", page, flags=re.DOTALL)
    commands = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(commands) >= 8
    for line in commands:
        words = shlex.split(line)
        assert words[0] == "satsuma", line
        if words[1:3] == ["serve", "token"]:  # its own parser (cli.main dispatches to it)
            from satsuma._arguments import token_parser

            token_parser().parse_args(words[3:])
            continue
        _parser().parse_args(words[1:])  # exits (failing the test) on a bad option


# --- offline, built-in tools, capabilities ----------------------------------------------------


def _events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def _tool_ends(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e["outcome"] for e in events if e["type"] == "ToolCallEnd"]  # type: ignore[misc]


async def test_run_offline_with_the_fake_model_needs_no_key_and_no_target(tmp_path: Path) -> None:
    status, out, err = await satsuma_command(
        "run", "--model", "fake", "hello there", "--json", cwd=tmp_path
    )
    assert (status, err) == (0, ""), err
    result = _events(out)[-1]["result"]
    assert result == {
        **result,
        "status": "completed",
        "output": "(fake model) You said: hello there",
    }


async def test_built_in_tools_from_the_command_line_with_a_capability(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("remember the milk\n")
    status, out, err = await satsuma_command(
        "run",
        "--model",
        "fake",
        "--tools",
        "list_dir,read_file",
        "--allow",
        "read",
        "--workdir",
        str(workdir),
        'use list_dir, then read_file {"path": "notes.txt"}',
        "--json",
        cwd=tmp_path,
    )
    assert (status, err) == (0, ""), err
    # The two calls run side by side: their ends come in either order.
    ends = {e["tool_name"]: e["outcome"] for e in _events(out) if e["type"] == "ToolCallEnd"}
    listing, reading = ends["list_dir"], ends["read_file"]
    assert listing["is_error"] is False and "notes.txt" in str(listing["content"])
    assert reading["is_error"] is False and "remember the milk" in str(reading["content"])


async def test_without_the_capability_the_tool_is_denied_and_the_user_told(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s3cret")
    status, out, err = await satsuma_command(
        "run",
        "--model",
        "fake",
        "--tools",
        "read_file",
        'read_file {"path": "secret.txt"}',
        "--json",
        cwd=tmp_path,
    )
    assert status == 0, err
    assert (
        err.strip()
        == "satsuma: note: read_file needs --allow read; without it its calls are denied"
    )
    (denied,) = _tool_ends(_events(out))
    assert denied["is_error"] is True and "s3cret" not in str(denied["content"])
    assert "read" in str(denied["content"])


async def test_a_workdir_confines_the_tools(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "outside.txt").write_text("not yours")
    status, out, err = await satsuma_command(
        "run",
        "--model",
        "fake",
        "--tools",
        "read_file",
        "--allow",
        "read",
        "--workdir",
        str(workdir),
        'read_file {"path": "../outside.txt"}',
        "--json",
        cwd=tmp_path,
    )
    assert status == 0, err
    (refused,) = _tool_ends(_events(out))
    assert refused["is_error"] is True and "not yours" not in str(refused["content"])


async def test_the_fake_model_drives_an_agent_of_yours(project: Path) -> None:
    status, out, err = await satsuma_command(
        "run",
        "--model",
        "fake",
        "calc_agents.py:Calc",
        'add {"a": 2, "b": 3}',
        "--json",
        cwd=project,
    )
    assert (status, err) == (0, ""), err
    assert _events(out)[-1]["result"]["output"] == "(fake model) The tools answered:\n- add: 5"  # type: ignore[index]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tools", "nosuch", "hi"), "no built-in tool named 'nosuch' (there are: read_file, "),
        (("--workdir", "/no/such/dir", "hi"), "--workdir /no/such/dir: no such directory"),
        (
            ("calc_agents:Calc", "hi", "there"),
            "expected [TARGET] PROMPT: quote the prompt, got 3 words",
        ),
        (("--tools", "add", "calc_agents:Calc", "hi"), "no built-in tool named 'add'"),
    ],
    ids=["unknown tool", "no workdir", "unquoted prompt", "not built-in"],
)
async def test_command_line_tool_mistakes_are_one_line(
    project: Path, args: tuple[str, ...], message: str
) -> None:
    status, out, err = await satsuma_command("run", "--model", "fake", *args, cwd=project)
    assert (status, out) == (2, ""), err
    assert err.strip().startswith(f"satsuma: error: {message}"), err


async def test_without_a_key_the_error_says_how_to_try_offline(project: Path) -> None:
    status, _out, err = await satsuma_command("run", "hi", cwd=project)
    assert status == 2
    assert "--model fake" in err and "export ANTHROPIC_API_KEY=" in err


async def test_the_fake_server_answers_the_sdk_and_stops_on_sigterm(project: Path) -> None:
    import signal

    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "satsuma.cli", "fake-server", "--port", "0"],
        cwd=project,
        env=environment(),
        stdout=__import__("subprocess").PIPE,
    )
    try:
        assert process.stdout is not None
        seen = b""
        with trio.fail_after(30):
            while b"ANTHROPIC_API_KEY=fake-key" not in seen:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, seen
                seen += chunk
        url = re.search(rb"ANTHROPIC_BASE_URL=(\S+)", seen)
        assert url is not None, seen
        env = environment(ANTHROPIC_API_KEY="fake-key", ANTHROPIC_BASE_URL=url.group(1).decode())
        for _ in range(2):  # it answers for as long as it runs
            status, out, err = await satsuma_command(
                "run", "calc_agents:Calc", 'add {"a": 20, "b": 22}', "--json", cwd=project, env=env
            )
            assert (status, err) == (0, ""), err
            assert _events(out)[-1]["result"]["output"].endswith("- add: 42")  # type: ignore[index]
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# --- interrupted runs: listed, resumed, never closed behind the user's back --------------------

KILLER = '''
import os
import signal
import sqlite3

import trio

import satsuma


@satsuma.tool
async def note(text: str) -> str:
    """Write a note.

    Args:
        text: What to write.
    """
    return f"noted: {text}"


@satsuma.tool
async def deploy(version: str) -> str:
    """Deploy a version.

    Args:
        version: Which.
    """
    # A note of the same turn finishes first (its outcome in the store's journal, in
    # ops.db beside this file), then the process dies mid-call.
    for _ in range(1000):
        with sqlite3.connect("file:ops.db?mode=ro", uri=True) as db:
            rows = db.execute(
                "SELECT count(*) FROM tool_calls WHERE tool_name = 'note' AND finished = 0"
            ).fetchone()
        if rows[0] == 0:
            break
        await trio.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
    return "deployed"


class Ops(satsuma.Agent):
    name = "ops"
    tools = [note, deploy]
'''


async def test_an_interrupted_run_is_listed_refused_past_and_resumed(tmp_path: Path) -> None:
    (tmp_path / "ops_agents.py").write_text(KILLER)
    store = str(tmp_path / "ops.db")
    offline = ("--model", "fake", "--store", store)
    status, _out, _err = await satsuma_command(
        "run",
        "ops_agents.py:Ops",
        'note {"text": "v2"} then deploy {"version": "2.0"}',
        *offline,
        "--json",
        cwd=tmp_path,
    )
    assert status == -9  # killed in the middle of deploy

    # `runs` lists it, with the call in doubt and the one that finished.
    status, out, err = await satsuma_command(
        "runs", "ops_agents.py:Ops", "--store", store, cwd=tmp_path
    )
    assert (status, err) == (0, ""), err
    lines = out.splitlines()
    run_id = re.search(r"(run_\w+)", lines[1]).group(1)  # type: ignore[union-attr]
    assert re.match(rf"  {run_id}  running\s+\S+ \S+  'note ", lines[1]), out
    assert re.match(r'      finished  note\(\{"text": "v2"\}\)  ', lines[2]), out
    assert re.match(r'      in doubt  deploy\(\{"version": "2.0"\}\)  ', lines[3]), out

    # A new run is refused: it would answer the open call for good.
    status, out, err = await satsuma_command(
        "run", "ops_agents.py:Ops", "hello", *offline, cwd=tmp_path
    )
    assert (status, out) == (2, "")
    assert "agent ops has runs that were interrupted" in err
    assert run_id in err and "in doubt  deploy" in err
    assert f"satsuma resume TARGET RUN_ID --store {store}" in err

    # Resumed: the finished call keeps its outcome, the one in doubt (not idempotent)
    # is answered Interrupted, and the model goes on.
    status, out, err = await satsuma_command(
        "resume", "ops_agents.py:Ops", run_id, *offline, cwd=tmp_path
    )
    assert status == 0, err
    assert "- deploy (an error): Error: Interrupted" in out
    status, out, err = await satsuma_command(
        "runs", "ops_agents.py:Ops", "--store", store, cwd=tmp_path
    )
    assert re.search(rf"  {run_id}  completed ", out), out

    # Nothing left to resume: a second resume says why; a new run goes ahead.
    status, _out, err = await satsuma_command(
        "resume", "ops_agents.py:Ops", run_id, *offline, cwd=tmp_path
    )
    assert (status, err.strip()) == (
        2,
        f"satsuma: error: run {run_id} ended completed; only an interrupted run can be resumed",
    )
    status, _out, err = await satsuma_command(
        "run", "ops_agents.py:Ops", "hello", *offline, cwd=tmp_path
    )
    assert status == 0, err


async def test_past_interrupted_goes_ahead_and_the_run_can_no_longer_be_resumed(
    tmp_path: Path,
) -> None:
    (tmp_path / "ops_agents.py").write_text(KILLER)
    store = str(tmp_path / "ops.db")
    offline = ("--model", "fake", "--store", store)
    status, _out, _err = await satsuma_command(
        "run", "ops_agents.py:Ops", 'deploy {"version": "3"}', *offline, cwd=tmp_path
    )
    assert status == -9
    _status, out, _err = await satsuma_command(
        "runs", "ops_agents.py:Ops", "--store", store, cwd=tmp_path
    )
    run_id = re.search(r"(run_\w+)", out.splitlines()[1]).group(1)  # type: ignore[union-attr]
    status, _out, err = await satsuma_command(
        "run", "ops_agents.py:Ops", "hello", *offline, "--past-interrupted", cwd=tmp_path
    )
    assert status == 0, err
    status, _out, err = await satsuma_command(
        "resume", "ops_agents.py:Ops", run_id, *offline, cwd=tmp_path
    )
    assert status == 2
    # Gone past, it was closed as cancelled: nothing of it can be run again.
    assert err.strip() == (
        f"satsuma: error: run {run_id} ended cancelled; only an interrupted run can be resumed"
    )


async def test_runs_of_a_missing_store_or_an_empty_one(tmp_path: Path) -> None:
    status, _out, err = await satsuma_command("runs", "--store", "nope.db", cwd=tmp_path)
    assert (status, err.strip()) == (2, "satsuma: error: no such store: nope.db")
    status, out, err = await satsuma_command(
        "run", "--model", "fake", "hi", "--store", "s.db", cwd=tmp_path
    )
    assert status == 0, err
    status, out, err = await satsuma_command(
        "runs", "--store", "s.db", "--agent-id", "x", cwd=tmp_path
    )
    assert (status, out.strip()) == (0, "agent x has no runs in s.db")


# --- human approval ---------------------------------------------------------------------------

BANK = '''
from pathlib import Path

import satsuma


@satsuma.tool(requires_approval=True)
async def transfer(to: str, amount: int) -> str:
    """Move money.

    Args:
        to: Who gets it.
        amount: How much.
    """
    with Path("transfers.log").open("a") as log:
        log.write(f"{amount} to {to}\\n")
    return f"sent {amount} to {to}"


class Bank(satsuma.Agent):
    name = "bank"
    tools = [transfer]
'''


async def paused_run(tmp_path: Path) -> tuple[str, str]:
    """A run of bank.py:Bank paused awaiting approval of one transfer: its id and the
    call's."""
    (tmp_path / "bank.py").write_text(BANK)
    status, _out, err = await satsuma_command(
        "run",
        "bank.py:Bank",
        'transfer {"to": "bob", "amount": 5}',
        "--model",
        "fake",
        "--store",
        "s.db",
        cwd=tmp_path,
    )
    assert status == 1, err
    run_id = re.search(r"run (run_\w+) is awaiting approval of:", err).group(1)  # type: ignore[union-attr]
    call_id = re.search(r"  (\S+)  transfer\(", err).group(1)  # type: ignore[union-attr]
    assert f"satsuma resume bank.py:Bank {run_id} --store s.db --approve CALL_ID" in err
    assert not (tmp_path / "transfers.log").exists()
    return run_id, call_id


async def test_a_paused_run_is_listed_refused_past_and_approved(tmp_path: Path) -> None:
    run_id, call_id = await paused_run(tmp_path)
    offline = ("--model", "fake", "--store", "s.db")

    status, out, err = await satsuma_command(
        "runs", "bank.py:Bank", "--store", "s.db", cwd=tmp_path
    )
    assert (status, err) == (0, ""), err
    lines = out.splitlines()
    assert re.match(rf"  {run_id}  awaiting_approval \S+ \S+  'transfer ", lines[1]), out
    assert lines[2] == (
        f'      pending   transfer({{"to": "bob", "amount": 5}})  {call_id}  '
        "(transfer requires approval)"
    )

    # A new run says so rather than going past it.
    status, out, err = await satsuma_command("run", "bank.py:Bank", "hello", *offline, cwd=tmp_path)
    assert (status, out) == (2, "")
    assert "agent bank has runs awaiting approval" in err and call_id in err
    assert "--past-paused" in err

    # Every pending call needs a decision, and only those.
    for decided, message in [
        ((), f"call {call_id} of run {run_id} needs a decision: --approve {call_id}"),
        (("--approve", "nope"), f"run {run_id} has no pending call nope (it waits on: {call_id})"),
        (("--approve", call_id, "--deny", call_id), f"call {call_id} is decided twice"),
    ]:
        status, out, err = await satsuma_command(
            "resume", "bank.py:Bank", run_id, *offline, *decided, cwd=tmp_path
        )
        assert (status, out) == (2, ""), err
        assert err.strip().startswith(f"satsuma: error: {message}"), err

    # Decided by the OS user, unless --by says who.
    status, out, err = await satsuma_command(
        "resume", "bank.py:Bank", run_id, *offline, "--approve", call_id, cwd=tmp_path,
        env=environment(LOGNAME="dana", USER="dana"),
    )  # fmt: skip
    assert status == 0, err
    assert "- transfer: sent 5 to bob" in out
    assert "approved by dana" in out
    assert (tmp_path / "transfers.log").read_text() == "5 to bob\n"
    async with SQLiteStore(tmp_path / "s.db") as store:
        (asked,) = await store.approvals(run_id)
    assert asked.decision is not None
    assert (asked.decision.verdict, asked.decision.decided_by) == ("approved", "dana")

    # Decided once: a second decision is refused and the transfer does not run again.
    status, out, err = await satsuma_command(
        "resume", "bank.py:Bank", run_id, *offline, "--approve", call_id, cwd=tmp_path
    )
    assert status == 2
    assert "is completed, not awaiting approval" in err
    assert (tmp_path / "transfers.log").read_text() == "5 to bob\n"
    status, out, err = await satsuma_command("run", "bank.py:Bank", "hello", *offline, cwd=tmp_path)
    assert status == 0, err


async def test_a_denied_call_tells_the_model_why(tmp_path: Path) -> None:
    run_id, call_id = await paused_run(tmp_path)
    status, out, err = await satsuma_command(
        "resume", "bank.py:Bank", run_id, "--model", "fake", "--store", "s.db",
        "--deny", f"{call_id}:not today", "--by", "carol", cwd=tmp_path,
        env=environment(LOGNAME="dana", USER="dana"),
    )  # fmt: skip
    assert status == 0, err
    assert "- transfer (an error): Error: Denied: not today" in out
    assert "denied by carol" in out
    assert not (tmp_path / "transfers.log").exists()
    async with SQLiteStore(tmp_path / "s.db") as store:
        (asked,) = await store.approvals(run_id)
    assert asked.decision is not None
    assert (asked.decision.verdict, asked.decision.reason, asked.decision.decided_by) == (
        "denied",
        "not today",
        "carol",
    )


async def test_chat_asks_the_person_about_each_call(tmp_path: Path) -> None:
    (tmp_path / "bank.py").write_text(BANK)
    typed = "\n".join(
        [
            'transfer {"to": "bob", "amount": 5}',
            "y",
            'transfer {"to": "ann", "amount": 7}',
            "n: not today",
            'transfer {"to": "carl", "amount": 9}',
            "maybe",
            "e",
            "[1]",
            '{"to": "carl", "amount": 1}',
        ]
    )
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", "chat", "bank.py:Bank", "--model", "fake"],
        stdin=typed.encode() + b"\n",
        cwd=tmp_path,
        env=environment(LOGNAME="dana", USER="dana"),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out, err = result.stdout.decode(), result.stderr.decode()
    assert (result.returncode, err) == (0, ""), err
    asked = 'approve transfer({"to": "bob", "amount": 5})? (transfer requires approval) [y/n/e]'
    assert asked in out
    assert "- transfer: sent 5 to bob" in out
    assert "- transfer (an error): Error: Denied: not today" in out
    assert "answer y, n (or n: reason) or e: " in out
    assert "not a JSON object; again: " in out
    assert "- transfer: sent 1 to carl" in out
    assert (tmp_path / "transfers.log").read_text() == "5 to bob\n1 to carl\n"
    # Each answer is the OS user's.
    assert out.count("approved by dana") == 1
    assert "approved with an edit by dana" in out
    assert "denied by dana" in out


async def test_chat_by_names_who_decides(tmp_path: Path) -> None:
    (tmp_path / "bank.py").write_text(BANK)
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", "chat", "bank.py:Bank", "--model", "fake",
         "--by", "erin"],
        stdin=b'transfer {"to": "bob", "amount": 5}\ny\n',
        cwd=tmp_path,
        env=environment(LOGNAME="dana", USER="dana"),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )  # fmt: skip
    out, err = result.stdout.decode(), result.stderr.decode()
    assert (result.returncode, err) == (0, ""), err
    assert "approved by erin" in out and "dana" not in out


async def test_a_resume_from_another_process_waits_for_the_agent_s_lease(
    tmp_path: Path,
) -> None:
    """While a process serves the agent, `satsuma resume` in another process against the
    same SQLite file cannot decide its paused run: deciding takes the agent's lease,
    which the serving process holds, so the CLI says so and nothing changes (no call
    runs, the run still waits). Once that process lets the agent go, the same command
    decides it."""
    run_id, call_id = await paused_run(tmp_path)
    offline = ("--model", "fake", "--store", "s.db")

    class Bank(satsuma.Agent):
        name = "bank"

    async with (
        SQLiteStore(tmp_path / "s.db") as store,
        satsuma.open_agent(
            Bank, model=satsuma.testing.ScriptedModel([]), store=store, agent_id="bank"
        ),
    ):
        status, out, err = await satsuma_command(
            "resume", "bank.py:Bank", run_id, *offline, "--approve", call_id, cwd=tmp_path
        )
        assert status != 0 and out == "", err
        assert "agent 'bank' is already open in process" in err, err
        assert not (tmp_path / "transfers.log").exists()
        assert [r.run_id for r in await store.runs_awaiting_approval("bank")] == [run_id]
        assert (await store.approvals(run_id))[0].decision is None
    status, out, err = await satsuma_command(
        "resume", "bank.py:Bank", run_id, *offline, "--approve", call_id, cwd=tmp_path
    )
    assert status == 0, err
    assert (tmp_path / "transfers.log").read_text() == "5 to bob\n"
