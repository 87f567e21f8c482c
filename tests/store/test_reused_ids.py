"""Tool-call ids that a provider reuses (issue 29, item 2).

OpenAI-compatible local servers number their calls ``call_0`` in every turn, and a
hostile server can send any id: twice in one response, empty, with characters the
Messages API refuses, or very long. Over the wire (the real AsyncAnthropic client against
MessagesServer, the real AsyncOpenAI client against ChatCompletionsServer), from a Model
of the user's own, and on every store: each call gets its own id in the history (the one
its events and journal record carry), each executed call its own journal record, and a
resume of an interrupted run answers each call with its own outcome."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import Message, ModelRequest, ModelResponse, ToolCall
from satsuma.store import Owner, RunRecord, SQLiteStore, Store
from satsuma.testing import (
    ChatCompletionsServer,
    MessagesServer,
    Reply,
    check_conversation,
    tool_call,
)

WORKER = Path(__file__).with_name("ids_worker.py")
API_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
INTERRUPTED = (
    "Error: Interrupted: the process stopped while this tool was running; not re-run "
    "because the tool is not idempotent."
)

paid: list[int] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    paid.clear()


@satsuma.tool
async def pay(amount: int) -> str:
    """Pay an amount.

    Args:
        amount: How much.
    """
    paid.append(amount)
    return f"paid {amount}"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay]


def pays(*pairs: tuple[str, int]) -> Reply:
    return Reply(tool_calls=[tool_call("pay", {"amount": amount}, id=id) for id, amount in pairs])


@contextlib.asynccontextmanager
async def provider(dialect: str, script: list[Reply | str]) -> AsyncIterator[Any]:
    """A model on the wire: the Messages API's dialect or Chat Completions'."""
    if dialect == "messages":
        async with MessagesServer(script) as server:
            yield satsuma.AnthropicModel(server.client(), backoff_base=0.001, jitter=False)
    else:
        async with ChatCompletionsServer(script) as chat_server:
            yield satsuma.OpenAIModel(chat_server.client(), backoff_base=0.001, jitter=False)


def history_ids(history: Sequence[Message]) -> list[str]:
    return [block["id"] for message in history for block in message.tool_uses]


async def assert_one_record_per_call(
    store: Store, run_id: str, history: Sequence[Message], amounts: list[int]
) -> None:
    """The history's calls, in order, pay ``amounts``; each has a valid id of its own,
    answered by its own outcome, and its own finished journal record."""
    check_conversation(history)
    ids = history_ids(history)
    assert len(set(ids)) == len(ids) == len(amounts)
    assert all(API_ID.fullmatch(tool_id) for tool_id in ids), ids
    uses = {block["id"]: block for m in history for block in m.tool_uses}
    results = {block["tool_use_id"]: block for m in history for block in m.tool_results}
    assert [uses[tool_id]["input"] for tool_id in ids] == [{"amount": a} for a in amounts]
    assert [results[tool_id]["content"] for tool_id in ids] == [f"paid {a}" for a in amounts]
    journal = {entry.tool_use_id: entry for entry in await store.calls(run_id)}
    assert set(journal) == set(ids)
    for tool_id, amount in zip(ids, amounts, strict=True):
        entry = journal[tool_id]
        assert entry.input == {"amount": amount}
        assert entry.finished and entry.content == f"paid {amount}"


def event_ids(events: list[Any], kind: type) -> list[str]:
    return [event.tool_use_id for event in events if isinstance(event, kind)]


@pytest.mark.parametrize("dialect", ["messages", "chat"])
async def test_calls_numbered_again_in_every_turn_each_get_an_id_and_a_record(
    dialect: str, store: Store
) -> None:
    script: list[Reply | str] = [pays(("call_0", 1)), pays(("call_0", 2)), "Paid twice."]
    events: list[Any] = []
    async with (
        provider(dialect, script) as model,
        satsuma.open_agent(Payer, model=model, store=store, agent_id="a") as agent,
    ):
        result = await agent.run("Pay 1, then 2.", events=events.append)
        history = agent.history
    assert result.status == "completed"
    assert paid == [1, 2]
    await assert_one_record_per_call(store, result.run_id, history, [1, 2])
    first, second = history_ids(history)
    assert first == "call_0"  # a valid id new to the conversation is kept as it came
    assert second.startswith("call_0_")  # the reused one is replaced, its stem kept
    # The streaming events carry the ids the history holds.
    assert event_ids(events, satsuma.ToolCallStart) == [first, second]
    assert event_ids(events, satsuma.ToolCallEnd) == [first, second]
    # What was stored is what the agent holds.
    assert list(await store.load_messages("a")) == list(history)


@pytest.mark.parametrize("dialect", ["messages", "chat"])
async def test_ids_no_api_would_take_are_replaced(dialect: str, store: Store) -> None:
    # Twice in one response, empty, characters the Messages API refuses, very long, not
    # ASCII; then a turn reusing them all.
    hostile = ["dup", "dup", "", "has space!", "x" * 5000, "caf\u00e9", "call/../0"]
    script: list[Reply | str] = [
        pays(*((tool_id, n) for n, tool_id in enumerate(hostile, 1))),
        pays(*((tool_id, n) for n, tool_id in enumerate(hostile, 11))),
        "Done.",
    ]
    events: list[Any] = []
    async with (
        provider(dialect, script) as model,
        satsuma.open_agent(Payer, model=model, store=store, agent_id="a") as agent,
    ):
        result = await agent.run("Pay them all.", events=events.append)
        history = agent.history
    assert result.status == "completed"
    amounts = [*range(1, 8), *range(11, 18)]
    assert sorted(paid) == amounts
    await assert_one_record_per_call(store, result.run_id, history, amounts)
    assert history_ids(history)[0] == "dup"
    assert sorted(event_ids(events, satsuma.ToolCallStart)) == sorted(history_ids(history))


class RenumberingModel:
    """A Model of the user's own that returns ModelResponse directly, numbering its calls
    from ``call_0`` in every turn (twice in one turn too)."""

    def __init__(self) -> None:
        self.turn = 0

    async def respond(self, request: ModelRequest, listener: Any) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        self.turn += 1
        if self.turn > 2:
            return ModelResponse(content=({"type": "text", "text": "Done."},))
        calls = tuple(ToolCall("call_0", "pay", {"amount": 10 * self.turn + n}) for n in range(2))
        content = tuple(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls
        )
        return ModelResponse(content=content, calls=calls, stop_reason="tool_use")


async def test_a_users_own_model_passes_the_same_point(store: Store) -> None:
    async with satsuma.open_agent(
        Payer, model=RenumberingModel(), store=store, agent_id="a"
    ) as agent:
        result = await agent.run("Pay.")
        history = agent.history
    assert result.status == "completed"
    await assert_one_record_per_call(store, result.run_id, history, [10, 11, 20, 21])


async def test_a_model_whose_calls_do_not_match_its_blocks_fails_the_run() -> None:
    class Mismatched:
        async def respond(self, request: ModelRequest, listener: Any) -> ModelResponse:
            await trio.lowlevel.checkpoint()
            return ModelResponse(
                content=({"type": "tool_use", "id": "a", "name": "pay", "input": {"amount": 1}},),
                calls=(ToolCall("b", "pay", {"amount": 1}),),
            )

    async with satsuma.open_agent(Payer, model=Mismatched()) as agent:
        result = await agent.run("Pay.")
        history = agent.history
    assert result.status == "failed"
    assert result.error == (
        "malformed response: its calls do not match its tool_use blocks "
        "(1 calls, 1 tool_use blocks)"
    )
    assert paid == []
    check_conversation(history)


# --- resume ------------------------------------------------------------------------------


async def start_worker(db: Path, dialect: str, where: str, log: Path) -> trio.Process:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), str(db), dialect, where, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(60):
        while f"AT {where}\n".encode() not in seen:
            chunk = await process.stdout.receive_some()
            if not chunk:
                assert process.stderr is not None
                errors = await process.stderr.receive_some()
                raise AssertionError(f"the worker ended: {errors.decode()}")
            seen += chunk
    return process


async def kill(process: trio.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


@pytest.mark.parametrize("dialect", ["messages", "chat"])
@pytest.mark.parametrize(
    ("where", "second"),
    [("started", INTERRUPTED), ("finished", "paid 2")],
    ids=["killed-before-journaled", "killed-after-journaled"],
)
async def test_a_resume_answers_each_call_with_its_own_outcome(
    tmp_path: Path, dialect: str, where: str, second: str
) -> None:
    db, log = tmp_path / "s.db", tmp_path / "paid.log"
    worker = await start_worker(db, dialect, where, log)
    await kill(worker)
    ran_before = log.read_text().splitlines()
    async with SQLiteStore(db) as store:
        (record,) = await store.runs("a")
        async with (
            provider(dialect, ["Resumed."]) as model,
            satsuma.open_agent(Payer, model=model, store=store, agent_id="a") as agent,
        ):
            result = await agent.resume(record.run_id)
            history = agent.history
        assert result.status == "completed"
        # In order: never the first turn's outcome for the second turn's call.
        answers = [block["content"] for m in history for block in m.tool_results]
        assert answers == ["paid 1", second]
        check_conversation(history)
        first_id, second_id = history_ids(history)
        journal = {e.tool_use_id: e for e in await store.calls(record.run_id)}
        assert journal[first_id].input == {"amount": 1}
        assert journal[first_id].content == "paid 1"
        if where == "finished":
            assert journal[second_id].input == {"amount": 2}
            assert journal[second_id].content == "paid 2"
        else:
            assert second_id not in journal  # it never started
    # Nothing ran again: pay is not idempotent.
    assert ran_before == (["pay 1", "pay 2"] if where == "finished" else ["pay 1"])
    assert paid == []


async def test_a_conversation_stored_with_reused_ids_is_resumed_safely(tmp_path: Path) -> None:
    """An older satsuma stored the ids as the provider sent them: the run's second turn
    reused ``call_0``, and the process stopped before that call was journaled, so the
    journal's ``call_0`` record is the first turn's."""
    db = tmp_path / "old.db"

    def use(amount: int) -> dict[str, Any]:
        return {"type": "tool_use", "id": "call_0", "name": "pay", "input": {"amount": amount}}

    answered = {"type": "tool_result", "tool_use_id": "call_0", "content": "paid 1"}
    stored = [
        Message.user("Pay 1, then 2."),
        Message(role="assistant", content=[use(1)]),
        Message(role="user", content=[{**answered, "is_error": False}]),
        Message(role="assistant", content=[use(2)]),
    ]
    async with SQLiteStore(db) as store:
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        record = RunRecord(
            run_id="old-run",
            agent_id="a",
            status="running",
            prompt="Pay 1, then 2.",
            started_at=time.time(),
            position=0,
        )
        await store.start_run(record, start=0, messages=stored, lease=lease)
        await store.call_started("old-run", "call_0", "pay", {"amount": 1}, lease=lease)
        await store.call_finished(
            "old-run", "call_0", content="paid 1", is_error=False, error_kind=None, lease=lease
        )
        await store.release_lease(lease)

    async with (
        SQLiteStore(db) as store,
        provider("messages", ["Resumed."]) as model,
        satsuma.open_agent(Payer, model=model, store=store, agent_id="a") as agent,
    ):
        # Loaded with an id of its own for the second call.
        loaded = history_ids(agent.history)
        assert loaded[0] == "call_0" and len(set(loaded)) == 2
        result = await agent.resume("old-run")
        history = agent.history
    assert result.status == "completed"
    check_conversation(history)
    first_id, second_id = history_ids(history)
    assert first_id == "call_0"
    results = {block["tool_use_id"]: block["content"] for m in history for block in m.tool_results}
    assert results == {first_id: "paid 1", second_id: INTERRUPTED}
    assert paid == []
    async with SQLiteStore(db) as store:
        check_conversation(await store.load_messages("a"))


@satsuma.tool(requires_approval=True)
async def transfer(amount: int) -> str:
    """Send money.

    Args:
        amount: How much.
    """
    paid.append(amount)
    return f"sent {amount}"


class Treasurer(satsuma.Agent):
    name = "treasurer"
    tools = [pay, transfer]


@pytest.mark.parametrize("dialect", ["messages", "chat"])
async def test_a_call_awaiting_approval_is_named_by_its_own_id(dialect: str, store: Store) -> None:
    script: list[Reply | str] = [
        pays(("call_0", 1)),
        Reply(tool_calls=[tool_call("transfer", {"amount": 5}, id="call_0")]),
        "Sent.",
    ]
    async with (
        provider(dialect, script) as model,
        satsuma.open_agent(Treasurer, model=model, store=store, agent_id="a") as agent,
    ):
        paused = await agent.run("Pay 1, then send 5.")
        assert paused.status == "awaiting_approval"
        (pending,) = paused.pending
        first, second = history_ids(agent.history)
        assert pending.id == second != first
        assert [p.tool_use_id for p in await store.pending_calls(paused.run_id)] == [second]
        result = await agent.resume(paused.run_id, decisions={pending.id: satsuma.Approve()})
        history = agent.history
    assert result.status == "completed"
    assert paid == [1, 5]
    check_conversation(history)
    answers = [block["content"] for m in history for block in m.tool_results]
    assert answers == ["paid 1", "sent 5"]
    journal = {e.tool_use_id: e.content for e in await store.calls(paused.run_id)}
    assert journal == {first: "paid 1", second: "sent 5"}


async def test_a_stored_turn_with_an_id_twice_keeps_each_result_with_its_call(
    tmp_path: Path,
) -> None:
    """Older satsuma kept two calls with one id (and ids no API takes) as they came; on
    load each gets its own id, the k-th result for an id still answering its k-th use."""

    def use(tool_id: str, amount: int) -> dict[str, Any]:
        return {"type": "tool_use", "id": tool_id, "name": "pay", "input": {"amount": amount}}

    def answer(tool_id: str, amount: int) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": tool_id, "content": f"paid {amount}"}

    stored = [
        Message.user("Pay."),
        Message(role="assistant", content=[use("dup", 1), use("dup", 2), use("bad id!", 3)]),
        Message(role="user", content=[answer("dup", 1), answer("dup", 2), answer("bad id!", 3)]),
        Message(role="assistant", content=[{"type": "text", "text": "Paid."}]),
    ]
    db = tmp_path / "old.db"
    async with SQLiteStore(db) as store:
        lease = await store.acquire_lease("a", Owner.new(), seconds=30)
        await store.write_tail("a", 0, stored, lease=lease)
        await store.release_lease(lease)
    async with (
        SQLiteStore(db) as store,
        provider("messages", ["Welcome."]) as model,
        satsuma.open_agent(Payer, model=model, store=store, agent_id="a") as agent,
    ):
        await agent.run("Thanks.")
        history = agent.history
    check_conversation(history)
    ids = history_ids(history)
    assert ids[0] == "dup" and len(set(ids)) == 3
    assert all(API_ID.fullmatch(tool_id) for tool_id in ids)
    uses = {block["id"]: block["input"]["amount"] for m in history for block in m.tool_uses}
    for block in history[2].tool_results:
        assert block["content"] == f"paid {uses[block['tool_use_id']]}"
    async with SQLiteStore(db) as store:
        assert list(await store.load_messages("a")) == list(history)


class CheckingStore:
    """The store, checking at each call journaled as started that the stored
    conversation already holds that call: a record never belongs to a lost turn."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def call_started(
        self, run_id: str, tool_use_id: str, tool_name: str, input: Any, **options: Any
    ) -> None:
        stored = history_ids(await self.inner.load_messages("a"))
        assert tool_use_id in stored, f"{tool_name} {tool_use_id} journaled before it was stored"
        await self.inner.call_started(run_id, tool_use_id, tool_name, input, **options)


