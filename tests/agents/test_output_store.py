"""Typed answers kept by a store (a real SQLite file): the answer is the JSON the model
sent, in the stored conversation; an agent opened again gives it back typed
(``agent.result(run_id)``); a sub-agent's typed answer reaches its parent as JSON; the
cluster's queue keeps it as JSON and ``Cluster.run`` types it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

import satsuma
from satsuma import Message
from satsuma.agents._agent import spec_of
from satsuma.cluster._results import decode_result, encode_result, result_from_record
from satsuma.store import RunRecord, SQLiteStore
from satsuma.testing import Reply, ScriptedModel


@attrs.frozen
class Invoice:
    total: float
    currency: Literal["EUR", "USD"]


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"


def answer(value: object) -> Reply:
    return Reply(tool_calls=[("final_answer", value)])


async def test_an_agent_opened_again_gives_its_stored_answers_back_typed(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    model = ScriptedModel(
        [
            answer({"total": 12, "currency": "EUR"}),
            "Twelve euros.",
            answer({"value": 3}),
            answer({"total": "wrong"}),
            answer({"total": "wrong again"}),
            answer({"total": "and again"}),
        ]
    )
    async with satsuma.open_agent(
        Extractor, model=model, store=SQLiteStore(path), agent_id="inv-1"
    ) as agent:
        typed = await agent.run("Invoice?")
        text = await agent.run("Say it", output_type=str)
        count = await agent.run("How many?", output_type=int)
        failed = await agent.run("Invoice?")
    assert failed.status == "failed"

    async with satsuma.open_agent(
        Extractor, model=ScriptedModel([]), store=SQLiteStore(path), agent_id="inv-1"
    ) as again:
        stored = await again.result(typed.run_id)
        assert stored.output == Invoice(12.0, "EUR")
        assert (stored.status, stored.usage, stored.iterations) == ("completed", typed.usage, 1)
        assert stored.messages == typed.messages
        # A type given per run is not kept: the reader names it.
        with pytest.raises(ValueError, match="completed with a text answer, not a typed one"):
            await again.result(text.run_id)
        assert (await again.result(text.run_id, output_type=str)).output == "Twelve euros."
        with pytest.raises(
            ValueError,
            match=r"the stored answer does not fit Invoice: missing .* read it with "
            r"result\(run_id, output_type=X\)",
        ):
            await again.result(count.run_id)
        counted = await again.result(count.run_id, output_type=int)
        assert counted.output == 3
        with pytest.raises(TypeError, match=r"output_type set\[int\] is not supported"):
            await again.result(count.run_id, output_type=set[int])
        lost = await again.result(failed.run_id)
        assert (lost.status, lost.error) == ("failed", failed.error)
        with pytest.raises(satsuma.NoOutput, match="it ended failed"):
            lost.output  # noqa: B018
        with pytest.raises(ValueError, match="agent inv-1 has no run 'run_nope'"):
            await again.result("run_nope")

    # A class without a type reads text: a typed answer is read by naming its type.
    class Reader(satsuma.Agent):
        name = "reader"

    async with satsuma.open_agent(
        Reader, model=ScriptedModel([]), store=SQLiteStore(path), agent_id="inv-1"
    ) as reader:
        with pytest.raises(
            ValueError,
            match=r"completed with a typed answer \(its final_answer input: \{\"value\": 3\}\), "
            r"not text: read it with result\(run_id, output_type=X\)",
        ):
            await reader.result(count.run_id)
        assert (await reader.result(count.run_id, output_type=int)).output == 3
        assert (await reader.result(typed.run_id, output_type=Invoice)).output == Invoice(12, "EUR")
        assert (await reader.result(text.run_id)).output == "Twelve euros."
        assert (await reader.result(failed.run_id)).output == ""  # read as text: no answer


async def test_without_a_store_there_is_no_result_to_read() -> None:
    async with satsuma.open_agent(Extractor, model=ScriptedModel([])) as agent:
        with pytest.raises(ValueError, match="agent extractor has no store"):
            await agent.result("run_1")


async def test_a_sub_agents_typed_answer_reaches_the_parent_as_json() -> None:
    class Boss(satsuma.Agent):
        name = "boss"
        tools = [satsuma.AgentTool(Extractor)]

    model = ScriptedModel(
        [
            Reply(tool_calls=[("extractor", {"task": "Read the invoice"})]),
            answer({"total": 7.5, "currency": "USD"}),
            "It is 7.50 USD.",
        ]
    )
    async with satsuma.open_agent(Boss, model=model) as boss:
        result = await boss.run("How much?")
        history = boss.history
    assert result.output == "It is 7.50 USD."
    (sub_answer,) = history[2].tool_results
    assert json.loads(sub_answer["content"]) == {"total": 7.5, "currency": "USD"}


async def test_the_cluster_queue_keeps_a_typed_answer_as_json(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    model = ScriptedModel([answer({"total": 1, "currency": "EUR"})])
    store = SQLiteStore(path)
    async with satsuma.open_agent(Extractor, model=model, store=store, agent_id="q") as agent:
        result = await agent.run("Invoice?")
        history = agent.history
        record = await store.get_run(result.run_id)
    decoded = decode_result(encode_result(result))
    assert decoded.output == {"total": 1.0, "currency": "EUR"}
    assert Invoice(**decoded.output) == result.output
    # Rebuilt from the agent's own records (a node that stopped before the queue heard),
    # read by the class's type: typed, and the same JSON in the queue.
    assert record is not None
    rebuilt = result_from_record(record, history, spec_of(Extractor).output)
    assert rebuilt.output == Invoice(1.0, "EUR")
    assert decode_result(encode_result(rebuilt)).output == decoded.output


@attrs.frozen
class Score:
    value: int


@pytest.mark.parametrize(
    ("output_type", "given", "typed", "as_json"),
    [
        pytest.param(int, {"value": 7}, 7, 7, id="wrapped"),
        # An object type whose only field is "value" sends the same input, unwrapped:
        # the type, not the stored shape, says which.
        pytest.param(Score, {"value": 7}, Score(7), {"value": 7}, id="object-with-value"),
    ],
)
async def test_an_answer_reads_back_the_same_from_the_queue_and_the_records(
    tmp_path: Path, output_type: Any, given: Any, typed: Any, as_json: Any
) -> None:
    Counter = type("Counter", (satsuma.Agent,), {"name": "counter", "output_type": output_type})

    store = SQLiteStore(tmp_path / "agents.db")
    model = ScriptedModel([answer(given)])
    async with satsuma.open_agent(Counter, model=model, store=store, agent_id="c") as agent:
        result = await agent.run("How many?")
        history = agent.history
        record = await store.get_run(result.run_id)
        assert (await agent.result(result.run_id)).output == typed
    assert record is not None and result.output == typed
    output = spec_of(Counter).output
    assert output is not None
    # The same JSON in the queue both ways (a run's end, or a node rebuilding it from the
    # records), and typed again as Cluster.run does.
    queued = decode_result(encode_result(result)).output
    recorded = decode_result(encode_result(result_from_record(record, history, output))).output
    assert queued == recorded == as_json
    assert output.from_json(queued) == typed


def test_a_cluster_records_and_reads_back_the_answer_events() -> None:
    from satsuma.cluster._events import decode_event, encode_event

    events = [
        satsuma.OutputDelta(agent="extractor", run_id="r", iteration=1, text='{"total": 1'),
        satsuma.OutputRejected(
            agent="extractor", run_id="r", iteration=1, errors=("missing total",), retries_left=1
        ),
        satsuma.OutputValidated(
            agent="extractor", run_id="r", iteration=2, output=Invoice(1.0, "EUR")
        ),
    ]
    delta, rejected, validated = (decode_event(encode_event(event)) for event in events)
    assert (delta, rejected) == (events[0], events[1])
    # The stream does not know the class: the answer reads back as its JSON.
    assert isinstance(validated, satsuma.OutputValidated)
    assert validated.output == {"total": 1.0, "currency": "EUR"}


async def test_a_typed_run_killed_after_its_answer_resumes_to_that_answer(tmp_path: Path) -> None:
    # What a kill after the answer was taken (before the run's end was written) leaves:
    # the answer and its "Answer received." result, the run still 'running'.
    store = SQLiteStore(tmp_path / "agents.db")
    call = {"type": "tool_use", "id": "t_answer", "name": "final_answer"}
    await store.write_tail(
        "inv-9",
        0,
        [
            Message.user("Invoice?"),
            Message(role="assistant", content=[{**call, "input": {"total": 5, "currency": "USD"}}]),
            Message(
                role="user",
                content=[
                    {
                        "type": "tool_result",
                        "tool_use_id": "t_answer",
                        "content": "Answer received.",
                        "is_error": False,
                    }
                ],
            ),
        ],
    )
    await store.start_run(
        RunRecord(
            run_id="run_killed",
            agent_id="inv-9",
            status="running",
            prompt="Invoice?",
            started_at=1.0,
            position=0,
        )
    )
    model = ScriptedModel([])  # the model is not asked again
    async with satsuma.open_agent(Extractor, model=model, store=store, agent_id="inv-9") as agent:
        assert [r.run_id for r in agent.interrupted] == ["run_killed"]
        resumed = await agent.resume("run_killed")
        stored = await agent.result("run_killed")
    assert (resumed.status, resumed.output) == ("completed", Invoice(5.0, "USD"))
    assert stored.output == Invoice(5.0, "USD")
    assert model.requests == []


@satsuma.tool(requires_approval=True)
async def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: The order.
    """
    return f"refunded {order}"


async def test_a_run_paused_beside_an_invalid_answer_resumes_with_that_answer_s_result(
    tmp_path: Path,
) -> None:
    class Refunder(satsuma.Agent[Invoice]):
        name = "refunder"
        tools = [refund]

    model = ScriptedModel(
        [
            Reply(tool_calls=[("refund", {"order": "A-1"}), ("final_answer", {"total": -1})]),
            answer({"total": 3, "currency": "EUR"}),
        ]
    )
    store = SQLiteStore(tmp_path / "agents.db")
    async with satsuma.open_agent(Refunder, model=model, store=store, agent_id="r") as agent:
        paused = await agent.run("Refund A-1 and tell me the invoice")
        assert paused.status == "awaiting_approval"
        (pending,) = paused.pending
        resumed = await agent.resume(paused.run_id, decisions={pending.id: satsuma.Approve()})
        history = agent.history
    assert resumed.output == Invoice(3.0, "EUR")
    refunded, invalid = history[2].tool_results
    assert refunded["content"] == "refunded A-1"
    # The answer's own error, journaled before the pause; not "Interrupted".
    assert invalid["content"].startswith("Error: Invalid answer: missing required parameter:")
