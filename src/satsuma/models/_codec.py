"""The Anthropic Messages API wire format: the one place that builds and parses its dicts.

Everything else in satsuma works with its own attrs classes; only this module knows the
shape of an error body and of a message and its stream events (read by AnthropicModel,
written by the test server, so that the two agree), and ``_requests`` the shape of a
request's parameters. The
shapes satsuma's own conversation shares with tools (a tool definition, ``tool_use`` and
``tool_result`` blocks) are the kernel's (``satsuma._shapes``). It imports nothing of
satsuma, and not the SDK either, whose import takes seconds.

What it writes (a message and its stream events, for the test server) and what it
reads (the stream accumulator) must agree field for field, which they can be checked to
do only side by side.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

import attrs

from ._context_editing import compaction_steps
from ._plaincopy import without_none

__all__ = [
    "StreamAccumulator",
    "StreamedMessage",
    "error_object",
    "error_status",
    "error_type",
    "message_object",
    "no_delta",
    "plain",
    "in_pieces",
    "stream_events",
]


# --- Plain values ----------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A deep copy of ``value`` made of dicts and lists only, as the SDK serialises them
    (a frozen message holds tuples and read-only mappings)."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


# --- Errors ----------------------------------------------------------------------------

# The API's error types by HTTP status (https://docs.anthropic.com/en/api/errors). An error
# sent as an ``error`` event inside a stream arrives on a 200 response, so its type is the
# only way to know which status it stands for.
_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_STATUSES: dict[str, int] = {kind: status for status, kind in _ERROR_TYPES.items()}


def error_type(status: int) -> str:
    """The API's error type for an HTTP status."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_status(kind: str | None) -> int | None:
    """The HTTP status that an API error type stands for, or None for an unknown type."""
    return _STATUSES.get(kind) if kind is not None else None


def error_object(kind: str, message: str) -> dict[str, Any]:
    """An error body, as the API sends it in an HTTP response or an ``error`` event."""
    return {"type": "error", "error": {"type": kind, "message": message}}


# --- Responses -------------------------------------------------------------------------


def message_object(
    *,
    id: str,
    model: str,
    content: Iterable[Mapping[str, Any]],
    stop_reason: str | None,
    usage: Mapping[str, Any],
) -> dict[str, Any]:
    """A complete (non-streamed) ``message`` object."""
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": plain(list(content)),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage),
    }


def in_pieces(text: str, count: int) -> list[str]:
    """``text`` in about ``count`` pieces, as a stream sends it."""
    size = max(1, -(-len(text) // count))
    return [text[start : start + size] for start in range(0, len(text), size)]


def stream_events(
    *,
    id: str,
    model: str,
    content: Sequence[Mapping[str, Any]],
    stop_reason: str | None,
    usage: Mapping[str, Any],
    tool_inputs: Mapping[str, str] | None = None,
    pieces: int = 3,
) -> list[dict[str, Any]]:
    """The raw stream events of a message, as the API sends them with ``stream: true``.

    Text, thinking and tool input are each split into about ``pieces`` deltas.
    ``tool_inputs`` maps a ``tool_use`` id to the raw JSON text to stream for it (which
    may not even parse); otherwise the block's ``input`` is serialised.
    """
    raw_inputs = tool_inputs or {}
    start_usage = {key: value for key, value in usage.items() if key != "output_tokens"}
    # As the API does: message_start counts output tokens so far, message_delta the total.
    start_usage["output_tokens"] = min(1, usage.get("output_tokens", 0))
    start = message_object(id=id, model=model, content=[], stop_reason=None, usage=start_usage)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(content):
        kind = block.get("type")
        opening: dict[str, Any]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in in_pieces(block["text"], pieces)]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p}
                for p in in_pieces(block["thinking"], pieces)
            ]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        elif kind == "tool_use":
            opening = {**plain(block), "input": {}}
            text = raw_inputs.get(block["id"], None)
            if text is None:
                text = json.dumps(block.get("input", {}))
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in in_pieces(text, pieces)
            ]
        else:
            opening = plain(block)
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events.extend({"type": "content_block_delta", "index": index, "delta": d} for d in deltas)
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


