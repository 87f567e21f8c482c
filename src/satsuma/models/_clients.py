"""The model an agent gets when none is passed in: one per trio run and configuration.

Building an ``AsyncAnthropic`` costs some 30 ms and most of a megabyte (an SSL context and
a connection pool), and a client only pays off when its connections are reused. So
every agent that declares its model by name shares one ``AnthropicModel`` (and so one
client and one connection pool) with every other such agent of the same configuration:
the environment's ``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN`` and
``ANTHROPIC_BASE_URL`` when the model is first needed.

Its connection pool is several small pools (``_pool``): one pool of a thousand
connections costs more CPU per request than the request itself once a thousand
conversations are in flight.

A client's sockets belong to the trio run that opened them, so the sharing is per run
(a ``RunVar``): a service's one ``trio.run`` shares everything, and two runs (two tests,
two threads) never see each other's connections. The clients of a run are closed when
the run ends, by a system task that trio cancels after the main task returns; nothing
an agent does, cancellation included, closes a client other agents use.

A model string with a provider prefix gets that provider's model, shared the same way
per configuration: ``bedrock:`` an AnthropicModel on ``AsyncAnthropicBedrock`` (AWS
region and credentials as boto3 finds them), ``vertex:`` on ``AsyncAnthropicVertex``
(``CLOUD_ML_REGION``, ``ANTHROPIC_VERTEX_PROJECT_ID``, Application Default Credentials,
found and their first token fetched as the model is built),
``openai:`` an ``OpenAIModel`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``). Each is built
only when some agent names it, so that the providers' packages stay extras.

Each provider says how in a ``Provider``, defined in its own module (``_anthropic``,
``_clouds``, ``_openai``) and found through the registry of model strings
(``_aliases.PROVIDERS``), imported only once a model string names it.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from typing import Any

import attrs
import trio
import trio.lowlevel

from ._aliases import DEFAULT_PROVIDER, PROVIDERS, parse_model

__all__ = ["Provider", "provider", "shared_model"]

logger = logging.getLogger("satsuma.agents")

# How long closing a run's clients may take when the run ends.
_CLOSE_SECONDS = 5.0

_Key = tuple[str | None, ...]


class _Models:
    """The shared models of one trio run, and the task that closes them."""

    def __init__(self) -> None:
        self.models: dict[_Key, Any] = {}  # each model has the client it shares
        self.lock = trio.Lock()  # one build per configuration, however many agents wait
        trio.lowlevel.spawn_system_task(self._close_at_the_end, name="satsuma shared clients")

    async def _close_at_the_end(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_SECONDS):
                for model in self.models.values():
                    try:
                        await model.client.close()
                    except Exception:
                        logger.exception("closing a shared model client failed")
            self.models.clear()


_RUN_MODELS: trio.lowlevel.RunVar[_Models] = trio.lowlevel.RunVar("satsuma_shared_models")


@attrs.frozen
class Provider:
    """How a provider's shared model is checked, built, and told apart by environment.

    Attributes:
        environment: The environment variables the model's client reads: one shared
            model per trio run and values of these.
        check: Called as an agent that names the provider starts, with the agent's
            name and its model string (both None when not known): raises a
            ConfigurationError for what would fail every request (no key, no region,
            the extra not installed).
        build: Builds the model, in a worker thread (the SDK's first import and a
            client's SSL context take long); may raise a ConfigurationError too.
    """

    environment: tuple[str, ...]
    check: Callable[[str | None, str | None], None]
    build: Callable[[], Any]


_found: dict[str, Provider] = {}


def provider(name: str) -> Provider:
    """The Provider the registry (``_aliases.PROVIDERS``) names ``name``, its module
    imported now if it was not yet (looked up once: every agent's open asks)."""
    found = _found.get(name)
    if found is None:
        module, _, attribute = PROVIDERS[name].partition(":")
        found = getattr(importlib.import_module(f".{module}", __package__), attribute)
        assert isinstance(found, Provider)
        _found[name] = found
    return found


async def shared_model(agent: str | None = None, declared: str | None = None) -> Any:
    """The model of this trio run for the provider that ``declared`` names (Anthropic's
    when None) and the environment's configuration, built on first use (its client
    reads the same environment).

    Typed ``Any``: an ``AnthropicModel`` (on Anthropic's API, Bedrock or Vertex AI) or
    an ``OpenAIModel``, all ``Model``s.

    Raises:
        ConfigurationError: the provider's key (or region) is not set, its package (an
            extra) is not installed, or its base URL is not a URL (named for ``agent``,
            which declares the model ``declared``).
    """
    parsed = parse_model(declared) if declared is not None else None
    name = parsed[0] if parsed is not None else DEFAULT_PROVIDER
    configuration = provider(name)
    configuration.check(agent, declared)
    try:
        models = _RUN_MODELS.get()
    except LookupError:
        models = _Models()
        _RUN_MODELS.set(models)
    key = (name, *(os.environ.get(variable) for variable in configuration.environment))
    model = models.models.get(key)
    if model is not None:
        return model
    async with models.lock:
        model = models.models.get(key)
        if model is None:
            model = models.models[key] = await trio.to_thread.run_sync(configuration.build)
    return model
