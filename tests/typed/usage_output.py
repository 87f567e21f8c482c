"""Typed answers as a user's type checker sees them (tests/test_typing.py runs
``mypy --strict`` over this file, then runs it): an agent declared ``Agent[Invoice]``
gives ``AgentHandle[Invoice]`` from ``open_agent`` and from ``start_child``, and its runs
``RunResult[Invoice]``; an agent without a type answers ``str``; ``run(output_type=X)``
types that run as X.

Each ``assert_type`` is an assertion mypy checks (and that is a no-op at run time).
"""

from __future__ import annotations

from typing import Any, Literal, assert_type

import attrs
import trio

import satsuma
from satsuma.testing import Reply, ScriptedModel


@attrs.frozen
class Invoice:
    total: float
    currency: Literal["EUR", "USD"]


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"


class Chatty(satsuma.Agent):
    name = "chatty"


def answer(value: dict[str, Any]) -> Reply:
    return Reply(tool_calls=[("final_answer", value)])


async def main() -> None:
    invoice = answer({"total": 9.5, "currency": "EUR"})
    model = ScriptedModel([invoice, "Hello.", answer({"value": 3}), invoice])
    async with satsuma.open_agent(Extractor, model=model) as extractor:
        assert_type(extractor, satsuma.AgentHandle[Invoice])
        result = await extractor.run("Invoice?")
        assert_type(result, satsuma.RunResult[Invoice])
        assert_type(result.output, Invoice)
        total: float = result.output.total
        assert total == 9.5

        text = await extractor.run("Say hello", output_type=str)
        assert_type(text.output, str)
        count = await extractor.run("How many?", output_type=int)
        assert_type(count.output, int)
        assert count.output == 3

    async with satsuma.open_agent(Chatty, model=ScriptedModel(["Hi."])) as chatty:
        assert_type(chatty, satsuma.AgentHandle[str])
        said = await chatty.run("Hello")
        assert_type(said.output, str)
        assert said.output.upper() == "HI."

    async with satsuma.Supervisor() as sup:
        child = await sup.start_child(Extractor, model=ScriptedModel([invoice]))
        assert_type(child, satsuma.AgentHandle[Invoice])
        supervised = await child.run("Invoice?")
        assert_type(supervised.output, Invoice)
        assert supervised.output.currency == "EUR"

    def verify(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
        # A verifier serves any agent: its output is the typed answer, or the text.
        return satsuma.Verdict.ok() if ctx.output else satsuma.Verdict.retry("empty")

    assert verify is not None


trio.run(main)
