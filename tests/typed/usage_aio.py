"""satsuma.aio as a user's type checker sees it: the handles carry the agent's output type,
as satsuma.AgentHandle does. Checked by mypy --strict and run (tests/test_typing.py)."""

from __future__ import annotations

import asyncio
from typing import assert_type

import attrs

import satsuma
from satsuma.aio import AsyncioAgentHandle, Runtime
from satsuma.testing import Reply, ScriptedModel


@attrs.frozen
class Invoice:
    total: int


class Billing(satsuma.Agent[Invoice]):
    name = "billing"


class Plain(satsuma.Agent):
    name = "plain"


def invoice_reply() -> Reply:
    return Reply(tool_calls=[("final_answer", {"total": 3})])


async def main() -> None:
    async with Runtime() as rt:
        billing = await rt.open_agent(Billing, model=ScriptedModel([invoice_reply(), "3"]))
        assert_type(billing, AsyncioAgentHandle[Invoice])
        result = await billing.run("Bill it")
        assert_type(result, satsuma.RunResult[Invoice])
        assert result.output == Invoice(total=3)
        text = await billing.run("Say it", output_type=str)
        assert_type(text, satsuma.RunResult[str])
        supervised = await rt.start_child(Billing, model=ScriptedModel([]))
        assert_type(supervised, AsyncioAgentHandle[Invoice])
        plain = await rt.supervisor.start_child(Plain, model=ScriptedModel(["Hi."]))
        assert_type(plain, AsyncioAgentHandle[str])
        assert (await plain.run("Hello")).output == "Hi."


asyncio.run(main())
