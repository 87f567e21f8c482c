"""OpenAIModel against ChatCompletionsServer, with the real AsyncOpenAI client under trio:
what respond() returns, what the listener hears, the Chat Completions request it sends
for a satsuma conversation, and each failure it retries or refuses."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import openai
import pytest
import trio
import trio.lowlevel

import satsuma
from satsuma import ToolCall
from satsuma._exceptions import ConfigurationError, ModelError
from satsuma._messages import Message, Usage
from satsuma.models._model import ModelRequest
from satsuma.models._openai import OpenAIModel
from satsuma.testing._chat_server import ChatCompletionsServer
from satsuma.testing._script import Failure, Reply
from satsuma.testing._server import ServerScriptItem

FAST = {"backoff_base": 0.001, "jitter": False}
PING = {"name": "ping", "description": "Ping a host", "input_schema": {"type": "object"}}


@attrs.define
class Listener:
    wants_deltas: bool = True
    texts: list[str] = attrs.Factory(list)
    inputs: list[tuple[str, str]] = attrs.Factory(list)
    retries: list[tuple[int, float, str]] = attrs.Factory(list)

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def thinking(self, delta: str) -> None:
        raise AssertionError("Chat Completions sends no thinking here")

    def tool_input(self, name: str, piece: str) -> None:
        self.inputs.append((name, piece))

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        self.retries.append((attempt, delay, reason))


def make_request(**changes: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "gpt-test",
        "system": "You help.",
        "messages": (Message.user("Hello"),),
        "tools": (PING,),
        "max_tokens": 1000,
    }
    return ModelRequest(**{**fields, **changes})


@attrs.define
class Harness:
    server: ChatCompletionsServer
    model: OpenAIModel
    listener: Listener

    async def respond(self, request: ModelRequest | None = None) -> Any:
        return await self.model.respond(request or make_request(), self.listener)


@asynccontextmanager
async def open_harness(
    script: list[ServerScriptItem], *, stream: bool = True, **options: Any
) -> AsyncIterator[Harness]:
    async with ChatCompletionsServer(script) as server:
        model = OpenAIModel(server.client(), **{**FAST, **options})
        yield Harness(server, model, Listener(wants_deltas=stream))


FULL_REPLY = Reply(
    text="Pinging both.",
    tool_calls=[
        ToolCall("call_1", "ping", {"host": "example.com"}),
        ToolCall("call_2", "ping", {"host": "example.org"}),
    ],
    usage=Usage(input_tokens=12, output_tokens=34, cache_read_input_tokens=6),
)


@pytest.mark.parametrize("stream", [True, False])
async def test_respond_returns_content_calls_usage_and_stop_reason(stream: bool) -> None:
    async with open_harness([FULL_REPLY], stream=stream) as h:
        response = await h.respond()
        (request,) = h.server.requests
    assert request.get("stream", False) is stream
    assert response.content == (
        {"type": "text", "text": "Pinging both."},
        {"type": "tool_use", "id": "call_1", "name": "ping", "input": {"host": "example.com"}},
        {"type": "tool_use", "id": "call_2", "name": "ping", "input": {"host": "example.org"}},
    )
    assert response.calls == (
        ToolCall("call_1", "ping", {"host": "example.com"}),
        ToolCall("call_2", "ping", {"host": "example.org"}),
    )
    assert response.stop_reason == "tool_use"
    # prompt_tokens counts the cached part too; satsuma counts them apart.
    assert response.usage == Usage(input_tokens=12, output_tokens=34, cache_read_input_tokens=6)
    assert response.model == "gpt-test"
    assert response.id.startswith("chatcmpl-test-")
    assert "".join(h.listener.texts) == "Pinging both."
    arguments = "".join(piece for name, piece in h.listener.inputs if name == "ping")
    assert arguments == '{"host": "example.com"}{"host": "example.org"}'


async def test_text_streams_in_pieces() -> None:
    async with open_harness([Reply(text="one two three four five six")]) as h:
        response = await h.respond()
    assert len(h.listener.texts) > 1
    assert "".join(h.listener.texts) == response.text == "one two three four five six"
    assert response.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("raw", ['{"host": ', "[1, 2]", "nonsense"])
async def test_arguments_that_are_not_an_object_fail_only_that_call(stream: bool, raw: str) -> None:
    reply = Reply(
        tool_calls=[ToolCall("call_bad", "ping", raw), ToolCall("call_ok", "ping", {"host": "a"})]
    )
    async with open_harness([reply], stream=stream) as h:
        response = await h.respond()
    assert response.calls == (
        ToolCall("call_bad", "ping", raw),
        ToolCall("call_ok", "ping", {"host": "a"}),
    )
    assert response.content[0] == {
        "type": "tool_use",
        "id": "call_bad",
        "name": "ping",
        "input": {},
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [("max_tokens", "length"), ("refusal", "content_filter"), ("end_turn", "stop")],
)
async def test_finish_reasons_become_satsumas_stop_reasons(
    stop_reason: str, finish_reason: str
) -> None:
    async with open_harness([Reply(text="cut", stop_reason=stop_reason)], stream=False) as h:
        response = await h.respond()
    assert response.stop_reason == stop_reason


async def test_the_request_carries_the_conversation_in_chat_completions_shape() -> None:
    image = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    history = (
        Message.user("Ping both hosts", {"type": "image", "source": image}),
        Message(
            role="assistant",
            content=[
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {"host": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "ping", "input": {"host": "b"}},
            ],
        ),
        Message(
            role="user",
            content=[
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "Error: Tool crashed: OSError: no route",
                    "is_error": True,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [
                        {"type": "text", "text": "exit status 1"},
                        {"type": "image", "source": image},
                    ],
                    "is_error": True,
                },
                {"type": "text", "text": "Also, hurry."},
            ],
        ),
    )
    async with open_harness(["Done."], stream=False) as h:
        await h.respond(make_request(messages=history))
        (request,) = h.server.requests
    data_url = "data:image/png;base64,iVBORw0KGgo="
    assert request["model"] == "gpt-test"
    assert request["max_completion_tokens"] == 1000
    assert request["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ping",
                "description": "Ping a host",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert request["messages"] == [
        {"role": "system", "content": "You help."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Ping both hosts"},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        },
        {
            "role": "assistant",
            "content": "On it.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "ping", "arguments": '{"host": "a"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "ping", "arguments": '{"host": "b"}'},
                },
            ],
        },
        # satsuma's failure texts begin "Error: " already; a tool's own is_error result
        # gets the prefix, since a tool message has no is_error field.
        {
            "role": "tool",
            "tool_call_id": "toolu_1",
            "content": "Error: Tool crashed: OSError: no route",
        },
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: exit status 1"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images from the result of tool call toolu_2:"},
                {"type": "image_url", "image_url": {"url": data_url}},
                {"type": "text", "text": "Also, hurry."},
            ],
        },
    ]


async def test_max_tokens_can_go_by_its_older_name() -> None:
    async with open_harness(["ok"], max_tokens_param="max_tokens") as h:
        await h.respond()
    assert h.server.requests[0]["max_tokens"] == 1000
    assert "max_completion_tokens" not in h.server.requests[0]


async def test_a_block_chat_completions_cannot_carry_is_a_clear_error() -> None:
    document = {"type": "document", "source": {"type": "text", "data": "x"}}
    async with open_harness([]) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond(make_request(messages=(Message.user(document),)))
    assert caught.value.retryable is False
    assert "a 'document' block in a user message" in str(caught.value)


async def test_a_429_waits_what_retry_after_says() -> None:
    async with open_harness([Failure.rate_limited(retry_after=0.05), "done"]) as h:
        response = await h.respond()
    assert response.text == "done"
    assert h.listener.retries == [(1, 0.05, "429: rate limited")]


async def test_retry_after_is_capped_by_backoff_cap() -> None:
    async with open_harness([Failure.rate_limited(retry_after=60), "done"], backoff_cap=0.01) as h:
        await h.respond()
    assert h.listener.retries == [(1, 0.01, "429: rate limited")]


@pytest.mark.parametrize(
    ("failure", "stream", "reason"),
    [
        (Failure.server_error(502), True, "502: Internal server error"),
        (Failure.overloaded(), False, "529: Overloaded"),
        (Failure.cut_stream(Reply(text="Partial"), after_events=2), True, "stream interrupted"),
        # Not streamed, the cut is a connection closed before any answer.
        (Failure.cut_stream(Reply(text="Partial"), after_events=2), False, "Connection error"),
        # An {"error": ...} chunk inside a stream that began with 200.
        (Failure.stream_error(Reply(text="Partial"), after_events=2), True, "Overloaded"),
    ],
)
async def test_each_transient_failure_is_retried(
    failure: Any, stream: bool, reason: str, collect_garbage: Callable[[], int]
) -> None:
    async with open_harness([failure, Reply(text="Whole answer")], stream=stream) as h:
        response = await h.respond()
    assert response.text == "Whole answer"
    assert response.content == ({"type": "text", "text": "Whole answer"},)
    ((attempt, delay, said),) = h.listener.retries
    assert (attempt, delay) == (1, 0.001)
    assert said.startswith(reason)
    assert len(h.server.requests) == 2
    # Nothing of the failed stream is left to be collected (trio would warn about an
    # async generator left suspended, and warnings are errors here).
    collect_garbage()
    await trio.lowlevel.checkpoint()


async def test_retries_exhausted_raise_the_last_failure() -> None:
    script: list[ServerScriptItem] = [Failure.server_error(503)] * 3
    async with open_harness(script, max_retries=2) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond()
    assert caught.value.status == 503
    assert caught.value.retryable is True
    assert [attempt for attempt, _, _ in h.listener.retries] == [1, 2]


async def test_a_bad_request_fails_at_once_with_the_apis_message() -> None:
    async with open_harness([Failure.bad_request("context length exceeded"), "unused"]) as h:
        with pytest.raises(ModelError) as caught:
            await h.respond()
        assert h.server.remaining == 1
    assert caught.value.status == 400
    assert caught.value.retryable is False
    assert caught.value.message == "context length exceeded"
    assert h.listener.retries == []


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_retries must be 0 or more"):
        OpenAIModel(max_retries=-1)
    with pytest.raises(ValueError, match="max_tokens_param must be"):
        OpenAIModel(max_tokens_param="tokens")  # type: ignore[arg-type]


def test_without_a_key_the_error_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY is not set") as caught:
        OpenAIModel()
    assert "OPENAI_BASE_URL" in caught.value.fix


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # What `import openai` does where the package is not installed.
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ConfigurationError, match="the openai package is not installed") as caught:
        OpenAIModel()
    assert 'pip install "satsuma[openai]"' in caught.value.fix


async def test_a_client_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async with ChatCompletionsServer(["From the environment."]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "env-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        async with OpenAIModel(**FAST) as model:  # type: ignore[arg-type]
            response = await model.respond(make_request(), Listener())
        assert model.client.is_closed()
    assert response.text == "From the environment."


@pytest.mark.parametrize("stream", [True, False])
async def test_a_cancelled_call_leaves_nothing_behind(
    stream: bool, collect_garbage: Callable[[], int]
) -> None:
    arrived = trio.Event()

    async def never(body: dict[str, Any]) -> str:
        arrived.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_harness([never, "next"], stream=stream) as h:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.respond)
            await arrived.wait()
            nursery.cancel_scope.cancel()
        assert h.listener.retries == []  # a cancel is not a failure to retry
        # The client is still good for the next call.
        assert (await h.respond()).text == "next"
    # No generator of the cancelled stream is left for the collector (trio would warn,
    # and warnings are errors here).
    collect_garbage()
    await trio.lowlevel.checkpoint()


async def test_limits_bound_the_agents_sharing_the_model() -> None:
    in_flight = peak = 0

    async def held(body: dict[str, Any]) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        # Long enough for the others to arrive, were they let through.
        await trio.sleep(0.05)
        in_flight -= 1
        return "ok"

    class Chat(satsuma.Agent):
        name = "chat"
        model = "openai:gpt-test"

    async with ChatCompletionsServer([held] * 4) as server:
        model = OpenAIModel(server.client(), limits=satsuma.ModelLimits(max_concurrency=1))

        async def converse() -> None:
            async with satsuma.open_agent(Chat, model=model) as agent:
                assert (await agent.run("hi")).output == "ok"

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(converse)
    assert peak == 1
    with pytest.raises(TypeError, match=r"limits must be a satsuma\.ModelLimits"):
        OpenAIModel(limits=1)  # type: ignore[arg-type]


async def test_prompt_cache_key_goes_to_openai_only_and_is_stable_per_prefix() -> None:
    # The loopback server is not OpenAI's API: no key unless asked for.
    async with open_harness(["one"]) as h:
        await h.respond()
    assert "prompt_cache_key" not in h.server.requests[0]
    tools = ({"name": "a", "description": "A", "input_schema": {"type": "object"}},)
    async with open_harness(["1", "2", "3", "4"], prompt_cache_key=True) as h:
        await h.respond(make_request(tools=tools))
        await h.respond(make_request(tools=tools, messages=(Message.user("Other"),)))
        await h.respond(make_request(tools=tools, system="Another prompt."))
        await h.respond(make_request(tools=tools, cache=None))
    first, second, other, uncached = h.server.requests
    assert first["prompt_cache_key"].startswith("satsuma-")
    assert second["prompt_cache_key"] == first["prompt_cache_key"]  # the same prefix
    assert other["prompt_cache_key"] != first["prompt_cache_key"]
    assert "prompt_cache_key" not in uncached
    async with openai.AsyncOpenAI(api_key="k") as client:  # OpenAI's own base URL
        assert OpenAIModel(client).prompt_cache_key is True
        with pytest.raises(ValueError, match="prompt_cache_key must be"):
            OpenAIModel(client, prompt_cache_key="yes")  # type: ignore[arg-type]
