"""Which limiter an agent's model calls go through, and the limits set by model id.

A limiter belongs to a model configuration and is shared by every agent of the trio run
that uses it: a model object with limits of its own (``AnthropicModel(limits=...)``) is
one configuration, whatever model ids its agents name; a model object without them,
for agents whose model has limits set by name (``set_model_limits``), is one
configuration per provider and model id (so the one ``AnthropicModel`` that agents
declaring their model by name share holds a limiter for ``sonnet`` and another for
``haiku``; ``openai:gpt-5`` and ``bedrock:...`` have their own).

Limiters live per trio run, as the shared clients do (``_clients``): their deadlines
are read on the run's clock, and two runs (two tests) never wait for each other.
"""

from __future__ import annotations

import weakref

import trio.lowlevel

from ._aliases import model_problem, parse_model
from ._limiter import ModelLimiter
from ._limits import ModelLimits

__all__ = ["limiter_for", "model_limits", "set_model_limits"]


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
