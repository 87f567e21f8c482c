"""The cap on runs in flight per token: one client cannot take every agent a server has.

Every surface that starts a run (satsuma's API, A2A, AG-UI, MCP) holds a slot of the
principal that asked for it while the run is in flight; past the cap the request is a
429 with ``Retry-After``. The count is per token name (a server without tokens counts
all its clients as one), kept in this process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, final

import attrs
import trio

from ._http import HTTPError, Principal
from ._runs import IfBusy, Runs, RunView, UnknownRun

__all__ = ["CURRENT_PRINCIPAL", "RETRY_AFTER_SECONDS", "CappedRuns", "RunSlot", "RunSlots"]

CURRENT_PRINCIPAL: ContextVar[Principal | None] = ContextVar(
    "satsuma_serve_principal", default=None
)
"""Who sent the request being answered: set by the app around each surface's answer
(trio's tasks inherit it), so that ``CappedRuns`` counts a run against its token
whichever surface starts it."""

# A run is usually seconds long: a client told to come back in one second neither
# hammers the server nor waits much longer than it has to.
RETRY_AFTER_SECONDS = 1


@final
@attrs.define(eq=False)
class RunSlot:
    """One run in flight, counted against its principal until ``release``."""

    _slots: RunSlots
    _key: str
    _held: bool = True

    def release(self) -> None:
        """Give the slot back (once; a second call does nothing)."""
        if self._held:
            self._held = False
            self._slots._give_back(self._key)


@final
@attrs.define(eq=False)
class RunSlots:
    """Runs in flight per principal, at most ``per_principal`` each.

    ``admit`` is for a run that lives within the request (it waits for the run); a run
    that outlives its request (answered 202) takes a slot with ``take`` and releases it
    when the run ends.
    """

    per_principal: int
    _counts: dict[str, int] = attrs.field(factory=dict, init=False)

    def take(self, principal: Principal) -> RunSlot:
        """A slot of ``principal``'s.

        Raises:
            HTTPError: 429 with ``Retry-After`` when it has ``per_principal`` runs in
                flight already.
        """
        key = principal.name or ""
        held = self._counts.get(key, 0)
        if held >= self.per_principal:
            raise HTTPError(
                429,
                "too_many_runs",
                f"this token has {self.per_principal} run(s) in flight already, its cap; retry "
                "when one has ended",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self._counts[key] = held + 1
        return RunSlot(self, key)

    @asynccontextmanager
    async def admit(self, principal: Principal) -> AsyncIterator[RunSlot]:
        """Hold a slot of ``principal``'s for the block (see ``take``)."""
        slot = self.take(principal)
        try:
            yield slot
        finally:
            slot.release()

    def in_flight(self, principal: Principal) -> int:
        """How many slots ``principal`` holds now."""
        return self._counts.get(principal.name or "", 0)

    def _give_back(self, key: str) -> None:
        left = self._counts[key] - 1
        if left:
            self._counts[key] = left
        else:
            del self._counts[key]


@final
@attrs.define(eq=False)
class CappedRuns:
    """The server's runs as every surface sees them: ``start`` takes a slot of the
    request's principal (``CURRENT_PRINCIPAL``) and gives it back when the run ends or
    pauses for approval; everything else is the runs' own.

    A surface needs nothing to apply the cap: a 429 comes out of ``start`` as an
    ``HTTPError``. Outside a request (no principal) nothing is counted.
    """

    # Named so that no method of ``Runs`` is shadowed (``Runs.runs`` is one).
    inner: Runs
    slots: RunSlots
    nursery: trio.Nursery

    @property
    def agents(self) -> Any:
        return self.inner.agents

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def start(
        self, agent: str, agent_id: str, prompt: str, *, if_busy: IfBusy = "enqueue"
    ) -> RunView:
        principal = CURRENT_PRINCIPAL.get()
        if principal is None:
            return await self.inner.start(agent, agent_id, prompt, if_busy=if_busy)
        slot = self.slots.take(principal)
        try:
            view = await self.inner.start(agent, agent_id, prompt, if_busy=if_busy)
        except BaseException:
            slot.release()
            raise
        if view.ended or view.status == "awaiting_approval":
            slot.release()
            return view
        # Runs that can call back when a run stops (LocalRuns) spare a task per run,
        # spawned and woken for nothing but this; others are waited for by a task.
        when_stopped = getattr(self.inner, "when_stopped", None)
        if when_stopped is None or not when_stopped(view.run_id, slot.release):
            self.nursery.start_soon(self._release_at_end, view.run_id, slot)
        return view

    async def _release_at_end(self, run_id: str, slot: RunSlot) -> None:
        try:
            await self.inner.wait(run_id)
        except UnknownRun:
            pass  # gone past its retention: not in flight either
        finally:
            slot.release()
