"""MCP over the streamable HTTP transport, against the fault server serving HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

import satsuma
from satsuma.testing import EventRecorder, tool_call
from satsuma.tools.mcp import MCPServer

FAULT_SERVER = Path(__file__).with_name("fault_server.py")

# The SDK's HTTP client leaves httpx2's async generators for the garbage collector to
# close, which trio reports as a ResourceWarning (an SDK matter, not ours).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[tuple[str, trio.Process, Path]]:
    port = free_port()
    log = tmp_path / "fault.log"
    process = await trio.lowlevel.open_process(
        [sys.executable, str(FAULT_SERVER), "--http", str(port)],
        env={"MCP_FAULT_LOG": str(log), "PATH": "/usr/bin:/bin"},
        stderr=subprocess.DEVNULL,
    )
    try:
        with trio.fail_after(20):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield f"http://127.0.0.1:{port}/mcp", process, log
    finally:
        process.kill()
        await process.wait()


async def test_calls_timeouts_and_progress_over_http(
    http_server: tuple[str, trio.Process, Path],
) -> None:
    url, _, log = http_server
    events = EventRecorder()
    async with MCPServer.http("remote", url, headers={"X-Client": "satsuma"}, prefix="r") as srv:
        assert "r__structured" in {tool.name for tool in srv.tools()}
        # The hang runs beside the other two over the same session, under a deadline of
        # its own: a loaded machine may take over a second for the others' answers.
        outcomes: dict[str, list[satsuma.ToolOutcome]] = {}

        async def execute(key: str, deadline: float, calls: list[satsuma.ToolCall]) -> None:
            runner = satsuma.ToolRunner([srv], timeout=deadline)
            outcomes[key] = await runner.execute(calls, events=events)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(execute, "hang", 1.0, [tool_call("r__hang", {"tag": "http"})])
            nursery.start_soon(
                execute,
                "others",
                60.0,
                [tool_call("r__structured", {"n": 6}), tool_call("r__progress", {"steps": 2})],
            )
        (hung,) = outcomes["hang"]
        structured, progressed = outcomes["others"]
        # The server was told of the cancellation over HTTP too.
        with trio.fail_after(5):
            while "hang-cancelled http" not in log.read_text():  # noqa: ASYNC110 (a file)
                await trio.sleep(0.05)
    assert structured.details is not None
    assert structured.details["structured_content"] == {"n": 6, "sq": 36}
    assert hung.error_kind == "timeout"
    assert progressed.content == "done 2"
    assert [event.text for event in events.of_type(satsuma.ToolProgress)] == [
        "step 1/2",
        "step 2/2",
    ]


async def test_a_server_gone_answers_every_call_and_the_block_leaves_quietly(
    http_server: tuple[str, trio.Process, Path],
) -> None:
    url, process, _ = http_server
    async with MCPServer.http("remote", url) as srv:
        runner = satsuma.ToolRunner([srv], timeout=5.0)
        process.kill()
        await process.wait()
        (first,) = await runner.execute([tool_call("structured", {"n": 1})])
        (later,) = await runner.execute([tool_call("structured", {"n": 2})])
        assert srv.state.value == "exited"
    assert first.content.startswith("Error: MCP server remote exited:")
    assert later.content == first.content


async def test_nothing_listening_is_a_clear_start_error() -> None:
    port = free_port()
    with pytest.raises(satsuma.MCPServerError, match="MCP server nowhere did not start: "):
        async with MCPServer.http("nowhere", f"http://127.0.0.1:{port}/mcp"):
            pass  # pragma: no cover
