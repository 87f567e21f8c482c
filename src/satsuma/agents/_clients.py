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
"""

from __future__ import annotations

import logging
import os

import trio
import trio.lowlevel

from .._exceptions import missing_api_key
from ._anthropic import AnthropicModel

__all__ = ["shared_model"]

logger = logging.getLogger("satsuma.agents")

# How long closing a run's clients may take when the run ends.
_CLOSE_SECONDS = 5.0

_ENVIRONMENT = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")

_Key = tuple[str | None, ...]


class _Models:
    """The shared models of one trio run, and the task that closes them."""

    def __init__(self) -> None:
        self.models: dict[_Key, AnthropicModel] = {}
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


def _build() -> AnthropicModel:
    # The SDK's first import takes over a second and a client's SSL context some more:
    # done in a worker thread, so that the first agent of a service to open does not
    # stall every other task of the run meanwhile.
    import anthropic

    from ._pool import pooled_http_client

    # Passed in, the client is not the model's to close: aclose() on a shared model
    # (reached through AgentHandle.model) leaves it to the run's end.
    return AnthropicModel(anthropic.AsyncAnthropic(http_client=pooled_http_client()))


async def shared_model(agent: str | None = None, declared: str | None = None) -> AnthropicModel:
    """The AnthropicModel of this trio run for the environment's configuration, built on
    first use (its client reads the same environment).

    Raises:
        ConfigurationError: neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is set
            (named for ``agent``, which declares the model ``declared``).
    """
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        # Found as the agent starts, not as its first run crashes inside the SDK.
        raise missing_api_key(agent, declared)
    try:
        models = _RUN_MODELS.get()
    except LookupError:
        models = _Models()
        _RUN_MODELS.set(models)
    key = tuple(os.environ.get(name) for name in _ENVIRONMENT)
    model = models.models.get(key)
    if model is not None:
        return model
    async with models.lock:
        model = models.models.get(key)
        if model is None:
            model = models.models[key] = await trio.to_thread.run_sync(_build)
    return model
