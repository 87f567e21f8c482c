"""Budgets (``satsuma.Budget``, ``satsuma.set_budget``) through real model calls on a
MessagesServer: a call that would pass a budget is not sent and the run fails with
``BudgetExceeded``, shown as the run's error in its result, ``satsuma runs`` and serve's
run JSON; a ``BudgetWarning`` at 80 %; daily budgets roll over at midnight UTC (on a
clock the test moves); a run resumed after an approval counts what it spent before;
a cancelled call gives its reservation back; a model without
prices fails the run rather than spend without a count; and bad budgets are refused
when the class is declared."""

from __future__ import annotations

import datetime
import io
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import satsuma
from satsuma.agents import _spending
from satsuma.serve import Server
from satsuma.store import Balance, MemoryStore, SQLiteStore, ledgers_of
from satsuma.testing import MessagesServer, Reply

# A dollar an output token, 10 cents an input token: a scripted call costs its output
# tokens, and a call is estimated at about $10 (max_tokens) and a few more for its input.
MODEL = "claude-budget-test"
PRICES = satsuma.ModelPrices(input=100_000, output=1_000_000)


@pytest.fixture(autouse=True)
def _prices() -> Iterator[None]:
    satsuma.set_prices(MODEL, PRICES)
    yield
    satsuma.set_prices(MODEL, None)
    satsuma.set_budget(None)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The wall clock budgets read the UTC day from: ``clock[0]``, moved by the test."""
    now = [datetime.datetime(2027, 1, 15, 23, 50, tzinfo=datetime.UTC).timestamp()]
    monkeypatch.setattr(_spending, "wall_clock", lambda: now[0])
    return now


@satsuma.tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


class PerRun(satsuma.Agent):
    name = "per_run"
    model = MODEL
    max_tokens = 10
    max_iterations = 50
    tools = [ping]
    budget = satsuma.Budget(usd_per_run=100)


class Daily(satsuma.Agent):
    name = "daily"
    model = MODEL
    max_tokens = 10
    budget = satsuma.Budget(usd_per_agent_per_day=50)


class PerAgent(satsuma.Agent):
    name = "per_agent"
    model = MODEL
    max_tokens = 10
    tools = [ping]
    budget = satsuma.Budget(usd_per_agent=1000)


class Unbudgeted(satsuma.Agent):
    name = "unbudgeted"
    model = MODEL
    max_tokens = 10


def costing(dollars: int, **reply: Any) -> Reply:
    return Reply(usage=satsuma.Usage(output_tokens=dollars), **reply)


async def test_a_run_that_would_pass_usd_per_run_fails_with_budget_exceeded() -> None:
    # Every call asks for a tool and costs $30: the fourth would pass $100.
    script = [costing(30, tool_calls=[("ping", {})]) for _ in range(10)]
    events: list[satsuma.AgentEvent] = []
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(PerRun, model=satsuma.AnthropicModel(server.client())) as agent,
    ):
        result = await agent.run("go", events=events.append)
        sent = len(server.requests)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(
        f"BudgetExceeded: usd_per_run of $100.0000 (the agent's budget) would be passed by "
        f"agent {agent.agent_id!r}: $90.0000 spent, and the next model call is estimated"
    ), result.error
    # The refused call was never sent; what was spent stays within the budget.
    assert sent == result.iterations - 1 == 3
    assert result.usage.cost_usd == 90
    warnings = [e for e in events if isinstance(e, satsuma.BudgetWarning)]
    assert [(w.budget, w.source, w.limit_usd, w.spent_usd) for w in warnings] == [
        ("usd_per_run", "agent", 100, 90)
    ]
    assert satsuma.event_to_json(warnings[0])["type"] == "BudgetWarning"


async def test_a_daily_budget_is_kept_in_the_store_and_rolls_over_at_midnight_utc(
    tmp_path: Path, clock: list[float]
) -> None:
    path = tmp_path / "budget.db"
    script = [costing(40, text="One."), costing(40, text="Two."), costing(5, text="Three.")]
    async with MessagesServer(script) as server:
        model = satsuma.AnthropicModel(server.client())
        async with (
            SQLiteStore(path) as store,
            satsuma.open_agent(Daily, model=model, store=store, agent_id="d") as agent,
        ):
            first = await agent.run("one")
            second = await agent.run("two")
        assert (first.status, first.usage.cost_usd) == ("completed", 40)
        assert second.status == "failed" and second.error is not None
        assert second.error.startswith(
            "BudgetExceeded: usd_per_agent_per_day of $50.0000 (the agent's budget) would be "
            "passed by agent 'd': $40.0000 spent"
        )
        # Another process on the same file (a new store, a new agent) counts the same day.
        async with (
            SQLiteStore(path) as store,
            satsuma.open_agent(Daily, model=model, store=store, agent_id="d") as agent,
        ):
            again = await agent.run("again")
            assert again.status == "failed"
            day = await ledgers_of(store).balance("day:d:2027-01-15")
            assert day == Balance(spent=40.0, reserved=0.0)
            clock[0] += 15 * 60  # 00:05 UTC, the next day
            tomorrow = await agent.run("tomorrow")
        assert (tomorrow.status, tomorrow.output) == ("completed", "Two.")
        assert len(server.requests) == 2  # the refused calls were never sent

    # `satsuma runs` shows why each failed run failed.
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", "runs", "--store", str(path), "--agent-id", "d"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert out.count("      error: BudgetExceeded: usd_per_agent_per_day of $50.0000") == 2, out


async def test_the_process_budget_holds_every_agent_and_the_tighter_limit_wins() -> None:
    satsuma.set_budget(satsuma.Budget(usd_per_agent=25, usd_per_run=1000))
    store = MemoryStore()
    script = [costing(20, text="First."), costing(20, text="Second.")]
    events: list[satsuma.AgentEvent] = []
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(
            PerRun, model=satsuma.AnthropicModel(server.client()), store=store, agent_id="p"
        ) as agent,
    ):
        first = await agent.run("one", events=events.append)
        second = await agent.run("two")
    assert first.status == "completed"
    assert second.error is not None
    assert second.error.startswith(
        "BudgetExceeded: usd_per_agent of $25.0000 (the process's budget) would be passed "
        "by agent 'p': $20.0000 spent"
    )
    # The process's usd_per_run (1000) is looser than the class's (100): 100 counts, and
    # $20 of it is not 80 %; the process's usd_per_agent was crossed at $20.
    warnings = [(e.budget, e.source) for e in events if isinstance(e, satsuma.BudgetWarning)]
    assert warnings == [("usd_per_agent", "process")]
    with pytest.raises(TypeError, match=r"set_budget: budget must be a satsuma\.Budget or None"):
        satsuma.set_budget(5.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_cancelled_call_gives_its_reservation_back(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    satsuma.set_budget(satsuma.Budget(usd_per_agent=1000))
    arrived = trio.Event()

    async def hang(body: dict[str, Any]) -> Reply:
        arrived.set()
        await trio.sleep_forever()

    async with (
        MessagesServer([hang]) as server,
        satsuma.open_agent(
            Unbudgeted, model=satsuma.AnthropicModel(server.client()), store=store, agent_id="c"
        ) as agent,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.run, "wait")
            await arrived.wait()  # the call is in flight, its estimate reserved
            held = await ledgers_of(store).balance("agent:c")
            nursery.cancel_scope.cancel()
        balance = await ledgers_of(store).balance("agent:c")
    assert held.spent == 0 and held.reserved > 0
    assert balance == Balance(spent=0.0, reserved=0.0)


async def test_an_unpriced_model_with_a_budget_fails_the_run_before_any_call() -> None:
    class Local(satsuma.Agent):
        name = "local"
        model = "claude-nobody-prices-this"
        budget = satsuma.Budget(usd_per_run=1)

    async with (
        MessagesServer(["Never sent."]) as server,
        satsuma.open_agent(Local, model=satsuma.AnthropicModel(server.client())) as agent,
    ):
        result = await agent.run("hi")
        assert server.requests == []
    assert result.status == "failed"
    assert result.error == (
        f"ConfigurationError: agent {agent.agent_id!r} has a budget, but the prices of "
        "model 'claude-nobody-prices-this' are unknown, so what its calls cost cannot be "
        "counted. Set them with satsuma.set_prices(model, satsuma.ModelPrices(...))"
    )


async def test_serve_shows_budget_exceeded_as_the_run_errors_type() -> None:
    script = [costing(30, tool_calls=[("ping", {})]) for _ in range(5)]
    async with MessagesServer(script) as server:
        served = Server([PerRun], model=satsuma.AnthropicModel(server.client()), port=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(served.serve)
            async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
                answer = await client.post("/v1/agents/per_run/t-1/runs", json={"prompt": "go"})
            nursery.cancel_scope.cancel()
    run = answer.json()
    assert run["status"] == "failed"
    assert run["error"]["type"] == "BudgetExceeded"
    assert run["error"]["message"].startswith("usd_per_run of $100.0000")


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"usd_per_run": -1}, ValueError, "Budget.usd_per_run must be a finite number"),
        ({"usd_per_agent": math.nan}, ValueError, "Budget.usd_per_agent must be a finite"),
        ({"usd_per_agent_per_day": math.inf}, ValueError, "Budget.usd_per_agent_per_day must"),
        ({"usd_per_run": 0}, ValueError, r"above 0 \(None: no limit\), got: 0"),
        ({"usd_per_run": "5"}, TypeError, "Budget.usd_per_run must be a number of US dollars"),
        ({"usd_per_agent": True}, TypeError, "Budget.usd_per_agent must be a number"),
        ({}, ValueError, "Budget: give at least one of usd_per_run"),
    ],
)
def test_a_budget_that_makes_no_sense_is_refused_when_the_class_is_declared(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):

        class Bad(satsuma.Agent):
            name = "bad"
            budget = satsuma.Budget(**fields)


def test_a_budget_that_is_not_a_budget_is_refused() -> None:
    with pytest.raises(satsuma.AgentDefinitionError, match=r"budget must be a satsuma.Budget"):

        class Bad(satsuma.Agent):
            name = "bad"
            budget = 5.0  # type: ignore[assignment]


async def test_the_live_view_prints_a_budget_warning_on_a_line_of_its_own() -> None:
    from rich.console import Console

    from satsuma._live import LiveView

    console = Console(record=True, width=100, force_terminal=False, file=io.StringIO())
    view = LiveView(console, live=False)
    fields: dict[str, Any] = {"agent": "support", "run_id": "run_1", "iteration": 1}
    view.agent_event(satsuma.RunStart(**fields, prompt="Go"))
    view.agent_event(
        satsuma.BudgetWarning(
            **fields, budget="usd_per_agent_per_day", source="agent", limit_usd=5, spent_usd=4.1
        )
    )
    assert console.export_text().splitlines()[-1] == (
        "support: 82% of its budget usd_per_agent_per_day spent ($4.1000 of $5.0000)"
    )


async def test_the_estimate_is_calibrated_on_the_tokens_the_api_counted_last() -> None:
    # The first call is estimated at 4 characters a token (a few dollars of input). The
    # API then counts its input at 5,000 tokens ($500): a token for a few characters, as
    # for code or non-Latin text. The second call, a little longer, is estimated at that
    # rate (some $600 of input), which would pass $1,000; at 4 characters a token it
    # would have been sent.
    first = Reply(
        tool_calls=[("ping", {})], usage=satsuma.Usage(input_tokens=5000, output_tokens=1)
    )
    async with (
        MessagesServer([first, costing(1, text="done")]) as server,
        satsuma.open_agent(PerAgent, model=satsuma.AnthropicModel(server.client())) as agent,
    ):
        result = await agent.run("go")
        sent = len(server.requests)
    assert sent == 1
    assert result.status == "failed"
    assert result.error is not None and "BudgetExceeded: usd_per_agent" in result.error
    assert "$501.0000 spent" in result.error, result.error


# An agent with a budget on a SQLite file, in a process of its own that the test kills
# while the agent's model call is in flight.
_KILLED_WORKER = """
import sys, anthropic, trio, satsuma
from satsuma.store import SQLiteStore

