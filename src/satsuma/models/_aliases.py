"""The registry of model strings: the short names of Anthropic's current models, and
the providers a model string's prefix names (``openai:gpt-5``).

To add a provider, write its module in this package (its Model, and a
``_clients.Provider`` saying how its shared model is checked and built from the
environment) and add one line to ``PROVIDERS``: the prefix, and where its Provider is.
Agents then accept ``"<prefix>:<model id>"``, share one such model per configuration,
and limits set for such a string hold for them.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_PROVIDER",
    "MODEL_ALIASES",
    "PROVIDERS",
    "model_problem",
    "parse_model",
    "resolve_model",
]

# The newest model of each family that the pinned anthropic SDK (2.12) lists; the SDK
# warns when a request names a model past its deprecation date, so keep this current.
MODEL_ALIASES: Final[dict[str, str]] = {
    "sonnet": "claude-sonnet-5-5",
    "opus": "claude-opus-5-5",
    "haiku": "claude-haiku-5-5",
}

# Who answers a model string, by the prefix it starts with, and where each provider is
# defined: a module of satsuma.models and the name of its _clients.Provider there,
# imported only once a model string names it (so that its SDK stays an extra). The
# model id after a prefix is the provider's own, sent as it is (no aliases: ids differ
# by provider). A provider's name is its prefix; the default one is named by none.
PROVIDERS: Final[dict[str, str]] = {
    "anthropic": "_anthropic:ANTHROPIC",
    "bedrock": "_clouds:BEDROCK",
    "vertex": "_clouds:VERTEX",
    "openai": "_openai:OPENAI",
}

DEFAULT_PROVIDER: Final = "anthropic"
"""The provider of a model string without a prefix: an alias or a ``claude-`` id, on
Anthropic's API. Its name is no prefix (``anthropic:...`` names no model)."""

_PREFIXES: Final = tuple(prefix for prefix in PROVIDERS if prefix != DEFAULT_PROVIDER)


def parse_model(name: str) -> tuple[str, str] | None:
    """The provider and the model id a model string names; None if it names none."""
    prefix, colon, rest = name.partition(":")
    if colon:
        return (prefix, rest) if prefix in _PREFIXES and rest else None
    if name in MODEL_ALIASES:
        return DEFAULT_PROVIDER, MODEL_ALIASES[name]
    if name.startswith("claude-") and len(name) > len("claude-"):
        return DEFAULT_PROVIDER, name
    return None


def resolve_model(name: str) -> str | None:
    """The model id for an alias, an id (``claude-...``) or a prefixed name
    (``openai:gpt-5`` gives ``gpt-5``, ``bedrock:anthropic.claude-x-v1:0`` gives
    ``anthropic.claude-x-v1:0``); None if it is none of them."""
    parsed = parse_model(name)
    return parsed[1] if parsed is not None else None


def model_problem(name: object) -> str | None:
    """What is wrong with a declared model string, or None if it names a model."""
    if isinstance(name, str) and parse_model(name) is not None:
        return None
    if isinstance(name, str) and ":" in name:
        prefix = name.partition(":")[0]
        if prefix in _PREFIXES:
            return f"unknown model {name!r}: name the model after {prefix + ':'!r}"
        known = ", ".join(f"{prefix}:<model>" for prefix in _PREFIXES)
        return f"unknown model {name!r}: unknown provider {prefix!r} (known: {known})"
    return (
        f"unknown model {name!r}: use an alias ({', '.join(MODEL_ALIASES)}) "
        "or a model id (claude-...)"
    )
