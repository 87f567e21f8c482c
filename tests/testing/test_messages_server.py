"""MessagesServer, seen through the real AsyncAnthropic client: plain and streamed
replies, the requests it records, each injected fault, and a clean shutdown."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import h11
import httpx2
import pytest
import trio
import trio.lowlevel
from anthropic.types import RawMessageStreamEvent

from satsuma import ToolCall
from satsuma._exceptions import ModelError
from satsuma._messages import Usage
from satsuma.testing import MessagesServer
from satsuma.testing._script import Failure, Reply

USER = [{"role": "user", "content": "Hello"}]


async def create(client: anthropic.AsyncAnthropic, **options: Any) -> Any:
    return await client.messages.create(
        model="claude-test", max_tokens=100, messages=USER, **options
    )


async def events_of(client: anthropic.AsyncAnthropic) -> list[RawMessageStreamEvent]:
    stream = await create(client, stream=True)
    return [event async for event in stream]


FULL_REPLY = Reply(
    text="The answer is forty-two.",
    thinking="Let me work this out carefully.",
    tool_calls=[ToolCall("toolu_1", "ping", {"host": "example.com", "count": 3})],
    usage=Usage(input_tokens=11, output_tokens=7, cache_read_input_tokens=5),
)


async def test_a_plain_response_parses_with_the_sdk() -> None:
    async with MessagesServer([FULL_REPLY]) as server, server.client() as client:
        message = await create(client)
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == "claude-test"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool_use = message.content
    assert thinking.thinking == "Let me work this out carefully."
    assert thinking.signature == "scripted"
    assert text.text == "The answer is forty-two."
    assert (tool_use.id, tool_use.name) == ("toolu_1", "ping")
    assert tool_use.input == {"host": "example.com", "count": 3}
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 11
    assert message.usage.output_tokens == 7
    assert message.usage.cache_read_input_tokens == 5


async def test_a_streamed_response_comes_in_deltas() -> None:
    async with MessagesServer([FULL_REPLY]) as server, server.client() as client:
        events = await events_of(client)
    assert events[0].type == "message_start"
    assert events[0].message.usage.input_tokens == 11
    assert [event.type for event in events[-2:]] == ["message_delta", "message_stop"]
    assert events[-2].delta.stop_reason == "tool_use"
    assert events[-2].usage.output_tokens == 7

    starts = [event for event in events if event.type == "content_block_start"]
    assert [start.content_block.type for start in starts] == ["thinking", "text", "tool_use"]
    deltas = [event for event in events if event.type == "content_block_delta"]
    thinking = [d.delta for d in deltas if d.index == 0]
    assert thinking[-1].type == "signature_delta"
    assert thinking[-1].signature == "scripted"
    assert len(thinking) > 2
    assert "".join(d.thinking for d in thinking[:-1]) == "Let me work this out carefully."
    text = [d.delta.text for d in deltas if d.index == 1]
    assert len(text) > 1
    assert "".join(text) == "The answer is forty-two."
    tool_json = [d.delta.partial_json for d in deltas if d.index == 2]
    assert len(tool_json) > 1
    assert json.loads("".join(tool_json)) == {"host": "example.com", "count": 3}
    stops = [event.index for event in events if event.type == "content_block_stop"]
    assert stops == [0, 1, 2]


async def test_the_sdks_own_stream_helper_assembles_the_same_message() -> None:
    async with (
        MessagesServer([FULL_REPLY]) as server,
        server.client() as client,
        client.messages.stream(model="claude-test", max_tokens=100, messages=USER) as stream,
    ):
        texts = [text async for text in stream.text_stream]
        message = await stream.get_final_message()
    assert "".join(texts) == "The answer is forty-two."
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"host": "example.com", "count": 3}
    assert message.usage.output_tokens == 7


async def test_a_tool_input_given_as_text_is_streamed_as_that_raw_text() -> None:
    reply = Reply(tool_calls=[("broken", '{"path": "a.txt", '), ("fine", '{"n": 1}')])
    async with MessagesServer([reply, reply]) as server, server.client() as client:
        events = await events_of(client)
        message = await create(client)
    raw = {
        index: "".join(
            e.delta.partial_json
            for e in events
            if e.type == "content_block_delta" and e.index == index
        )
        for index in (0, 1)
    }
    assert raw == {0: '{"path": "a.txt", ', 1: '{"n": 1}'}
    # Without a stream there is no raw text to send: the block holds {}.
    assert [block.input for block in message.content] == [{}, {"n": 1}]


async def test_usage_defaults_to_a_rough_count_of_the_request() -> None:
    async with MessagesServer(["Hi"]) as server, server.client() as client:
        message = await create(client)
    assert message.usage.input_tokens >= 10  # the request's JSON is well over 40 characters
    assert message.usage.output_tokens == 1
    assert message.stop_reason == "end_turn"
    assert [block.text for block in message.content] == ["Hi"]


async def test_requests_are_recorded_in_order() -> None:
    async with MessagesServer(["one", "two"]) as server, server.client() as client:
        await create(client, system="Be brief.")
        await create(client, stream=True)
    assert len(server.requests) == 2
    assert server.requests[0]["system"] == "Be brief."
    assert server.requests[0]["messages"] == USER
    assert "stream" not in server.requests[0]
    assert server.requests[1]["stream"] is True
    assert server.remaining == 0


async def test_a_function_item_answers_from_the_request_body() -> None:
    def echo(body: dict[str, Any]) -> str:
        return f"you said {body['messages'][-1]['content']}"

    async def later(body: dict[str, Any]) -> Failure:
        await trio.lowlevel.checkpoint()
        return Failure.overloaded()

    async with MessagesServer([echo, later]) as server, server.client() as client:
        message = await create(client)
        with pytest.raises(anthropic.OverloadedError):
            await create(client)
    assert message.content[0].text == "you said Hello"


async def test_rate_limited_is_a_429_with_retry_after() -> None:
    async with (
        MessagesServer([Failure.rate_limited(retry_after=2)]) as server,
        server.client() as client,
    ):
        with pytest.raises(anthropic.RateLimitError) as caught:
            await create(client, stream=True)
    error = caught.value
    assert error.status_code == 429
    assert error.response.headers["retry-after"] == "2"
    assert error.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "rate limited"},
    }


@pytest.mark.parametrize(
    ("failure", "exception", "status", "kind"),
    [
        (Failure.overloaded(), anthropic.OverloadedError, 529, "overloaded_error"),
        (Failure.server_error(), anthropic.InternalServerError, 500, "api_error"),
        (Failure.server_error(503), anthropic.ServiceUnavailableError, 503, "api_error"),
        (
            Failure.bad_request("prompt is too long: 250000 tokens > 200000 maximum"),
            anthropic.BadRequestError,
            400,
            "invalid_request_error",
        ),
        (ValueError("the tool exploded"), anthropic.InternalServerError, 500, "api_error"),
        (ModelError("slow down", status=529), anthropic.OverloadedError, 529, "overloaded_error"),
    ],
)
async def test_status_failures_have_the_apis_error_shape(
    failure: Any, exception: type[anthropic.APIStatusError], status: int, kind: str
) -> None:
    async with MessagesServer([failure]) as server, server.client() as client:
        with pytest.raises(exception) as caught:
            await create(client)
    assert caught.value.status_code == status
    assert caught.value.type == kind
    assert caught.value.api_message == (
        str(failure) if isinstance(failure, ValueError) else getattr(failure, "message", None)
    )


async def test_a_cut_stream_drops_the_connection_after_some_events() -> None:
    script = [Failure.cut_stream("A long answer that never ends", after_events=3), "after"]
    async with MessagesServer(script) as server, server.client() as client:
        stream = await create(client, stream=True)
        seen = []
        with pytest.raises(httpx2.RemoteProtocolError):
            async for event in stream:
                seen.append(event.type)
        assert seen == ["message_start", "content_block_start", "content_block_delta"]
        # The script moves on: the next request gets the next item.
        message = await create(client)
    assert message.content[0].text == "after"


async def test_a_cut_without_a_stream_is_a_connection_error() -> None:
    async with (
        MessagesServer([Failure.cut_stream("never sent")]) as server,
        server.client() as client,
    ):
        with pytest.raises(anthropic.APIConnectionError):
            await create(client)


# The SDK raises the error event from inside its event generator and leaves the
# generators under it suspended; trio warns about each when they are collected. The
# warnings are let go here, and the collection forced now rather than in a later test.
# (AnthropicModel reads the raw events to the end instead, and so leaves none.)
@pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")
async def test_an_error_event_ends_the_stream(collect_garbage: Callable[[], int]) -> None:
    script = [Failure.stream_error("Half an answer", after_events=4), "after"]
    async with MessagesServer(script) as server, server.client() as client:
        stream = await create(client, stream=True)
        seen = []
        with pytest.raises(anthropic.APIStatusError) as caught:
            async for event in stream:
                seen.append(event.type)
        assert len(seen) == 4
        message = await create(client)
    # The SDK raises it on the stream's 200 response: only the body tells what it is.
    assert caught.value.status_code == 200
    assert caught.value.type == "overloaded_error"
    assert caught.value.api_message == "Overloaded"
    assert message.content[0].text == "after"
    del caught, stream
    collect_garbage()
    await trio.lowlevel.checkpoint()  # trio closes the collected generators in its own tasks


async def test_a_slow_answer_waits_first() -> None:
    async with (
        MessagesServer([Failure.slow("late", delay=0.2)]) as server,
        server.client() as client,
    ):
        start = trio.current_time()
        message = await create(client)
    assert trio.current_time() - start >= 0.2
    assert message.content[0].text == "late"


async def test_a_client_that_gives_up_on_a_slow_answer_does_not_break_the_server() -> None:
    script = [Failure.slow("too late", delay=5.0), "on time"]
    async with MessagesServer(script) as server, server.client(timeout=0.1) as client:
        with pytest.raises(anthropic.APITimeoutError):
            await create(client)
        message = await create(client)
    assert message.content[0].text == "on time"


async def test_an_exhausted_script_fails_clearly() -> None:
    async with MessagesServer(["only one"]) as server, server.client() as client:
        await create(client)
        with pytest.raises(anthropic.InternalServerError) as caught:
            await create(client)
    assert caught.value.api_message == "MessagesServer script exhausted after 1 requests"
    assert len(server.requests) == 2


async def test_other_paths_are_not_found() -> None:
    async with MessagesServer(["unused"]) as server, server.client() as client:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await client.post("/v1/complete", body={"model": "claude-test"}, cast_to=object)
    assert caught.value.type == "not_found_error"
    assert server.requests == []
    assert server.remaining == 1


async def test_the_count_endpoint_counts_as_the_server_bills_and_plays_no_script_item() -> None:
    async with MessagesServer(["unused"]) as server, server.client() as client:
        counted = await client.messages.count_tokens(model="claude-test", messages=USER)  # type: ignore[arg-type]
        longer = [{"role": "user", "content": "word " * 400}]
        more = await client.messages.count_tokens(model="claude-test", messages=longer)  # type: ignore[arg-type]
        with pytest.raises(anthropic.BadRequestError, match="model: Field required"):
            await client.post("/v1/messages/count_tokens", body={"messages": []}, cast_to=object)
    body = server.count_requests[0]
    # A token per 4 characters of the body: 2,000 more characters, some 500 more tokens.
    assert counted.input_tokens >= 1
    assert 490 <= more.input_tokens - counted.input_tokens <= 510
    assert body["model"] == "claude-test" and "max_tokens" not in body
    assert server.requests == [] and server.remaining == 1


async def test_a_request_without_required_fields_is_refused() -> None:
    async with MessagesServer(["unused"]) as server, server.client() as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.post("/v1/messages", body={"model": "m"}, cast_to=object)
    assert caught.value.api_message == "max_tokens: Field required"
    assert server.remaining == 1


async def test_connections_are_kept_alive_between_requests() -> None:
    async with MessagesServer(["one", "two"]) as server:
        host, port = server.base_url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        connection = h11.Connection(h11.CLIENT)
        answers = []
        async with stream:
            for _ in range(2):
                body = json.dumps({"model": "m", "max_tokens": 5, "messages": USER}).encode()
                request = h11.Request(
                    method="POST",
                    target="/v1/messages",
                    headers=[("host", host), ("content-length", str(len(body)))],
                )
                for event in (request, h11.Data(data=body), h11.EndOfMessage()):
                    await stream.send_all(connection.send(event) or b"")
                data = b""
                while True:
                    event = connection.next_event()
                    if event is h11.NEED_DATA:
                        connection.receive_data(await stream.receive_some())
                    elif isinstance(event, h11.Data):
                        data += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                answers.append(json.loads(data)["content"][0]["text"])
                connection.start_next_cycle()
    assert answers == ["one", "two"]


async def test_the_server_stops_on_exit_and_leaves_no_task() -> None:
    before = trio.lowlevel.current_statistics().tasks_living
    async with MessagesServer(["one", Failure.slow("never", delay=30)]) as server:
        base_url = server.base_url
        async with server.client() as client:
            await create(client)
        # A request left hanging on the server when it stops.
        async with trio.open_nursery() as nursery, server.client() as hanging:
            nursery.start_soon(create, hanging)
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert trio.lowlevel.current_statistics().tasks_living == before
    with pytest.raises(RuntimeError):
        server.base_url  # noqa: B018
    host, port = base_url.removeprefix("http://").split(":")
    with pytest.raises(OSError):
        await trio.open_tcp_stream(host, int(port))


async def test_an_exception_in_the_body_comes_out_as_it_is() -> None:
    with pytest.raises(KeyError):
        async with MessagesServer([]):
            raise KeyError("mine")


async def test_a_script_function_that_raises_fails_the_block() -> None:
    def broken(body: dict[str, Any]) -> str:
        raise LookupError("bad test helper")

    with pytest.RaisesGroup(LookupError):
        async with MessagesServer([broken]) as server, server.client() as client:
            await create(client)


def test_script_items_are_checked_up_front() -> None:
    with pytest.raises(TypeError, match=r"script\[1\] must be a str"):
        MessagesServer(["fine", 42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown Failure kind 'meltdown'"):
        MessagesServer([Failure(kind="meltdown")])


def test_base_url_needs_a_running_server() -> None:
    with pytest.raises(RuntimeError, match="new, not running"):
        MessagesServer([]).base_url  # noqa: B018
