"""A2A conformance as a test: ``a2a-lint`` (an offline conformance linter from the
package index, MIT) run in another process against a real server on loopback.

What it checks (a2a-lint 0.1): the agent card at ``/.well-known/agent-card.json`` (its
required fields, each skill's, the transport it declares, its URL's scheme, whether it
declares the authentication it needs); with ``--live`` a ``message/send`` round trip
whose result must be a task or a message, and, as the card declares streaming, a
``message/stream`` that must be ``text/event-stream`` and end with a final status
update. Exit code 0 is conformant, 1 findings at error level, 2 no card found.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from serve_agents import Banker, Greeter, scripted

from satsuma.serve import TokenBook, create_token

pytestmark = pytest.mark.trio


async def lint(url: str, *options: str) -> tuple[int, dict[str, Any]]:
    """a2a-lint's exit code and its JSON report on ``url``."""
    done = await trio.run_process(
        [sys.executable, "-m", "a2a_lint.cli", url, "--json", "--timeout", "30", *options],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert not done.stderr, done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


async def test_a2a_lint_finds_the_server_conformant(serve_http: Any) -> None:
    async with serve_http([Greeter], model=scripted("Sent.", "Streamed.")) as served:
        code, report = await lint(served.url, "--live", "--strict")
    assert code == 0, report
    assert report["ok"] and report["agent"] == "greeter"
    assert report["cardUrl"] == f"{served.url}/.well-known/agent-card.json"
    # No finding at all: not an error, not a warning (plain http on loopback aside).
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0, report
    assert "liveRoundTripMs" in report and report["streamEvents"] >= 2


async def test_each_agents_card_of_several_is_conformant(serve_http: Any) -> None:
    async with serve_http([Banker, Greeter], model=scripted("Sent.", "Streamed.")) as served:
        code, report = await lint(f"{served.url}/a2a/greeter", "--live", "--strict")
    assert code == 0, report
    assert report["cardUrl"] == f"{served.url}/a2a/greeter/.well-known/agent-card.json"


async def test_with_tokens_the_public_card_is_conformant(serve_http: Any, tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    create_token(path, name="ops", scopes=["run", "read"])
    async with serve_http([Greeter], model=scripted(), tokens=TokenBook.from_file(path)) as served:
        # a2a-lint sends no token: the card is linted (it is public), not a live call.
        code, report = await lint(served.url, "--strict")
    assert code == 0, report
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0, report
