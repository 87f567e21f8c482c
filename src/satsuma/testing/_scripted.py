"""Models for tests: ScriptedModel plays a list of replies, FunctionModel computes each
reply from the request. No network, no key."""

from __future__ import annotations

import inspect
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias, final

import trio

from .._exceptions import ModelError
from .._messages import Message, message_size
from ..models import ModelListener, ModelRequest, ModelResponse
from ._script import (
    DEFAULT_KEPT_REQUESTS,
    Failure,
    Reply,
    as_reply,
    checked_keep,
    estimate_usage,
    input_text,
    remember,
    reply_blocks,
)

__all__ = ["FunctionModel", "ScriptedModel", "check_conversation"]

ScriptItem: TypeAlias = "Reply | str | BaseException"


def _prompt_chars(request: ModelRequest) -> int:
    return sum(message_size(message) for message in request.messages)


async def _play(item: Reply | str, request: ModelRequest, listener: ModelListener) -> ModelResponse:
    reply = as_reply(item)
    if reply.thinking:
        listener.thinking(reply.thinking)
    if reply.text:
        # Streamed in word-sized pieces, as a real model would.
        for piece in re.findall(r"\s*\S+\s*", reply.text) or [reply.text]:
            listener.text(piece)
    tool_input = getattr(listener, "tool_input", None)
    if tool_input is not None:
        for call in reply.tool_calls:
            text = input_text(call.input)
            # In pieces, as a real model streams a tool's input.
            for start in range(0, max(len(text), 1), 16):
                tool_input(call.name, text[start : start + 16])
    blocks, calls = reply_blocks(reply)
    usage = (
        reply.usage if reply.usage is not None else estimate_usage(reply, _prompt_chars(request))
    )
    return ModelResponse(
        content=tuple(blocks),
        calls=calls,
        stop_reason=reply.final_stop_reason,
        usage=usage,
        model=request.model,
    )


@final
class ScriptedModel:
    """A model that answers with the given replies, in order.

    Each item is a ``str`` (a text reply ending the turn), a ``Reply`` (text, thinking,
    tool calls), or an exception to raise (``ModelError("...")`` fails the run as an API
    error would). A call after the last item raises ModelError("ScriptedModel script
    exhausted ...").

    Args:
        script: The replies, in order.
        delay: Seconds each reply waits before it is given.
        keep_requests: Keep only the last this many requests in ``requests`` (100 by
            default; None keeps all: each holds the whole conversation so far, so a
            long test keeping all of them grows as its square).

    Attributes:
        requests: The ModelRequests received, in order: the last ``keep_requests``.
        request_count: How many requests were received in all.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem],
        *,
        delay: float = 0.0,
        keep_requests: int | None = DEFAULT_KEPT_REQUESTS,
    ) -> None:
        items = list(script)
        for item in items:
            if isinstance(item, Failure):
                raise TypeError("Failure items are HTTP faults: use them with MessagesServer")
            if not isinstance(item, (Reply, str, BaseException)):
                raise TypeError(
                    f"a script item must be a str, a Reply or an exception, got: {item!r}"
                )
        self._script: deque[ScriptItem] = deque(items)
        self._delay = delay
        self._keep = checked_keep(keep_requests)
        self.requests: list[ModelRequest] = []
        self.request_count = 0

    @property
    def remaining(self) -> int:
        """How many items have not been played yet."""
        return len(self._script)

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        remember(self.requests, request, self._keep)
        self.request_count += 1
        if not self._script:
            raise ModelError(
                f"ScriptedModel script exhausted after {self.request_count - 1} replies"
            )
        # Taken before the delay: a call cancelled in flight has used its reply, as a
        # request to a real API would have.
        item = self._script.popleft()
        await trio.sleep(self._delay)
        if isinstance(item, BaseException):
            raise item
        return await _play(item, request, listener)


ReplyFunction: TypeAlias = Callable[[ModelRequest], "Reply | str | Awaitable[Reply | str]"]


@final
class FunctionModel:
    """A model whose every reply is computed by ``fn(request)`` (sync or async), from the
    conversation so far. ``fn`` may raise ModelError to fail the run.

    Args:
        fn: The function of the request.
        keep_requests: As for ScriptedModel (100 by default; None keeps all).

    Attributes:
        requests: The ModelRequests received, in order: the last ``keep_requests``.
        request_count: How many requests were received in all.
    """

    def __init__(
        self, fn: ReplyFunction, *, keep_requests: int | None = DEFAULT_KEPT_REQUESTS
    ) -> None:
        self._fn = fn
        self._keep = checked_keep(keep_requests)
        self.requests: list[ModelRequest] = []
        self.request_count = 0

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        remember(self.requests, request, self._keep)
        self.request_count += 1
        item = self._fn(request)
        if inspect.isawaitable(item):
            item = await item
        else:
            await trio.lowlevel.checkpoint()
        if not isinstance(item, (Reply, str)):
            raise TypeError(f"FunctionModel's function returned {item!r}, not a Reply or str")
        return await _play(item, request, listener)


def check_conversation(messages: Sequence[Message] | Sequence[Mapping[str, Any]]) -> None:
    """Assert that a conversation is one the Messages API would take: it starts with a
    user message; roles alternate; no message is empty and no text block is empty;
    every ``tool_use`` id is unique and is answered by exactly one ``tool_result`` at the
    start of the next message, which is a user message; no tool_result answers
    anything else. Every history satsuma writes passes.

    Raises:
        AssertionError: naming the first problem found.
    """
    normal = [
        (m.role, list(m.content)) if isinstance(m, Message) else (m["role"], list(m["content"]))
        for m in messages
    ]
    if not normal:
        return
    assert normal[0][0] == "user", "the conversation must start with a user message"
    seen_ids: set[str] = set()
    for index, (role, content) in enumerate(normal):
        if index:
            assert role != normal[index - 1][0], (
                f"messages {index - 1} and {index} have the same role"
            )
        assert content, f"message {index} is empty"
        for position, block in enumerate(content):
            if block.get("type") == "text":
                assert block.get("text"), f"message {index}: text block {position} is empty"
        asked = [b["id"] for b in content if b.get("type") == "tool_use"]
        for tool_use_id in asked:
            assert tool_use_id not in seen_ids, (
                f"message {index}: tool_use id {tool_use_id!r} is used twice"
            )
            seen_ids.add(tool_use_id)
        kinds = [b.get("type") for b in content]
        answered_here = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
        if answered_here:
            assert role == "user", f"message {index}: tool_result in an assistant message"
            assert kinds[: len(answered_here)] == ["tool_result"] * len(answered_here), (
                f"message {index}: tool_result blocks must come before any other content"
            )
        if role == "user":
            previous = normal[index - 1][1] if index else []
            expected = [b["id"] for b in previous if b.get("type") == "tool_use"]
            assert sorted(answered_here) == sorted(expected), (
                f"message {index} answers tool_use ids {answered_here}, expected {expected}"
            )
        if asked:
            assert role == "assistant", f"message {index}: tool_use in a user message"
            assert index + 1 < len(normal), f"message {index}: tool_use {asked} never answered"
