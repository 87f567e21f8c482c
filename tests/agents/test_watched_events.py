"""Who decides whether a run's model answers are streamed: an event callback derived
from ``agents.internal.WatchedEvents`` (a cluster node's recorder) is asked before each
model call; any other callback gets the text as it is written, whatever attributes it
happens to have. Real SDK client against the loopback Messages API, whose requests say
whether they asked for a stream."""

from __future__ import annotations

import satsuma
from satsuma.agents import AgentEvent, TextDelta, internal
from satsuma.models import AnthropicModel
from satsuma.testing import MessagesServer

ANSWER = "Two parcels are on their way."


class Clerk(satsuma.Agent):
    name = "clerk"


class Asked(internal.WatchedEvents):
    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.texts: list[str] = []

    def __call__(self, event: AgentEvent, /) -> None:
        if isinstance(event, TextDelta):
            self.texts.append(event.text)

    @property
    def wants_deltas(self) -> bool:
        return self.wanted


class LooksAlike:
    """A user's callback with an attribute of the same name: not asked."""

    wants_deltas = False

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self.texts.append(event.text)


async def test_a_watched_events_callback_decides_and_any_other_gets_a_stream() -> None:
    async with MessagesServer([ANSWER, ANSWER, ANSWER]) as server:
        model = AnthropicModel(server.client(), jitter=False)
        async with satsuma.open_agent(Clerk, model=model) as agent:
            unwanted, wanted, alike = Asked(False), Asked(True), LooksAlike()
            for callback in (unwanted, wanted, alike):
                result = await agent.run("Where are my parcels?", events=callback)
                assert result.output == ANSWER
    streamed = [bool(body.get("stream", False)) for body in server.requests]
    assert streamed == [False, True, True]
    assert unwanted.texts == [ANSWER]  # the whole text, in one piece
    assert "".join(wanted.texts) == ANSWER and "".join(alike.texts) == ANSWER
