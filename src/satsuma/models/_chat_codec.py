"""The OpenAI Chat Completions wire format's answers: the one place that builds and parses
a completion's dicts (a request's are ``_chat_requests``').

satsuma keeps every conversation in the Anthropic Messages shape (``_codec``), whichever
provider answers it, so that a history, a journal and a resume do not depend on the
model: ``_chat_requests`` translates a request's messages and tools into Chat
Completions parameters, and this module a completion (whole, or as stream chunks) back
into Anthropic content blocks. ``OpenAIModel`` reads with it and the test server writes
with it, so the two agree. Like ``_codec`` it imports nothing of satsuma and not the SDK.

Streamed reasoning (``reasoning_content`` or ``reasoning``, which vLLM, DeepSeek and
OpenRouter send) is reported as thinking deltas but not kept: no Chat Completions
endpoint takes it back.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._codec import StreamedMessage, in_pieces, no_delta

__all__ = [
    "ChatAccumulator",
    "completion_chunks",
    "completion_object",
    "error_body",
    "finish_reason",
]

# Chat Completions finish_reason -> the Messages API's stop_reason, which the loop and
# the events speak. An unknown reason is kept as it is.
_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


# --- Errors ----------------------------------------------------------------------------

_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error body as OpenAI's API sends it."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# --- Responses -------------------------------------------------------------------------


def finish_reason(stop_reason: str) -> str:
    """The Chat Completions finish_reason for a Messages API stop_reason."""
    return _FINISH_REASONS.get(stop_reason, stop_reason)


def _usage_object(usage: Mapping[str, int]) -> dict[str, Any]:
    cached = usage.get("cache_read_input_tokens", 0)
    prompt = usage.get("input_tokens", 0) + cached + usage.get("cache_creation_input_tokens", 0)
    completion = usage.get("output_tokens", 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _calls_of(
    content: Iterable[Mapping[str, Any]], raw_arguments: Mapping[str, str]
) -> list[dict[str, Any]]:
    return [
        {
            "id": block["id"],
            "type": "function",
            "function": {
                "name": block["name"],
                "arguments": raw_arguments.get(block["id"], json.dumps(block.get("input", {}))),
            },
        }
        for block in content
        if block.get("type") == "tool_use"
    ]


def completion_object(
    *,
    id: str,
    model: str,
    content: Sequence[Mapping[str, Any]],
    stop_reason: str,
    usage: Mapping[str, int],
    raw_arguments: Mapping[str, str] | None = None,
    created: int = 0,
) -> dict[str, Any]:
    """A whole ``chat.completion`` for Anthropic-shaped content blocks (text and
    tool_use; others are left out). ``raw_arguments`` maps a call id to the arguments
    text to send for it (which may not even parse)."""
    text = "".join(block["text"] for block in content if block.get("type") == "text")
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    calls = _calls_of(content, raw_arguments or {})
    if calls:
        message["tool_calls"] = calls
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(stop_reason),
                "logprobs": None,
            }
        ],
        "usage": _usage_object(usage),
    }


def completion_chunks(
    completion: Mapping[str, Any], *, include_usage: bool = True, pieces: int = 3
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects that stream ``completion`` (as
    ``completion_object`` builds it), as the API sends them: text and each call's
    arguments in about ``pieces`` deltas, then the finish reason, then
    (``include_usage``) a chunk with the usage and no choices."""
    head = {**completion, "object": "chat.completion.chunk"}
    del head["choices"], head["usage"]
    (choice,) = completion["choices"]
    message = choice["message"]

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in in_pieces(message["content"] or "", pieces)]
    for index, call in enumerate(message.get("tool_calls", ())):
        function = call["function"]
        opening = {"id": call["id"], "type": "function", "function": {"name": function["name"]}}
        opening["function"]["arguments"] = ""
        chunks.append(chunk({"tool_calls": [{"index": index, **opening}]}))
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in in_pieces(function["arguments"], pieces)
        ]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


# --- Reading a completion --------------------------------------------------------------


_call_numbers = itertools.count(1)


@attrs.define
class _Call:
    id: str
    name: str
    arguments: list[str] = attrs.Factory(list)


