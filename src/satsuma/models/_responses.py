"""What of a model's response may enter the conversation.

The history is sent back with every later request and stored, so a response is checked
before it is committed, whichever Model produced it:

- a ``tool_use`` input that the API could not take back (NaN, an infinity, nesting past
  ``MAX_DEPTH``, not an object) is kept as ``{}`` in the history, and its ToolCall too,
  with the reason in ``ToolCall.refused`` (the JSON gate, ``tools.gated``), so that the
  runner refuses that one call with ``Invalid arguments``, a final answer is retried,
  and nothing before them (the journal, events, the loop guard) ever serialises it;
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
from .._jsonvalue import JsonProblem, is_plain, plain_members, plain_or_problem
from .._toolcall import ToolCall, gated_all
from ._model import ModelResponse

__all__ = ["checked_plain_response", "checked_response"]

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
    # Ids, names and inputs as plain values first: nothing below (nor the journal, the
    # events, the loop guard) reads a model's own objects. Ids are made unique later,
    # against the whole conversation (_ids).
    content: list[Mapping[str, Any]] = []
    # The ids of the tool inputs found plain with their blocks: each of them is alive in
    # ``content``, so an id here is that very input, and its call is not walked again.
    plain_inputs: set[int] = set()
    for block in response.content:
        try:
            checked = _checked_block(block, f"content[{len(content)}]", plain_inputs)
        except JsonProblem as problem:
            raise ModelError(f"malformed response: {problem}", retryable=True) from None
        if checked is not None:
            content.append(checked)
    calls = gated_all(response.calls, plain_inputs)
    return _record(_rebuilt(response, tuple(content), calls), fresh=fresh)


def checked_plain_response(response: ModelResponse) -> ModelResponse:
    """``checked_response(response, fresh=True)`` for a response whose blocks are fresh
    copies of plain JSON values that nothing else holds (``StreamedMessage.plain``: a
    whole response, copied by ``_plaincopy.plain_block``): nothing is walked again; its
    empty text blocks are left out, and its calls go through the gate, which does not
    walk the inputs found in its blocks."""
    content: list[Mapping[str, Any]] = []
    plain_inputs: set[int] = set()
    for block in response.content:
        kind = block.get("type")
        if kind == "text" and not block.get("text"):
            continue
        if kind == "tool_use" and type(given := block.get("input")) is dict:
            plain_inputs.add(id(given))
        content.append(block)
    checked = _rebuilt(response, tuple(content), gated_all(response.calls, plain_inputs))
    _passed[id(checked)] = checked
    return checked


def _rebuilt(
    response: ModelResponse, content: tuple[Mapping[str, Any], ...], calls: tuple[ToolCall, ...]
) -> ModelResponse:
    """``attrs.evolve(response, content=content, calls=calls)``, field by field for a
    ModelResponse itself (evolve reads the class's fields and each value by name, on
    every response); a subclass, whose fields only evolve knows, is evolved."""
    if type(response) is not ModelResponse:
        return attrs.evolve(response, content=content, calls=calls)
    return ModelResponse(
        content=content,
        calls=calls,
        stop_reason=response.stop_reason,
        usage=response.usage,
        model=response.model,
        id=response.id,
    )


_NO_INPUT: Any = object()


def _checked_block(block: object, where: str, plain_inputs: set[int]) -> dict[str, Any] | None:
    """The block as plain JSON values (a tool_use's refused input as ``{}``), or None
    for an empty text block. The id of a tool_use input found plain as it is goes into
    ``plain_inputs``.

    Raises:
        JsonProblem: the block is not an object, or holds what JSON cannot carry.
    """
    if type(block) is dict and is_plain(block):
        # The common case, in one walk: what json.loads made, every part as the gate
        # would keep it. A tool_use whose input is not an object takes the long way.
        kind = block.get("type")
        if kind == "text" and not block.get("text"):
            return None
        if kind != "tool_use" or type(given := block.get("input")) is dict:
            if kind == "tool_use":
                plain_inputs.add(id(given))
            return dict(block)
    members = plain_members(block, where)
    if members is None:
        raise JsonProblem(where, f"{where} is not an object")
    given = members.pop("input", _NO_INPUT)
    plain, problem = plain_or_problem(members, where)
    if problem is not None:
        raise JsonProblem(where, problem)
    kind = plain.get("type")
    if kind == "text" and not plain.get("text"):
        return None
    if kind == "tool_use":
        # Refused input stays out of the history: its ToolCall says why (gated()).
        checked, refused = plain_or_problem({} if given is _NO_INPUT else given, "")
        plain["input"] = checked if refused is None and type(checked) is dict else {}
    elif given is not _NO_INPUT:
        checked, problem = plain_or_problem(given, f"{where}.input")
        if problem is not None:
            raise JsonProblem(where, problem)
        plain["input"] = checked
    return plain  # type: ignore[no-any-return]


def _record(response: ModelResponse, *, fresh: bool) -> ModelResponse:
    if fresh:
        _passed[id(response)] = response
    return response
