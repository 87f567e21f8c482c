"""Limits on model calls: ``ModelLimits``, the limiter that enforces them, and which
limiter an agent's model calls go through.

A limiter belongs to a model configuration and is shared by every agent of the trio run
that uses it: a model object with limits of its own (``AnthropicModel(limits=...)``) is
one configuration, whatever model ids its agents name; a model object without them,
for agents whose model has limits set by name (``set_model_limits``), is one
configuration per provider and model id (so the one ``AnthropicModel`` that agents
declaring their model by name share holds a limiter for ``sonnet`` and another for
``haiku``; ``openai:gpt-5`` and ``bedrock:...`` have their own).

Limiters live per trio run, as the shared clients do (``_clients``): their deadlines
are read on the run's clock, and two runs (two tests) never wait for each other.

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
  ``finally`` by its holder.
- Rates are token buckets that hold a minute's allowance and refill continuously (the
  way Anthropic's API counts its own limits): after a quiet minute a burst of up to a
  minute's allowance goes at once, then calls go at the limit's pace. A retry is one
  more request with the same input: it is charged as it starts, without waiting (the
  call holds its slot), which may leave a bucket in debt that later calls wait off.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio
import trio.lowlevel

from ._aliases import model_problem, parse_model

if TYPE_CHECKING:
    from .._messages import Usage
    from ._model import ModelRequest

__all__ = [
    "LimiterStatistics",
    "ModelLimiter",
    "ModelLimits",
    "Permit",
    "estimate_input_tokens",
    "limiter_for",
    "set_model_limits",
]


def _positive(value: object, *, whole: bool) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int):
        return False
    return math.isfinite(value) and value > 0


@attrs.frozen(kw_only=True)
class ModelLimits:
    """Limits on the calls of one model configuration, for every agent of the process
    that uses it (see docs/limits.md).

    Attach them to a model object (``AnthropicModel(client, limits=ModelLimits(...))``)
    or, for agents that name their model and are given none, to the model id
    (``satsuma.set_model_limits("sonnet", ModelLimits(...))``). Every field is None (no
    bound) by default; even ``ModelLimits()`` with no bound makes the configuration's
    users pause together when the API answers with ``retry-after``.

    Attributes:
        max_concurrency: Model calls in progress at once. A call holds its slot from the
            request until the response is read, its retries and their waits included.
        requests_per_minute: Requests sent per minute, retries included.
        tokens_per_minute: Input tokens sent per minute: each request is charged an
            estimate (a token per 4 characters of its system prompt, messages and tool
            definitions) when it starts, then corrected to the input tokens the API
            reported (``input_tokens`` plus ``cache_creation_input_tokens``; cache
            reads are not counted, as Anthropic's own input limit does not count them).

    Raises:
        ValueError: A field is not a positive number (``max_concurrency``: a positive
            integer) or None; every wrong field is named in one message.
    """

    max_concurrency: int | None = None
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    def __attrs_post_init__(self) -> None:
        problems = []
        if not _positive(self.max_concurrency, whole=True):
            problems.append(
                f"max_concurrency must be an integer >= 1 or None, got: {self.max_concurrency!r}"
            )
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if not _positive(value, whole=False):
                problems.append(f"{name} must be a positive number or None, got: {value!r}")
        if problems:
            raise ValueError("ModelLimits: " + "; ".join(problems))


# --- by model id ---------------------------------------------------------------------

_Name = tuple[str, str]  # (provider, model id)

_BY_NAME: dict[_Name, ModelLimits] = {}


def _model_key(model: str) -> _Name:
    # An alias and its model id are one model; the same id at two providers is two.
    parsed = parse_model(model)
    return parsed if parsed is not None else ("", model)


def set_model_limits(model: str, limits: ModelLimits | None) -> None:
    """Set the limits of a model id (or alias) for this process: they bound every agent
    that runs that model through a model object without limits of its own, which is the
    case of every agent that names its model and is given none (they share one model).

    Set them before the agents start: an agent takes its limiter when it starts. An
    agent started later with new limits for the same model id changes them for every
    agent already sharing that model's limiter (one configuration, one set of limits:
    the last set wins); ``None`` removes the limits for agents started afterwards.

    Args:
        model: A model string as agents declare it: an alias (``sonnet``), a model id
            (``claude-sonnet-5-5``), or a provider's (``openai:gpt-5``,
            ``bedrock:<model id>``).
        limits: The limits, or None to remove them.

    Raises:
        TypeError: ``model`` is not a str, or ``limits`` is not a ModelLimits or None.
        ValueError: ``model`` names no model an agent could declare.
    """
    if not isinstance(model, str):
        raise TypeError(f"set_model_limits: model must be a model string, got: {model!r}")
    problem = model_problem(model)
    if problem is not None:
        raise ValueError(f"set_model_limits: {problem}")
    if limits is not None and not isinstance(limits, ModelLimits):
        raise TypeError(
            f"set_model_limits: limits must be a satsuma.ModelLimits or None, got: {limits!r}"
        )
    if limits is None:
        _BY_NAME.pop(_model_key(model), None)
    else:
        _BY_NAME[_model_key(model)] = limits


def model_limits(model: str) -> ModelLimits | None:
    """The limits set for a model id or alias with ``set_model_limits``, or None."""
    return _BY_NAME.get(_model_key(model))


# --- the limiter ---------------------------------------------------------------------


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
    """One call's admission: released once (by ``release``), however the call ends."""

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


