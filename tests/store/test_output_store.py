"""Typed answers kept by every store (memory, a SQLite file, real PostgreSQL): an agent
opened again on the same conversation gives each run back as it ended, its answer typed
by the class's type or by the type the run was asked for."""

from __future__ import annotations

from typing import Any, Literal

import attrs
import pytest

import satsuma
from satsuma.store import Store
from satsuma.testing import Reply, ScriptedModel


@attrs.frozen
class Line:
    item: str
    cents: int


@attrs.frozen
class Invoice:
    currency: Literal["EUR", "USD"]
    lines: list[Line]


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"
    output_retries = 0


def answer(value: Any) -> Reply:
    return Reply(tool_calls=[("final_answer", value)])


async def test_typed_answers_survive_the_agent(store: Store) -> None:
    model = ScriptedModel(
        [
            Reply(text="Reading.", tool_calls=[("final_answer", {"currency": "EUR"})]),
            answer({"currency": "EUR", "lines": [{"item": "tea", "cents": 350}]}),
            answer({"value": ["tea", "cake"]}),
            answer({"currency": "GBP", "lines": []}),
        ]
    )
    async with satsuma.open_agent(Extractor, model=model, store=store, agent_id="inv") as agent:
        retried = await agent.run("Invoice?", output_retries=1)
        items = await agent.run("Items?", output_type=list[str])
        failed = await agent.run("Invoice?")
    assert retried.output == Invoice("EUR", [Line("tea", 350)])
    assert items.output == ["tea", "cake"]
    assert failed.status == "failed"

    async with satsuma.open_agent(
        Extractor, model=ScriptedModel([]), store=store, agent_id="inv"
    ) as again:
        kept = await again.result(retried.run_id)
        assert kept.output == retried.output
        assert (kept.status, kept.iterations, kept.messages) == ("completed", 2, retried.messages)
        assert (await again.result(items.run_id, output_type=list[str])).output == ["tea", "cake"]
        lost = await again.result(failed.run_id)
        assert (lost.status, lost.error) == ("failed", failed.error)
        with pytest.raises(satsuma.NoOutput, match="it ended failed"):
            lost.output  # noqa: B018
