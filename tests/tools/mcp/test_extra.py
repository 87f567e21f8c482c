"""The MCP SDK is the extra satsuma[mcp], not a dependency: without it everything else
works, and MCP says plainly what to install. The SDK is made unimportable in a child
interpreter by a finder on sys.meta_path (sitecustomize.py on PYTHONPATH), as if it were
not installed, rather than uninstalled from the shared environment."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKER = """
import importlib.abc, sys

class _NoMCP(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoMCP())
"""

HINT = "pip install 'satsuma[mcp]'"


def run_without_mcp(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def test_the_sdk_is_an_extra_not_a_dependency() -> None:
    requires = importlib.metadata.requires("satsuma") or []
    mcp = [r.replace('"', "'") for r in requires if r.replace(" ", "").startswith("mcp>")]
    # Its own extra, and the serving extra's (satsuma.serve's /mcp); never required.
    assert any("extra == 'mcp'" in r for r in mcp)
    assert mcp and all("extra == 'mcp'" in r or "extra == 'serve'" in r for r in mcp)


@pytest.mark.parametrize(
    "statement",
    [
        "import satsuma.tools.mcp",
        "from satsuma.tools.mcp import MCPServer",
        "from satsuma.tools.mcp import MCPTool",
        "from satsuma.tools import mcp",
    ],
)
def test_mcp_without_the_sdk_is_an_import_error_naming_the_extra(
    tmp_path: Path, statement: str
) -> None:
    out = run_without_mcp(
        tmp_path,
        f"""
        try:
            {statement}
        except ImportError as exc:
            print(type(exc).__name__, "|", exc, "|", type(exc.__cause__).__name__)
        else:
            print("imported")
        """,
    )
    assert out.returncode == 0, out.stderr
    kind, message, cause = (part.strip() for part in out.stdout.split("|"))
    assert kind == "ImportError"
    assert HINT in message and "MCPServer" in message
    assert cause == "ModuleNotFoundError"


def test_everything_else_works_without_the_sdk(tmp_path: Path) -> None:
    out = run_without_mcp(
        tmp_path,
        """
        import sys
        import trio
        import satsuma, satsuma.testing, satsuma.store, satsuma.tools.builtin, satsuma.cli
        from satsuma.testing import ScriptedModel

        class Greeter(satsuma.Agent):
            name = "greeter"

        async def main():
            async with satsuma.open_agent(Greeter, model=ScriptedModel(["hi"])) as agent:
                return await agent.run("hello")

        result = trio.run(main)
        assert result.output == "hi", result
        assert not [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]
        print("ok", satsuma.MCPServerError.__name__)
        """,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "MCPServerError"]


def test_a_broken_sdk_keeps_its_own_error(tmp_path: Path) -> None:
    """An SDK that is installed but whose own dependency is missing is not reported as
    the extra missing: the error names what is really gone."""
    blocker = BLOCKER.replace('"mcp"', '"pydantic"').replace('"mcp."', '"pydantic."')
    (tmp_path / "sitecustomize.py").write_text(blocker)
    out = subprocess.run(
        [sys.executable, "-c", "import satsuma.tools.mcp"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=120,
    )
    assert out.returncode == 1
    assert "ModuleNotFoundError: No module named 'pydantic" in out.stderr
    assert HINT not in out.stderr
