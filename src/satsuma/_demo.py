"""``satsuma demo``: a small supervised team of agents, shown live.

Two agents under one supervisor prepare a briefing. The researcher asks for five tool
calls in one turn; they run in parallel, each under its own deadline: two succeed, a long
one reports progress, one crashes (captured: the model reads the error and goes on) and
one hangs until its timeout. The writer turns the notes into a briefing; its verifier
sends the first draft back. Then a bug in the writer's model wrapper (injected on
purpose) crashes the agent: the supervisor restarts it and, its conversation kept in a
SQLite store, it answers the same request as if nothing had happened.

With no ANTHROPIC_API_KEY the agents talk to satsuma's own loopback Messages API server,
which plays the scripted conversation in ``scripted_answer``; with a key, to the real API.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import trio
from rich.console import Console

from ._exceptions import AgentCrashed
from ._live import open_live_view
from ._tally import Tally
from ._terminal import say, show
from .agents import Agent, AgentEvent, Verdict, VerifyContext
from .models import AnthropicModel, Model, ModelListener, ModelRequest, ModelResponse
from .store import SQLiteStore
from .supervisor import ChildSpec, Supervisor, SupervisorEvent
from .testing import MessagesServer, Reply
from .tools import ToolContext, content_text, tool

__all__ = ["DemoFailed", "run_demo", "scripted_answer"]

RESEARCH_PROMPT: Final = "Prepare the notes for next week's team offsite in Lisbon."
TITLE_PROMPT: Final = "Give the briefing a title."
_CRASH: Final = "simulated bug in the model wrapper (injected by the demo)"


class DemoFailed(Exception):
    """A run the demo needs did not complete (with a key: the API refused, or is down)."""


# --- the tools -------------------------------------------------------------------------


@tool
async def fetch_weather(city: str) -> str:
    """The weather forecast for a city.

    Args:
        city: The city's name.
    """
    await trio.sleep(0.4)
    return f"{city}: sunny, 19°C, light wind"


@tool
async def find_flights(origin: str, destination: str) -> str:
    """Direct flights between two cities next week.

    Args:
        origin: Where from.
        destination: Where to.
    """
    await trio.sleep(0.6)
    return f"{origin} → {destination}: 3 direct flights a day, 3h05"


@tool
async def draft_agenda(days: int, ctx: ToolContext) -> str:
    """Draft an agenda, one day at a time (slow: reports progress).

    Args:
        days: How many days the offsite lasts.
    """
    for day in range(1, days + 1):
        ctx.progress(f"day {day}/{days}")
        await trio.sleep(0.35)
    return f"agenda for {days} days: workshops in the mornings, city in the afternoons"


@tool
async def check_venue(name: str) -> str:
    """Check a venue's availability in the booking service (which has a bug).

    Args:
        name: The venue.
    """
    await trio.sleep(0.2)
    raise ConnectionResetError(f"booking service dropped the connection while reading {name!r}")


@tool(timeout=1.0)
async def hotel_rates(city: str) -> str:
    """Hotel rates from a partner database (which never answers).

    Args:
        city: The city.
    """
    await trio.sleep_forever()
    return "unreachable"


# --- the agents ------------------------------------------------------------------------


def mentions_the_weather(ctx: VerifyContext) -> Verdict:
    """The briefing must tell people what weather to expect."""
    if "°C" in ctx.output:
        return Verdict.ok()
    reason = "the briefing must say what weather to expect (with the temperature)"
    narrate = ctx.extra.get("narrate")
    if callable(narrate):
        narrate(f"verifier sends the writer back: {reason}")
    return Verdict.retry(reason)


class Researcher(Agent):
    name = "researcher"
    model = "haiku"
    system = (
        "You research facts for a team offsite. Call every tool you need in one turn, "
        "then write short notes, saying plainly what you could not find out."
    )
    tools = (fetch_weather, find_flights, draft_agenda, check_venue, hotel_rates)
    tool_timeout = 10.0
    max_tokens = 1024


class Writer(Agent):
    name = "writer"
    model = "haiku"
    system = "You write short, friendly briefings for a team from research notes."
    verifiers = (mentions_the_weather,)
    max_tokens = 1024


# --- the scripted conversation (offline) -----------------------------------------------


def _blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
    ]


def _user_texts(body: Mapping[str, Any]) -> list[str]:
    texts = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(block["text"] for block in content if block.get("type") == "text")
    return texts


def scripted_answer(body: dict[str, Any]) -> Reply | str:
    """The scripted model: answers each request from its agent and its conversation, so
    the answers do not depend on the order in which concurrent requests arrive."""
    system = body.get("system", "")
    if not isinstance(system, str):
        system = " ".join(block.get("text", "") for block in system)
    if system.startswith("You research"):
        results = [block for block in _blocks(body) if block.get("type") == "tool_result"]
        if not results:
            return Reply(
                text="I'll look everything up at once.",
                tool_calls=[
                    ("fetch_weather", {"city": "Lisbon"}),
                    ("find_flights", {"origin": "Berlin", "destination": "Lisbon"}),
                    ("draft_agenda", {"days": 3}),
                    ("check_venue", {"name": "LX Factory"}),
                    ("hotel_rates", {"city": "Lisbon"}),
                ],
            )
        found = [
            content_text(block.get("content", "")) for block in results if not block.get("is_error")
        ]
        failed = [
            content_text(block.get("content", "")) for block in results if block.get("is_error")
        ]
        return "Notes: " + "; ".join(found) + ". Could not check: " + "; ".join(failed) + "."
    texts = _user_texts(body)
    if texts and texts[-1] == TITLE_PROMPT:
        # Drawn from the briefing earlier in the conversation: a writer that lost its
        # conversation in the crash could not give this answer.
        briefings = [
            block["text"]
            for message in body["messages"]
            if message["role"] == "assistant" and isinstance(message["content"], list)
            for block in message["content"]
            if "Weather: " in block.get("text", "")
        ]
        if not briefings:
            return "Title: I have no briefing to give a title to."
        return f"Title: Lisbon offsite — {briefings[-1].split('Weather: ')[1].split('.')[0]}"
    if texts and texts[-1].startswith("Verification failed"):
        return (
            "Briefing: three days in Lisbon, workshops in the mornings. "
            "Weather: sunny, 19°C. Flights: 3 a day from Berlin. Book hotels by phone."
        )
    return "Briefing: three days in Lisbon, workshops in the mornings. Book hotels by phone."


# --- the injected crash ----------------------------------------------------------------


class _BugOnce:
    """A model wrapper with a bug: its first answer to the title request raises."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.crashed = False

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        last = request.messages[-1]
        if not self.crashed and last.text == TITLE_PROMPT:
            self.crashed = True
            raise RuntimeError(_CRASH)
        return await self.model.respond(request, listener)