path, base_url = sys.argv[1:]


class Spender(satsuma.Agent):
    name = "spender"
    model = "claude-haiku-4-5"
    max_tokens = 100
    budget = satsuma.Budget(usd_per_agent=1.0)


async def main():
    model = satsuma.AnthropicModel(anthropic.AsyncAnthropic(api_key="k", base_url=base_url))
    async with SQLiteStore(path) as store, satsuma.open_agent(
        Spender, model=model, store=store, agent_id="k"
    ) as agent:
        await agent.run("hello")


trio.run(main)
"""


async def test_a_process_killed_during_a_call_leaves_a_hold_that_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "killed.db"
    arrived = trio.Event()

    async def hang(body: dict[str, Any]) -> Reply:
        arrived.set()
        await trio.sleep_forever()

    class Spender(satsuma.Agent):
        name = "spender"
        model = "claude-haiku-4-5"
        max_tokens = 100
        budget = satsuma.Budget(usd_per_agent=1.0)

    async with MessagesServer([hang, "Fine."]) as server:
        worker = await trio.lowlevel.open_process(
            [sys.executable, "-c", _KILLED_WORKER, str(path), server.base_url]
        )
        try:
            with trio.fail_after(60):
                await arrived.wait()
        finally:
            worker.kill()
            await worker.wait()
        async with SQLiteStore(path) as store:
            left = await ledgers_of(store).balance("agent:k")
            assert left.spent == 0 and left.reserved > 0  # the dead call's hold stays
            # Once the hold has expired, the next call gives it back.
            later = _spending.wall_clock() + _spending.HOLD_SECONDS + 1
            monkeypatch.setattr(_spending, "wall_clock", lambda: later)
            model = satsuma.AnthropicModel(server.client())
            async with satsuma.open_agent(Spender, model=model, store=store, agent_id="k") as agent:
                result = await agent.run("again")
            after = await ledgers_of(store).balance("agent:k")
    assert result.status == "completed"
    assert result.usage.cost_usd is not None
    assert after.spent == result.usage.cost_usd
    assert abs(after.reserved) < 1e-12  # both holds given back (sums of floats)


@satsuma.tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay an amount.

    Args:
        amount: How much.
    """
    return f"paid {amount}"


