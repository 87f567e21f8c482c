"""Guards for the asyncio tests: a hang fails the run rather than blocking it.

Each test drives a real asyncio loop (``asyncio.run``) with trio as its guest. Every wait
inside is bounded by ``asyncio.timeout``; a hang that no asyncio timeout can break (a
trio run that never ends) ends the process with every thread's traceback instead.
"""

from __future__ import annotations

import faulthandler
import threading
from collections.abc import Iterator

import pytest

# Generous: a test takes well under a second; this only turns a hang into a failure.
HANG_SECONDS = 120


@pytest.fixture(autouse=True)
def _hang_guard() -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def busy_threads() -> Iterator[None]:
    """After the test, no thread but the main one and trio's idle thread cache runs."""
    yield
    for thread in threading.enumerate():
        if thread is threading.main_thread():
            continue
        # trio's cache keeps an idle worker for a few seconds after its last job (the
        # guest run's I/O wait ran there); it is named "Trio thread N" and does nothing.
        # Declaring an agent imports its SDK in a daemon thread that ends on its own
        # (satsuma.models._prefetch): the process's, not the test's.
        if thread.name.startswith("satsuma: import "):
            continue
        assert thread.name.startswith("Trio thread"), f"a thread outlived its test: {thread}"
