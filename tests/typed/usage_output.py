"""Typed answers as a user's type checker sees them (tests/test_typing.py runs
``mypy --strict`` over this file, then runs it): an agent declared ``Agent[Invoice]``
gives ``AgentHandle[Invoice]`` from ``open_agent`` and from ``start_child``, and its runs
``RunResult[Invoice]``; an agent without a type answers ``str``; ``run(output_type=X)``
types that run as X, and so does ``result(run_id, output_type=X)``; a typed run that did
not complete raises ``NoOutput`` on ``output``. The class-attribute form
(``output_type = Invoice`` on a plain ``Agent``) works at run time, but mypy sees ``str``.

Each ``assert_type`` is an assertion mypy checks (and that is a no-op at run time).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Literal, assert_type

import attrs
import trio

import satsuma
from satsuma.store import SQLiteStore
from satsuma.testing import Reply, ScriptedModel


@attrs.frozen
class Invoice:
    total: float
    currency: Literal["EUR", "USD"]


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"


class Chatty(satsuma.Agent):
    name = "chatty"


class Attributed(satsuma.Agent):
    # DESIGN.md's form: typed at run time, but to mypy this class is Agent[str].
    name = "attributed"
    output_type = Invoice


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

    async with satsuma.open_agent(Extractor, model=ScriptedModel([])) as failing:
        failed = await failing.run("Invoice?")  # the script is over: the run fails
        try:  # typed Invoice, and reading it raises, naming why
            assert_type(failed.output, Invoice)
        except satsuma.NoOutput as exc:
            assert exc.status == failed.status == "failed"
        else:
            raise AssertionError("a failed typed run has no output")

    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "agents.db")
        model = ScriptedModel([answer({"value": 3})])
        async with satsuma.open_agent(Chatty, model=model, store=store, agent_id="c") as kept:
            counted = await kept.run("How many?", output_type=int)
            again = await kept.result(counted.run_id, output_type=int)
            assert_type(again, satsuma.RunResult[int])
            assert again.output == 3

    async with satsuma.open_agent(Attributed, model=ScriptedModel([invoice])) as attributed:
        assert_type(attributed, satsuma.AgentHandle[str])
        plain = await attributed.run("Invoice?")
        assert_type(plain.output, str)  # what mypy sees; at run time, the Invoice:
        assert isinstance(plain.output, Invoice)

    def verify(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
        # A verifier serves any agent: its output is the typed answer, or the text.
        return satsuma.Verdict.ok() if ctx.output else satsuma.Verdict.retry("empty")

    assert verify is not None


trio.run(main)
