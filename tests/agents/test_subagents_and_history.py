"""Sub-agents offered as tools, and history processors for long-lived agents."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import satsuma
from satsuma import AgentTool, KeepLastExchanges, NestedEvent, TokenBudget, Usage
from satsuma.agents._history import TrimMemo, choose
from satsuma.testing import FunctionModel, Reply, ScriptedModel, check_conversation


@satsuma.tool
async def grep(pattern: str) -> str:
    """Search the code."""
    await trio.sleep(1)
    return f"3 matches for {pattern}"


class Researcher(satsuma.Agent):
    """Researches a question in the code base and reports what it found."""

    name = "researcher"
    tools = [grep]


class Lead(satsuma.Agent):
    name = "lead"
    tools = [AgentTool(Researcher)]


async def test_a_sub_agent_runs_as_a_tool_with_nested_events_and_summed_usage(
    autojump_clock: trio.abc.Clock,
) -> None:
    usage = Usage(input_tokens=100, output_tokens=10)
    # One script serves both agents, in the order their model calls happen.
    model = ScriptedModel(
        [
            Reply(tool_calls=[("researcher", {"task": "find the retry logic"})], usage=usage),
            Reply(tool_calls=[("grep", {"pattern": "retry"})], usage=usage),
            Reply(text="It is in _anthropic.py.", usage=usage),
            Reply(text="The researcher found it in _anthropic.py.", usage=usage),
        ]
    )
    events: list[Any] = []
    async with satsuma.open_agent(Lead, model=model) as lead:
        result = await lead.run("where is the retry logic?", events=events.append)
    assert result.status == "completed"
    assert result.output == "The researcher found it in _anthropic.py."
    assert result.usage == Usage(input_tokens=400, output_tokens=40)
    check_conversation(lead.history)
    assert lead.history[2].tool_results[0]["content"] == "It is in _anthropic.py."
    nested = [e for e in events if isinstance(e, NestedEvent)]
    assert nested
    assert {e.tool_name for e in nested} == {"researcher"}
    assert {e.agent for e in nested} == {"lead"}
    inner = [type(e.event).__name__ for e in nested]
    assert inner[0] == "RunStart"
    assert inner[-1] == "RunEnd"
    assert "ToolCallStart" in inner
    assert nested[0].event.agent == "researcher"


def test_agent_tool_schema_uses_the_agents_docstring() -> None:
    schema = AgentTool(Researcher).schema()
    assert schema["name"] == "researcher"
    assert (
        schema["description"] == "Researches a question in the code base and reports what it found."
    )
    assert schema["input_schema"]["required"] == ["task"]
    renamed = AgentTool(Researcher, name="ask_researcher", description="Ask.")
    assert renamed.schema()["name"] == "ask_researcher"


def test_agent_tool_needs_an_agent() -> None:
    with pytest.raises(satsuma.ToolDefinitionError, match="AgentTool needs an Agent subclass"):
        AgentTool(int)


async def test_a_sub_agent_that_fails_is_an_error_result_not_a_crash() -> None:
    model = ScriptedModel(
        [
            Reply(tool_calls=[("researcher", {"task": "x"})]),
            satsuma.ModelError("Overloaded", status=529, retryable=True),
            "The researcher is unavailable.",
        ]
    )
    async with satsuma.open_agent(Lead, model=model) as lead:
        result = await lead.run("go")
    assert result.status == "completed"
    block = lead.history[2].tool_results[0]
    assert block["is_error"]
    assert block["content"] == "The researcher agent ended failed: 529: Overloaded."


async def test_cancelling_the_parent_cancels_the_sub_agent(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel(
        [
            Reply(tool_calls=[("researcher", {"task": "x"})]),
            Reply(tool_calls=[("grep", {"pattern": "p"})]),
        ]
    )
    before = trio.lowlevel.current_statistics().tasks_living
    async with satsuma.open_agent(Lead, model=model) as lead:
        with trio.move_on_after(0.5):
            await lead.run("go")
        check_conversation(lead.history)
    assert trio.lowlevel.current_statistics().tasks_living == before
    assert trio.current_time() == 0.5


def conversation(exchanges: int) -> list[satsuma.Message]:
    """``exchanges`` exchanges, each a prompt, a tool turn and an answer."""
    messages: list[satsuma.Message] = []
    for n in range(exchanges):
        messages += [
            satsuma.Message.user(f"question {n}"),
            satsuma.Message(
                role="assistant",
                content=[{"type": "tool_use", "id": f"t{n}", "name": "grep", "input": {}}],
            ),
            satsuma.Message(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x" * 400}],
            ),
            satsuma.Message(role="assistant", content=[{"type": "text", "text": f"answer {n}"}]),
        ]
    return messages


def test_keep_last_exchanges_cuts_only_between_exchanges() -> None:
    messages = conversation(5)
    kept = KeepLastExchanges(2, cut_to=1).process(messages, None)
    assert len(kept) == 8
    assert kept[0].text == "question 3"
    check_conversation(kept)
    assert KeepLastExchanges(10).process(messages, None) == messages


def test_token_budget_drops_the_oldest_exchanges_using_reported_usage() -> None:
    messages = conversation(6)
    chars = sum(len(str(block)) for m in messages for block in m.content)
    # The API said the whole thing, sent last time, was 2 characters a token: 3
    # exchanges fit in the budget. (The agent keeps a memo of what it sent.)
    memo = TrimMemo()
    memo.sent_chars = chars
    usage = Usage(input_tokens=chars // 2)
    budget = (chars // 2) // 2
    kept = choose(TokenBudget(budget, cut_to=1), messages, usage, memo, 0)
    check_conversation(kept)
    assert kept[0].role == "user"
    assert kept[0].text.startswith("question")
    assert 0 < len(kept) < len(messages)
    kept_chars = sum(len(str(block)) for m in kept for block in m.content)
    assert kept_chars / 2 <= budget
    assert choose(TokenBudget(10**9), messages, usage, TrimMemo(), 0) == messages


def test_token_budget_keeps_the_newest_exchange_even_if_it_alone_is_too_big() -> None:
    messages = conversation(3)
    kept = TokenBudget(1).process(messages, None)
    assert kept[0].text == "question 2"
    check_conversation(kept)


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_history_processors_check_their_sizes(bad: Any) -> None:
    with pytest.raises(ValueError, match="must be a positive integer"):
        KeepLastExchanges(bad)
    with pytest.raises(ValueError, match="must be a positive integer"):
        TokenBudget(bad)


async def test_an_agent_that_serves_for_long_sends_a_bounded_history() -> None:
    class LongLived(satsuma.Agent):
        name = "long_lived"
        tools = [grep]
        history = KeepLastExchanges(3)

    sizes: list[int] = []

    def reply(request: satsuma.ModelRequest) -> str:
        sizes.append(len(request.messages))
        return "ok"

    async with satsuma.open_agent(LongLived, model=FunctionModel(reply)) as agent:
        for n in range(20):
            await agent.run(f"message {n}")
        assert len(agent.history) == 40  # the agent keeps everything...
    assert max(sizes) == 5  # ...but sends at most 3 exchanges
    assert sizes[:3] == [1, 3, 5]
