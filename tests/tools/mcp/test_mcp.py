"""MCP servers over stdio: real servers from the registry (time, git) and the project's
own fault server, run with ``async with``, under a Supervisor, and by an agent.

These run real subprocesses, so they use the real clock with short timeouts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma.testing import EventRecorder, Reply, ScriptedModel, tool_call
from satsuma.tools.mcp import MCPServer, MCPServerError

FAULT_SERVER = Path(__file__).with_name("fault_server.py")
SERVER_MARKERS = ("fault_server.py", "mcp_server_")


# --- helpers --------------------------------------------------------------------------


def our_children(markers: tuple[str, ...] = SERVER_MARKERS) -> list[tuple[int, str]]:
    """Processes whose parent is this one and whose command line holds a marker."""
    me = os.getpid()
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        # The command name (in parentheses) may hold spaces: the fields follow its end.
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == me and any(marker in cmdline for marker in markers):
            found.append((int(entry.name), cmdline))
    return found


@pytest.fixture(autouse=True)
def _no_server_left_behind() -> Iterator[None]:
    assert our_children() == []
    yield
    assert our_children() == []


def time_server(**options: Any) -> MCPServer:
    return MCPServer(
        "time", sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], **options
    )


def fault_server(log: Path, **options: Any) -> MCPServer:
    return MCPServer(
        "fault", sys.executable, [str(FAULT_SERVER)], env={"MCP_FAULT_LOG": str(log)}, **options
    )


def read(log: Path) -> str:
    return log.read_text() if log.exists() else ""


async def wait_for_line(log: Path, text: str) -> None:
    with trio.fail_after(5):
        while text not in read(log):  # noqa: ASYNC110 (a file, not a trio event)
            await trio.sleep(0.05)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "fault.log"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "tracked.txt").write_text("hello\n")
    subprocess.run([*git, "add", "tracked.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the very first commit"], check=True)
    (path / "stray.txt").write_text("not added\n")
    return path


# --- real servers ---------------------------------------------------------------------


async def test_time_server_lists_and_calls_and_checks_arguments_first() -> None:
    async with time_server() as srv:
        assert srv.running
        assert srv.state.value == "running"
        assert srv.generation >= 1
        names = {tool.name for tool in srv.tools()}
        assert {"get_current_time", "convert_time"} <= names
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        paris, missing, wrong_type = await runner.execute(
            [
                tool_call("get_current_time", {"timezone": "Europe/Paris"}),
                tool_call("get_current_time", {}),
                tool_call("get_current_time", {"timezone": 42}),
            ]
        )
        # The tool objects themselves work in a runner too.
        (again,) = await satsuma.ToolRunner(srv.tools(), timeout=5.0).execute(
            [tool_call("get_current_time", {"timezone": "UTC"})]
        )
    assert not paris.is_error, paris
    assert paris.error_kind is None
    assert json.loads(paris.text)["timezone"] == "Europe/Paris"
    assert paris.details is not None
    assert paris.details["server"] == "time"
    assert paris.details["tool"] == "get_current_time"
    assert missing.is_error
    assert missing.error_kind == "invalid_args"
    assert "timezone" in missing.text
    assert wrong_type.error_kind == "invalid_args"
    assert json.loads(again.text)["timezone"] == "UTC"
    assert srv.state.value == "stopped"
    assert not srv.running


async def test_git_server_with_a_prefix_on_a_temporary_repository(repo: Path) -> None:
    server = MCPServer(
        "git", sys.executable, ["-m", "mcp_server_git", "--repository", str(repo)], prefix="git"
    )
    async with server as srv:
        names = {tool.name for tool in srv.tools()}
        assert {"git__git_status", "git__git_log", "git__git_diff_unstaged"} <= names
        assert all(name.startswith("git__") for name in names)
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        status, history, unprefixed = await runner.execute(
            [
                tool_call("git__git_status", {"repo_path": str(repo)}),
                tool_call("git__git_log", {"repo_path": str(repo), "max_count": 5}),
                tool_call("git_status", {"repo_path": str(repo)}),
            ]
        )
    assert not status.is_error, status
    assert "stray.txt" in status.text
    assert "Untracked" in status.text
    assert status.details is not None
    assert status.details["tool"] == "git_status"  # the server's own name, unprefixed
    assert not history.is_error, history
    assert "the very first commit" in history.text
    assert unprefixed.error_kind == "unknown_tool"


# --- the fault server: arguments, deadlines, cancellation, progress, results -----------


async def test_invalid_arguments_never_reach_the_server(log: Path) -> None:
    async with fault_server(log) as srv:
        runner = satsuma.ToolRunner([srv], timeout=2.0)
        wrong, missing = await runner.execute(
            [tool_call("hang", {"tag": 123}), tool_call("structured", {})]
        )
    assert wrong.error_kind == "invalid_args"
    assert wrong.is_error
    assert missing.error_kind == "invalid_args"
    assert "hang-start" not in read(log)


async def test_the_runner_deadline_cancels_the_call_on_the_server(log: Path) -> None:
    async with fault_server(log) as srv:
        runner = satsuma.ToolRunner([srv], timeout=0.5)
        hung, quick = await runner.execute(
            [tool_call("hang", {"tag": "deadline"}), tool_call("structured", {"n": 2})]
        )
        await wait_for_line(log, "hang-cancelled deadline")
        # The connection is still good after a cancelled call.
        (after,) = await runner.execute([tool_call("structured", {"n": 3})])
    assert hung.error_kind == "timeout"
    assert hung.is_error
    assert quick.error_kind is None
    assert after.error_kind is None
    assert "hang-start deadline" in read(log)
    assert "hang-exit deadline" in read(log)


async def test_an_outer_cancellation_cancels_the_call_on_the_server(log: Path) -> None:
    async with fault_server(log) as srv:
        runner = satsuma.ToolRunner([srv], timeout=None)
        with trio.move_on_after(0.5) as scope:
            await runner.execute([tool_call("hang", {"tag": "outer"})])
        assert scope.cancelled_caught
        await wait_for_line(log, "hang-cancelled outer")
        assert srv.running


async def test_progress_notifications_become_progress_events(log: Path) -> None:
    events = EventRecorder()
    async with fault_server(log) as srv:
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        (outcome,) = await runner.execute([tool_call("progress", {"steps": 3})], events=events)
    assert outcome.content == "done 3"
    progress = events.of_type(satsuma.ToolProgress)
    assert [event.text for event in progress] == ["step 1/3", "step 2/3", "step 3/3"]
    assert {event.tool_use_id for event in progress} == {outcome.tool_use_id}


async def test_every_kind_of_result(log: Path) -> None:
    async with fault_server(log) as srv:
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        fail, explicit, explode, image, structured = await runner.execute(
            [
                tool_call("fail", {"msg": "nope"}),
                tool_call("fail_explicit", {}),
                tool_call("explode", {}),
                tool_call("image", {}),
                tool_call("structured", {"n": 7}),
            ]
        )
    assert fail.is_error
    assert fail.error_kind == "failed"
    assert "Error executing tool fail: nope" in fail.text

    assert explicit.is_error
    assert explicit.error_kind == "failed"
    assert "explicit failure" in explicit.text

    assert explode.is_error
    assert explode.error_kind == "failed"
    # The SDK's server hides an unexpected exception's text from the client.
    assert explode.text == "Error executing tool explode"

    assert not image.is_error
    assert isinstance(image.content, list)
    kinds = [block["type"] for block in image.content]
    assert kinds == ["text", "image"]
    assert image.content[0]["text"] == "a 1x1 png follows"
    source = image.content[1]["source"]
    assert source["type"] == "base64"
    assert source["media_type"] == "image/png"
    assert source["data"]

    assert not structured.is_error
    assert json.loads(structured.text) == {"n": 7, "sq": 49}
    assert structured.details is not None
    assert structured.details["structured_content"] == {"n": 7, "sq": 49}


# --- a server that dies, a server that never starts ------------------------------------


async def test_a_server_killed_mid_call_answers_every_call_and_the_block_leaves_quietly(
    log: Path,
) -> None:
    async with fault_server(log) as srv:
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        hung, crashed = await runner.execute(
            [tool_call("hang", {"tag": "bystander"}), tool_call("crash", {"code": 3})]
        )
        (later,) = await runner.execute([tool_call("structured", {"n": 1})])
        assert srv.state.value == "exited"
        assert not srv.running
    assert crashed.is_error
    assert isinstance(crashed.content, str)
    assert crashed.content.startswith("Error: MCP server fault exited:")
    assert "crashing now" in crashed.content
    assert later.content == crashed.content
    assert hung.content == crashed.content  # a call in flight on the same server
    assert srv.state.value == "exited"
    assert "crash" in read(log)


async def test_under_a_supervisor_a_death_is_a_crash_and_the_server_comes_back(
    log: Path,
) -> None:
    events: list[object] = []
    srv = fault_server(log)
    async with satsuma.Supervisor(events=events.append) as sup:
        await sup.start_child(srv)
        assert srv.running
        generation = srv.generation
        tools = srv.tools()
        runner = satsuma.ToolRunner(tools, timeout=5.0)
        (crashed,) = await runner.execute([tool_call("crash", {})])
        with trio.fail_after(10):
            while not (srv.running and srv.generation > generation):  # noqa: ASYNC110
                await trio.sleep(0.05)
        # The same tool objects reach the new process.
        (after,) = await runner.execute([tool_call("structured", {"n": 4})])
    assert isinstance(crashed.content, str)
    assert crashed.content.startswith("Error: MCP server fault exited:")
    assert "crashing now" in crashed.content
    assert after.error_kind is None, after
    assert json.loads(after.text) == {"n": 4, "sq": 16}
    crashes = [e for e in events if isinstance(e, satsuma.ChildCrashed)]
    restarts = [e for e in events if isinstance(e, satsuma.ChildRestarted)]
    assert len(crashes) == 1
    assert "exited" in crashes[0].error
    assert len(restarts) == 1
    assert read(log).count("start pid=") == 2
    assert not srv.running


async def test_tools_before_start_is_an_error() -> None:
    srv = time_server()
    assert srv.state.value == "idle"
    with pytest.raises(MCPServerError, match="MCP server time is not running"):
        srv.tools()


async def test_a_missing_program_does_not_start() -> None:
    srv = MCPServer("ghost", "/nonexistent/no-such-mcp-server")
    with pytest.raises(MCPServerError, match="MCP server ghost did not start: no such program"):
        async with srv:
            pass  # pragma: no cover
    assert srv.state.value == "exited"
    assert not srv.running


async def test_a_program_that_exits_at_once_does_not_start() -> None:
    code = "import sys; sys.stderr.write('going away now\\n'); sys.exit(3)"
    srv = MCPServer("quitter", sys.executable, ["-c", code])
    with pytest.raises(MCPServerError) as info:
        async with srv:
            pass  # pragma: no cover
    message = str(info.value)
    assert message.startswith("MCP server quitter did not start: the connection closed")
    assert "(its last words on stderr: going away now)" in message
    assert our_children(("sys.exit(3)",)) == []


async def test_a_program_that_never_answers_times_out_and_is_gone() -> None:
    code = "import time; time.sleep(60)"
    srv = MCPServer("mute", sys.executable, ["-c", code], start_timeout=1)
    with pytest.raises(MCPServerError, match=r"MCP server mute did not start: no answer within 1s"):
        async with srv:
            pass  # pragma: no cover
    assert our_children(("time.sleep(60)",)) == []


# --- the tool list changing ------------------------------------------------------------


async def test_a_tool_added_at_run_time_can_be_called(log: Path) -> None:
    async with fault_server(log) as srv:
        generation = srv.generation
        assert "extra" not in {tool.name for tool in srv.tools()}
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        (added,) = await runner.execute([tool_call("add_tool", {"name": "extra"})])
        # The new list is in before the call's result comes back.
        assert srv.generation > generation
        assert "extra" in {tool.name for tool in srv.tools()}
        (called,) = await satsuma.ToolRunner([srv], timeout=5.0).execute([tool_call("extra", {})])
    assert added.content == "added extra"
    assert called.error_kind is None, called
    assert called.content == "I am extra"


# --- an agent ------------------------------------------------------------------------


@satsuma.tool
async def double(x: int) -> str:
    """Double a number."""
    return str(2 * x)


async def test_an_agent_uses_an_mcp_server_next_to_a_local_tool(log: Path) -> None:
    srv = fault_server(log, prefix="f")

    class Worker(satsuma.Agent):
        name = "worker"
        tools = [srv, double]
        system = "You work."

    model = ScriptedModel(
        [
            Reply(tool_calls=[("f__structured", {"n": 5}), ("double", {"x": 21})]),
            Reply(tool_calls=[("f__add_tool", {"name": "late"})]),
            Reply(tool_calls=[("f__late", {})]),
            "all done",
        ]
    )
    assert not srv.running
    async with satsuma.open_agent(Worker, model=model) as agent:
        assert srv.running  # started with the agent
        result = await agent.run("go")
        results = [b for m in agent.history for b in m.tool_results]
    assert result.status == "completed"
    assert result.output == "all done"
    contents = [block["content"] for block in results]
    assert json.loads(contents[0]) == {"n": 5, "sq": 25}
    assert contents[1:] == ["42", "added late", "I am late"]
    assert not any(block.get("is_error") for block in results)
    assert srv.state.value == "stopped"  # stopped with the agent