# --- Reading a stream ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class StreamedMessage:
    """An assistant message assembled from stream events.

    Attributes:
        content: The blocks, in the API's param form, ready to go back into the history.
        tool_uses: ``(id, name, input)`` for each ``tool_use`` block, in order; ``input``
            is the raw JSON text when the streamed input did not parse to an object
            (its block then holds ``{}``).
        stop_reason: The API's stop reason, or None if the stream never said.
        model: The model that answered.
        id: The message id the API gave (``msg_...``), or "" if the stream never said.
        input_tokens: Uncached input tokens.
        output_tokens: Output tokens.
        cache_creation_input_tokens: Input tokens written to the cache.
        cache_read_input_tokens: Input tokens read from the cache.
        cache_creation_1h_input_tokens: Of those written, the ones written for an hour
            (the API's ``cache_creation.ephemeral_1h_input_tokens``).
        compaction: The tokens of the API's server-side compaction steps, which the
            counts above leave out (``compaction_steps``), or None.
        plain: Every block is a fresh copy of plain JSON values that nothing else holds
            (a whole response, copied by ``feed_message``'s ``plain``).
    """

    content: tuple[dict[str, Any], ...]
    tool_uses: tuple[tuple[str, str, Any], ...]
    stop_reason: str | None
    model: str
    id: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    compaction: Mapping[str, int] | None = None
    plain: bool = False


def no_delta(delta: str) -> None:
    """A listener of deltas that ignores them."""


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


_EventHandler: TypeAlias = "Callable[[StreamAccumulator, Mapping[str, Any]], None]"
_DeltaHandler: TypeAlias = (
    "Callable[[StreamAccumulator, int, dict[str, Any], Mapping[str, Any]], None]"
)


