"""Limits on model calls: the ``ModelLimits`` value, and the estimate of a request's
input tokens that ``tokens_per_minute`` charges as a call starts.

How a limiter admits calls under them (FIFO, cancellation-safe, rates as token
buckets) is ``_limiter``'s; which limiter an agent's calls go through, and the limits
set by model id, are ``_run_limiters``'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

if TYPE_CHECKING:
    from ._model import ModelRequest

__all__ = ["ModelLimits", "estimate_input_tokens"]


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