# --- the run ---------------------------------------------------------------------------


async def run_demo(console: Console, *, live: bool | None = None) -> Tally:
    """Run the demo, drawing on ``console``; return what it counted."""
    tally = Tally()
    started = trio.current_time()
    key = os.environ.get("ANTHROPIC_API_KEY")
    if key:
        say(
            console,
            "satsuma demo: ANTHROPIC_API_KEY is set, so the agents use the real Anthropic API "
            f"({os.environ.get('ANTHROPIC_BASE_URL') or 'api.anthropic.com'}).",
        )
        async with AnthropicModel() as model:
            await _team(console, model, tally, live)
    else:
        say(
            console,
            "satsuma demo: offline — no ANTHROPIC_API_KEY, so the agents talk to satsuma's "
            "loopback Messages API server, which plays a scripted conversation.",
        )
        async with MessagesServer([scripted_answer] * 40) as server:
            model = AnthropicModel(server.client(), backoff_base=0.01)
            await _team(console, model, tally, live)
    show(console, tally.table(trio.current_time() - started))  # counts and fixed names
    return tally


async def _team(console: Console, model: Model, tally: Tally, live: bool | None) -> None:
    with tempfile.TemporaryDirectory(prefix="satsuma-demo-") as folder:
        store = SQLiteStore(Path(folder) / "state.db")
        async with open_live_view(console, live=live) as view:

            def on_agent(event: AgentEvent) -> None:
                view.agent_event(event)
                tally.agent_event(event)

            def on_supervisor(event: SupervisorEvent) -> None:
                view.supervisor_event(event)
                tally.supervisor_event(event)

            async with Supervisor(
                "one_for_one",
                name="team",
                max_restarts=3,
                within=10.0,
                events=on_supervisor,
                children=[
                    ChildSpec(
                        Researcher, name="researcher", options=_options(model, store, "researcher")
                    ),
                    ChildSpec(
                        Writer,
                        name="writer",
                        options={
                            **_options(_BugOnce(model), store, "writer"),
                            "context": {"narrate": view.say},
                        },
                    ),
                ],
            ) as team:
                await _play(view.say, team, on_agent)
        await store.aclose()


def _options(model: Model, store: SQLiteStore, agent_id: str) -> dict[str, Any]:
    return {"model": model, "store": store, "agent_id": agent_id}


async def _play(
    say: Callable[[str], None], team: Supervisor, on_agent: Callable[[AgentEvent], None]
) -> None:
    researcher, writer = team.lookup("researcher"), team.lookup("writer")
    notes = await researcher.run(RESEARCH_PROMPT, events=on_agent)
    if notes.status != "completed":
        raise DemoFailed(f"the researcher's run {notes.status}: {notes.error}")
    await writer.run(f"Write the briefing from these notes: {notes.output}", events=on_agent)
    try:
        await writer.run(TITLE_PROMPT, events=on_agent)
    except AgentCrashed as crash:
        say(f"the caller got AgentCrashed: {crash}")
    # The same handle reaches the restarted agent (a call waits for the restart), which
    # loaded its conversation from the store: its answer draws on the earlier briefing.
    say("asking the restarted writer again")
    await writer.run(TITLE_PROMPT, events=on_agent)
    say(f"the writer's conversation survived the crash: {len(writer.history)} messages")
