"""The limiter that enforces one configuration's ModelLimits for every agent sharing it
(the limits themselves are ``_limits``'s, which agents share one ``_run_limiters``').

How a call goes through (the loop does it, around ``Model.respond``; see ``_loop``):

- Waiters queue in one FIFO: the first of the queue holds a ``trio.Lock`` (which hands
  itself to the next waiter in the order they came) while it waits for everything it
  needs, a free slot, the rates' budgets, the end of a pause, and takes them all at
  once. No one behind it can take anything first, so a busy agent cannot starve the
  others, and a call needing many tokens is not passed by small ones forever.
- A call that finds no one queued and room for itself takes its permit without
  waiting (``admit_nowait``): no checkpoint, no event.
- Nothing is taken before the last check, and nothing awaited after it, so a waiter
  cancelled anywhere in the queue holds nothing; the permit is released in a
  ``finally`` by its holder, or held as an async context manager, as trio's
  ``CapacityLimiter`` is (``async with limiter.admit(cost) as permit:``), which
  releases it however the block ends.
- New limits (``reconfigure``) wake the first waiter whatever it waits for, a slot or
  a bucket's refill: raised limits let it go at once, lowered ones send it back to wait.
- Rates are token buckets that hold a minute's allowance and refill continuously (the
  way Anthropic's API counts its own limits): after a quiet minute a burst of up to a
  minute's allowance goes at once, then calls go at the limit's pace. A retry is one
  more request with the same input: it is charged as it starts, without waiting (the
  call holds its slot), which may leave a bucket in debt that later calls wait off.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Self, final

import attrs
import trio

from ._limits import ModelLimits

if TYPE_CHECKING:
    from .._messages import Usage

__all__ = ["Admission", "LimiterStatistics", "ModelLimiter", "Permit"]


@final
class _Bucket:
    """A token bucket holding a minute's allowance, refilled continuously. Its level may
    go below zero (a debt): a retry or a correction charged without waiting."""

    def __init__(self, per_minute: float, now: float) -> None:
        self.capacity = float(per_minute)
        self.rate = self.capacity / 60.0
        self.level = self.capacity
        self.updated = now

    def refill(self, now: float) -> float:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now
        return self.level

    def need(self, amount: float) -> float:
        # A call larger than a minute's allowance waits for a full bucket, not forever.
        return min(amount, self.capacity)

    def ready_at(self, amount: float, now: float) -> float:
        """When the bucket holds enough for ``amount`` (now if it does)."""
        missing = self.need(amount) - self.refill(now)
        return now if missing <= 0 else now + missing / self.rate

    def resize(self, per_minute: float, now: float) -> None:
        self.refill(now)
        self.capacity = float(per_minute)
        self.rate = self.capacity / 60.0
        self.level = min(self.level, self.capacity)


@attrs.frozen(kw_only=True)
class LimiterStatistics:
    """What a limiter holds now: ``in_use`` slots (calls in progress), ``waiting``
    calls in its queue, and ``paused_for`` seconds left of a ``retry-after`` pause."""

    in_use: int
    waiting: int
    paused_for: float


@final
class Permit:
    """One call's admission: released once (by ``release``, or on leaving ``async with
    permit:``), however the call ends."""

    __slots__ = ("_limiter", "cost", "released", "waited")

    def __init__(self, limiter: ModelLimiter, cost: int, waited: float) -> None:
        self._limiter = limiter
        self.cost = cost
        self.waited = waited
        self.released = False

    def retried(self) -> None:
        """The call is sent again: one more request, with the same input."""
        self._limiter._charge(1.0, float(self.cost))

    def settle(self, usage: Usage) -> None:
        """Correct the call's estimated input tokens to those the API reported."""
        used = usage.input_tokens + usage.cache_creation_input_tokens
        self._limiter._charge(0.0, float(used - self.cost))

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._limiter._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


@final
class Admission:
    """A wait for a permit (``ModelLimiter.admit``): awaited, the permit, for its holder
    to release; entered (``async with limiter.admit(cost) as permit:``), the permit,
    released when the block exits. Cancelled while it waits, it has taken nothing."""

    __slots__ = ("_cost", "_limiter", "_permit")

    def __init__(self, limiter: ModelLimiter, cost: int) -> None:
        self._limiter = limiter
        self._cost = cost
        self._permit: Permit | None = None

    def __await__(self) -> Generator[Any, None, Permit]:
        return self._limiter._admit(self._cost).__await__()

    async def __aenter__(self) -> Permit:
        self._permit = await self._limiter._admit(self._cost)
        return self._permit

    async def __aexit__(self, *exc_info: object) -> None:
        if self._permit is not None:
            self._permit.release()


