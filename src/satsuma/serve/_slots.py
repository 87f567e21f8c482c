"""The cap on runs in flight per token: one client cannot take every agent a server has.

Every surface that starts a run (satsuma's API, A2A, AG-UI, MCP) holds a slot of the
principal that asked for it while the run is in flight; past the cap the request is a
429 with ``Retry-After``. The count is per token name (a server without tokens counts
all its clients as one), kept in this process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import attrs

from ._http import HTTPError, Principal

__all__ = ["RETRY_AFTER_SECONDS", "RunSlot", "RunSlots"]

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
                f"{self.per_principal} runs in flight already for this token; retry "
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