@final
class ModelLimiter:
    """Enforces one configuration's ModelLimits for every agent sharing it: FIFO,
    cancellation-safe (see the module's notes)."""

    def __init__(self, limits: ModelLimits) -> None:
        self.limits = limits
        self._turnstile = trio.Lock()  # held by the first waiter of the queue
        self._waiting = 0
        self._in_use = 0
        self._freed: trio.Event | None = None  # set when a slot frees, if the first waits
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
        """Take new limits; calls in progress keep their slots."""
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

    async def admit(self, cost: int) -> Permit:
        """Wait in the queue, then for room; the permit, once there is.

        Cancellation-safe: a waiter cancelled anywhere here has taken nothing.
        """
        started = trio.current_time()
        self._waiting += 1
        try:
            async with self._turnstile:
                while True:
                    now = trio.current_time()
                    until = self._ready_at(now, cost)
                    if until is None:
                        break
                    if until == math.inf:
                        # Waits for a slot: woken by a release (or new limits).
                        self._freed = trio.Event()
                        await self._freed.wait()
                    else:
                        await trio.sleep_until(until)
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


# --- estimates -----------------------------------------------------------------------

_CHARS_PER_TOKEN: Final = 4


def estimate_input_tokens(request: ModelRequest) -> int:
    """A cheap estimate of a request's input tokens: a token per 4 characters of its
    system prompt, messages (their blocks as printed, measured once per message) and
    tool definitions."""
    from .._messages import message_size

    chars = len(request.system or "")
    chars += sum(message_size(message) for message in request.messages)
    chars += sum(_size(tool) for tool in request.tools)
    return max(1, chars // _CHARS_PER_TOKEN)


def _size(tool: Mapping[str, Any]) -> int:
    return len(str(tool))


# --- which limiter ---------------------------------------------------------------------


class _RunLimiters:
    """The limiters of one trio run, per model object and then per name (None: the
    model's own limits). Held weakly by model where the model allows it, so that a model
    object dropped (one built per request, say) takes its limiters with it."""

    def __init__(self) -> None:
        self.weak: weakref.WeakKeyDictionary[object, dict[_Name | None, ModelLimiter]] = (
            weakref.WeakKeyDictionary()
        )
        # Models that take no weak reference (or no hash), kept by id with the model, so
        # that its id cannot be reused in this run.
        self.strong: dict[int, tuple[object, dict[_Name | None, ModelLimiter]]] = {}

    def of(self, model: object) -> dict[_Name | None, ModelLimiter]:
        try:
            return self.weak.setdefault(model, {})
        except TypeError:
            entry = self.strong.get(id(model))
            if entry is None or entry[0] is not model:
                entry = self.strong[id(model)] = (model, {})
            return entry[1]


_RUN_LIMITERS: trio.lowlevel.RunVar[_RunLimiters] = trio.lowlevel.RunVar("satsuma_model_limiters")


def limiter_for(model: object, declared: str) -> ModelLimiter | None:
    """The limiter of this trio run that an agent's calls to ``model`` go through (the
    agent declares ``declared``, its model string), or None when the configuration has
    no limits: the model's own ``limits`` (any Model may have that attribute), else
    those set for the declared model. Called once when an agent starts."""
    own = getattr(model, "limits", None)
    name: _Name | None
    if isinstance(own, ModelLimits):
        limits, name = own, None
    else:
        name = _model_key(declared)
        found = _BY_NAME.get(name)
        if found is None:
            return None
        limits = found
    try:
        run_limiters = _RUN_LIMITERS.get()
    except LookupError:
        run_limiters = _RunLimiters()
        _RUN_LIMITERS.set(run_limiters)
    limiters = run_limiters.of(model)
    limiter = limiters.get(name)
    if limiter is None:
        limiter = limiters[name] = ModelLimiter(limits)
    elif limiter.limits != limits:
        limiter.reconfigure(limits)
    return limiter
