"""Model names: the one table mapping short names to current model ids, and the provider
prefixes a model string may carry (``openai:gpt-5``)."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

__all__ = [
    "MODEL_ALIASES",
    "PROVIDERS",
    "Provider",
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

Provider: TypeAlias = Literal["anthropic", "bedrock", "vertex", "openai"]
"""Who answers a model string: Anthropic's API, Claude on Bedrock or on Vertex AI, or an
OpenAI-compatible endpoint."""

# The prefixes a model string may start with, and the provider each names. The model id
# after one is the provider's own, sent as it is (no aliases: ids differ by provider).
PROVIDERS: Final[dict[str, Provider]] = {
    "bedrock": "bedrock",
    "vertex": "vertex",
    "openai": "openai",
}


def parse_model(name: str) -> tuple[Provider, str] | None:
    """The provider and the model id a model string names; None if it names none."""
    prefix, colon, rest = name.partition(":")
    if colon:
        provider = PROVIDERS.get(prefix)
        return (provider, rest) if provider is not None and rest else None
    if name in MODEL_ALIASES:
        return "anthropic", MODEL_ALIASES[name]
    if name.startswith("claude-") and len(name) > len("claude-"):
        return "anthropic", name
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
        if prefix in PROVIDERS:
            return f"unknown model {name!r}: name the model after {prefix + ':'!r}"
        known = ", ".join(f"{prefix}:<model>" for prefix in PROVIDERS)
        return f"unknown model {name!r}: unknown provider {prefix!r} (known: {known})"
    return (
        f"unknown model {name!r}: use an alias ({', '.join(MODEL_ALIASES)}) "
        "or a model id (claude-...)"
    )
