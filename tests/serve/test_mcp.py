"""The MCP surface through real HTTP: MCPApp on hypercorn's trio worker (port 0), the
official mcp client (streamable HTTP, ClientSession) under trio, real agent runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import httpx2
import hypercorn.config
import hypercorn.trio
import mcp_types as types
import pytest
import trio
import trio.testing
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

import satsuma
from conftest import ServeHTTP
from satsuma import ModelError
from satsuma.serve import create_token
from satsuma.serve._http import Principal
from satsuma.serve._mcp import PRINCIPAL_KEY, MCPApp, tool_arguments
from satsuma.serve._open_runs import open_local_runs
from satsuma.testing import Reply, ScriptedModel

# The SDK's HTTP client leaves httpx2's async generators for the garbage collector to
# close, which trio reports as a ResourceWarning (an SDK matter, as in tests/tools/mcp).
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]


@satsuma.tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return "paid"


class Support(satsuma.Agent):
    """Answers questions about your account."""

    name = "support"
    tools = [pay]


@attrs.frozen
class Invoice:
    number: str
    total: int


class Billing(satsuma.Agent[Invoice]):
    name = "billing"
    description = "Reads invoices."


@asynccontextmanager
async def _serving(app: MCPApp, principal: Principal | None = None) -> AsyncIterator[str]:
    """``app`` on hypercorn's trio worker at 127.0.0.1, port 0; yields the /mcp URL.
    With ``principal``, every request is made by it (as the server's app leaves it)."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if principal is not None:
            scope[PRINCIPAL_KEY] = principal
        await app(scope, receive, send)

    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with app.run(), trio.open_nursery() as nursery:
        shutdown = trio.Event()
        binds = await nursery.start(
            lambda task_status: hypercorn.trio.serve(
                asgi,  # type: ignore[arg-type]
                config,
                shutdown_trigger=shutdown.wait,
                task_status=task_status,
            )
        )
        try:
            yield binds[0] + "/mcp"
        finally:
            shutdown.set()


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _text(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def test_tools_are_listed_and_called_through_http() -> None:
    support = ScriptedModel(["Your balance is 3 EUR."])
    billing = ScriptedModel([Reply(tool_calls=[("final_answer", {"number": "F-1", "total": 12})])])
    models = {"support": support, "billing": billing}
    async with open_local_runs([Support, Billing], model=models) as runs:
        async with _serving(MCPApp(runs)) as url, _client(url) as session:
            listed = await session.list_tools()
            tools = {tool.name: tool for tool in listed.tools}
            assert sorted(tools) == ["billing", "support"]
            assert tools["support"].description == "Answers questions about your account."
            assert tools["billing"].description == "Reads invoices."
            schema = tools["support"].input_schema
            assert schema["required"] == ["prompt"]
            assert set(schema["properties"]) == {"prompt", "agent_id"}

            result = await session.call_tool(
                "support", {"prompt": "my balance?", "agent_id": "alice"}
            )
            assert not result.is_error
            assert _text(result) == "Your balance is 3 EUR."

            typed = await session.call_tool("billing", {"prompt": "the last invoice"})
            assert not typed.is_error
            assert json.loads(_text(typed)) == {"number": "F-1", "total": 12}
            assert typed.structured_content == {"number": "F-1", "total": 12}
        # The named conversation was used; without agent_id a new one was made up.
        (first,) = await runs.runs("support")
        assert (first.agent_id, first.prompt) == ("alice", "my balance?")
        (second,) = await runs.runs("billing")
        assert second.agent_id.startswith("mcp-")


async def test_a_failed_run_and_a_pause_are_clear_results() -> None:
    support = ScriptedModel(
        [ModelError("the model is down"), Reply(tool_calls=[("pay", {"amount": 5})])]
    )
    async with (
        open_local_runs([Support], model=support) as runs,
        _serving(MCPApp(runs)) as url,
        _client(url) as session,
    ):
        failed = await session.call_tool("support", {"prompt": "hi"})
        assert failed.is_error
        assert "ended failed" in _text(failed)
        assert "the model is down" in _text(failed)

        paused = await session.call_tool("support", {"prompt": "pay 5", "agent_id": "bob"})
        assert not paused.is_error
        text = _text(paused)
        assert "waiting for approval" in text and "pay" in text
        structured = paused.structured_content
        assert structured is not None
        assert structured["status"] == "awaiting_approval"
        (call,) = structured["pending"]
        assert (call["tool"], call["input"]) == ("pay", {"amount": 5})
        assert call["call_id"] in text


async def test_bad_arguments_and_unknown_tools_are_error_results() -> None:
    async with open_local_runs([Support], model=ScriptedModel([])) as runs:
        async with _serving(MCPApp(runs)) as url, _client(url) as session:
            for arguments, message in [
                ({}, "prompt must be a non-empty string"),
                ({"prompt": 3}, "prompt must be a non-empty string"),
                ({"prompt": "hi", "agent_id": "a/b"}, "agent_id must contain no '/'"),
                ({"prompt": "hi", "colour": "red"}, "unknown argument(s): colour"),
            ]:
                result = await session.call_tool("support", arguments)
                assert result.is_error
                assert message in _text(result)
            unknown = await session.call_tool("nobody", {"prompt": "hi"})
            assert unknown.is_error and "no such tool: 'nobody'" in _text(unknown)
        assert await runs.runs() == []


def test_tool_arguments_give_a_new_conversation_without_agent_id() -> None:
    prompt, first = tool_arguments({"prompt": "hi"})
    _, second = tool_arguments({"prompt": "hi"})
    assert prompt == "hi" and first != second
    assert tool_arguments({"prompt": "hi", "agent_id": "x"}) == ("hi", "x")


@attrs.frozen
class _Token(Principal):
    """A token's principal, deciding as the server's tokens do (admin aside)."""

    def allows(self, scope: Any, agent: str | None = None) -> bool:
        reaches = self.agents is None or agent is None or agent in self.agents
        return scope in self.scopes and reaches


async def test_a_token_sees_and_runs_only_what_its_scopes_and_agents_allow() -> None:
    support = ScriptedModel(["Hello."])
    models = {"support": support, "billing": ScriptedModel([])}
    reader = _Token("reader", frozenset({"read"}), frozenset({"support"}))
    async with (
        open_local_runs([Support, Billing], model=models) as runs,
        _serving(MCPApp(runs), reader) as url,
        _client(url) as session,
    ):
        listed = await session.list_tools()
        assert [tool.name for tool in listed.tools] == ["support"]
        refused = await session.call_tool("support", {"prompt": "hi"})
        assert refused.is_error
        assert _text(refused) == "this token may not run 'support' (it needs the run scope)"
        assert await runs.runs() == []

    runner = _Token("runner", frozenset({"run"}), frozenset({"support"}))
    async with (
        open_local_runs([Support, Billing], model=models) as runs,
        _serving(MCPApp(runs), runner) as url,
        _client(url) as session,
    ):
        # It lists what it may run: MCP clients list the tools before calling one.
        assert [tool.name for tool in (await session.list_tools()).tools] == ["support"]
        assert _text(await session.call_tool("support", {"prompt": "hi"})) == "Hello."
        other = await session.call_tool("billing", {"prompt": "hi"})
        assert other.is_error and "may not run 'billing'" in _text(other)


async def test_a_caller_that_stops_waiting_cancels_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The model's delay passes on the virtual clock; the call is given up before it.
    model = ScriptedModel(["Done at last."], delay=10.0)
    async with open_local_runs([Support], model=model) as runs:
        app = MCPApp(runs)
        params = types.CallToolRequestParams(
            name="support", arguments={"prompt": "slow", "agent_id": "carol"}
        )
        with trio.move_on_after(1.0) as waited:
            await app._call_tool(None, params)
        assert waited.cancelled_caught
        (run,) = await runs.runs("support", "carol")
        ended = await runs.wait(run.run_id)
    assert (ended.status, ended.output) == ("completed", "Done at last.")


async def test_the_session_manager_lives_within_run_only() -> None:
    async with open_local_runs([Support], model=ScriptedModel([])) as runs:
        app = MCPApp(runs)
        async with app.run():
            pass
        # Its task group ended with the block: it cannot serve again.
        with pytest.raises(RuntimeError):
            async with app.run():
                pass


# httpx leaves its request body's generator to the collector when the server answers
# before reading it all (as it should, past the limit).
@pytest.mark.filterwarnings("ignore:Async generator 'httpx:ResourceWarning")
async def test_a_body_over_one_mib_is_refused_with_413() -> None:
    async with (
        open_local_runs([Support], model=ScriptedModel([])) as runs,
        _serving(MCPApp(runs)) as url,
        httpx.AsyncClient() as client,
    ):
        response = await client.post(
            url,
            content=b"x" * ((1 << 20) + 1),
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            },
        )
        assert response.status_code == 413
        assert await runs.runs() == []


gate = {"open": trio.Event()}


@satsuma.tool
async def wait_for_gate() -> str:
    """Wait until the test opens the gate."""
    await gate["open"].wait()
    return "opened"


class Waiter(satsuma.Agent):
    """Waits for the gate."""

    name = "waiter"
    tools = [wait_for_gate]


@asynccontextmanager
async def _token_client(url: str, token: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_through_the_server_a_token_reaches_its_agents_and_its_cap(
    serve_http: ServeHTTP, tmp_path: Path
) -> None:
    gate["open"] = trio.Event()
    tokens = tmp_path / "tokens.txt"
    token = create_token(tokens, name="ops", scopes=["run"], agents=["waiter", "support"])
    models = {
        "waiter": ScriptedModel([Reply(tool_calls=[("wait_for_gate", {})]), "Through."]),
        "support": ScriptedModel([]),
        "billing": ScriptedModel([]),
    }
    options = {"model": models, "tokens": tokens, "max_runs_per_token": 1}
    async with (
        serve_http([Waiter, Support, Billing], **options) as served,
        _token_client(served.url, token) as session,
    ):
        listed = await session.list_tools()
        assert [tool.name for tool in listed.tools] == ["support", "waiter"]
        other = await session.call_tool("billing", {"prompt": "hi"})
        assert other.is_error and "may not run 'billing'" in _text(other)

        results: list[types.CallToolResult] = []

        async def call_waiter() -> None:
            results.append(await session.call_tool("waiter", {"prompt": "wait"}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_waiter)
            # Once the waiter's run is in flight, a second run of the token is refused.
            while not await served.server.asgi.runs.runs("waiter"):
                await trio.testing.wait_all_tasks_blocked()
            capped = await session.call_tool("support", {"prompt": "hi"})
            assert capped.is_error
            assert "this token has 1 run(s) in flight already" in _text(capped)
            gate["open"].set()
        (waited,) = results
        assert _text(waited) == "Through."
