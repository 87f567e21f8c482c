"""How many input tokens a model takes in one request: the table of known models' context
windows beside their prices, ``set_context_window`` to override it, and the error of a
request that would not fit (``ContextWindowExceeded``, raised before it is sent).

Models are named as families, the way ``_prices`` names them (``price_key``): an alias,
the id, its dated snapshots and its Bedrock and Vertex AI names find the same window.
The windows are the standard ones; a larger window some models offer behind a beta
header (a million tokens) is set with ``set_context_window``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from .._exceptions import SatsumaError
from ._prices import price_key

if TYPE_CHECKING:
    from ._model import ModelRequest

__all__ = [
    "CONTEXT_WINDOWS",
    "ContextWindowExceeded",
    "context_window_for",
    "count_input_tokens",
    "set_context_window",
]

_CLAUDE: Final = 200_000

CONTEXT_WINDOWS: Final[dict[str, int]] = {
    **dict.fromkeys(
        (
            "claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5", "claude-opus-5",
            "claude-sonnet-5", "claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6",
            "claude-opus-4-5", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-haiku-4-5",
            "claude-opus-4-1", "claude-opus-4", "claude-sonnet-4", "claude-3-7-sonnet",
            "claude-3-5-haiku", "claude-3-haiku",
        ),
        _CLAUDE,
    ),
    "gpt-5.1": 400_000,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
}  # fmt: skip
"""Input tokens a request may carry, by model family (see ``_prices.price_key``)."""

_overrides: dict[str, int] = {}
# Each model string's family, found once: the check runs before every call.
_families: dict[str, str] = {}


def set_context_window(model: str, tokens: int | None) -> None:
    """Set a model's context window for this process, over the table's.

    Every agent of the process checks its requests to the model against it before they
    are sent (a request past it is compacted, or fails with ``ContextWindowExceeded``).

    Args:
        model: A model string, as agents name it; its whole family takes the window.
        tokens: The input tokens a request may carry, or None to go back to the
            table's (none for a model it does not know: nothing is checked).

    Raises:
        TypeError: ``model`` is not a str, or ``tokens`` not an int or None.
        ValueError: ``model`` names no model, or ``tokens`` is below 1.
    """
    if not isinstance(model, str):
        raise TypeError(f"set_context_window: model must be a model string, got: {model!r}")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)):
        raise TypeError(f"set_context_window: tokens must be an int or None, got: {tokens!r}")
    if tokens is not None and tokens < 1:
        raise ValueError(f"set_context_window: tokens must be 1 or more, got: {tokens!r}")
    key = price_key(model)
    if not key:
        raise ValueError(f"set_context_window: {model!r} names no model")
    if tokens is None:
        _overrides.pop(key, None)
    else:
        _overrides[key] = tokens


def context_window_for(model: str) -> int | None:
    """The input tokens a request to ``model`` may carry: set by ``set_context_window``,
    else the table's; None for a model neither knows."""
    key = _families.get(model)
    if key is None:
        key = _families[model] = price_key(model)
    return _overrides.get(key) or CONTEXT_WINDOWS.get(key)


class ContextWindowExceeded(SatsumaError):
    """A request would carry more input tokens than its model's context window: it was
    not sent. The run fails with it (a ``Compaction`` history would have summarised the
    conversation instead; a trimmer's newest exchange alone may still be too large).

    Attributes:
        model: The model the request was for.
        estimate: The request's input tokens, as counted before sending.
        window: The model's context window.
        counted_by: ``"estimate"`` (characters at the rate the API last reported) or
            ``"api"`` (the provider's count endpoint).
    """

    def __init__(self, model: str, estimate: int, window: int, counted_by: str) -> None:
        self.model = model
        self.estimate = estimate
        self.window = window
        self.counted_by = counted_by
        super().__init__(
            f"the request to {model} was not sent: its input is about {estimate} tokens "
            f"(counted by {counted_by}), past the model's context window of {window} "
            "tokens; set history = satsuma.Compaction(...) or satsuma.TokenBudget(...) to "
            "keep requests under it"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.model, self.estimate, self.window, self.counted_by))


@runtime_checkable
class _TokenCounter(Protocol):
    async def count_tokens(self, request: ModelRequest) -> int | None: ...


async def count_input_tokens(model: object, request: ModelRequest) -> int | None:
    """The request's input tokens as the model's provider counts them (its count
    endpoint: ``AnthropicModel.count_tokens``), or None for a model with none.

    Raises:
        ModelError: the provider refused the count or could not be reached.
    """
    if isinstance(model, _TokenCounter):
        return await model.count_tokens(request)
    return None
