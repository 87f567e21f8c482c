"""How a Model retries a failed request: one policy for every provider's model.

``AnthropicModel`` and ``OpenAIModel`` turn their SDK's retries off and retry here, so
that each retry is reported to the listener (a ``ModelRetry`` event), and so that what
retries, how long it waits, and who else waits (a ``retry-after`` pauses the limits of
the whole configuration: docs/limits.md) are the same whichever provider answered.

A model says how its request failed with a ``ModelError`` (``retryable``, ``status``,
``retry_after``, built with ``retryable_status`` and ``retry_after_seconds`` from the
answer); ``retrying`` decides the rest.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

import trio

from .._exceptions import ModelError
from .._text import MESSAGE_LIMIT, describe_exception_text, exception_message
from ._model import ModelListener

__all__ = [
    "RetrySettings",
    "backoff_delay",
    "check_retry_settings",
    "retry_after_seconds",
    "retryable_status",
    "retrying",
]

_T = TypeVar("_T")


class RetrySettings(Protocol):
    """A model's retry settings, read at each retry (a test may change them)."""

    max_retries: int
    backoff_base: float
    backoff_cap: float
    jitter: bool


def check_retry_settings(max_retries: int, backoff_base: float, backoff_cap: float) -> None:
    """Refuse a negative retry count or backoff (a ValueError), as a model is built."""
    if max_retries < 0:
        raise ValueError(f"max_retries must be 0 or more, got: {max_retries}")
    if backoff_base < 0 or backoff_cap < 0:
        raise ValueError(f"backoffs must be 0 or more, got: base {backoff_base}, cap {backoff_cap}")


async def retrying(
    settings: RetrySettings, attempt: Callable[[], Awaitable[_T]], listener: ModelListener
) -> _T:
    """The result of ``attempt()``, called again after each retryable ModelError, up to
    ``settings.max_retries`` times.

    A failure that says how long to wait (``retry_after``) is reported to the listener's
    ``retry_after`` (if it has one) whether or not it is retried, so that every user of
    the configuration pauses; each retry is reported with ``listener.retry`` before its
    wait (``backoff_delay``).

    Raises:
        ModelError: A failure that is not retryable, at once; or the last one, when the
            retries ran out.
    """
    retries = 0
    while True:
        try:
            return await attempt()
        except ModelError as error:
            if error.retry_after is not None:
                # Every user of the configuration waits, not only this call (the loop's
                # listener pauses its limiter, if it has one; docs/limits.md).
                paused = getattr(listener, "retry_after", None)
                if paused is not None:
                    paused(min(settings.backoff_cap, error.retry_after))
            if not error.retryable or retries >= settings.max_retries:
                raise
            retries += 1
            delay = backoff_delay(settings, retries, error.retry_after)
            listener.retry(retries, delay, _said(error))
        # Outside the except block, so that a cancel during the wait is not chained to the
        # failure it was waiting after.
        await trio.sleep(delay)


def backoff_delay(settings: RetrySettings, retry: int, retry_after: float | None) -> float:
    """Seconds to wait before the ``retry``-th retry (from 1): what ``retry-after`` asked
    for, else up to ``backoff_base * 2**(retry - 1)`` (a random time up to it with
    ``jitter``); at most ``backoff_cap`` either way."""
    if retry_after is not None:
        return min(settings.backoff_cap, retry_after)
    # The exponent is bounded so that a huge max_retries cannot overflow a float.
    ceiling = min(settings.backoff_cap, settings.backoff_base * 2.0 ** min(retry - 1, 64))
    return random.uniform(0.0, ceiling) if settings.jitter else ceiling


def retryable_status(status: int | None) -> bool:
    """Whether an answer with this HTTP status is worth a retry: 408, 429, and 5xx
    (Anthropic's 529 among them)."""
    return status is not None and (status in (408, 429) or status >= 500)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, or ``retry-after`` in seconds
    or as an HTTP date; None when it did not say (or said nonsense)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        seconds: float | None
        try:
            seconds = float(value) * scale
        except ValueError:
            seconds = _seconds_until(value) if name == "retry-after" else None
        if seconds is not None and math.isfinite(seconds):
            return max(0.0, seconds)
    return None


def _seconds_until(http_date: str) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    return moment.timestamp() - time.time()


def _said(error: ModelError) -> str:
    # A retry event's reason: the provider's text may hold a lone surrogate (a JSON
    # error body's escape), and a Model's own ModelError subclass a hostile __str__.
    message = exception_message(error, limit=MESSAGE_LIMIT)
    return message if message is not None else describe_exception_text(error)
