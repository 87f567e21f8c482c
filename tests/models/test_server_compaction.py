"""The Anthropic API's server-side compaction (``ContextEditing(compact=True)``): what
reaches the server through the real AsyncAnthropic client, the compaction block kept in
the history and sent back (also after a restart on a SQLite store), and the settings
refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import satsuma
from satsuma import AnthropicModel, ContextEditing
from satsuma.store import SQLiteStore
from satsuma.testing import MessagesServer

COMPACT_BETA = "compact-2026-01-12"
EDITING_BETA = "context-management-2025-06-27"
TRIGGER = 50_000
# Past the trigger at the server's 4 characters a token.
LONG = "word " * (TRIGGER * 4 // 5 + 100)


class Talker(satsuma.Agent):
    name = "talker"
    system = "You talk."


class Summariser(satsuma.Agent):
    name = "summariser"
    history = satsuma.Compaction(max_tokens=100_000, keep_last_tokens=10_000)


def compacting(**settings: Any) -> ContextEditing:
    return ContextEditing(clear_tool_uses=False, compact=True, **settings)


def summary_block() -> dict[str, Any]:
    return {"type": "compaction", "content": MessagesServer.compaction_summary}


async def test_the_edit_and_its_beta_header_are_sent_as_documented() -> None:
    alone = compacting(compact_trigger_tokens=60_000, compact_instructions="Keep the numbers.")
    both = ContextEditing(compact=True)
    async with MessagesServer(["a", "b", "c"]) as server:
        async with satsuma.open_agent(
            Talker, model=AnthropicModel(server.client(), context_editing=alone)
        ) as agent:
            await agent.run("one")
        async with satsuma.open_agent(
            Talker, model=AnthropicModel(server.client(), context_editing=both)
        ) as agent:
            await agent.run("two")
        client = server.client(default_headers={"anthropic-beta": "files-api-2025-04-14"})
        async with satsuma.open_agent(
            Talker, model=AnthropicModel(client, context_editing=alone)
        ) as agent:
            await agent.run("three")
    first, second, third = server.received
    assert first.headers["anthropic-beta"] == COMPACT_BETA
    assert first.body["context_management"] == {
        "edits": [
            {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": 60_000},
                "instructions": "Keep the numbers.",
            }
        ]
    }
    assert second.headers["anthropic-beta"] == f"{EDITING_BETA},{COMPACT_BETA}"
    assert second.body["context_management"] == {
        "edits": [{"type": "clear_tool_uses_20250919"}, {"type": "compact_20260112"}]
    }
    # The client's own betas are kept, the compaction's added.
    assert third.headers["anthropic-beta"] == f"files-api-2025-04-14,{COMPACT_BETA}"
    # Under the trigger, the answers carry no compaction block.
    assert all("compaction" not in str(r.body["messages"]) for r in server.received)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_block_is_kept_in_the_history_and_sent_back(stream: bool) -> None:
    editing = compacting(compact_trigger_tokens=TRIGGER)
    async with MessagesServer(["Noted.", "Still here."]) as server:
        model = AnthropicModel(server.client(), context_editing=editing, stream=stream)
        async with satsuma.open_agent(Talker, model=model) as agent:
            first = await agent.run(LONG)
            second = await agent.run("And now?")
            history = agent.history
    assert (first.output, second.output) == ("Noted.", "Still here.")
    # The answer past the trigger began with the compaction block, kept as the API gave it.
    reply = history[1]
    assert reply.role == "assistant"
    assert [dict(block) for block in reply.content] == [
        summary_block(),
        {"type": "text", "text": "Noted."},
    ]
    # The next request sends it back verbatim, after the whole history before it.
    later = server.requests[1]["messages"]
    assert later[0]["content"][0]["text"] == LONG
    assert later[1]["content"][0] == summary_block()
    # Billed from the block on: the long prompt is no longer read; the first call's
    # compaction read it (reported apart, as the API reports it).
    assert first.usage.input_tokens < 1_000
    assert second.usage.input_tokens < 1_000
    assert len(history) == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_the_compaction_steps_tokens_are_in_the_calls_cost(stream: bool) -> None:
    # The API reports the compaction's own call under usage.iterations, not in the
    # top-level counts: its tokens are priced into the call's cost (what a budget
    # charges), while the counts stay the request's own.
    prices = satsuma.ModelPrices(input=3.0, output=15.0)
    satsuma.set_prices(Talker.model, prices)
    try:
        editing = compacting(compact_trigger_tokens=TRIGGER)
        async with MessagesServer(["Noted.", "Still here."]) as server:
            model = AnthropicModel(server.client(), context_editing=editing, stream=stream)
            async with satsuma.open_agent(Talker, model=model) as agent:
                first = await agent.run(LONG)
                second = await agent.run("And now?")
    finally:
        satsuma.set_prices(Talker.model, None)
    own = prices.cost(first.usage)
    assert first.usage.cost_usd is not None and first.usage.input_tokens < 1_000
    # The step read the long prompt (at the server's 4 characters a token).
    step = first.usage.cost_usd - own
    assert step >= len(LONG) / 4 * 3.0 / 1_000_000
    # A call without a compaction step costs its counts alone.
    assert second.usage.cost_usd == prices.cost(second.usage)


async def test_a_resume_on_a_sqlite_store_sends_the_block_back(tmp_path: Path) -> None:
    path = tmp_path / "compaction.db"
    editing = compacting(compact_trigger_tokens=TRIGGER)
    async with MessagesServer(["Noted.", "Still here."]) as server:
        model = AnthropicModel(server.client(), context_editing=editing)
        async with (
            SQLiteStore(path) as store,
            satsuma.open_agent(Talker, model=model, store=store, agent_id="t") as agent,
        ):
            await agent.run(LONG)
        # Another process on the same file: the conversation, block included, is read back.
        async with (
            SQLiteStore(path) as store,
            satsuma.open_agent(Talker, model=model, store=store, agent_id="t") as agent,
        ):
            resumed = await agent.run("And now?")
    assert resumed.output == "Still here."
    later = server.requests[1]["messages"]
    assert later[1]["content"][0] == summary_block()
    assert later[-1]["content"][-1]["text"] == "And now?"
    assert resumed.usage.input_tokens < 1_000


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        (
            {"compact_trigger_tokens": 49_999},
            ValueError,
            "compact_trigger_tokens must be at least 50,000",
        ),
        ({"compact_trigger_tokens": 0}, ValueError, "compact_trigger_tokens must be a positive"),
        ({"compact_instructions": ""}, ValueError, "compact_instructions is empty"),
        ({"compact_instructions": 3}, TypeError, "compact_instructions must be a string"),
    ],
)
def test_bad_compaction_settings_are_refused_naming_the_field(
    settings: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        compacting(**settings)


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"compact": "yes"}, TypeError, "ContextEditing.compact must be True or False"),
        (
            {"compact_trigger_tokens": 60_000},
            ValueError,
            "compact_trigger_tokens is set but compact is False",
        ),
        (
            {"compact_instructions": "Be short."},
            ValueError,
            "compact_instructions is set but compact is False",
        ),
    ],
)
def test_compaction_settings_without_compact_are_refused(
    settings: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        ContextEditing(**settings)


async def test_satsumas_compaction_and_the_apis_together_are_refused() -> None:
    async with MessagesServer([]) as server:
        model = AnthropicModel(server.client(), context_editing=ContextEditing(compact=True))
        with pytest.raises(satsuma.ConfigurationError, match="compacts its history twice"):
            async with satsuma.open_agent(Summariser, model=model):
                pass  # pragma: no cover
        # Without the API's compaction, satsuma's alone is fine.
        plain = AnthropicModel(server.client(), context_editing=ContextEditing())
        async with satsuma.open_agent(Summariser, model=plain) as agent:
            assert agent.agent_id
    assert server.requests == []


async def test_a_conversation_goes_on_past_the_context_window_once_compacted() -> None:
    # The stored history outgrows the window; the API reads it from the last block on,
    # and the window check, calibrated on the API's count of the compacted request,
    # lets it through.
    satsuma.set_context_window("sonnet", 60_000)
    try:
        editing = compacting(compact_trigger_tokens=TRIGGER)
        async with MessagesServer(["One.", "Two.", "Three."]) as server:
            model = AnthropicModel(server.client(), context_editing=editing)
            async with satsuma.open_agent(Talker, model=model) as agent:
                results = [await agent.run(LONG), await agent.run(LONG)]
                results.append(await agent.run("And now?"))
    finally:
        satsuma.set_context_window("sonnet", None)
    assert [(r.status, r.output) for r in results] == [
        ("completed", "One."),
        ("completed", "Two."),
        ("completed", "Three."),
    ]
    last = server.requests[2]["messages"]
    assert sum(len(str(message)) for message in last) // 4 > 60_000  # past the window
    # Each long request was compacted; the last, read from the second block on, was not.
    blocks = [m["content"][0] for m in last if m["role"] == "assistant"]
    assert blocks == [summary_block(), summary_block()]
    assert results[2].usage.input_tokens < 1_000
