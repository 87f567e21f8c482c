"""The budget figures of ``cost.py`` (issue 33, item 8): how far a budget is overrun, and
what caching and cost accounting add to a model call's CPU time.

1. Overrun, one run: an agent with ``usd_per_run`` calls a tool turn after turn against
   ``MessagesServer`` (its default usage: a token per 4 characters of the request and of
   the answer) until its budget refuses the next call. Bar: what was spent passes the
   limit by at most one call's cost (the largest call of the run).
2. Overrun, concurrent spenders: ``spenders`` tasks charge one agent's daily ledger on one
   SQLite file through two ``SQLiteStore`` objects (two processes' connections), each
   call costing 1.5 times its estimate (an input the estimate under-counts). Bar: the
   ledger is overrun by at most what the calls in flight cost beyond their estimates.
3. CPU per call, measured on the three steps they add, since end to end over loopback
   HTTP the difference drowns in the noise of a shared machine: building an Anthropic
   request with the cache's breakpoints against without (``AnthropicModel``'s own step);
   pricing a response's usage against a model without prices; and a run's loop around a
   call with a budget of all three limits (ledgers in memory) against without, on an
   in-process model that answers at once. Rounds interleave the arms; the median per arm
   is taken. Bar: the three added together, at most 20 microseconds of CPU a call.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from long_lived import PROMPT_PADDING
from long_lived import noop as noop_tool

import satsuma
from satsuma.store import Charge, Shortfall, SQLiteStore, ledgers_of
from satsuma.testing import MessagesServer, Reply

__all__ = ["budget_rows"]


def _verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


# --- 1. one run ------------------------------------------------------------------------


@satsuma.tool
async def lookup(index: int) -> str:
    """Look an entry up."""
    return f"entry {index}: " + "0123456789abcdef " * 30


class Looping(satsuma.Agent):
    name = "looping"
    model = "claude-haiku-4-5"
    max_tokens = 1024
    max_iterations = 10_000
    tools = [lookup]
    cache = None


def _always_a_tool(body: dict[str, Any]) -> Reply:
    return Reply(tool_calls=[("lookup", {"index": len(body["messages"])})])


async def _one_run(limit: float) -> dict[str, float]:
    costs: list[float] = []

    def keep(event: satsuma.AgentEvent) -> None:
        if isinstance(event, satsuma.TurnEnd) and event.usage.cost_usd is not None:
            costs.append(event.usage.cost_usd)

    agent_class = type(
        "Looping", (Looping,), {"name": "looping", "budget": satsuma.Budget(usd_per_run=limit)}
    )
    async with (
        MessagesServer(then=_always_a_tool, keep_requests=0) as server,
        satsuma.open_agent(agent_class, model=satsuma.AnthropicModel(server.client())) as agent,
    ):
        result = await agent.run("Look every entry up.", events=keep)
    if result.error is None or not result.error.startswith("BudgetExceeded"):
        raise SystemExit(f"the looping run ended {result.status}: {result.error}")
    return {"spent": sum(costs), "calls": len(costs), "largest": max(costs)}


# --- 2. concurrent spenders -------------------------------------------------------------


async def _spenders(count: int, limit: float, estimate: float) -> dict[str, float]:
    cost = estimate * 1.5
    spent: list[float] = []
    in_flight = [0, 0]  # now, most

    async def spend(store: SQLiteStore, number: int) -> None:
        ledgers = ledgers_of(store)
        charges = [Charge(ledger="day:shared:2027-01-15", limit=limit)]
        for call in range(1_000_000):
            now = time.time()
            hold = await ledgers.reserve(
                charges, estimate, hold_id=f"{number}-{call}", now=now, expires_at=now + 900
            )
            if isinstance(hold, Shortfall):
                return
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            await trio.sleep(0.001)  # the model call
            in_flight[0] -= 1
            await ledgers.settle(hold, cost)
            spent.append(cost)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledgers.db"
        async with (
            SQLiteStore(path) as one,
            SQLiteStore(path) as two,
            trio.open_nursery() as nursery,
        ):
            for number in range(count):
                nursery.start_soon(spend, one if number % 2 else two, number)
    return {"spent": sum(spent), "most_in_flight": in_flight[1], "cost": cost}


# --- 3. CPU per call --------------------------------------------------------------------

_ENORMOUS = satsuma.Budget(usd_per_run=1e6, usd_per_agent=1e9, usd_per_agent_per_day=1e9)


def _conversation(turns: int) -> tuple[satsuma.Message, ...]:
    """A conversation of ``turns`` exchanges, each a prompt, a tool call and its result."""
    messages = []
    for turn in range(turns):
        messages += [
            satsuma.Message(role="user", content=[{"type": "text", "text": f"note {turn}"}]),
            satsuma.Message(
                role="assistant",
                content=[{"type": "tool_use", "id": f"t{turn}", "name": "noop", "input": {}}],
            ),
            satsuma.Message(
                role="user",
                content=[{"type": "tool_result", "tool_use_id": f"t{turn}", "content": "ok"}],
            ),
        ]
    return tuple(messages)


def _per_call(work: Any, calls: int) -> float:
    started = time.process_time()
    for _ in range(calls):
        work()
    return (time.process_time() - started) / calls


def _request_cpu(calls: int, rounds: int) -> tuple[float, float]:
    """CPU per request to build an Anthropic request's parameters, without and with the
    cache's breakpoints (``AnthropicModel``'s own step, on a 40-message conversation)."""
    import anthropic

    model = satsuma.AnthropicModel(anthropic.AsyncAnthropic(api_key="bench"))
    plain: list[float] = []
    cached: list[float] = []
    prompt = satsuma.Message(role="user", content=[{"type": "text", "text": "next"}])
    messages = (*_conversation(13)[:-1], prompt)
    for _ in range(rounds):
        for mode, into in ((None, plain), ("auto", cached)):
            request = satsuma.ModelRequest(
                model="claude-sonnet-4-5",
                system="You keep notes. " * 20,
                messages=messages,
                tools=[noop_tool.schema()],
                max_tokens=1024,
                cache=mode,
            )
            into.append(_per_call(lambda r=request: model._params(r), calls))
    return statistics.median(plain), statistics.median(cached)


def _pricing_cpu(calls: int, rounds: int) -> tuple[float, float]:
    """CPU per call to price a response's usage: a model without prices, and one with."""
    from satsuma.models._prices import priced

    usage = satsuma.Usage(input_tokens=1200, output_tokens=80, cache_read_input_tokens=9000)
    unknown: list[float] = []
    known: list[float] = []
    for _ in range(rounds):
        unknown.append(
            _per_call(lambda: priced(usage, "claude-unpriced", "claude-unpriced"), calls)
        )
        known.append(_per_call(lambda: priced(usage, "claude-sonnet-4-5", "x"), calls))
    return statistics.median(unknown), statistics.median(known)


