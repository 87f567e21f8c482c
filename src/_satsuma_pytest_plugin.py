"""satsuma's pytest plugin, registered through the ``pytest11`` entry point.

pytest loads every installed plugin in every session, whether its tests use satsuma or
not. This module therefore lives outside the ``satsuma`` package, as hypothesis' plugin
does: importing anything under ``satsuma`` imports the package (trio, attrs, cattrs,
about a quarter of a second), and here only pytest is imported until a test asks for a
fixture.

Fixtures:
    tool_workspace: an empty directory for a tool to work in (under ``tmp_path``).
    tool_context: a context mapping for ``run_tool`` / ``execute`` with that workspace as
        ``working_dir`` and every built-in capability granted.
    tool_events: an EventRecorder to pass as ``events=``.

Before each test, ``satsuma.testing.tool_call`` starts its ids again at
``toolu_test_1``, so what a test expects does not depend on the tests run before it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from satsuma.testing import EventRecorder

ALL_CAPABILITIES = frozenset({"read", "write", "shell", "network"})


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the test's fixtures, which may make calls too. A module that has not been
    # imported has not counted yet.
    if "satsuma.testing._tools" in sys.modules:
        from satsuma.testing._tools import restart_ids

        restart_ids()


@pytest.fixture
def tool_workspace(tmp_path: Path) -> Path:
    """An empty directory for a tool under test to work in."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


@pytest.fixture
def tool_context(tool_workspace: Path) -> dict[str, Any]:
    """A context mapping: ``tool_workspace`` as working_dir, every capability granted."""
    return {"working_dir": tool_workspace, "capabilities": set(ALL_CAPABILITIES)}


@pytest.fixture
def tool_events() -> EventRecorder:
    """An EventRecorder to pass as ``events=``."""
    from satsuma.testing import EventRecorder

    return EventRecorder()