@attrs.define(eq=False)
class ChatAccumulator:
    """Builds the assistant message, as Anthropic content blocks, from a completion's
    stream chunks (``feed``) or from a whole completion (``feed_completion``).

    A call whose arguments are not a JSON object does not spoil the message: its
    ``tool_use`` block holds ``{}`` and ``tool_uses`` keeps the raw text, so that only
    that call is answered with ``Invalid arguments``.

    Attributes:
        on_text: Called with each text delta.
        on_thinking: Called with each reasoning delta (not kept: see the module).
        on_tool_input: Called with a call's name and each piece of its arguments' JSON.
        finished: Whether a finish_reason has arrived.
        error: The ``error`` object of an error sent inside the stream, or None.
    """

    on_text: Callable[[str], None] = no_delta
    on_thinking: Callable[[str], None] = no_delta
    on_tool_input: Callable[[str, str], None] | None = None
    finished: bool = attrs.field(default=False, init=False)
    error: dict[str, Any] | None = attrs.field(default=None, init=False)
    _text: list[str] = attrs.field(factory=list, init=False)
    _calls: dict[int, _Call] = attrs.field(factory=dict, init=False)
    _finish: str | None = attrs.field(default=None, init=False)
    _model: str = attrs.field(default="", init=False)
    _id: str = attrs.field(default="", init=False)
    _usage: dict[str, int] = attrs.field(factory=dict, init=False)

    def feed(self, chunk: Mapping[str, Any]) -> None:
        """Take one decoded stream chunk.

        Raises:
            KeyError, TypeError, AttributeError: the chunk does not have the API's shape.
        """
        if "error" in chunk and "choices" not in chunk:
            error = chunk["error"]
            self.error = dict(error) if isinstance(error, Mapping) else {"message": str(error)}
            return
        self._head(chunk)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # n > 1 is never asked for
            delta = choice.get("delta") or {}
            self._words(delta)
            for call in delta.get("tool_calls") or ():
                self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self.finished = True

    def _head(self, chunk: Mapping[str, Any]) -> None:
        self._model = chunk.get("model") or self._model
        self._id = chunk.get("id") or self._id
        if chunk.get("usage"):
            self._count(chunk["usage"])

    def _words(self, part: Mapping[str, Any]) -> None:
        """The reasoning and the text of a delta, or of a whole message."""
        reasoning = part.get("reasoning_content") or part.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self.on_thinking(reasoning)
        if part.get("content"):
            self._text.append(part["content"])
            self.on_text(part["content"])

    def _call_delta(self, delta: Mapping[str, Any]) -> None:
        index = delta.get("index", len(self._calls))
        function = delta.get("function") or {}
        call = self._calls.get(index)
        if call is None:
            # Some servers leave out the id: made up, unique in the process.
            call_id = delta.get("id") or f"call_satsuma_{next(_call_numbers)}"
            call = self._calls[index] = _Call(call_id, function.get("name") or "")
        elif function.get("name") and not call.name:
            call.name = function["name"]
        piece = function.get("arguments")
        if piece:
            call.arguments.append(piece)
            if self.on_tool_input is not None:
                self.on_tool_input(call.name, piece)

    def feed_completion(self, completion: Mapping[str, Any]) -> None:
        """Take a whole ``chat.completion``, as if it had streamed (its text and each
        call's arguments reported in one piece).

        Raises:
            KeyError, TypeError, IndexError, AttributeError: not a completion.
        """
        self._head(completion)
        choice = completion["choices"][0]
        message = choice["message"]
        self._words(message)
        for index, call in enumerate(message.get("tool_calls") or ()):
            self._call_delta({**call, "index": index})
        self._finish = choice.get("finish_reason")
        self.finished = True

    def _count(self, usage: Mapping[str, Any]) -> None:
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        cached = cached if isinstance(cached, int) else 0
        if isinstance(prompt, int):
            # The prompt's count includes its cached part; satsuma counts them apart.
            self._usage["input_tokens"] = max(0, prompt - cached)
            self._usage["cache_read_input_tokens"] = cached
        if isinstance(completion, int):
            self._usage["output_tokens"] = completion

    def result(self) -> StreamedMessage:
        """The message as assembled so far, in the Messages API's shape."""
        content: list[dict[str, Any]] = []
        tool_uses: list[tuple[str, str, Any]] = []
        if self._text:
            content.append({"type": "text", "text": "".join(self._text)})
        for index in sorted(self._calls):
            call = self._calls[index]
            text = "".join(call.arguments)
            try:
                value = json.loads(text) if text.strip() else {}
            except (ValueError, RecursionError):  # not JSON, or nested past what json reads
                value = None
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            if isinstance(value, dict):
                block["input"] = value
                tool_uses.append((call.id, call.name, value))
            else:
                tool_uses.append((call.id, call.name, text))
            content.append(block)
        stop = self._finish
        if stop == "stop" and tool_uses:
            # Some servers (older Ollama) say "stop" on a turn that calls tools.
            stop = "tool_calls"
        return StreamedMessage(
            content=tuple(content),
            tool_uses=tuple(tool_uses),
            stop_reason=_STOP_REASONS.get(stop, stop) if stop is not None else None,
            model=self._model,
            id=self._id,
            input_tokens=self._usage.get("input_tokens", 0),
            output_tokens=self._usage.get("output_tokens", 0),
            cache_read_input_tokens=self._usage.get("cache_read_input_tokens", 0),
        )
