"""``satsuma run`` on an agent with a typed answer prints the answer as JSON (the real
command in a subprocess, its model the loopback MessagesServer, or the offline fake
model)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import trio

from satsuma.testing import MessagesServer, Reply

AGENTS = """
from typing import Literal

import attrs

import satsuma


@attrs.frozen
class Invoice:
    total: float
    currency: Literal["EUR", "USD"]


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"
"""


async def satsuma_run(
    project: Path, server: MessagesServer | None, *args: str
) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(COLUMNS="200")
    if server is not None:
        env.update(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=server.base_url)
    result = await trio.run_process(
        [sys.executable, "-m", "satsuma.cli", "run", "invoices:Extractor", *args],
        cwd=project,
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_run_prints_a_typed_answer_as_json(tmp_path: Path) -> None:
    (tmp_path / "invoices.py").write_text(AGENTS)
    answer = Reply(tool_calls=[("final_answer", {"total": 12, "currency": "EUR"})])
    async with MessagesServer([answer]) as server:
        status, out, err = await satsuma_run(tmp_path, server, "Twelve euros, please.")
    assert status == 0, err
    # The live view's lines, then the answer as JSON. (With --json, the RunEnd line
    # carries it: event_to_json, tested in test_output.py.)
    start = out.index("{")
    assert json.loads(out[start:]) == {"total": 12.0, "currency": "EUR"}
    assert "extractor run completed" in out[:start]


async def test_run_with_the_fake_model_prints_a_typed_answer_made_from_the_schema(
    tmp_path: Path,
) -> None:
    # A newcomer, offline, with no key: the typed agent completes on its first turn.
    (tmp_path / "invoices.py").write_text(AGENTS)
    status, out, err = await satsuma_run(tmp_path, None, "Read it.", "--model", "fake")
    assert status == 0, err
    start = out.index("{")
    assert json.loads(out[start:]) == {"total": 1, "currency": "EUR"}
    assert "extractor run completed" in out[:start]
