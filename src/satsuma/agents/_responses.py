"""What of a model's response may enter the conversation.

The history is sent back with every later request and stored, so a response is checked
before it is committed, whichever Model produced it:

- a ``tool_use`` input that the API could not take back (NaN, an infinity, nesting past
  ``MAX_DEPTH``, not an object) is kept as ``{}`` in the history while its ToolCall keeps
  what the model sent, so that the runner refuses that one call with ``Invalid
  arguments`` and the conversation stays sendable;
- empty text blocks, which the API refuses in a request, are left out;
- anything in the content that JSON cannot carry makes the response malformed: a
  ``ModelError`` (retried by models that retry, as the API's own errors are).

Tool-call ids are made unique afterwards, against the whole conversation (``_ids``).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import attrs

from .._exceptions import ModelError
from .._jsonvalue import json_problem
from ._model import ModelResponse

__all__ = ["checked_response"]

# Responses checked by a model of satsuma's own as it built them, by identity:
# AnthropicModel checks its responses (so that a malformed one is retried inside the
# model) and the loop checks whatever any model returns; such a response, which nothing
# else has held, is not walked twice. Others' responses are always checked.
_passed: weakref.WeakValueDictionary[int, ModelResponse] = weakref.WeakValueDictionary()


def checked_response(response: ModelResponse, *, fresh: bool = False) -> ModelResponse:
    """``response`` as it may enter the history (see the module docstring).

    ``fresh``: the caller built ``response`` just now and hands it straight to the loop,
    whose own check then passes it at once.

    Raises:
        ModelError: the response is malformed (retryable).
    """
    if _passed.get(id(response)) is response:
        return response
    content: list[Mapping[str, Any]] = []
    changed = False
    for block in response.content:
        kind = block.get("type")
        if kind == "text" and not block.get("text"):
            changed = True
            continue
        checked: Mapping[str, Any] = block
        if kind == "tool_use":
            given = block.get("input", {})
            if not isinstance(given, Mapping) or json_problem(given, "") is not None:
                block = {**block, "input": {}}
                changed = True
            # Its input is checked (or replaced) now: the rest of the block is left.
            checked = {key: value for key, value in block.items() if key != "input"}
        problem = json_problem(checked, f"content[{len(content)}]")
        if problem is not None:
            raise ModelError(f"malformed response: {problem}", retryable=True)
        content.append(block)
    if changed:
        response = attrs.evolve(response, content=tuple(content))
    if fresh:
        _passed[id(response)] = response
    return response
