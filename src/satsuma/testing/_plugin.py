"""satsuma's pytest plugin, registered through the ``pytest11`` entry point.

Fixtures:
    tool_workspace: an empty directory for a tool to work in (under ``tmp_path``).
    tool_context: a context mapping for ``run_tool`` / ``execute`` with that workspace as
        ``working_dir`` and every built-in capability granted.
    tool_events: an EventRecorder to pass as ``events=``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ._tools import EventRecorder

ALL_CAPABILITIES = frozenset({"read", "write", "shell", "network"})


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
    return EventRecorder()
