"""The Chat Completions codec on its own: what the servers found in the wild send (no ids,
"stop" on a turn with calls, reasoning deltas, usage chunks), and the shapes it refuses."""

from __future__ import annotations

import pytest

from satsuma import Message
from satsuma.models._chat_codec import ChatAccumulator, completion_chunks, completion_object
from satsuma.models._chat_requests import UnsupportedContent, chat_messages, chat_tools


def test_chunks_it_writes_read_back_as_the_same_message() -> None:
    content = [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "call_1", "name": "ping", "input": {"host": "a"}},
    ]
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 4}
    completion = completion_object(
        id="c1", model="m", content=content, stop_reason="tool_use", usage=usage
    )
    whole = ChatAccumulator()
    whole.feed_completion(completion)
    streamed = ChatAccumulator()
    for chunk in completion_chunks(completion):
        streamed.feed(chunk)
    assert whole.result() == streamed.result()
    message = streamed.result()
    assert message.content == tuple(content)
    assert message.stop_reason == "tool_use"
    assert (message.input_tokens, message.cache_read_input_tokens, message.output_tokens) == (
        10,
        4,
        5,
    )


def test_a_call_without_an_id_gets_one_and_stop_with_calls_means_tool_use() -> None:
    # Some local servers leave the id out, and say "stop" on a turn that calls tools.
    accumulator = ChatAccumulator()
    accumulator.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "function": {"name": "ping", "arguments": ""}}]
                    },
                }
            ]
        }
    )
    accumulator.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                    "finish_reason": "stop",
                }
            ]
        }
    )
    message = accumulator.result()
    ((call_id, name, arguments),) = message.tool_uses
    assert call_id.startswith("call_satsuma_") and name == "ping" and arguments == {}
    assert message.stop_reason == "tool_use"


def test_reasoning_is_reported_but_not_kept() -> None:
    thoughts: list[str] = []
    accumulator = ChatAccumulator(on_thinking=thoughts.append)
    accumulator.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "Hmm."}}]})
    accumulator.feed(
        {"choices": [{"index": 0, "delta": {"content": "Yes."}, "finish_reason": "stop"}]}
    )
    assert thoughts == ["Hmm."]
    assert accumulator.result().content == ({"type": "text", "text": "Yes."},)


def test_an_error_chunk_is_kept_as_the_error() -> None:
    accumulator = ChatAccumulator()
    accumulator.feed({"error": {"message": "upstream timed out", "code": 502}})
    assert accumulator.error == {"message": "upstream timed out", "code": 502}
    assert not accumulator.finished


def test_a_chunk_of_the_wrong_shape_raises_for_the_model_to_retry() -> None:
    with pytest.raises((TypeError, AttributeError)):
        ChatAccumulator().feed({"choices": ["not a choice"]})


def test_an_assistant_message_of_only_thinking_is_left_out() -> None:
    history = [
        Message.user("Hi"),
        Message(
            role="assistant", content=[{"type": "thinking", "thinking": "x", "signature": "s"}]
        ),
        Message.user("Again"),
    ]
    assert chat_messages(None, history) == [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": "Again"},
    ]


def test_an_anthropic_server_tool_cannot_be_sent() -> None:
    with pytest.raises(UnsupportedContent, match="web_search"):
        chat_tools([{"type": "web_search_20250305", "name": "web_search"}])