@final
class ModelLimiter:
    """Enforces one configuration's ModelLimits for every agent sharing it: FIFO,
    cancellation-safe (see the module's notes)."""

    def __init__(self, limits: ModelLimits) -> None:
        self.limits = limits
        self._turnstile = trio.Lock()  # held by the first waiter of the queue
        self._waiting = 0
        self._in_use = 0
        # Set when a slot frees or the limits change, if the first of the queue waits.
        self._freed: trio.Event | None = None
        self._paused_until = -math.inf
        self._requests: _Bucket | None = None
        self._tokens: _Bucket | None = None
        self._buckets_made = False

    @property
    def counts_tokens(self) -> bool:
        return self.limits.tokens_per_minute is not None

    def statistics(self) -> LimiterStatistics:
        now = trio.current_time()
        return LimiterStatistics(
            in_use=self._in_use,
            waiting=self._waiting,
            paused_for=max(0.0, self._paused_until - now),
        )

    def reconfigure(self, limits: ModelLimits) -> None:
        """Take new limits; calls in progress keep their slots, and the call waiting
        first in the queue looks again at once (under raised limits it may go now)."""
        now = trio.current_time()
        self._make_buckets(now)
        self.limits = limits
        self._requests = self._resized(self._requests, limits.requests_per_minute, now)
        self._tokens = self._resized(self._tokens, limits.tokens_per_minute, now)
        self._wake()

    @staticmethod
    def _resized(bucket: _Bucket | None, per_minute: float | None, now: float) -> _Bucket | None:
        if per_minute is None:
            return None
        if bucket is None:
            return _Bucket(per_minute, now)
        bucket.resize(per_minute, now)
        return bucket

    def _make_buckets(self, now: float) -> None:
        # Made at the first call rather than at construction, which may happen outside
        # the run whose clock they read.
        if not self._buckets_made:
            self._buckets_made = True
            limits = self.limits
            if limits.requests_per_minute is not None:
                self._requests = _Bucket(limits.requests_per_minute, now)
            if limits.tokens_per_minute is not None:
                self._tokens = _Bucket(limits.tokens_per_minute, now)

    def pause(self, seconds: float) -> None:
        """Hold every call not yet admitted for ``seconds`` (the API's ``retry-after``);
        calls in progress go on. A longer pause already set is kept."""
        if seconds > 0:
            self._paused_until = max(self._paused_until, trio.current_time() + seconds)

    def blocked(self, cost: int) -> str | None:
        """Why a call of ``cost`` input tokens cannot start now, or None if it can."""
        now = trio.current_time()
        self._make_buckets(now)
        if self._waiting:
            return f"{self._waiting} call{'s' * (self._waiting != 1)} queued before it"
        return self._reason(now, cost)

    def _reason(self, now: float, cost: int) -> str | None:
        limits = self.limits
        if now < self._paused_until:
            return f"paused {self._paused_until - now:.1f}s by the API's retry-after"
        if limits.max_concurrency is not None and self._in_use >= limits.max_concurrency:
            return f"{self._in_use} of {limits.max_concurrency} slots in use"
        if self._requests is not None and self._requests.ready_at(1.0, now) > now:
            return f"requests_per_minute ({_number(limits.requests_per_minute)}) reached"
        if self._tokens is not None and self._tokens.ready_at(float(cost), now) > now:
            return f"tokens_per_minute ({_number(limits.tokens_per_minute)}) reached"
        return None

    def admit_nowait(self, cost: int) -> Permit | None:
        """A permit at once if no one is queued and there is room, else None."""
        now = trio.current_time()
        self._make_buckets(now)
        if self._waiting or self._reason(now, cost) is not None:
            return None
        return self._take(cost, 0.0)

    def admit(self, cost: int) -> Admission:
        """Wait in the queue, then for room; the permit, once there is: ``await
        limiter.admit(cost)`` gives it to release, ``async with limiter.admit(cost) as
        permit:`` holds it for the block.

        Cancellation-safe: a waiter cancelled anywhere here has taken nothing.
        """
        return Admission(self, cost)

    async def _admit(self, cost: int) -> Permit:
        started = trio.current_time()
        self._waiting += 1
        try:
            async with self._turnstile:
                while True:
                    now = trio.current_time()
                    until = self._ready_at(now, cost)
                    if until is None:
                        break
                    # Until ``until`` (inf: a slot), or sooner when a slot frees or the
                    # limits change: a rate raised while this call waits at the old rate
                    # must let it go now, not when the old rate would have.
                    self._freed = trio.Event()
                    with trio.move_on_at(until):
                        await self._freed.wait()
                # No checkpoint from the last check to the return: what was free still is.
                return self._take(cost, trio.current_time() - started)
        finally:
            self._waiting -= 1

    def _ready_at(self, now: float, cost: int) -> float | None:
        """None if a call can start now; else when to look again (inf: at a release)."""
        limits = self.limits
        if now < self._paused_until:
            return self._paused_until
        if limits.max_concurrency is not None and self._in_use >= limits.max_concurrency:
            return math.inf
        later = now
        if self._requests is not None:
            later = max(later, self._requests.ready_at(1.0, now))
        if self._tokens is not None:
            later = max(later, self._tokens.ready_at(float(cost), now))
        return None if later <= now else later

    def _take(self, cost: int, waited: float) -> Permit:
        self._in_use += 1
        self._charge(1.0, float(cost))
        return Permit(self, cost, waited)

    def _charge(self, requests: float, tokens: float) -> None:
        now = trio.current_time()
        if self._requests is not None and requests:
            self._requests.refill(now)
            self._requests.level -= requests
        if self._tokens is not None and tokens:
            self._tokens.refill(now)
            self._tokens.level = min(self._tokens.capacity, self._tokens.level - tokens)

    def _release(self) -> None:
        self._in_use -= 1
        self._wake()

    def _wake(self) -> None:
        if self._freed is not None:
            self._freed.set()
            self._freed = None


def _number(value: float | None) -> str:
    return f"{value:g}" if value is not None else "none"
