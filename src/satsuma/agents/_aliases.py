"""Model aliases: the one table mapping short names to current model ids."""

from __future__ import annotations

from typing import Final

__all__ = ["MODEL_ALIASES", "resolve_model"]

# The newest model of each family that the pinned anthropic SDK (2.12) lists; the SDK
# warns when a request names a model past its deprecation date, so keep this current.
MODEL_ALIASES: Final[dict[str, str]] = {
    "sonnet": "claude-sonnet-5-5",
    "opus": "claude-opus-5-5",
    "haiku": "claude-haiku-5-5",
}


def resolve_model(name: str) -> str | None:
    """The model id for an alias or an id (``claude-...``); None if it is neither."""
    if name in MODEL_ALIASES:
        return MODEL_ALIASES[name]
    if name.startswith("claude-") and len(name) > len("claude-"):
        return name
    return None
