"""Model aliases: the one table mapping short names to current model ids."""

from __future__ import annotations

from typing import Final

__all__ = ["MODEL_ALIASES", "resolve_model"]

MODEL_ALIASES: Final[dict[str, str]] = {
    "sonnet": "claude-sonnet-4-5",
    "opus": "claude-opus-4-5",
    "haiku": "claude-haiku-4-5",
}


def resolve_model(name: str) -> str | None:
    """The model id for an alias or an id (``claude-...``); None if it is neither."""
    if name in MODEL_ALIASES:
        return MODEL_ALIASES[name]
    if name.startswith("claude-") and len(name) > len("claude-"):
        return name
    return None
