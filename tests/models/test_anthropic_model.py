"""AnthropicModel against MessagesServer, with the real SDK client: what respond()
returns, what the listener hears, the request it sends, and each failure it retries or
refuses."""

from __future__ import annotations

import json
import types
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import attrs
import pytest
import trio
import trio.lowlevel

from satsuma import ToolCall
from satsuma._exceptions import ModelError
from satsuma._messages import Message, Usage
from satsuma.models._anthropic import AnthropicModel, anthropic_params
from satsuma.models._model import ModelRequest
from satsuma.testing import MessagesServer
from satsuma.testing._script import Failure, Reply
from satsuma.testing._server import ServerScriptItem

FAST = {"backoff_base": 0.001, "jitter": False}


@attrs.define
class Listener:
    texts: list[str] = attrs.Factory(list)
    thoughts: list[str] = attrs.Factory(list)
    retries: list[tuple[int, float, str]] = attrs.Factory(list)

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def thinking(self, delta: str) -> None:
        self.thoughts.append(delta)

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        self.retries.append((attempt, delay, reason))


def make_request(**changes: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "claude-test-1",
        "system": "You help.",
        "messages": (Message.user("Hello"),),
        "tools": (),
        "max_tokens": 1000,
    }
    return ModelRequest(**{**fields, **changes})


@attrs.define
class Harness:
    server: MessagesServer
    model: AnthropicModel
    listener: Listener

    async def respond(self, request: ModelRequest | None = None) -> Any:
        return await self.model.respond(request or make_request(), self.listener)


@asynccontextmanager
async def open_harness(script: list[ServerScriptItem], **options: Any) -> AsyncIterator[Harness]:
    """A server playing ``script``, and a model (fast retries) using a client of it."""
    async with MessagesServer(script) as server, server.client() as client:
        yield Harness(server, AnthropicModel(client, **{**FAST, **options}), Listener())


FULL_REPLY = Reply(
    text="Pinging it now.",
    thinking="The user wants a ping.",
    tool_calls=[ToolCall("toolu_1", "ping", {"host": "example.com"})],
    usage=Usage(
        input_tokens=12, output_tokens=34, cache_creation_input_tokens=5, cache_read_input_tokens=6
    ),
)


async def test_respond_returns_content_calls_usage_and_stop_reason() -> None:
    async with open_harness([FULL_REPLY]) as h:
        response = await h.respond()
    assert response.content == (
        {"type": "thinking", "thinking": "The user wants a ping.", "signature": "scripted"},
        {"type": "text", "text": "Pinging it now."},
        {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {"host": "example.com"}},
    )
    assert response.calls == (ToolCall("toolu_1", "ping", {"host": "example.com"}),)
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(
        input_tokens=12, output_tokens=34, cache_creation_input_tokens=5, cache_read_input_tokens=6
    )
    assert response.model == "claude-test-1"
    assert response.text == "Pinging it now."


async def test_the_listener_hears_text_and_thinking_as_they_stream() -> None:
    async with open_harness([FULL_REPLY]) as h:
        await h.respond()
    assert len(h.listener.texts) > 1
    assert "".join(h.listener.texts) == "Pinging it now."
    assert len(h.listener.thoughts) > 1
    assert "".join(h.listener.thoughts) == "The user wants a ping."
    assert h.listener.retries == []


async def test_a_tool_input_that_does_not_parse_fails_only_that_call() -> None:
    reply = Reply(
        text="Two calls.",
        tool_calls=[
            ToolCall("toolu_bad", "write_file", '{"path": "a.txt", "content": "unterminated'),
            ToolCall("toolu_good", "ping", {"host": "example.com"}),
            ToolCall("toolu_list", "ping", "[1, 2]"),
        ],
    )
    async with open_harness([reply]) as h:
        response = await h.respond()
    bad, good, listed = response.calls
    assert bad == ToolCall("toolu_bad", "write_file", '{"path": "a.txt", "content": "unterminated')
    assert good == ToolCall("toolu_good", "ping", {"host": "example.com"})
    # Valid JSON, but not an object: the API would refuse it back in the history.
    assert listed == ToolCall("toolu_list", "ping", "[1, 2]")
    assert [block["input"] for block in response.content if block["type"] == "tool_use"] == [
        {},
        {"host": "example.com"},
        {},
    ]


