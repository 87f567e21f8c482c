"""The wire format: request parameters, error bodies, and the stream accumulator (fed
with events as the API sends them, including block types satsuma does not know)."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma._messages import Message
from satsuma.models import _codec, _plaincopy, _requests


def test_request_params_leave_out_an_empty_system_prompt_and_no_tools() -> None:
    params = _requests.request_params(
        model="m", system="", messages=[Message.user("hi")], max_tokens=10, cache=True
    )
    assert params == {
        "model": "m",
        "max_tokens": 10,
        # The message's own blocks, not a copy: the SDK copies the body before sending.
        "messages": [{"role": "user", "content": ({"type": "text", "text": "hi"},)}],
    }


def test_cache_breakpoints_go_on_the_last_system_block_and_tool() -> None:
    tools = [{"name": name, "description": name, "input_schema": {}} for name in "abc"]
    params = _requests.request_params(
        model="m", system="sys", messages=[], tools=tools, max_tokens=10, cache=True
    )
    assert params["system"] == [
        {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}
    ]
    assert ["cache_control" in tool for tool in params["tools"]] == [False, False, True]
    assert all("cache_control" not in tool for tool in tools)


def test_error_types_and_statuses() -> None:
    assert _codec.error_type(529) == "overloaded_error"
    assert _codec.error_type(503) == "api_error"
    assert _codec.error_type(418) == "invalid_request_error"
    assert _codec.error_status("overloaded_error") == 529
    assert _codec.error_status("rate_limit_error") == 429
    assert _codec.error_status("something_new") is None
    assert _codec.error_status(None) is None
    assert _codec.error_object("api_error", "boom") == {
        "type": "error",
        "error": {"type": "api_error", "message": "boom"},
    }


def accumulate(events: list[dict[str, Any]]) -> tuple[_codec.StreamAccumulator, list[str]]:
    texts: list[str] = []
    accumulator = _codec.StreamAccumulator(on_text=texts.append)
    for event in events:
        accumulator.feed(event)
    return accumulator, texts


CONTENT = [
    {"type": "thinking", "thinking": "Hmm, let me see.", "signature": "sig"},
    {"type": "text", "text": "Calling two tools."},
    {"type": "tool_use", "id": "t1", "name": "ping", "input": {"host": "a"}},
    {"type": "tool_use", "id": "t2", "name": "read", "input": {}},
]
USAGE = {
    "input_tokens": 10,
    "output_tokens": 20,
    "cache_creation_input_tokens": 3,
    "cache_read_input_tokens": 4,
}


def test_stream_events_accumulate_back_to_the_message() -> None:
    events = _codec.stream_events(
        id="msg_1",
        model="m",
        content=CONTENT,
        stop_reason="tool_use",
        usage=USAGE,
        tool_inputs={"t2": '{"path": '},
    )
    accumulator, texts = accumulate(events)
    assert accumulator.complete
    assert "".join(texts) == "Calling two tools."
    message = accumulator.result()
    assert list(message.content) == CONTENT
    assert message.tool_uses == (("t1", "ping", {"host": "a"}), ("t2", "read", '{"path": '))
    assert message.stop_reason == "tool_use"
    assert message.model == "m"
    assert (message.input_tokens, message.output_tokens) == (10, 20)
    assert (message.cache_creation_input_tokens, message.cache_read_input_tokens) == (3, 4)


def test_a_stream_cut_short_is_not_complete() -> None:
    events = _codec.stream_events(
        id="msg_1", model="m", content=CONTENT, stop_reason="tool_use", usage=USAGE
    )
    accumulator, _ = accumulate(events[:5])
    assert not accumulator.complete


def test_blocks_satsuma_does_not_know_are_kept_as_the_api_gave_them() -> None:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5}}},
        {"type": "ping"},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "redacted_thinking", "data": "EncryptedBlob=="},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "server_tool_use", "id": "s1", "name": "web_search"},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "trio"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "text", "text": "", "citations": None},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Hi"}},
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {
                "type": "citations_delta",
                "citation": {"type": "char_location", "cited_text": "x", "document_title": None},
            },
        },
        {"type": "content_block_stop", "index": 2},
        {"type": "something_new", "detail": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    accumulator, _ = accumulate(events)
    message = accumulator.result()
    assert list(message.content) == [
        {"type": "redacted_thinking", "data": "EncryptedBlob=="},
        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "trio"}},
        {"type": "text", "text": "Hi", "citations": [{"type": "char_location", "cited_text": "x"}]},
    ]
    # A server tool runs at the API: it is not a call for satsuma to make.
    assert message.tool_uses == ()
    assert (message.input_tokens, message.output_tokens) == (5, 9)


def test_an_error_event_is_recorded() -> None:
    accumulator, _ = accumulate(
        [
            {"type": "message_start", "message": {"model": "m", "usage": {}}},
            _codec.error_object("overloaded_error", "Overloaded"),
        ]
    )
    assert accumulator.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert not accumulator.complete


def test_a_whole_message_reads_as_its_stream_would() -> None:
    content = [
        {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
        {"type": "text", "text": "Two calls.", "citations": None},
        {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {"host": "a"}},
        {"type": "tool_use", "id": "toolu_2", "name": "ping", "input": [1, 2]},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    ]
    usage = {"input_tokens": 7, "output_tokens": 9, "cache_read_input_tokens": 2}
    message = _codec.message_object(
        id="msg_1", model="claude-test-1", content=content, stop_reason="tool_use", usage=usage
    )
    texts: list[str] = []
    thoughts: list[str] = []
    whole = _codec.StreamAccumulator(on_text=texts.append, on_thinking=thoughts.append)
    whole.feed_message(message)
    streamed = _codec.StreamAccumulator()
    for event in _codec.stream_events(
        id="msg_1",
        model="claude-test-1",
        content=content,
        stop_reason="tool_use",
        usage=usage,
        tool_inputs={"toolu_2": "[1, 2]"},
    ):
        streamed.feed(event)
    # The same message either way, a non-object input included; the text comes in one piece.
    assert whole.complete
    assert texts == ["Two calls."]
    assert thoughts == ["Hmm."]
    result = whole.result()
    assert result.content[1] == {"type": "text", "text": "Two calls."}
    assert result.content[3]["input"] == {}
    assert result.tool_uses == (("toolu_1", "ping", {"host": "a"}), ("toolu_2", "ping", "[1, 2]"))
    assert result.tool_uses == streamed.result().tool_uses
    assert result.content[4] == content[4]
    assert (result.id, result.model, result.stop_reason) == ("msg_1", "claude-test-1", "tool_use")
    assert (result.input_tokens, result.output_tokens, result.cache_read_input_tokens) == (7, 9, 2)
    # Copied and judged in one walk (AnthropicModel's whole responses): the same message,
    # said to be plain; a block that is not plain makes the whole message not so.
    judged = _codec.StreamAccumulator()
    judged.feed_message(message, _plaincopy.plain_block)
    assert judged.result() == attrs.evolve(result, plain=True)
    assert not result.plain and not streamed.result().plain
    odd = _codec.StreamAccumulator()
    odd.feed_message(
        {**message, "content": [*content, {"type": "text", "text": "\ud800"}]},
        _plaincopy.plain_block,
    )
    assert not odd.result().plain


def test_a_whole_message_without_content_is_refused() -> None:
    accumulator = _codec.StreamAccumulator()
    try:
        accumulator.feed_message({"type": "message", "id": "msg_1"})
    except KeyError as error:
        assert error.args == ("content",)
    else:
        raise AssertionError("a message without content was accepted")


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4)
)
block_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),  # not what json.loads makes: the general copy
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(block_values)
def test_the_quick_copy_of_a_block_agrees_with_the_general_one(value: Any) -> None:
    # Nulls in objects are left out, everything else is copied (never the same object).
    quick = _plaincopy.without_none(value)
    assert quick == _plaincopy._without_none_iteratively(value)
    if isinstance(value, (dict, list)):
        assert quick is not value


def test_a_block_nested_past_the_quick_copy_is_copied_whole() -> None:
    deep: Any = {"x": None, "leaf": 1}
    for _ in range(5_000):  # past the recursion limit
        deep = {"a": deep, "b": None}
    copied = _plaincopy.without_none(deep)
    for _ in range(5_000):
        assert set(copied) == {"a"}
        copied = copied["a"]
    assert copied == {"leaf": 1}


def test_conversation_breakpoints_skip_an_empty_text_block() -> None:
    params = _requests.request_params(
        model="m",
        system="sys",
        messages=[
            Message.user(""),
            Message(role="assistant", content=[{"type": "text", "text": "a"}]),
            Message.user(""),
        ],
        max_tokens=10,
        cache=True,
    )
    _requests.conversation_breakpoints(params, ttl=None, automatic=False)
    # The API refuses cache_control on an empty text block: none is put there.
    assert "cache_control" not in json.dumps(params["messages"])
    params["messages"][-1] = {"role": "user", "content": [{"type": "text", "text": "q"}]}
    _requests.conversation_breakpoints(params, ttl="1h", automatic=False)
    assert params["messages"][-1]["content"][-1]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "1h",
    }
    assert "cache_control" not in params["messages"][0]["content"][-1]
