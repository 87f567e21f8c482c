"""ChatCompletionsServer, seen through the real AsyncOpenAI client: replies the SDK parses,
streamed chunks with and without usage, the faults, and what it refuses."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from satsuma import ToolCall
from satsuma.testing import ChatCompletionsServer, Failure, Reply

USER = [{"role": "user", "content": "Hello"}]


async def test_a_reply_parses_with_the_sdk() -> None:
    reply = Reply(text="Pinging.", tool_calls=[ToolCall("call_1", "ping", {"host": "a"})])
    async with ChatCompletionsServer([reply]) as server, server.client() as client:
        completion = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Pinging."
    (call,) = choice.message.tool_calls or []
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_1",
        "ping",
        '{"host": "a"}',
    )
    assert completion.usage is not None and completion.usage.completion_tokens > 0


@pytest.mark.parametrize("include_usage", [True, False])
async def test_a_stream_parses_with_the_sdk(include_usage: bool) -> None:
    # Read raw and parsed with the SDK's chunk type: the SDK's own stream, iterated to its
    # end under trio, leaves its generators suspended at [DONE] (it breaks out of them),
    # which trio reports as ResourceWarnings (OpenAIModel reads raw for that reason).
    options: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    async with (
        ChatCompletionsServer(["one two three"]) as server,
        server.client() as client,
        client.chat.completions.with_streaming_response.create(
            model="m",
            messages=USER,  # type: ignore[arg-type]
            stream=True,
            **options,
        ) as response,
    ):
        lines = [line async for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(line[6:]) for line in lines[:-1]]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert (chunks[-1].usage is not None) is include_usage


async def test_faults_come_as_openais_errors() -> None:
    script = [Failure.rate_limited(retry_after=2), Failure.bad_request("too long")]
    async with ChatCompletionsServer(script) as server, server.client() as client:
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert limited.value.response.headers["retry-after"] == "2"
    assert refused.value.body == {
        "message": "too long",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


async def test_other_paths_and_an_exhausted_script_are_refused() -> None:
    async with ChatCompletionsServer([]) as server, server.client() as client:
        with pytest.raises(openai.NotFoundError):
            await client.embeddings.create(model="m", input="x")
        with pytest.raises(openai.InternalServerError, match="script exhausted after 0"):
            await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        assert [request.path for request in server.received] == ["/v1/chat/completions"]