class _Answering:
    """A model in this process that answers at once, its usage priced: what remains is
    satsuma's own work around a call."""

    async def respond(self, request: satsuma.ModelRequest, listener: Any) -> Any:
        from satsuma.models import ModelResponse

        await trio.lowlevel.checkpoint()
        return ModelResponse(
            content=({"type": "text", "text": "Noted."},),
            stop_reason="end_turn",
            usage=satsuma.Usage(input_tokens=500, output_tokens=20, cost_usd=0.0018),
        )


class Plain(satsuma.Agent):
    name = "plain"
    model = "claude-sonnet-4-5"
    max_tokens = 1024
    tools = [noop_tool]


class Budgeted(Plain):
    name = "budgeted"
    budget = _ENORMOUS


async def _runs_cpu(agent_class: type[satsuma.Agent], runs: int, store: Any) -> float:
    async with satsuma.open_agent(
        agent_class, model=_Answering(), store=store, agent_id="bench" if store else None
    ) as agent:
        await agent.run("warm up")
        started = time.process_time()
        for index in range(runs):
            result = await agent.run(f"note {index}: {PROMPT_PADDING}")
            if result.status != "completed":
                raise SystemExit(f"run {index} ended {result.status}: {result.error}")
        return (time.process_time() - started) / runs  # one model call a run


def _budget_cpu(runs: int, rounds: int) -> tuple[float, float]:
    """CPU per call of a run without a budget and with one (ledgers in memory)."""
    plain: list[float] = []
    budgeted: list[float] = []
    for round_ in range(rounds):
        arms = [(Plain, plain), (Budgeted, budgeted)]
        for agent_class, into in arms if round_ % 2 == 0 else reversed(arms):
            into.append(trio.run(_runs_cpu, agent_class, runs, None))
    return statistics.median(plain), statistics.median(budgeted)


def budget_rows(*, quick: bool) -> list[list[str]]:
    """The budget figures as rows of cost.py's table."""
    one = trio.run(_one_run, 0.02 if quick else 0.20)
    limit = 0.02 if quick else 0.20
    overrun = max(0.0, one["spent"] - limit)
    spenders = 4 if quick else 8
    many = trio.run(_spenders, spenders, 1.0 if quick else 10.0, 0.01)
    shared_limit = 1.0 if quick else 10.0
    over_many = max(0.0, many["spent"] - shared_limit)
    bound = many["most_in_flight"] * (many["cost"] - 0.01)
    rounds = 3 if quick else 15
    request = _request_cpu(50 if quick else 2_000, rounds)
    pricing = _pricing_cpu(100 if quick else 20_000, rounds)
    budget = _budget_cpu(20 if quick else 300, rounds)
    parts = [(b - a) * 1e6 for a, b in (request, pricing, budget)]
    added = sum(parts)
    return [
        [
            f"usd_per_run ${limit:g}: overrun",
            f"${overrun:.6f}",
            "<= one call",
            f"{_verdict(overrun <= one['largest'])}; ${one['spent']:.6f} spent in "
            f"{one['calls']:.0f} calls, largest call ${one['largest']:.6f}",
        ],
        [
            f"{spenders} spenders, one daily ledger: overrun",
            f"${over_many:.4f}",
            "<= calls in flight",
            f"{_verdict(over_many <= bound + 1e-9)}; ${many['spent']:.4f} of "
            f"${shared_limit:g}, each call 1.5x its estimate, at most "
            f"{many['most_in_flight']:.0f} in flight (bound ${bound:.4f})",
        ],
        [
            "cache, prices and budget: CPU per call",
            f"{added:+.1f} us",
            "<= 20 us",
            f"{_verdict(added <= 20)}; breakpoints {parts[0]:+.1f} us (request built in "
            f"{request[0] * 1e6:.0f} us), pricing {parts[1]:+.1f} us, budget "
            f"{parts[2]:+.1f} us (a call's loop {budget[0] * 1e6:.0f} us)",
        ],
    ]
