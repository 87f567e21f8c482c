"""The run loop's index of a conversation's tool_use ids (agents/_ids.py ``TakenIds``):
read as the history grows, and read again whenever the history is not the one it read
plus messages at its end. A stale index would let a provider's reused id through."""

from __future__ import annotations

from satsuma import Message
from satsuma.agents._ids import TakenIds


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
