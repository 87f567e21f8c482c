"""Compaction's summaries in every store: kept beside the full conversation, read back by
``through``, refused past the conversation's end, deleted when the conversation is
rewritten before them, and gone with a pruned conversation."""

from __future__ import annotations

from typing import Any

import pytest

import satsuma
from satsuma import Message
from satsuma.store import Owner, Store, StoreError, Summary
from satsuma.testing import FunctionModel, Reply


def text(role: Any, words: str) -> Message:
    return Message(role=role, content=[{"type": "text", "text": words}])


def summary(through: int, words: str = "earlier: hello", agent_id: str = "a") -> Summary:
    return Summary(agent_id=agent_id, through=through, text=words, model="m", created_at=1.5)


async def test_summaries_are_kept_beside_the_untouched_conversation(store: Store) -> None:
    messages = [text("user" if n % 2 == 0 else "assistant", f"m{n}") for n in range(6)]
    await store.write_tail("a", 0, messages)
    assert await store.summaries("a") == []
    await store.add_summary(summary(4, "second"))
    await store.add_summary(summary(2, "first"))
    assert await store.summaries("a") == [summary(2, "first"), summary(4, "second")]
    assert await store.load_messages("a") == messages  # the full history stays
    assert await store.summaries("b") == []
    await store.add_summary(summary(2, "first, again"))  # one per (agent, through)
    assert [s.text for s in await store.summaries("a")] == ["first, again", "second"]


async def test_a_summary_past_the_conversation_is_refused(store: Store) -> None:
    await store.write_tail("a", 0, [text("user", "hi")])
    with pytest.raises(StoreError, match=r"through message 3 of agent 'a'.*has 1 messages"):
        await store.add_summary(summary(3))
    assert await store.summaries("a") == []


async def test_rewriting_the_conversation_before_a_summary_deletes_it(store: Store) -> None:
    messages = [text("user" if n % 2 == 0 else "assistant", f"m{n}") for n in range(6)]
    await store.write_tail("a", 0, messages)
    await store.add_summary(summary(2))
    await store.add_summary(summary(4))
    await store.write_tail("a", 5, [text("assistant", "other")])  # after both: kept
    assert [s.through for s in await store.summaries("a")] == [2, 4]
    await store.write_tail("a", 3, [])  # a roll-back past the second
    assert [s.through for s in await store.summaries("a")] == [2]
    await store.write_tail("a", 0, [])  # a reset
    assert await store.summaries("a") == []


async def test_a_summary_write_carries_the_lease(store: Store) -> None:
    await store.write_tail("a", 0, [text("user", "hi"), text("assistant", "yo")])
    old = await store.acquire_lease("a", Owner.new(), seconds=60)
    await store.release_lease(old)
    await store.acquire_lease("a", Owner.new(), seconds=60)  # another takes the agent
    with pytest.raises(StoreError):
        await store.add_summary(summary(2), lease=old)
    assert await store.summaries("a") == []


def test_a_summary_must_stand_for_at_least_one_message() -> None:
    with pytest.raises(ValueError, match=r"Summary\.through must be a positive integer"):
        summary(0)


async def test_pruning_a_conversation_takes_its_summaries(store: Store) -> None:
    await store.write_tail("a", 0, [text("user", "hi"), text("assistant", "yo")])
    await store.add_summary(summary(2))
    report = await store.prune(older_than=0, conversations=True)
    assert report.conversations == 1
    assert await store.summaries("a") == []


async def test_an_agent_opened_again_on_the_store_goes_on_from_its_summary(store: Store) -> None:
    # As another node of a cluster does on PostgreSQL: the summary is read back, not
    # written again, and the requests begin with it.
    made: list[str] = []
    firsts: list[str] = []

    def reply(request: satsuma.ModelRequest) -> Reply:
        if request.system == "Summarise.":
            made.append("summary")
            return Reply(text="the story so far")
        firsts.append(str(request.messages[0].content[0].get("text")))
        return Reply(text="noted. " * 200)

    class Long(satsuma.Agent):
        name = "long_store_agent"
        history = satsuma.Compaction(
            max_tokens=1_500, keep_last_tokens=500, instructions="Summarise."
        )

    model = FunctionModel(reply)
    async with satsuma.open_agent(Long, model=model, store=store, agent_id="long") as agent:
        while not made:
            await agent.run("tell me more " * 20)
    firsts.clear()
    async with satsuma.open_agent(Long, model=model, store=store, agent_id="long") as agent:
        result = await agent.run("and then?")
    assert result.status == "completed"
    assert made == ["summary"]
    assert firsts == ["Summary of the earlier conversation:\nthe story so far"]
    assert [s.text for s in await store.summaries("long")] == ["the story so far"]
