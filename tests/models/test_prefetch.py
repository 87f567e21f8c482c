"""Declaring an agent starts importing its SDK in a daemon thread: a run with a scripted
model never waits for that import, and an SDK that fails to import fails the first real
model with its own error. Each case runs in a fresh interpreter, whose ``anthropic`` is
a stand-in on ``sys.path`` that the test holds or breaks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from satsuma.models._aliases import PROVIDERS
from satsuma.models._prefetch import SDKS, import_sdk_in_background

# A stand-in SDK whose import waits until the test lets it finish.
_HELD_SDK = """
import _gate
_gate.entered.set()
_gate.release.wait()
FINISHED = True
"""

_GATE = """
import threading
entered = threading.Event()
release = threading.Event()
"""


def _run(tmp_path: Path, sdk: str, script: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "anthropic").mkdir()
    (tmp_path / "anthropic" / "__init__.py").write_text(sdk)
    (tmp_path / "_gate.py").write_text(_GATE)
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(script)
    # A key, so that the first real model gets as far as its SDK (never to the network).
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key"}
    env.pop("ANTHROPIC_BASE_URL", None)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_a_scripted_run_does_not_wait_for_the_sdk_import(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        _HELD_SDK,
        """
        import threading
        import _gate, trio, satsuma
        from satsuma.testing import ScriptedModel

        assert "anthropic" not in sys.modules  # import satsuma starts nothing

        class Helper(satsuma.Agent):
            name = "helper"
            model = "sonnet"

        _gate.entered.wait()  # the SDK's import has started, in its own thread
        [importer] = [t for t in threading.enumerate() if t.name == "satsuma: import anthropic"]
        assert importer.daemon

        async def main():
            async with satsuma.open_agent(Helper, model=ScriptedModel(["Hello."])) as agent:
                return await agent.run("Hi")

        result = trio.run(main)
        # The run is over, and the import is still held: it never waited for it.
        assert not _gate.release.is_set() and importer.is_alive()
        print(result.status, result.output)
        _gate.release.set()
        importer.join()
        print(sys.modules["anthropic"].FINISHED)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "completed Hello.\nTrue\n"


def test_an_sdk_that_fails_to_import_fails_the_first_real_model(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        'raise ImportError("this SDK is broken")\n',
        """
        import threading
        import trio, satsuma

        class Helper(satsuma.Agent):
            name = "helper"
            model = "sonnet"

        for thread in threading.enumerate():
            if thread.name == "satsuma: import anthropic":
                thread.join()  # it failed, quietly: nobody was there to read it
        assert "anthropic" not in sys.modules

        async def main():
            async with satsuma.open_agent(Helper) as agent:
                await agent.run("Hi")

        try:
            trio.run(main)
        except ImportError as exc:
            print("raised:", exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "raised: this SDK is broken\n"


def test_every_provider_says_whether_its_sdk_is_imported_early() -> None:
    assert set(SDKS) == set(PROVIDERS)
    # Extras are never imported early (test_providers checks that declaring loads none).
    assert SDKS["openai"] is None
    assert import_sdk_in_background("openai:gpt-5") is None


def test_a_model_string_no_provider_knows_starts_nothing() -> None:
    assert import_sdk_in_background("no-such-model") is None
    assert import_sdk_in_background(None) is None


# A stand-in SDK that, like the real one, leaves many objects that survive its import.
_LARGE_SDK = """
import _gate
_gate.entered.set()
_gate.release.wait()
KEPT = [{"n": [n]} for n in range(50_000)]
DONE = True
"""

_COLLECTIONS = """
import gc, threading
import _gate, satsuma

full = []  # (thread, whether the SDK's import had finished by then)

def on_gc(phase, info):
    if phase == "stop" and info["generation"] == 2:
        done = getattr(sys.modules.get("anthropic"), "DONE", False)
        full.append((threading.current_thread().name, done))

gc.callbacks.append(on_gc)
{before}

class Helper(satsuma.Agent):
    name = "helper"
    model = "sonnet"

_gate.entered.wait()
# Found while its import waits: unheld, it may be done before the list is taken.
[importer] = [t for t in threading.enumerate() if t.name == "satsuma: import anthropic"]
_gate.release.set()
importer.join()
print(sorted(set(full)))
"""


def test_the_import_thread_runs_the_full_collection_the_import_made_due(
    tmp_path: Path,
) -> None:
    done = _run(tmp_path, _LARGE_SDK, _COLLECTIONS.format(before=""))
    assert done.returncode == 0, done.stderr
    # A full collection after the import, in its thread, not the first conversation's.
    assert "('satsuma: import anthropic', True)" in done.stdout


def test_with_the_collector_turned_off_the_import_thread_runs_none(tmp_path: Path) -> None:
    done = _run(tmp_path, _LARGE_SDK, _COLLECTIONS.format(before="gc.disable()"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