async def test_the_request_is_streamed_and_caches_system_tools_and_conversation() -> None:
    tools = (
        {"name": "a", "description": "A", "input_schema": {"type": "object"}},
        {"name": "b", "description": "B", "input_schema": {"type": "object"}},
    )
    history = (
        Message.user("Hello"),
        Message(role="assistant", content=[{"type": "text", "text": "Hi"}]),
        Message.user("Again"),
    )
    async with open_harness(["one", "two"]) as h:
        await h.respond(make_request(tools=tools, messages=history, max_tokens=77))
        await h.respond(make_request(tools=tools, cache=False, system=None))
    cached, uncached = h.server.requests
    assert cached["stream"] is True
    assert cached["model"] == "claude-test-1"
    assert cached["max_tokens"] == 77
    assert cached["system"] == [
        {"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}
    ]
    assert [tool.get("cache_control") for tool in cached["tools"]] == [
        None,
        {"type": "ephemeral"},
    ]
    # The conversation: the API's automatic breakpoint (on the last block), and one at
    # the end of the previous turn, where the last request's cache entry ends.
    assert cached["cache_control"] == {"type": "ephemeral"}
    assert cached["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "user", "content": [{"type": "text", "text": "Again"}]},
    ]
    # The history's own blocks were copied, not marked.
    assert all("cache_control" not in block for m in history for block in m.content)
    assert "system" not in uncached
    assert "cache_control" not in uncached
    assert "cache_control" not in json.dumps(uncached["messages"])
    assert all("cache_control" not in tool for tool in uncached["tools"])
    # The request's own definitions were copied, not marked.
    assert all("cache_control" not in tool for tool in tools)


def test_frozen_definitions_reach_the_sdk_as_plain_copies_made_once() -> None:
    # The SDK copies a dict or list by its exact type, a FrozenDict only after abstract
    # instance checks: the frozen definitions go out as plain copies, kept per definition.
    tools = (
        {
            "name": "ping",
            "description": "Ping.",
            "input_schema": {
                "type": "object",
                "properties": {"hosts": {"type": "array", "items": {"type": "string"}}},
                "required": ["hosts"],
            },
        },
    )
    request = make_request(tools=tools, cache=None)
    first = anthropic_params(request)["tools"]
    second = anthropic_params(make_request(tools=request.tools, cache=None))["tools"]

    def plain_all_the_way(value: Any) -> bool:
        if isinstance(value, dict):
            return type(value) is dict and all(map(plain_all_the_way, value.values()))
        if isinstance(value, list):
            return type(value) is list and all(map(plain_all_the_way, value))
        return True

    assert first == [*tools] == [*request.tools]
    assert plain_all_the_way(first)
    assert second[0] is first[0]  # made once for the definition
    # A cached request's breakpoint goes on a copy, never on the kept one.
    marked = anthropic_params(make_request(tools=request.tools))["tools"]
    assert marked[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in first[0]


async def test_frozen_blocks_go_out_as_plain_json_and_stay_as_they_were() -> None:
    # Read-only mappings and tuples, nested: what a Message may hold. The body is not
    # copied by satsuma (the SDK copies it), so the history's own blocks must come
    # through untouched, request after request.
    frozen = types.MappingProxyType(
        {
            "type": "tool_result",
            "tool_use_id": "t",
            "content": (types.MappingProxyType({"type": "text", "text": "x"}),),
        }
    )
    history = (
        Message.user("Hello"),
        Message(
            role="assistant",
            content=[{"type": "tool_use", "id": "t", "name": "ping", "input": {"hosts": ("a",)}}],
        ),
        Message(role="user", content=[frozen]),
    )
    before = repr([message.content for message in history])
    async with open_harness(["one", "two"]) as h:
        for _ in range(2):
            await h.respond(make_request(messages=history))
    for body in h.server.requests:
        assert body["messages"][1:] == [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "ping", "input": {"hosts": ["a"]}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "x"}],
                    }
                ],
            },
        ]
    assert repr([message.content for message in history]) == before


async def test_a_429_waits_what_retry_after_says() -> None:
    async with open_harness([Failure.rate_limited(retry_after=0.05), "done"]) as h:
        start = trio.current_time()
        response = await h.respond()
    assert trio.current_time() - start >= 0.05
    assert response.text == "done"
    assert h.listener.retries == [(1, 0.05, "429: rate limited")]
    assert len(h.server.requests) == 2


