"""Watching the cached prefix: a warning when an agent's system prompt changes.

The prompt cache serves a request only from a prefix that is byte-identical to one sent
before (tools, then the system prompt, then the messages). A system prompt that changes
from one run to the next (a timestamp, a request id formatted into it) rewrites the whole
cache every time, at 1.25x the price of input, and silently. The system prompt is a
class attribute, so it changes when the class is declared again: a class made per
request, say, with the time formatted into its prompt. This module remembers the last
system prompt each agent class (its module, qualified name and agent name) sent in this
process and warns, once per change, when another one comes.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Final

__all__ = ["SystemPromptChanged", "watch_system"]

_MAX_NAMES: Final = 10_000  # agent classes remembered; past it the oldest are forgotten


class SystemPromptChanged(UserWarning):
    """An agent's system prompt differs from the one its last model call sent, which
    defeats prompt caching (``cache = "auto"``)."""


# Per agent class: the last system prompt sent (the string itself, to skip hashing when
# the same object comes again, as it does for every call of a class) and its digest.
_last: dict[str, tuple[str | None, bytes]] = {}


def watch_system(origin: str, agent: str, system: str | None) -> None:
    """Remember the system prompt the agent class ``origin`` (named ``agent``) sends,
    and warn if it changed since the last call of that class in this process."""
    key = f"{origin}:{agent}"
    previous = _last.get(key)
    if previous is not None and previous[0] is system:
        return
    # Compared by digest: a class declared per request keeps only its latest prompt.
    digest = hashlib.blake2b((system or "").encode(), digest_size=16).digest()
    if previous is not None and previous[1] == digest:
        _last[key] = (system, digest)
        return
    if previous is not None:
        warnings.warn(
            SystemPromptChanged(
                f"agent {agent!r}: its system prompt changed since its last model call, "
                "so the prompt cache is written again from the start (tools, system, "
                "conversation). Keep what changes from run to run (a date, a time, an "
                "id) out of the system prompt: put it in the prompt instead"
            ),
            stacklevel=2,
        )
    elif len(_last) >= _MAX_NAMES:
        del _last[next(iter(_last))]
    _last[key] = (system, digest)