class Counter(satsuma.Agent[int]):
    name = "counter"
    tools = [pay]


async def test_every_journal_record_belongs_to_a_stored_call(tmp_path: Path) -> None:
    # A typed answer that is refused, beside a call that runs, in a turn reusing ids.
    script: list[Reply | str] = [
        pays(("call_0", 1)),
        Reply(
            tool_calls=[
                tool_call("final_answer", {"value": "not a number"}, id="call_0"),
                tool_call("pay", {"amount": 2}, id="call_1"),
            ]
        ),
        Reply(tool_calls=[tool_call("final_answer", {"value": 3}, id="call_0")]),
    ]
    async with SQLiteStore(tmp_path / "s.db") as opened:
        store: Any = CheckingStore(opened)
        async with (
            provider("messages", script) as model,
            satsuma.open_agent(Counter, model=model, store=store, agent_id="a") as agent,
        ):
            result = await agent.run("Count.")
            history = agent.history
        assert result.status == "completed" and result.output == 3
        assert paid == [1, 2]
        check_conversation(history)
        # The answer that ended the run, alone in its turn, is not journaled.
        journal = [(e.tool_name, e.tool_use_id) for e in await opened.calls(result.run_id)]
        names = ["pay", "final_answer", "pay", "final_answer"]
        assert journal == list(zip(names, history_ids(history), strict=True))[:3]