class Payer(satsuma.Agent):
    name = "payer"
    model = MODEL
    max_tokens = 10
    tools = [pay]
    budget = satsuma.Budget(usd_per_run=100)


async def test_a_run_resumed_after_approval_counts_what_it_spent_before_the_pause(
    tmp_path: Path,
) -> None:
    # The first call costs $85 and asks for an approval. Resumed, the run has $15 left,
    # under the next call's estimate (about $10 of output and some input): refused.
    script = [costing(85, tool_calls=[("pay", {"amount": 3})]), costing(1, text="done")]
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(
            Payer,
            model=satsuma.AnthropicModel(server.client()),
            store=SQLiteStore(tmp_path / "pay.db"),
            agent_id="payer-1",
        ) as agent,
    ):
        paused = await agent.run("pay 3")
        assert paused.status == "awaiting_approval"
        assert paused.usage.cost_usd == 85
        (pending,) = paused.pending
        resumed = await agent.resume(paused.run_id, decisions={pending.id: satsuma.Approve()})
        sent = len(server.requests)
    assert resumed.status == "failed"
    assert resumed.error is not None
    assert resumed.error.startswith(
        "BudgetExceeded: usd_per_run of $100.0000 (the agent's budget) would be passed by "
        "agent 'payer-1': $85.0000 spent, and the next model call is estimated"
    ), resumed.error
    assert sent == 1  # the refused call was never sent
    assert resumed.usage.cost_usd == 85
