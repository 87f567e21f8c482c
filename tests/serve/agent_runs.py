"""A small ``Runs`` over real agents, for the AG-UI and MCP tests until the server's own
LocalRuns is merged: each run is a real agent run (``open_agent`` with a ScriptedModel
and a MemoryStore) in the test's nursery, its events ``event_to_json``'s, numbered."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import trio

import satsuma
from satsuma.agents import Agent
from satsuma.models import Model
from satsuma.serve._runs import PendingView, RunEvent, RunView, UnknownAgent, UnknownRun
from satsuma.store import MemoryStore


class _Run:
    def __init__(self, agent: str, agent_id: str, prompt: str) -> None:
        self.agent = agent
        self.agent_id = agent_id
        self.prompt = prompt
        self.run_id = ""
        self.events: list[dict[str, Any]] = []
        self.changed = trio.Event()
        self.started = trio.Event()
        self.ended = trio.Event()

    def add(self, data: dict[str, Any]) -> None:
        self.events.append(data)
        self.changed.set()
        self.changed = trio.Event()

    def view(self) -> RunView:
        end = next((e for e in reversed(self.events) if e["type"] == "RunEnd"), None)
        if end is None:
            return RunView(
                run_id=self.run_id,
                agent=self.agent,
                agent_id=self.agent_id,
                status="running",
                prompt=self.prompt,
            )
        result = end["result"]
        pending = tuple(
            PendingView(
                run_id=self.run_id,
                agent=self.agent,
                agent_id=self.agent_id,
                call_id=call["id"],
                tool=call["tool_name"],
                input=call["input"],
                reason=call["reason"],
            )
            for call in result["pending"]
        )
        error = {"type": "error", "message": result["error"]} if result["error"] else None
        return RunView(
            run_id=self.run_id,
            agent=self.agent,
            agent_id=self.agent_id,
            status=result["status"],
            prompt=self.prompt,
            output=result["output"],
            error=error,
            pending=pending,
        )


class AgentRuns:
    """Runs of real agents, each a task of ``nursery``.

    Args:
        nursery: Where the runs' tasks run.
        agents: Each served class with the model its runs use.
    """

    def __init__(self, nursery: trio.Nursery, agents: Mapping[type[Agent[Any]], Model]) -> None:
        self._nursery = nursery
        self._models = {cls.name: model for cls, model in agents.items()}
        self._classes = {cls.name: cls for cls in agents}
        self._store = MemoryStore()
        self._runs: dict[str, _Run] = {}
        self.started: list[tuple[str, str, str]] = []

    @property
    def agents(self) -> Mapping[str, type[Agent[Any]]]:
        return self._classes

    async def start(
        self, agent: str, agent_id: str, prompt: str, *, if_busy: str = "enqueue"
    ) -> RunView:
        if agent not in self._classes:
            raise UnknownAgent(agent)
        self.started.append((agent, agent_id, prompt))
        run = _Run(agent, agent_id, prompt)
        self._nursery.start_soon(self._play, run)
        await run.started.wait()
        return run.view()

    async def _play(self, run: _Run) -> None:
        async with satsuma.open_agent(
            self._classes[run.agent],
            model=self._models[run.agent],
            agent_id=run.agent_id,
            store=self._store,
        ) as handle:
            async for event in handle.stream(run.prompt):
                data = satsuma.event_to_json(event)
                if not run.started.is_set():
                    run.run_id = data["run_id"]
                    self._runs[run.run_id] = run
                    run.started.set()
                run.add(data)
        run.ended.set()

    def _get(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise UnknownRun(run_id) from None

    async def wait(self, run_id: str) -> RunView:
        run = self._get(run_id)
        await run.ended.wait()
        return run.view()

    async def get(self, run_id: str) -> RunView:
        return self._get(run_id).view()

    async def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[RunEvent]:
        run = self._get(run_id)
        number = after
        while True:
            while number < len(run.events):
                data = run.events[number]
                number += 1
                yield RunEvent(number, data)
                if data["type"] == "RunEnd":
                    return
            await run.changed.wait()
