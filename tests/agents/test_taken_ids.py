"""The run loop's index of a conversation's tool_use ids (agents/_ids.py ``TakenIds``):
read as the history grows, and read again whenever the history is not the one it read
plus messages at its end. A stale index would let a provider's reused id through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import satsuma
from satsuma import Message, ModelError, ModelResponse, ToolCall
from satsuma.agents import _ids
from satsuma.agents._ids import TakenIds, unique_ids
from satsuma.testing import Reply, ScriptedModel, tool_call


def uses(*ids: str) -> Message:
    return Message(
        role="assistant",
        content=[{"type": "tool_use", "id": tool_id, "name": "t", "input": {}} for tool_id in ids],
    )


def test_it_reads_the_messages_added_since_the_last_call() -> None:
    history = [Message.user("go"), uses("a", "b")]
    taken = TakenIds()
    assert taken.of(history) == {"a", "b"}
    history += [Message.user("more"), uses("c")]
    assert taken.of(history) == {"a", "b", "c"}


def test_a_history_replaced_by_one_as_long_or_longer_is_read_again() -> None:
    # A load (history[:] = stored) or a replaced last message: the length alone would
    # say "nothing new", and the old ids would hide the new ones.
    history = [Message.user("go"), uses("a")]
    taken = TakenIds()
    taken.of(history)
    history[:] = [Message.user("other"), uses("x"), Message.user("then"), uses("y")]
    assert taken.of(history) == {"x", "y"}
    history[-1] = uses("z")
    assert taken.of(history) == {"x", "z"}


def test_a_shorter_history_is_read_again() -> None:
    history = [Message.user("go"), uses("a"), Message.user("more"), uses("b")]
    taken = TakenIds()
    taken.of(history)
    del history[2:]
    history.append(uses("c"))  # as long as the part read before, but not the same
    assert taken.of(history) == {"a", "c"}
    history.clear()
    assert taken.of(history) == set()


def test_a_committed_response_is_not_read_again_but_anything_else_is() -> None:
    history = [Message.user("go")]
    taken = TakenIds()
    ids = taken.of(history)
    unique_ids(response(["a"], ["a"]), ids)
    history.append(uses("a"))
    taken.committed(history)
    history.append(Message.user("results"))
    assert taken.of(history) == {"a"}
    # Two messages added since ``of``: the second is not the response's, and is read.
    history += [uses("b"), uses("c")]
    taken.committed(history)
    assert taken.of(history) == {"a", "b", "c"}
    # A replaced last message is not counted as read either.
    history[-1] = uses("d")
    taken.committed(history)
    assert taken.of(history) == {"a", "b", "d"}


# --- unique_ids: one pass over the response (issue 36, item 3) ---------------------------


def response(block_ids: list[str], call_ids: list[str]) -> ModelResponse:
    content: list[dict[str, Any]] = [{"type": "text", "text": "calling"}]
    content += [{"type": "tool_use", "id": i, "name": "t", "input": {}} for i in block_ids]
    return ModelResponse(content=tuple(content), calls=tuple(ToolCall(i, "t") for i in call_ids))


def test_ids_valid_and_new_are_kept_and_the_response_is_the_same_object() -> None:
    given = response(["a", "b"], ["a", "b"])
    taken = {"z"}
    assert unique_ids(given, taken) is given
    assert taken == {"a", "b", "z"}


def test_only_the_reused_or_invalid_ids_are_renamed_in_both_block_and_call() -> None:
    taken = {"b"}
    out = unique_ids(response(["a", "b", "bad id", "a"], ["a", "b", "bad id", "a"]), taken)
    block_ids = [block["id"] for block in out.content if block.get("type") == "tool_use"]
    assert block_ids == [call.id for call in out.calls]
    assert block_ids[0] == "a"
    assert block_ids[1].startswith("b_") and block_ids[2].startswith("badid_")
    assert block_ids[3].startswith("a_")
    assert len(set(block_ids)) == 4 and set(block_ids) <= taken
    assert out.content[0] == {"type": "text", "text": "calling"}


def test_an_id_is_kept_up_to_the_length_limit_and_renamed_past_it_or_empty() -> None:
    longest, too_long = "a" * _ids.MAX_ID_LENGTH, "b" * (_ids.MAX_ID_LENGTH + 1)
    given = [longest, too_long, "", "c\n"]
    out = unique_ids(response(given, given), set())
    block_ids = [block["id"] for block in out.content if block.get("type") == "tool_use"]
    assert block_ids[0] == longest
    assert all(new != old for new, old in zip(block_ids[1:], given[1:], strict=True))
    assert all(len(new) <= _ids.MAX_ID_LENGTH for new in block_ids)
    assert block_ids == [call.id for call in out.calls]


@pytest.mark.parametrize(
    ("block_ids", "call_ids", "counts"),
    [
        (["a"], ["a", "b"], "(2 calls, 1 tool_use blocks)"),
        (["a", "b"], ["a"], "(1 calls, 2 tool_use blocks)"),
        (["a", "b"], ["b", "a"], "(2 calls, 2 tool_use blocks)"),
    ],
)
def test_calls_that_do_not_match_the_blocks_are_a_models_bug(
    block_ids: list[str], call_ids: list[str], counts: str
) -> None:
    with pytest.raises(ModelError, match="do not match its tool_use blocks") as raised:
        unique_ids(response(block_ids, call_ids), set())
    assert str(raised.value).endswith(counts)
    assert raised.value.retryable is False


# --- kept by the conversation, across runs -----------------------------------------------


@satsuma.tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


class Pinger(satsuma.Agent):
    name = "pinger"
    tools = [ping]


async def test_a_run_reads_only_the_messages_added_since_the_last_run_and_reused_ids_are_renamed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A long conversation's run walked its whole history for its ids; the index now
    # lives with the conversation. A provider reusing an id of an earlier run is still
    # given a fresh one.
    read: list[int] = []
    real = _ids.taken_ids

    def counted(messages: Sequence[Message]) -> set[str]:
        read.append(len(messages))
        return real(messages)

    monkeypatch.setattr(_ids, "taken_ids", counted)
    again = Reply(tool_calls=[tool_call("ping", {}, id="toolu_same")])
    script: list[Reply | str] = [again, "one", again, "two", again, "three"]
    async with satsuma.open_agent(Pinger, model=ScriptedModel(script)) as agent:
        for prompt in ("first", "second", "third"):
            assert (await agent.run(prompt)).status == "completed"
        history = agent.history
    ids = [block["id"] for message in history for block in message.tool_uses]
    assert len(ids) == 3 and len(set(ids)) == 3 and ids[0] == "toolu_same"
    # Each model call reads what was added since the one before, never the whole
    # history again; and not the model's own messages either (committed: their ids are
    # the ones unique_ids just gave), so only the prompts and the results.
    users = sum(1 for message in history if message.role == "user")
    assert sum(read) == users == 6, (read, len(history))
