"""Tool-call ids in satsuma's history: unique, whatever the provider sends.

An id ties a ``tool_result`` to its ``tool_use``, keys the call's journal record (run,
id), and names the call in approvals, events and resumes. The Messages API refuses a
conversation that uses an id twice or one outside ``^[a-zA-Z0-9_-]+$``. Providers do not
all keep to that: OpenAI-compatible local servers (vLLM, Ollama, llama.cpp) number the
calls ``call_0``, ``call_1``... again in every turn, some send no id at all, and a hostile
proxy may send anything. Two calls with one id would share one journal record, and a
resume could answer one turn's call with another turn's outcome.

So the agent loop passes every response, whichever ``Model`` produced it, through
``unique_ids`` before anything else sees its calls (the runner, its events, the journal,
the history): an id that is valid and new to the conversation is kept as the provider
sent it; any other gets a fresh one. Nothing needs the provider's own id back: the
history, and every later request built from it, carries the fresh id in both the
``tool_use`` and its ``tool_result``, which is all a provider checks.

A conversation stored by an older satsuma may already hold an id twice:
``distinct_ids`` renames the later uses (and the results that answer them) when the
agent loads it, so that a journal record can only ever answer the first.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

import attrs

from .._exceptions import ModelError
from .._messages import Message
from ..models import ModelResponse

__all__ = ["MAX_ID_LENGTH", "TakenIds", "distinct_ids", "taken_ids", "unique_ids"]

logger = logging.getLogger("satsuma.agents")

# Longer than any provider's own ids (vLLM's are 46 characters), short enough that a
# hostile id cannot bloat every later request and the store.
MAX_ID_LENGTH = 64

_VALID = re.compile(r"[a-zA-Z0-9_-]+")
# The same, the length in the pattern: unique_ids judges every call's id with one call.
_VALID_ID = re.compile(rf"[a-zA-Z0-9_-]{{1,{MAX_ID_LENGTH}}}")
_INVALID_CHARACTERS = re.compile(r"[^a-zA-Z0-9_-]+")
_STEM_LENGTH = 24


def _is_valid(tool_id: object) -> TypeGuard[str]:
    return (
        isinstance(tool_id, str)
        and len(tool_id) <= MAX_ID_LENGTH
        and _VALID.fullmatch(tool_id) is not None
    )


def _fresh_id(given: object, taken: set[str]) -> str:
    """A new id, unique in ``taken`` and across processes (random), that keeps the
    provider's id as its stem where it can, so that logs still point at it."""
    stem = _INVALID_CHARACTERS.sub("", given)[:_STEM_LENGTH] if isinstance(given, str) else ""
    while True:
        candidate = f"{stem or 'call'}_{secrets.token_hex(8)}"
        if candidate not in taken:
            return candidate


def taken_ids(messages: Iterable[Message]) -> set[str]:
    """Every ``tool_use`` id of ``messages``."""
    return {
        block["id"]
        for message in messages
        if message.role == "assistant"
        for block in message.content
        if block.get("type") == "tool_use" and isinstance(block.get("id"), str)
    }


@attrs.define(eq=False)
class TakenIds:
    """The ``tool_use`` ids of a conversation, kept as it grows: each model call of a
    run reads only the messages added since the last call, not the whole history (a
    200-turn run walked 200 histories, some 40 µs a turn: most of the loop's overhead).

    A superset of the conversation's ids is harmless (an id renamed that need not have
    been); a subset is not. So the history is read again from the start whenever it is
    not the one read before plus messages at its end: shorter, or with another message
    where the last one read was (a reset, a load, a replaced last message).
    """

    ids: set[str] = attrs.field(factory=set)
    _read: int = 0
    _last: Message | None = None

    def of(self, history: Sequence[Message]) -> set[str]:
        """Every ``tool_use`` id of ``history`` (and the ids given since: the set is
        the one ``unique_ids`` adds to)."""
        start = self._read
        if start > len(history) or (start and history[start - 1] is not self._last):
            self.ids.clear()
            start = 0
        self.ids.update(taken_ids(history[start:]))
        self._read = len(history)
        self._last = history[-1] if history else None
        return self.ids

    def committed(self, history: Sequence[Message]) -> None:
        """Count the message just added to ``history`` as read: the assistant message of
        the response ``unique_ids`` gave its ids to, from the set ``of`` returned for
        the history before it. Its ids are in the set already, so the next ``of`` need
        not read it again. Anything else (no ``of`` just before, another message added
        or replaced) leaves the history to be read as before."""
        read = self._read
        if len(history) == read + 1 and (not read or history[-2] is self._last):
            self._read = read + 1
            self._last = history[-1]


