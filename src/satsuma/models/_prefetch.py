"""The provider's SDK imported ahead of its first use, in a thread of its own.

Importing the Anthropic SDK takes over a second (measured 1.3 s on a 2-core machine),
and a service's first conversation would wait for it. So when an agent class is declared
(at a service's start, long before its first request) whose model is on Anthropic's
SDK (Anthropic's API, Bedrock, Vertex AI), the SDK starts importing in a daemon thread; the first model built (``shared_model``, in
a worker thread) or ``AnthropicModel`` finds it imported, or waits on the import lock
for the rest. A run whose model is given (a scripted one, in tests) never waits for it.

Why a thread that nobody can cancel is safe here: it runs one ``import`` and ends on its
own; it touches no trio run, no store, no socket, nothing of satsuma's state; it is
started at most once per SDK and process; it is a daemon, so it never holds up the
process's exit. Python's import lock makes an ``import`` of the same module elsewhere
wait for it rather than run the module twice. What the import raises is dropped here,
on purpose: the module is then not in ``sys.modules``, and the first real use imports it
again and raises the same error where someone reads it (``satsuma.models`` turns a
missing SDK into a ConfigurationError).

Once the SDK is imported, the same thread runs one full garbage collection. The import
leaves the tens of thousands of objects it made waiting for one (Python runs a full
collection once the objects that survived since the last one reach a quarter of those
that survived it), and the first conversation's own allocations would set it off, in the
middle of the first answer: 83-230 ms on a shared 2-core machine, in every one of 11
fresh interpreters. Run here, at declaration, it finds the same heap, and the first
conversation pays none. It is an ordinary collection, as Python runs by itself in any
thread that allocates (this import's thread already runs some): nothing changes for the
rest of the process (``gc.freeze`` would have done as well, but it exempts every object
alive then, the service's included, from any later collection: not a library's call);
with the collector turned off (``gc.disable()``), none is run.

``import satsuma`` starts nothing: only declaring an agent does.
"""

from __future__ import annotations

import gc
import importlib
import sys
import threading
from typing import Final

from ._aliases import parse_model

__all__ = ["SDKS", "import_sdk_in_background"]

SDKS: Final[dict[str, str | None]] = {
    "anthropic": "anthropic",
    "bedrock": "anthropic",
    "vertex": "anthropic",
    "openai": None,
}
"""The module each provider of ``_aliases.PROVIDERS`` builds its client with, when it is
satsuma's own dependency. An extra's package (``openai``, and Bedrock's and Vertex's
credentials packages) is imported only when a model of its provider is built: declaring
an agent must not load what the default install does not need."""

_lock = threading.Lock()
_started: set[str] = set()


def import_sdk_in_background(model: object) -> threading.Thread | None:
    """Start importing the SDK that the model string ``model`` names, in a daemon
    thread, unless it is imported, being imported, or ``model`` names no provider.

    Returns:
        The thread started, or None when none was (for tests to join).
    """
    parsed = parse_model(model) if isinstance(model, str) else None
    module = SDKS.get(parsed[0]) if parsed is not None else None
    if module is None:  # no model string a provider knows: it fails at open, not here
        return None
    with _lock:
        if module in _started or module in sys.modules:
            return None
        _started.add(module)
    thread = threading.Thread(
        target=_import, args=(module,), name=f"satsuma: import {module}", daemon=True
    )
    thread.start()
    return thread


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception:
        return  # raised again, where it is read, by the first real import
    # The full collection the import made due, now rather than in the first conversation
    # (see the module docstring).
    if gc.isenabled():
        gc.collect()
