"""Limits on model calls: ``ModelLimits``, setting them by model, the estimate of a
request's tokens, and which limiter an agent's model calls go through.

A limiter belongs to a model configuration and is shared by every agent of the trio run
that uses it: a model object with limits of its own (``AnthropicModel(limits=...)``) is
one configuration, whatever model ids its agents name; a model object without them,
for agents whose model has limits set by name (``set_model_limits``), is one
configuration per provider and model id (so the one ``AnthropicModel`` that agents
declaring their model by name share holds a limiter for ``sonnet`` and another for
``haiku``; ``openai:gpt-5`` and ``bedrock:...`` have their own).

Limiters live per trio run, as the shared clients do (``_clients``): their deadlines
are read on the run's clock, and two runs (two tests) never wait for each other.

How the limiter admits calls (FIFO, cancellation-safe, rates as token buckets) is
``_limiter``'s.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio.lowlevel

from ._aliases import model_problem, parse_model
from ._limiter import ModelLimiter

if TYPE_CHECKING:
    from ._model import ModelRequest

__all__ = [
    "ModelLimits",
    "estimate_input_tokens",
    "limiter_for",
    "model_limits",
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

    Limits set while agents of this model run (in the same trio run) hold for them at
    once: one configuration, one set of limits, the last set wins, and calls waiting
    under the old limits look again at once (raised limits let them go). An agent
    started later with new limits for the model (its own, on its model object) changes
    them the same way for every agent sharing its limiter. ``None`` removes the limits
    for agents started afterwards; agents already running keep the limits they have.

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
    key = _model_key(model)
    if limits is None:
        _BY_NAME.pop(key, None)
        return
    _BY_NAME[key] = limits
    # Agents already running under this model's limits in this trio run take the new
    # ones now, and a call waiting at the old rate looks again at once.
    try:
        run_limiters = _RUN_LIMITERS.get()
    except (LookupError, RuntimeError):  # no limiter yet, or called outside a trio run
        return
    for limiter in run_limiters.named(key):
        if limiter.limits != limits:
            limiter.reconfigure(limits)


def model_limits(model: str) -> ModelLimits | None:
    """The limits set for a model id or alias with ``set_model_limits``, or None."""
    return _BY_NAME.get(_model_key(model))


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

    def named(self, name: _Name) -> list[ModelLimiter]:
        """Every limiter of this run for limits set by ``name`` (one per model object)."""
        tables = [*self.weak.values(), *(table for _, table in self.strong.values())]
        return [table[name] for table in tables if name in table]

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