@attrs.define(eq=False)
class StreamAccumulator:
    """Builds the assistant message from the raw events of one streamed response (the
    decoded JSON of each Server-Sent Event), in stream order.

    The SDK's own accumulator (``messages.stream()``) parses each tool input as it arrives
    and raises when the model streamed JSON that does not parse, losing the whole
    response; here only that call is marked (its raw text kept), so the runner answers it
    with ``Invalid arguments`` and the other calls of the turn still run.

    Attributes:
        on_text: Called with each text delta.
        on_thinking: Called with each thinking delta.
        on_tool_input: Called with a tool_use block's name and each piece of its input's
            JSON as it streams (an input given whole: in one piece), or None.
        complete: Whether ``message_stop`` has arrived.
        error: The ``error`` object of an ``error`` event (``{"type", "message"}``), or None.
    """

    on_text: Callable[[str], None] = no_delta
    on_thinking: Callable[[str], None] = no_delta
    on_tool_input: Callable[[str, str], None] | None = None
    complete: bool = attrs.field(default=False, init=False)
    error: dict[str, Any] | None = attrs.field(default=None, init=False)
    _blocks: dict[int, dict[str, Any]] = attrs.field(factory=dict, init=False)
    _json: dict[int, list[str]] = attrs.field(factory=dict, init=False)
    _raw_inputs: dict[int, str] = attrs.field(factory=dict, init=False)
    _model: str = attrs.field(default="", init=False)
    _id: str = attrs.field(default="", init=False)
    _stop_reason: str | None = attrs.field(default=None, init=False)
    _usage: dict[str, int] = attrs.field(factory=dict, init=False)
    _compaction_steps: dict[str, int] | None = attrs.field(default=None, init=False)
    _plain: bool = attrs.field(default=False, init=False)

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event. Unknown event types (``ping``, future ones) are ignored."""
        handler = self._ON_EVENT.get(event.get("type", ""))
        if handler is not None:
            handler(self, event)

    def feed_message(
        self, message: Mapping[str, Any], plain: Callable[[object], Any] | None = None
    ) -> None:
        """Take a whole (non-streamed) ``message`` object, as if it had streamed: each
        text and thinking block is reported in one piece, and the message is complete.

        ``plain``: a copy of a block that is plain JSON (None when it is not); when it
        copies every block, the result says so (``StreamedMessage.plain``).

        Raises:
            KeyError, TypeError: ``message`` is not a message object.
        """
        self._message_start({"message": message})
        self._plain = plain is not None
        for index, block in enumerate(message["content"]):
            kept = None if plain is None else plain(block)
            if kept is None:
                self._plain = False
                kept = without_none(block)
            self._blocks[index] = kept
            kind = kept.get("type")
            if kind == "text":
                self.on_text(kept.get("text", ""))
            elif kind == "thinking":
                self.on_thinking(kept.get("thinking", ""))
            elif kind == "tool_use":
                value = kept.get("input", {})
                if self.on_tool_input is not None:
                    self.on_tool_input(kept.get("name", ""), json.dumps(value))
                # A copy's objects are plain dicts (plain_block's, without_none's).
                if type(value) is not dict:
                    # As for a streamed input that is not an object: {} in the history,
                    # the call keeps what the model sent.
                    self._raw_inputs[index] = json.dumps(value)
                    kept["input"] = {}
        # The usage was counted with the start: a whole message has no later figures.
        self._stop_reason = message.get("stop_reason")
        self.complete = True

    def _message_start(self, event: Mapping[str, Any]) -> None:
        message = event["message"]
        self._model = message.get("model") or ""
        self._id = message.get("id") or ""
        self._count(message.get("usage") or {})

    def _block_start(self, event: Mapping[str, Any]) -> None:
        # Kept as the API gave it, so that block types satsuma does not know
        # (redacted_thinking, server tool results...) go back to it unchanged.
        self._blocks[event["index"]] = without_none(event["content_block"])

    def _block_delta(self, event: Mapping[str, Any]) -> None:
        index, delta = event["index"], event["delta"]
        handler = self._ON_DELTA.get(delta.get("type", ""))
        if handler is not None:
            handler(self, index, self._blocks[index], delta)

    def _text(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        block["text"] = block.get("text", "") + delta["text"]
        self.on_text(delta["text"])

    def _thinking(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        block["thinking"] = block.get("thinking", "") + delta["thinking"]
        self.on_thinking(delta["thinking"])

    def _signature(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        block["signature"] = delta["signature"]

    def _input_json(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        self._json.setdefault(index, []).append(delta["partial_json"])
        if self.on_tool_input is not None:
            self.on_tool_input(block.get("name", ""), delta["partial_json"])

    def _citation(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        block.setdefault("citations", []).append(without_none(delta["citation"]))

    def _compaction(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        # The API's compaction summary comes whole in one delta (the SDK replaces, not
        # appends); kept so that it goes back verbatim (ContextEditing(compact=True)).
        block.update(without_none({k: v for k, v in delta.items() if k != "type"}))

    _ON_DELTA: ClassVar[dict[str, _DeltaHandler]] = {
        "text_delta": _text,
        "thinking_delta": _thinking,
        "signature_delta": _signature,
        "input_json_delta": _input_json,
        "citations_delta": _citation,
        "compaction_delta": _compaction,
    }

    def _block_stop(self, event: Mapping[str, Any]) -> None:
        index = event["index"]
        if index not in self._json:
            return  # an input given whole in content_block_start, or no input at all
        text = "".join(self._json.pop(index))
        try:
            value = json.loads(text) if text.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested past what json can read
            value = None
        if isinstance(value, dict):
            self._blocks[index]["input"] = value
        else:
            # The API takes only an object as a tool_use input: the history gets {} while
            # the call keeps what the model really sent.
            self._blocks[index]["input"] = {}
            self._raw_inputs[index] = text

    def _message_delta(self, event: Mapping[str, Any]) -> None:
        self._stop_reason = (event.get("delta") or {}).get("stop_reason")
        self._count(event.get("usage") or {})

    def _message_stop(self, event: Mapping[str, Any]) -> None:
        self.complete = True

    def _error(self, event: Mapping[str, Any]) -> None:
        error = event.get("error")
        self.error = dict(error) if isinstance(error, Mapping) else {"type": None, "message": ""}

    def _count(self, usage: Mapping[str, Any]) -> None:
        # message_delta's counts are cumulative, so a later figure replaces an earlier one.
        # The common case (a dict of ints) judged without a call: this runs on every
        # response; ``type(...) is`` first, isinstance only for anything else.
        counts = self._usage
        for key in _USAGE_KEYS:
            if key in usage:
                value = usage[key]
                if type(value) is int or isinstance(value, int):
                    counts[key] = value
        # The hour's writes cost more than the 5 minutes' (priced in _prices).
        written = usage.get("cache_creation")
        if written is not None and (type(written) is dict or isinstance(written, Mapping)):
            hour = written.get("ephemeral_1h_input_tokens")
            if type(hour) is int or isinstance(hour, int):
                counts["cache_creation_1h_input_tokens"] = hour
        compaction = compaction_steps(usage)
        if compaction is not None:
            self._compaction_steps = compaction

    _ON_EVENT: ClassVar[dict[str, _EventHandler]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "content_block_stop": _block_stop,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
        "error": _error,
    }

    def result(self) -> StreamedMessage:
        """The message as assembled so far."""
        # Comprehensions of lists, not generators: a generator's frame is resumed once
        # per block, and this runs on every block of every response.
        ordered = sorted(self._blocks.items())
        content = tuple([block for _, block in ordered])
        raw = self._raw_inputs  # rarely any: tested with ``in``, not read with a default
        tool_uses = tuple(
            [
                (block["id"], block["name"], raw[index] if index in raw else block.get("input", {}))
                for index, block in ordered
                if block.get("type") == "tool_use"
            ]
        )
        return StreamedMessage(
            content=content,
            tool_uses=tool_uses,
            stop_reason=self._stop_reason,
            model=self._model,
            id=self._id,
            compaction=self._compaction_steps,
            plain=self._plain,
            **self._usage,
        )
