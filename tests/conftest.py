"""Suite-wide guards (no test reaches a network beyond this machine), and a cheap way
for a test to collect its own garbage."""

from __future__ import annotations

import gc
import ipaddress
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def _is_local(address: Any) -> bool:
    if isinstance(address, tuple) and address:
        host = address[0]
    else:
        return True  # AF_UNIX paths and the like
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it would need DNS and the network


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> Any:
        if not _is_local(address):
            raise OSError(f"tests may not reach the network: connect to {address!r} blocked")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if not _is_local(address):
            raise OSError(f"tests may not reach the network: connect to {address!r} blocked")
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield


@pytest.fixture
def collect_garbage() -> Iterator[Callable[[], int]]:
    """``gc.collect`` over what this test made. Everything older is frozen first: a full
    collection late in the suite walks every object the earlier tests left (67 s for one
    collection in a loaded full run, 0.8 s for the same test alone)."""
    gc.freeze()
    try:
        yield gc.collect
    finally:
        gc.unfreeze()


def _printable(text: str) -> str:
    """``text`` with any lone surrogate escaped: the tests of hostile text log it, and
    pytest-xdist's channel (execnet) sends a report's text as UTF-8, which a lone
    surrogate cannot be."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _printable(text)) for title, text in report.sections]
    if report.longrepr is not None:
        shown = str(report.longrepr)
        if _printable(shown) != shown:
            report.longrepr = _printable(shown)
