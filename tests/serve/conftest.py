"""The serve tests share their agent classes (serve_agents.py, beside this file)."""

from __future__ import annotations

import sys
from pathlib import Path

# Tests are imported in importlib mode (no package): make serve_agents importable.
sys.path.insert(0, str(Path(__file__).parent))
