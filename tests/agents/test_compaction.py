"""Compaction: older turns become one summary made by a model call, stored beside the
full history; through the real AsyncAnthropic client against the loopback Messages API
where a request goes out, and on the store that a resume and a restart read it back
from. Also the context window's check before a request is sent."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import satsuma
from satsuma import AnthropicModel, Compaction, ContextWindowExceeded, Usage, tool
from satsuma.store import MemoryStore, SQLiteStore, ledgers_of
from satsuma.testing import FunctionModel, MessagesServer, Reply

INSTRUCTIONS = "Summarise the conversation for the test."
HEADING = "Summary of the earlier conversation:\n"
MARK = "Summary of the earlier conversation:"  # as found in JSON text
SUMMARY_USAGE = Usage(input_tokens=12_345, output_tokens=67)


@tool
async def fetch(page: int) -> str:
    """Fetch a page of the log."""
    return f"page {page}: " + "log line. " * 100


class Reader(satsuma.Agent):
    name = "compacting_reader"
    system = "You read logs."
    tools = [fetch]
    history = Compaction(max_tokens=3_000, keep_last_tokens=1_000, instructions=INSTRUCTIONS)


def is_summary_call(body: Mapping[str, Any]) -> bool:
    system = body.get("system")
    text = system if isinstance(system, str) else json.dumps(system)
    return INSTRUCTIONS in str(text)


class Answers:
    """Each exchange: a tool call, then an answer; a summary call gets a summary."""

    def __init__(self) -> None:
        self.summaries = 0
        self.turn = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_call(body):
            self.summaries += 1
            return Reply(text=f"summary number {self.summaries}", usage=SUMMARY_USAGE)
        last = body["messages"][-1]["content"]
        if any(block.get("type") == "tool_result" for block in last):
            return Reply(text="read it")
        self.turn += 1
        return Reply(tool_calls=[("fetch", {"page": self.turn})])


def paired(messages: list[Mapping[str, Any]]) -> Iterator[str]:
    """The problems of a request's messages: a tool_result whose tool_use is not in the
    message before it, or a request that does not begin with a user message."""
    if messages and messages[0]["role"] != "user":
        yield "does not begin with a user message"
    for index, message in enumerate(messages):
        for block in message["content"]:
            if block.get("type") == "tool_result":
                before = messages[index - 1]["content"] if index else []
                ids = {b.get("id") for b in before if b.get("type") == "tool_use"}
                if block["tool_use_id"] not in ids:
                    yield f"message {index}: tool_result {block['tool_use_id']} alone"


async def test_older_turns_become_one_summary_and_requests_stay_under_the_limit() -> None:
    answers = Answers()
    async with MessagesServer(then=answers, keep_requests=None) as server:
        async with satsuma.open_agent(Reader, model=AnthropicModel(server.client())) as agent:
            results = [await agent.run(f"question {n}") for n in range(24)]
            history = agent.history
            compacted = agent.compacted_history
        bodies = server.requests
    assert all(result.status == "completed" for result in results)
    assert answers.summaries >= 2
    calls = [body for body in bodies if not is_summary_call(body)]
    # A summary is written in half the room between keep_last_tokens and max_tokens.
    assert {body["max_tokens"] for body in bodies if is_summary_call(body)} == {1_000}
    # Every request the agent sent stays within max_tokens, as the server bills it.
    assert max(len(json.dumps(body)) // 4 for body in calls) <= 3_000
    summarised = [body for body in calls if MARK in json.dumps(body["messages"][0])]
    assert summarised
    for body in calls:
        assert list(paired(body["messages"])) == []
    # The last request carries the newest summary at its head, and the history is whole.
    head = calls[-1]["messages"][0]["content"][0]["text"]
    assert head == f"{HEADING}summary number {answers.summaries}"
    assert len(history) == 24 * 4
    # compacted_history is what the last request began with, then the messages since.
    sent = calls[-1]["messages"]
    assert [m.role for m in compacted] == [m["role"] for m in sent] + ["assistant"]
    assert compacted[0].content[0]["text"] == head
    assert compacted[-1] == history[-1] and len(compacted) < len(history)
    assert MARK not in json.dumps([m.content for m in history])
    # The summary calls' usage counts in the runs' usage.
    total = sum((result.usage for result in results), Usage())
    assert total.input_tokens >= answers.summaries * SUMMARY_USAGE.input_tokens
    # A summary is made only when the limit is passed: between two, the head holds.
    heads = [json.dumps(body["messages"][0]) for body in summarised]
    assert len(set(heads)) == answers.summaries


async def test_a_budget_charges_the_summary_call_too() -> None:
    # The summary is a model call: checked against the agent's budget and charged to its
    # ledger like the agent's own calls, so the ledger holds what every call cost.
    model_id = "claude-compaction-budget-test"

    class Budgeted(Reader):
        name = "compacting_budgeted"
        model = model_id
        budget = satsuma.Budget(usd_per_agent=10_000)

    satsuma.set_prices(model_id, satsuma.ModelPrices(input=1_000, output=1_000))
    try:
        answers = Answers()
        store = MemoryStore()
        async with MessagesServer(then=answers, keep_requests=None) as server:
            model = AnthropicModel(server.client())
            async with satsuma.open_agent(Budgeted, model=model, store=store, agent_id="b") as a:
                results = []
                while answers.summaries == 0:
                    results.append(await a.run(f"question {answers.turn}"))
        balance = await ledgers_of(store).balance("agent:b")
    finally:
        satsuma.set_prices(model_id, None)
    costs = [result.usage.cost_usd for result in results]
    assert None not in costs
    # The summary's reported usage alone costs 12,345 * $0.001 + 67 * $0.001.
    assert sum(c for c in costs if c is not None) > 12.4
    assert balance.spent == pytest.approx(sum(c for c in costs if c is not None))
    assert balance.reserved == pytest.approx(0)


async def test_a_summary_call_on_another_model_names_that_model() -> None:
    class Cheap(Reader):
        name = "compacting_cheap"
        history = Compaction(
            max_tokens=3_000, keep_last_tokens=1_000, model="claude-haiku-4-5",
            instructions=INSTRUCTIONS,
        )  # fmt: skip

    answers = Answers()
    async with MessagesServer(then=answers, keep_requests=None) as server:
        async with satsuma.open_agent(Cheap, model=AnthropicModel(server.client())) as agent:
            for n in range(14):
                await agent.run(f"question {n}")
        bodies = server.requests
    models = {body["model"] for body in bodies if is_summary_call(body)}
    assert models == {"claude-haiku-4-5"}
    assert {body["model"] for body in bodies if not is_summary_call(body)} != models


async def test_a_resume_goes_on_from_the_stored_summary(tmp_path: Path) -> None:
    answers = Answers()
    server = MessagesServer(then=answers, keep_requests=None)
    async with server, SQLiteStore(tmp_path / "s.db") as store:
        model = AnthropicModel(server.client())
        async with satsuma.open_agent(Reader, model=model, store=store, agent_id="r") as a:
            while answers.summaries == 0:
                await a.run(f"question {answers.turn}")
        assert answers.summaries == 1
        stored = await store.summaries("r")
        full = await store.load_messages("r")
        assert [s.text for s in stored] == ["summary number 1"]
        sent = len(server.requests)
        # Another process (a new agent on the same file) goes on from it.
        async with satsuma.open_agent(Reader, model=model, store=store, agent_id="r") as a:
            result = await a.run("and now?")
        assert result.status == "completed"
        after = server.requests[sent:]
        assert not any(is_summary_call(body) for body in after)
        assert after[0]["messages"][0]["content"][0]["text"] == f"{HEADING}summary number 1"
        assert (await store.load_messages("r"))[: len(full)] == full
    assert answers.summaries == 1


async def test_a_supervisor_restart_goes_on_from_the_stored_summary() -> None:
    summaries: list[str] = []
    heads: list[str] = []

    def reply(request: satsuma.ModelRequest) -> Reply:
        if request.system == INSTRUCTIONS:
            summaries.append("made")
            return Reply(text="what happened before")
        heads.append(json.dumps(request.messages[0].content[0]))
        last = request.messages[-1].content
        if any(block.get("type") == "tool_result" for block in last):
            return Reply(text="read it")
        return Reply(tool_calls=[("fetch", {"page": len(heads)})])

    store = MemoryStore()
    async with satsuma.Supervisor() as sup:
        agent = await sup.start_child(
            Reader, model=FunctionModel(reply), store=store, agent_id="sup"
        )
        while not summaries:
            await agent.run("more")
        (child,) = sup.which_children()
        await sup.restart_child(child.id)
        heads.clear()
        result = await agent.run("after the restart")
    assert result.status == "completed"
    assert summaries == ["made"]  # once: the new incarnation read it from the store
    assert heads and all("what happened before" in head for head in heads)


async def test_a_failed_summary_call_trims_that_request_and_the_next_call_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = Answers()
    failures = [0]

    def flaky(body: dict[str, Any]) -> Reply | satsuma.ModelError:
        if is_summary_call(body) and failures[0] < 1:
            failures[0] += 1
            return satsuma.ModelError("the summariser is down", status=400)
        return answers(body)

    caplog.set_level(logging.WARNING, logger="satsuma.agents")
    async with MessagesServer(then=flaky, keep_requests=None) as server:
        async with satsuma.open_agent(Reader, model=AnthropicModel(server.client())) as agent:
            results = [await agent.run(f"question {n}") for n in range(14)]
        bodies = server.requests
    assert all(result.status == "completed" for result in results)
    assert failures == [1] and answers.summaries >= 1
    failed_at = next(i for i, body in enumerate(bodies) if is_summary_call(body))
    trimmed = bodies[failed_at + 1]
    assert not is_summary_call(trimmed)
    assert MARK not in json.dumps(trimmed["messages"][0])  # no summary yet: a trim
    assert len(json.dumps(trimmed)) // 4 <= 3_000
    assert list(paired(trimmed["messages"])) == []
    assert any(
        "summary of" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records
    )


async def test_a_cancelled_summary_call_cancels_the_run_and_stores_nothing() -> None:
    store = MemoryStore()
    cancel = trio.CancelScope()
    calls = []

    async def reply(request: satsuma.ModelRequest) -> Reply:
        calls.append(request)
        if request.system == INSTRUCTIONS:
            cancel.cancel()
            await trio.sleep_forever()
        last = request.messages[-1].content
        if any(block.get("type") == "tool_result" for block in last):
            return Reply(text="read it")
        return Reply(tool_calls=[("fetch", {"page": len(calls)})])

    async with satsuma.open_agent(
        Reader, model=FunctionModel(reply), store=store, agent_id="c"
    ) as agent:
        with cancel:
            for n in range(20):
                await agent.run(f"question {n}")
        sent = len(calls)
        assert cancel.cancelled_caught
        assert calls[-1].system == INSTRUCTIONS  # cancelled in the summary call
    assert len(calls) == sent  # no trimmed request went out after it
    assert await store.summaries("c") == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_tokens": 0, "keep_last_tokens": 1}, "max_tokens"),
        ({"max_tokens": -5, "keep_last_tokens": 1}, "max_tokens"),
        ({"max_tokens": float("nan"), "keep_last_tokens": 1}, "max_tokens"),
        ({"max_tokens": 100, "keep_last_tokens": 100}, "keep_last_tokens"),
        ({"max_tokens": 100, "keep_last_tokens": 200}, "keep_last_tokens"),
        ({"max_tokens": 100, "keep_last_tokens": True}, "keep_last_tokens"),
        ({"max_tokens": 100, "keep_last_tokens": 10, "instructions": 3}, "instructions"),
        ({"max_tokens": 100, "keep_last_tokens": 10, "instructions": " "}, "instructions"),
        ({"max_tokens": 100, "keep_last_tokens": 10, "model": ""}, "model"),
        ({"max_tokens": 100, "keep_last_tokens": 10, "count": "guess"}, "count"),
    ],
)
def test_bad_settings_are_refused_when_the_class_is_declared(
    kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=rf"Compaction\.{field}"):

        class Bad(satsuma.Agent):
            name = "bad_compaction"
            history = Compaction(**kwargs)


async def test_a_request_past_the_context_window_fails_before_it_is_sent() -> None:
    class Plain(satsuma.Agent):
        name = "plain_reader"

    satsuma.set_context_window("sonnet", 1_000)
    try:
        async with MessagesServer(["never sent"]) as server:
            async with satsuma.open_agent(Plain, model=AnthropicModel(server.client())) as agent:
                result = await agent.run("word " * 2_000)
            assert server.request_count == 0
    finally:
        satsuma.set_context_window("sonnet", None)
    assert result.status == "failed"
    assert result.error is not None
    assert "not sent" in result.error and "context window of 1000 tokens" in result.error
    assert "about 2" in result.error  # the estimate: 10,000 characters, ~2,500 tokens


async def test_compaction_keeps_a_small_window_from_being_passed() -> None:
    satsuma.set_context_window("sonnet", 3_500)
    try:
        answers = Answers()
        server = MessagesServer(then=answers, keep_requests=None)
        async with server, satsuma.open_agent(Reader, model=AnthropicModel(server.client())) as a:
            results = [await a.run(f"question {n}") for n in range(10)]
    finally:
        satsuma.set_context_window("sonnet", None)
    assert all(result.status == "completed" for result in results)
    assert answers.summaries >= 1


def test_context_windows_are_overridable_and_checked() -> None:
    with pytest.raises(ValueError, match="tokens must be 1 or more"):
        satsuma.set_context_window("sonnet", 0)
    with pytest.raises(TypeError, match="tokens must be an int"):
        satsuma.set_context_window("sonnet", 1.5)  # type: ignore[arg-type]
    error = ContextWindowExceeded("m", 10, 5, "api")
    assert (error.model, error.estimate, error.window, error.counted_by) == ("m", 10, 5, "api")


async def test_count_api_asks_the_count_endpoint_before_each_call() -> None:
    class Counted(Reader):
        name = "compacting_counted"
        history = Compaction(
            max_tokens=3_000, keep_last_tokens=1_000, instructions=INSTRUCTIONS, count="api"
        )

    answers = Answers()
    async with MessagesServer(then=answers, keep_requests=None) as server:
        async with satsuma.open_agent(Counted, model=AnthropicModel(server.client())) as agent:
            results = [await agent.run(f"question {n}") for n in range(14)]
        bodies = server.requests
        counted = server.count_requests
    assert all(result.status == "completed" for result in results)
    calls = [body for body in bodies if not is_summary_call(body)]
    assert answers.summaries >= 1
    # One count for each call, and one more after each summary (the new request).
    assert len(counted) == len(calls) + answers.summaries
    assert all("max_tokens" not in body for body in counted)
    assert max(len(json.dumps(body)) // 4 for body in calls) <= 3_000


# --- tool_use and tool_result stay together, whatever the history -----------------------


def _problems(messages: Any) -> list[str]:
    return list(paired([{"role": m.role, "content": list(m.content)} for m in messages]))


exchange_shapes = st.lists(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 1_500)), max_size=4),
    min_size=1,
    max_size=25,
)
"""Each exchange: its turns of tool calls (how many calls, how long each result)."""


def history_of(shapes: list[list[tuple[int, int]]]) -> list[satsuma.Message]:
    messages: list[satsuma.Message] = []
    ids = itertools.count()
    for n, turns in enumerate(shapes):
        messages.append(
            satsuma.Message(role="user", content=[{"type": "text", "text": f"prompt {n}"}])
        )
        for calls, size in turns:
            uses = [
                {"type": "tool_use", "id": f"t{next(ids)}", "name": "fetch", "input": {}}
                for _ in range(calls)
            ]
            messages.append(satsuma.Message(role="assistant", content=uses))
            results = [
                {"type": "tool_result", "tool_use_id": use["id"], "content": "x" * size}
                for use in uses
            ]
            messages.append(satsuma.Message(role="user", content=results))
        messages.append(
            satsuma.Message(role="assistant", content=[{"type": "text", "text": f"answer {n}"}])
        )
    return messages


@given(exchange_shapes, st.integers(200, 5_000))
@settings(max_examples=200, deadline=None)
def test_process_never_parts_a_tool_use_from_its_result(
    shapes: list[list[tuple[int, int]]], max_tokens: int
) -> None:
    messages = history_of(shapes)
    kept = Compaction(max_tokens=max_tokens, keep_last_tokens=max_tokens // 2).process(
        messages, None
    )
    assert kept and _problems(kept) == []
    assert list(kept) == messages[len(messages) - len(kept) :]


@given(exchange_shapes)
@settings(max_examples=15, deadline=None)
def test_every_request_of_a_compacting_agent_keeps_its_pairs(
    shapes: list[list[tuple[int, int]]],
) -> None:
    plan = [turn for turns in shapes for turn in [*turns, None]]  # None: the answer

    def reply(request: satsuma.ModelRequest) -> Reply:
        if request.system == INSTRUCTIONS:
            return Reply(text="summary")
        assert _problems(request.messages) == []
        step = plan.pop(0) if plan else None
        if step is None:
            return Reply(text="done")
        calls, size = step
        return Reply(tool_calls=[("blob", {"size": size})] * calls)

    @tool
    async def blob(size: int) -> str:
        """A result of ``size`` characters."""
        return "y" * size

    class Random(satsuma.Agent):
        name = "compacting_random"
        tools = [blob]
        history = Compaction(max_tokens=1_500, keep_last_tokens=500, instructions=INSTRUCTIONS)

    async def main() -> None:
        async with satsuma.open_agent(Random, model=FunctionModel(reply)) as agent:
            for n in range(len(shapes)):
                result = await agent.run(f"prompt {n}")
                assert result.status == "completed", result.error

    trio.run(main)


async def test_a_reset_forgets_the_summary_in_the_store_and_in_the_agent() -> None:
    made: list[str] = []
    firsts: list[str] = []

    def reply(request: satsuma.ModelRequest) -> Reply:
        if request.system == INSTRUCTIONS:
            made.append("summary")
            return Reply(text="the story so far")
        firsts.append(json.dumps(request.messages[0].content[0]))
        return Reply(text="noted. " * 200)

    store = MemoryStore()
    model = FunctionModel(reply)
    async with satsuma.open_agent(Reader, model=model, store=store, agent_id="z") as agent:
        while not made:
            await agent.run("tell me more " * 20)
        await agent.run("once more")
        assert MARK in firsts[-1]
        await agent.reset()
        assert await store.summaries("z") == []
        firsts.clear()
        for _ in range(3):  # as long as before the summary, without passing the limit
            await agent.run("tell me more " * 20)
        assert agent.compacted_history == agent.history
    assert firsts and not any(MARK in first for first in firsts)
    assert made == ["summary"]
