"""A2AAgent against an agent built with the official a2a-sdk, in another process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma.testing import EventRecorder, Reply, ScriptedModel, tool_call
from satsuma.tools.a2a import A2AAgent, A2AAgentError

SDK_SERVER = Path(__file__).with_name("sdk_server.py")

# httpx2 leaves the async generators of a stream cut short for the garbage collector,
# which trio reports as a ResourceWarning (an httpx2 matter, as for MCP over HTTP).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]


class Remote:
    """A running SDK server: its URL, its process and what it recorded."""

    def __init__(self, url: str, process: trio.Process, log: Path) -> None:
        self.url, self.process, self.log = url, process, log

    def entries(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    async def wait_for(self, key: str) -> Any:
        with trio.fail_after(10):
            while True:
                for entry in self.entries():
                    if key in entry:
                        return entry[key]
                await trio.sleep(0.02)


@pytest.fixture
async def remote_factory(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Any]]:
    processes: list[trio.Process] = []

    async def start(*flags: str) -> Remote:
        log = tmp_path / f"remote{len(processes)}.log"
        process = await trio.lowlevel.open_process(
            [sys.executable, str(SDK_SERVER), str(log), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        processes.append(process)
        assert process.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "the SDK server exited before it listened"
                line += chunk
        port = int(line.split()[1])
        return Remote(f"http://127.0.0.1:{port}", process, log)

    try:
        yield start
    finally:
        for process in processes:
            process.kill()
            await process.wait()


@pytest.fixture
async def remote(remote_factory: Callable[..., Any]) -> Remote:
    result: Remote = await remote_factory()
    return result


async def test_the_card_names_and_describes_the_tool(remote: Remote) -> None:
    async with A2AAgent(remote.url) as agent:
        (tool,) = agent.tools()
        assert agent.streaming
        assert agent.running
    assert tool.name == "ledger"
    assert tool.description.startswith("Keeps the books")
    assert "books: Bookkeeping" in tool.description
    schema = satsuma.ToolRunner([tool]).schemas()[0]["input_schema"]
    assert schema["required"] == ["message"]
    assert set(schema["properties"]) == {"message", "context_id", "task_id"}
    assert agent.state.value == "stopped"


@pytest.mark.parametrize("flags", [(), ("--no-streaming",)])
async def test_a_text_and_a_data_artifact_are_the_result(
    remote_factory: Callable[..., Any], flags: tuple[str, ...]
) -> None:
    remote = await remote_factory(*flags)
    async with A2AAgent(remote.url, name="books") as agent:
        assert agent.streaming is not flags
        runner = satsuma.ToolRunner([agent], timeout=20)
        text, data = await runner.execute(
            [tool_call("books", {"message": "text"}), tool_call("books", {"message": "data"})]
        )
    assert not text.is_error
    assert text.content.startswith("the answer is 42\n\n(context_id: ")
    assert text.details["state"] == "completed"
    assert text.content.endswith(f"{text.details['context_id']})")
    assert not data.is_error
    assert json.loads(data.content.split("\n\n")[0]) == {"lines": [1.0, 2.0], "total": 12.5}


async def test_streamed_status_becomes_tool_progress(remote: Remote) -> None:
    events = EventRecorder()
    async with A2AAgent(remote.url) as agent:
        (outcome,) = await satsuma.ToolRunner([agent]).execute(
            [tool_call("ledger", {"message": "progress"})], events=events
        )
    assert outcome.content.startswith("balanced")
    progress = [event.text for event in events.of_type(satsuma.ToolProgress)]
    assert progress == ["reading the ledger", "adding it up"]


@pytest.mark.parametrize("flags", [(), ("--no-streaming",)])
async def test_a_failed_task_is_an_error_with_the_remotes_reason(
    remote_factory: Callable[..., Any], flags: tuple[str, ...]
) -> None:
    remote = await remote_factory(*flags)
    async with A2AAgent(remote.url) as agent:
        (outcome,) = await satsuma.ToolRunner([agent]).execute(
            [tool_call("ledger", {"message": "fail"})]
        )
    assert outcome.is_error
    task_id = outcome.details["task_id"]
    assert outcome.content == f"Error: A2A agent ledger task {task_id} ended failed: disk on fire"


async def test_input_required_tells_the_model_how_to_answer(remote: Remote) -> None:
    async with A2AAgent(remote.url) as agent:
        (asked,) = await satsuma.ToolRunner([agent]).execute(
            [tool_call("ledger", {"message": "input"})]
        )
        ids = {k: asked.details[k] for k in ("task_id", "context_id")}
        # The model answers in the same task: the remote sees both ids.
        (answered,) = await satsuma.ToolRunner([agent]).execute(
            [tool_call("ledger", {"message": "echo savings", **ids})]
        )
    assert not asked.is_error
    assert asked.content == (
        "The remote agent ledger needs more input before it can go on: which account?\n"
        f"To answer, call this tool again with your reply and task_id={ids['task_id']}, "
        f"context_id={ids['context_id']}."
    )
    assert answered.content.startswith(
        f"task={ids['task_id']} context={ids['context_id']} text=echo savings"
    )


async def test_the_deadline_cancels_the_remote_task(remote: Remote) -> None:
    async with A2AAgent(remote.url) as agent:
        (outcome,) = await satsuma.ToolRunner([agent], timeout=2.0).execute(
            [tool_call("ledger", {"message": "slow"})]
        )
        started = await remote.wait_for("started")
        cancelled = await remote.wait_for("cancelled")
    assert outcome.error_kind == "timeout"
    assert cancelled == started


async def test_cancelling_the_run_cancels_the_remote_task(remote: Remote) -> None:
    events = EventRecorder()
    async with A2AAgent(remote.url) as agent:
        runner = satsuma.ToolRunner([agent])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(runner.execute, [tool_call("ledger", {"message": "slow"})], events=events)
            )
            started = await remote.wait_for("started")
            # Once the client has read the task's first status, it knows the task's id.
            with trio.fail_after(10):
                while not events.of_type(satsuma.ToolProgress):  # noqa: ASYNC110 (a list)
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        assert await remote.wait_for("cancelled") == started


async def test_headers_reach_the_remote_from_a_mapping_or_a_function(
    remote: Remote,
) -> None:
    tokens = iter(["t1", "t2", "t3", "t4"])

    async def fresh() -> dict[str, str]:
        return {"Authorization": f"Bearer {next(tokens)}"}

    async with A2AAgent(remote.url, headers={"Authorization": "Bearer fixed"}) as agent:
        await satsuma.ToolRunner([agent]).execute([tool_call("ledger", {"message": "headers"})])
    async with A2AAgent(remote.url, headers=fresh) as agent:
        await satsuma.ToolRunner([agent]).execute([tool_call("ledger", {"message": "headers"})])
    posts = [entry["post"] for entry in remote.entries() if "post" in entry]
    # The card is fetched with the first token of the function, the call with the next.
    assert posts == ["Bearer fixed", "Bearer t2"]


@pytest.mark.parametrize("flags", [(), ("--no-streaming",)])
async def test_a_remote_killed_mid_call_is_a_clear_error(
    remote_factory: Callable[..., Any], flags: tuple[str, ...]
) -> None:
    remote = await remote_factory(*flags)
    async with A2AAgent(remote.url) as agent:
        (outcome,) = await satsuma.ToolRunner([agent], timeout=20).execute(
            [tool_call("ledger", {"message": "die"})]
        )
        (later,) = await satsuma.ToolRunner([agent], timeout=20).execute(
            [tool_call("ledger", {"message": "text"})]
        )
    assert outcome.is_error
    assert outcome.content.startswith("Error: A2A agent ledger dropped the connection: ")
    assert later.is_error
    # A later call finds nothing listening (or, first, a pooled connection now dead).
    assert later.content.startswith(
        (
            "Error: A2A agent ledger could not be reached: ConnectError",
            "Error: A2A agent ledger dropped the connection: ",
        )
    )


async def test_a_bad_card_is_a_start_error_naming_the_url(
    remote_factory: Callable[..., Any],
) -> None:
    remote = await remote_factory("--bad-card")
    card = f"{remote.url}/.well-known/agent-card.json"
    with pytest.raises(A2AAgentError) as caught:
        async with A2AAgent(remote.url):
            pass  # pragma: no cover
    assert str(caught.value) == (
        f"A2A agent {remote.url} at {card}: is not an A2A agent card "
        "(a JSON object with a name): this is not a card"
    )


async def test_nothing_listening_is_a_start_error_naming_the_url() -> None:
    with trio.socket.socket() as probe:
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/a2a/books"
    with pytest.raises(A2AAgentError, match="agent card not fetched: ConnectError") as caught:
        async with A2AAgent(url, name="books"):
            pass  # pragma: no cover
    assert caught.value.url == f"{url}/.well-known/agent-card.json"


async def test_an_agent_starts_the_remote_and_the_model_uses_it(remote: Remote) -> None:
    remote_agent = A2AAgent(remote.url, name="books")

    class Clerk(satsuma.Agent):
        name = "clerk"
        tools = [remote_agent]
        system = "You keep accounts."

    model = ScriptedModel(
        [Reply(tool_calls=[("books", {"message": "progress"})]), "the books balance"]
    )
    async with satsuma.open_agent(Clerk, model=model) as agent:
        assert remote_agent.running
        result = await agent.run("do the books")
        (block,) = [b for m in agent.history for b in m.tool_results]
    assert result.output == "the books balance"
    assert block["content"].startswith("balanced")
    assert not block.get("is_error")
    assert remote_agent.state.value == "stopped"


async def test_under_a_supervisor(remote: Remote) -> None:
    remote_agent = A2AAgent(remote.url)
    async with satsuma.Supervisor() as sup:
        await sup.start_child(remote_agent)
        (outcome,) = await satsuma.ToolRunner([remote_agent]).execute(
            [tool_call("ledger", {"message": "text"})]
        )
    assert outcome.content.startswith("the answer is 42")
    assert remote_agent.state.value == "stopped"


async def test_a_task_the_remote_does_not_know_is_its_json_rpc_error_named(
    remote: Remote,
) -> None:
    async with A2AAgent(remote.url) as agent:
        (outcome,) = await satsuma.ToolRunner([agent]).execute(
            [tool_call("ledger", {"message": "more", "task_id": "no-such-task"})]
        )
    assert outcome.is_error
    assert outcome.content.startswith(
        "Error: A2A agent ledger answered with a JSON-RPC error: TaskNotFoundError (-32001)"
    )


@pytest.mark.parametrize(
    ("word", "problem"),
    [
        ("http503", "answered HTTP 503: overloaded, come back later"),
        (
            "rpc-error",
            "answered with a JSON-RPC error: UnsupportedOperationError (-32004): not today",
        ),
        ("not-json", "answered something that is not JSON: <html>a login page</html>"),
        ("short-stream", "the stream ended before the task did (its last state: working)"),
        ("bad-event", "sent a stream event that is not JSON: {oops"),
        ("silent", "went silent: nothing came for 1s"),
    ],
)
async def test_what_no_good_server_answers_is_a_clear_error(
    remote_factory: Callable[..., Any], word: str, problem: str
) -> None:
    remote = await remote_factory("--fault")
    async with A2AAgent(remote.url, read_timeout=1.0) as agent:
        (outcome,) = await satsuma.ToolRunner([agent], timeout=30).execute(
            [tool_call("ledger", {"message": word})]
        )
    assert outcome.is_error
    assert outcome.content == f"Error: A2A agent ledger {problem}"


async def test_a_remote_that_never_answers_cancel_task_cannot_hold_the_call(
    remote_factory: Callable[..., Any],
) -> None:
    remote = await remote_factory("--fault")
    async with A2AAgent(remote.url, cancel_timeout=0.5) as agent:
        with trio.fail_after(20):  # not a measure: only that the call ends at all
            (outcome,) = await satsuma.ToolRunner([agent], timeout=1.0).execute(
                [tool_call("ledger", {"message": "stuck"})]
            )
    assert outcome.error_kind == "timeout"
    assert await remote.wait_for("cancel-unanswered") == "t1"


async def test_a_task_answered_before_it_ends_is_asked_after_until_it_does(
    remote_factory: Callable[..., Any],
) -> None:
    remote = await remote_factory("--fault", "--no-streaming")
    events = EventRecorder()
    async with A2AAgent(remote.url) as agent:
        (outcome,) = await satsuma.ToolRunner([agent], timeout=30).execute(
            [tool_call("ledger", {"message": "poll"})], events=events
        )
    assert outcome.content == "polled answer\n\n(context_id: c1)"
    assert [event.text for event in events.of_type(satsuma.ToolProgress)] == ["halfway"]
    assert [entry["get"] for entry in remote.entries() if "get" in entry] == ["p1", "p1"]


async def test_an_agent_whose_remote_has_a_bad_card_does_not_start(
    remote_factory: Callable[..., Any],
) -> None:
    remote = await remote_factory("--bad-card")

    class Clerk(satsuma.Agent):
        name = "clerk"
        tools = [A2AAgent(remote.url, name="books")]
        system = "You keep accounts."

    with pytest.raises(A2AAgentError, match="is not an A2A agent card"):
        async with satsuma.open_agent(Clerk, model=ScriptedModel(["unused"])):
            pass  # pragma: no cover


async def test_a_card_without_a_json_rpc_interface_is_a_start_error(
    remote_factory: Callable[..., Any],
) -> None:
    remote = await remote_factory("--grpc-only")
    with pytest.raises(A2AAgentError) as caught:
        async with A2AAgent(remote.url):
            pass  # pragma: no cover
    assert str(caught.value) == (
        f"A2A agent ledger at {remote.url}/.well-known/agent-card.json: "
        "is not a usable A2A agent card: the agent card names no JSON-RPC endpoint"
    )