async def test_retry_after_is_capped_by_backoff_cap() -> None:
    async with open_harness([Failure.rate_limited(retry_after=60), "done"], backoff_cap=0.01) as h:
        await h.respond()
    assert h.listener.retries == [(1, 0.01, "429: rate limited")]


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (Failure.overloaded(), "529: Overloaded"),
        (Failure.server_error(), "500: Internal server error"),
        (Failure.server_error(503), "503: Internal server error"),
        (ValueError("boom"), "500: boom"),
        (
            Failure.cut_stream(Reply(text="Half of this is lost"), after_events=4),
            "stream interrupted: peer closed connection without sending complete message "
            "body (incomplete chunked read)",
        ),
        (
            Failure.cut_stream(Reply(text="Not a word of this"), after_events=0),
            "stream interrupted: peer closed connection without sending complete message "
            "body (incomplete chunked read)",
        ),
        (
            Failure.stream_error(Reply(text="Half of this is lost"), after_events=4),
            "529: Overloaded",
        ),
        (Failure.stream_error(Reply(text="Nothing"), after_events=0), "529: Overloaded"),
    ],
)
async def test_each_transient_failure_is_retried(
    failure: Any, reason: str, collect_garbage: Callable[[], int]
) -> None:
    async with open_harness([failure, Reply(text="Whole answer")]) as h:
        response = await h.respond()
    assert response.text == "Whole answer"
    assert response.content == ({"type": "text", "text": "Whole answer"},)
    assert h.listener.retries == [(1, 0.001, reason)]
    assert len(h.server.requests) == 2
    # Nothing of the failed stream is left to be collected (trio would warn about an
    # async generator left suspended, and warnings are errors here).
    collect_garbage()
    await trio.lowlevel.checkpoint()


async def test_a_timeout_is_retried() -> None:
    script = [Failure.slow("too late", delay=5.0), "on time"]
    async with MessagesServer(script) as server, server.client(timeout=0.1) as client:
        listener = Listener()
        response = await AnthropicModel(client, **FAST).respond(make_request(), listener)
    assert response.text == "on time"
    ((attempt, _, reason),) = listener.retries
    assert attempt == 1
    assert reason.startswith("Request timed out")


async def test_a_refused_connection_is_retried_then_fails() -> None:
    async with MessagesServer([]) as server:
        base_url = server.base_url
    # The server is gone: nothing listens on its port any more.
    async with anthropic.AsyncAnthropic(api_key="k", base_url=base_url) as client:
        listener = Listener()
        with pytest.raises(ModelError) as caught:
            await AnthropicModel(client, max_retries=1, **FAST).respond(make_request(), listener)
    assert caught.value.retryable is True
    assert caught.value.status is None
    assert caught.value.message.startswith("Connection error.")
    assert [attempt for attempt, _, _ in listener.retries] == [1]


async def test_backoff_doubles_up_to_the_cap() -> None:
    script = [Failure.overloaded()] * 4 + ["done"]
    async with open_harness(script, max_retries=4, backoff_base=0.002, backoff_cap=0.005) as h:
        await h.respond()
    assert [delay for _, delay, _ in h.listener.retries] == [0.002, 0.004, 0.005, 0.005]
    assert [attempt for attempt, _, _ in h.listener.retries] == [1, 2, 3, 4]


async def test_jitter_waits_a_random_time_up_to_the_backoff() -> None:
    script = [Failure.overloaded()] * 3 + ["done"]
    async with open_harness(script, backoff_base=0.004, jitter=True) as h:
        await h.respond()
    ceilings = [0.004, 0.008, 0.016]
    delays = [delay for _, delay, _ in h.listener.retries]
    assert all(0 <= delay <= ceiling for delay, ceiling in zip(delays, ceilings, strict=True))


async def test_retries_exhausted_raise_the_last_failure() -> None:
    script = [Failure.overloaded(), Failure.server_error(), Failure.overloaded(), "unused"]
    async with open_harness(script, max_retries=2) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond()
    assert caught.value.retryable is True
    assert caught.value.status == 529
    assert caught.value.message == "Overloaded"
    assert str(caught.value) == "529: Overloaded"
    assert [reason for _, _, reason in h.listener.retries] == [
        "529: Overloaded",
        "500: Internal server error",
    ]
    assert len(h.server.requests) == 3