def unique_ids(response: ModelResponse, taken: set[str]) -> ModelResponse:
    """``response`` with every ``tool_use`` id valid and unique: new to ``taken`` (the
    conversation's ids; the ids kept or given are added to it) and to each other.

    The ``n``-th call of ``response.calls`` is the ``n``-th ``tool_use`` block: both get
    the same id.

    Raises:
        ModelError: the calls do not match the ``tool_use`` blocks (a Model's bug: not
            retryable).
    """
    calls = response.calls
    count = len(calls)
    renamed: dict[int, str] = {}  # by the call's position: the common case renames none
    index = 0
    # One pass, the check of each id inline: this runs on every call of every response.
    for block in response.content:
        if block.get("type") != "tool_use":
            continue
        given = block.get("id")
        if index >= count or given != calls[index].id:
            raise _mismatch(response)
        index += 1
        if type(given) is str and _VALID_ID.fullmatch(given) is not None and given not in taken:
            taken.add(given)
            continue
        fresh = _fresh_id(given, taken)
        taken.add(fresh)
        renamed[index - 1] = fresh
        logger.debug("tool_use id %.100r from the model is now %s", given, fresh)
    if index != count:
        raise _mismatch(response)
    if not renamed:
        return response
    fresh_ids = iter([renamed.get(position) for position in range(count)])
    content = [
        {**block, "id": new_id}
        if block.get("type") == "tool_use" and (new_id := next(fresh_ids)) is not None
        else block
        for block in response.content
    ]
    calls = tuple(
        call if position not in renamed else attrs.evolve(call, id=renamed[position])
        for position, call in enumerate(calls)
    )
    return attrs.evolve(response, content=tuple(content), calls=calls)


def _mismatch(response: ModelResponse) -> ModelError:
    blocks = sum(1 for block in response.content if block.get("type") == "tool_use")
    return ModelError(
        "malformed response: its calls do not match its tool_use blocks "
        f"({len(response.calls)} calls, {blocks} tool_use blocks)"
    )


def distinct_ids(history: list[Message]) -> int | None:
    """Rename, in place, the ``tool_use`` ids of ``history`` that are invalid or used
    before (a conversation stored by an older satsuma), with the ``tool_result`` blocks
    of the next message that answer them (the ``k``-th result for an id answers the
    ``k``-th use of it in the message before). The first use of an id keeps it.

    Returns:
        The index of the first message changed, or None if none was.
    """
    taken: set[str] = set()
    first: int | None = None
    for index, message in enumerate(history):
        if message.role != "assistant":
            continue
        given_ids = [
            block.get("id") for block in message.content if block.get("type") == "tool_use"
        ]
        valid = [given for given in given_ids if _is_valid(given)]
        if len(valid) == len(given_ids) == len(set(valid)) and taken.isdisjoint(valid):
            taken.update(valid)  # the common case: nothing to rename, nothing built
            continue
        renames: dict[Any, deque[str | None]] = {}
        content: list[Mapping[str, Any]] = []
        for block in message.content:
            if block.get("type") == "tool_use":
                given = block.get("id")
                if _is_valid(given) and given not in taken:
                    taken.add(given)
                    renames.setdefault(_key(given), deque()).append(None)
                else:
                    fresh = _fresh_id(given, taken)
                    taken.add(fresh)
                    renames.setdefault(_key(given), deque()).append(fresh)
                    block = {**block, "id": fresh}
            content.append(block)
        if all(new_id is None for queue in renames.values() for new_id in queue):
            continue
        first = index if first is None else first
        history[index] = Message(role="assistant", content=content)
        if index + 1 < len(history) and history[index + 1].role == "user":
            answers = history[index + 1]
            results: list[Mapping[str, Any]] = []
            for block in answers.content:
                if block.get("type") == "tool_result":
                    queue = renames.get(_key(block.get("tool_use_id")))
                    new_id = queue.popleft() if queue else None
                    if new_id is not None:
                        block = {**block, "tool_use_id": new_id}
                results.append(block)
            history[index + 1] = Message(role="user", content=results)
    return first


def _key(tool_id: object) -> Any:
    # An id of any JSON type from an old store: a dict or list is not hashable.
    return tool_id if isinstance(tool_id, str | int | float | bool | None) else repr(tool_id)
