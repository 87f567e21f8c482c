"""A2AAgent against satsuma's own A2A surface (``satsuma.serve.Server``), over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

import satsuma
from satsuma.serve import Server, create_token
from satsuma.testing import Reply, ScriptedModel, tool_call
from satsuma.tools.a2a import A2AAgent, A2AAgentError

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]


@satsuma.tool(requires_approval=True)
async def refund(invoice: int) -> str:
    """Refund an invoice.

    Args:
        invoice: Its number.
    """
    return f"refunded {invoice}"


class Billing(satsuma.Agent):
    name = "billing"
    description = "Answers questions about invoices."
    tools = [refund]


@asynccontextmanager
async def serving(script: list[Any], **options: Any) -> AsyncIterator[Server]:
    server = Server([Billing], model=ScriptedModel(script), port=0, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


async def test_a_completed_run_is_the_result_and_its_context_goes_on() -> None:
    script = ["invoice 42 is paid", "and it was paid on time"]
    async with serving(script) as server, A2AAgent(f"{server.url}/a2a/billing") as remote:
        (tool,) = remote.tools()
        runner = satsuma.ToolRunner([remote], timeout=30)
        (first,) = await runner.execute([tool_call(tool.name, {"message": "invoice 42?"})])
        context_id = first.details["context_id"]
        (second,) = await runner.execute(
            [tool_call(tool.name, {"message": "on time?", "context_id": context_id})]
        )
    assert tool.name == "billing"
    assert not first.is_error, first.content
    assert first.content == f"invoice 42 is paid\n\n(context_id: {context_id})"
    assert second.content == f"and it was paid on time\n\n(context_id: {context_id})"


async def test_a_pending_approval_comes_back_as_input_required() -> None:
    script = [Reply(tool_calls=[("refund", {"invoice": 42})]), "refunded"]
    async with serving(script) as server, A2AAgent(f"{server.url}/a2a/billing") as remote:
        (outcome,) = await satsuma.ToolRunner([remote], timeout=30).execute(
            [tool_call("billing", {"message": "refund invoice 42"})]
        )
    assert not outcome.is_error, outcome.content
    assert outcome.details["state"] == "input-required"
    assert outcome.content.startswith("The remote agent billing needs more input")
    assert "refund" in outcome.content
    assert f"task_id={outcome.details['task_id']}" in outcome.content


async def test_a_bearer_token_in_the_headers_reaches_a_served_agent(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    token = create_token(tokens, name="caller", scopes=["run", "read"], agents=["billing"])
    async with serving(["paid"], tokens=tokens) as server:
        url = f"{server.url}/a2a/billing"
        async with A2AAgent(url, headers={"Authorization": f"Bearer {token}"}) as remote:
            (outcome,) = await satsuma.ToolRunner([remote], timeout=30).execute(
                [tool_call("billing", {"message": "invoice 7?"})]
            )
    assert outcome.content.startswith("paid"), outcome.content


async def test_without_the_token_the_start_names_what_the_card_requires(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    create_token(tokens, name="caller", scopes=["run", "read"], agents=["billing"])
    async with serving(["unused"], tokens=tokens) as server:
        with pytest.raises(A2AAgentError) as caught:
            async with A2AAgent(f"{server.url}/a2a/billing", name="billing"):
                pass  # pragma: no cover
    # The card is public (clients discover the agent through it); it declares the bearer
    # scheme, so the tool refuses to start without the header every call would need.
    assert caught.value.problem == (
        "requires a bearer token (its agent card's security requirements): give "
        "headers={'Authorization': 'Bearer TOKEN'}"
    )


@satsuma.tool
async def audit(year: int) -> str:
    """Audit a year's books (it never ends: the caller's deadline ends it).

    Args:
        year: Which year.
    """
    await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


class Auditor(satsuma.Agent):
    name = "auditor"
    tools = [audit]


async def test_the_deadline_cancels_the_served_run() -> None:
    script = [Reply(tool_calls=[("audit", {"year": 2025})]), "never said"]
    server = Server([Auditor], model=ScriptedModel(script), port=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with A2AAgent(f"{server.url}/a2a/auditor") as remote:
            (outcome,) = await satsuma.ToolRunner([remote], timeout=2.0).execute(
                [tool_call("auditor", {"message": "audit 2025"})]
            )
            # The timed-out outcome carries no task id: the server's one task is it.
            async with httpx2.AsyncClient() as client:
                answer = await client.post(
                    f"{server.url}/a2a/auditor",
                    json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                    headers={"A2A-Version": "1.0"},
                )
        nursery.cancel_scope.cancel()
    assert outcome.error_kind == "timeout"
    (task,) = answer.json()["result"]["tasks"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