async def test_no_retries_at_all_with_max_retries_zero() -> None:
    async with open_harness([Failure.rate_limited(0.01), "unused"], max_retries=0) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond()
    assert caught.value.status == 429
    assert caught.value.retry_after == 0.01
    assert h.listener.retries == []


async def test_a_bad_request_fails_at_once_with_the_apis_message() -> None:
    message = "prompt is too long: 250000 tokens > 200000 maximum"
    async with open_harness([Failure.bad_request(message), "unused"]) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond()
    assert caught.value.message == message
    assert caught.value.status == 400
    assert caught.value.retryable is False
    assert h.listener.retries == []
    assert len(h.server.requests) == 1


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_other_client_errors_are_not_retried(status: int) -> None:
    failure = ModelError(f"status {status}", status=status)
    async with open_harness([failure, "unused"]) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond()
    assert (caught.value.status, caught.value.retryable) == (status, False)
    assert caught.value.message == f"status {status}"
    assert h.server.remaining == 1


async def test_a_client_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["from the environment"]) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        async with AnthropicModel(**FAST) as model:
            assert model.client.api_key == "env-key"
            response = await model.respond(make_request(), Listener())
        assert model.client.is_closed()
    assert response.text == "from the environment"
    assert len(server.requests) == 1


async def test_a_client_passed_in_is_left_open() -> None:
    async with MessagesServer([]) as server, server.client() as client:
        async with AnthropicModel(client) as model:
            assert model.client is client
        assert not client.is_closed()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        AnthropicModel(max_retries=-1)
    with pytest.raises(ValueError, match="backoffs"):
        AnthropicModel(backoff_base=-0.1)


# --- stream=False: whole responses ----------------------------------------------------


async def test_without_streaming_the_response_is_the_same_and_the_text_comes_whole() -> None:
    async with open_harness([FULL_REPLY, FULL_REPLY]) as h:
        streamed = await h.respond()
        h.listener.texts.clear()
        h.listener.thoughts.clear()
        h.model.stream = False
        whole = await h.respond()
    assert h.server.requests[0]["stream"] is True
    assert "stream" not in h.server.requests[1]
    assert whole.content == streamed.content
    assert whole.calls == streamed.calls
    assert whole.usage == streamed.usage
    assert whole.stop_reason == streamed.stop_reason == "tool_use"
    assert whole.id and whole.id != streamed.id
    assert h.listener.texts == ["Pinging it now."]
    assert h.listener.thoughts == ["The user wants a ping."]


async def test_without_streaming_failures_are_retried_or_refused_the_same_way() -> None:
    script: list[ServerScriptItem] = [
        Failure.overloaded(),
        Failure.rate_limited(retry_after=0.01),
        "back",
        Failure.bad_request("prompt is too long"),
    ]
    async with open_harness(script, stream=False) as h:
        response = await h.respond()
        with pytest.raises(ModelError) as info:
            await h.respond()
    assert response.text == "back"
    assert [reason for _, _, reason in h.listener.retries] == [
        "529: Overloaded",
        "429: rate limited",
    ]
    assert info.value.status == 400
    assert not info.value.retryable
    assert "prompt is too long" in str(info.value)


async def test_without_streaming_an_agent_runs_its_tools() -> None:
    import satsuma

    @satsuma.tool
    async def double(n: int) -> str:
        """Double a number.

        Args:
            n: The number.
        """
        return str(2 * n)

    class Doubler(satsuma.Agent):
        name = "doubler"
        tools = [double]

    script: list[ServerScriptItem] = [Reply(tool_calls=[("double", {"n": 21})]), "42."]
    async with MessagesServer(script) as server, server.client() as client:
        model = AnthropicModel(client, stream=False)
        async with satsuma.open_agent(Doubler, model=model) as agent:
            result = await agent.run("Double 21")
    assert result.status == "completed"
    assert result.output == "42."
    assert result.messages[2].content[0]["content"] == "42"
    assert all("stream" not in request for request in server.requests)


async def test_without_streaming_a_response_too_long_to_wait_for_is_a_clear_error() -> None:
    # The SDK refuses a whole response that could take over 10 minutes: a ModelError
    # that fails the run, not an exception that crashes the agent.
    async with open_harness(["never sent"], stream=False) as h:
        with pytest.raises(ModelError) as info:
            await h.respond(make_request(max_tokens=64000))
    assert str(info.value).startswith("stream=False cannot be used here: Streaming is required")
    assert not info.value.retryable
    assert h.server.requests == []
