"""Interoperability: the official A2A SDK's client, under asyncio in another process,
talks to a satsuma server over real HTTP (tests/serve/a2a_sdk_client.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from serve_agents import Banker, Greeter, gate, scripted, two_transfers

from satsuma.serve import TokenBook, create_token
from satsuma.testing import Reply

pytestmark = pytest.mark.trio

SCRIPT = Path(__file__).parent / "a2a_sdk_client.py"


async def test_the_official_sdk_client(serve_http: Any, tmp_path: Path) -> None:
    gate["open"] = trio.Event()  # the slow tool waits until cancelled
    path = tmp_path / "tokens.txt"
    token = create_token(path, name="sdk", scopes=["run", "read", "approve"])
    models = {
        "greeter": scripted("Hello over A2A.", "Streamed hello."),
        "banker": scripted(
            Reply(tool_calls=[("slow", {"label": "a"})]), *two_transfers("Paid both.")
        ),
    }
    async with serve_http(
        [Greeter, Banker], model=models, tokens=TokenBook.from_file(path)
    ) as served:
        url = served.url
        done = await trio.run_process(
            [sys.executable, str(SCRIPT), served.url, token],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert seen["card"] == {"name": "greeter", "streaming": True, "url": f"{url}/a2a/greeter"}
    assert seen["send"]["state"] == "TASK_STATE_COMPLETED"
    assert seen["send"]["artifact"] == "Hello over A2A."
    assert seen["get"] == "TASK_STATE_COMPLETED"
    assert seen["list"] == [True]
    assert seen["stream"][0] == "task"
    assert seen["stream"][-2:] == ["artifact_update", "status_update"]
    assert seen["stream_end"] == "TASK_STATE_COMPLETED"
    assert seen["stream_artifact"] == ["Streamed hello."]
    assert seen["subscribe"] == ["task", "status_update"]
    assert seen["subscribe_end"] == "TASK_STATE_CANCELED"
    assert seen["cancel"] == "TASK_STATE_CANCELED"
    assert seen["cancel_again"] == "TaskNotCancelableError"
    assert seen["paused"] == "TASK_STATE_INPUT_REQUIRED"
    assert seen["resumed"] == "TASK_STATE_COMPLETED"
    assert seen["resumed_artifact"] == "Paid both."


ERRORS = Path(__file__).parent / "a2a_sdk_errors.py"


async def test_the_official_sdk_client_meets_the_specs_errors(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.txt"
    token = create_token(path, name="sdk", scopes=["run", "read", "approve"])
    models = {"greeter": scripted("Hello."), "banker": scripted()}
    async with serve_http(
        [Greeter, Banker], model=models, tokens=TokenBook.from_file(path)
    ) as served:
        done = await trio.run_process(
            [sys.executable, str(ERRORS), served.url, token],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    # Each is the SDK's class for the specification's JSON-RPC code (section 5.4). The
    # SDK answers GetExtendedAgentCard itself when the card declares none (satsuma's
    # -32007 for it is tested over httpx in test_a2a.py).
    assert seen == {
        "task_not_found": "TaskNotFoundError",  # -32001
        "other_agents_task": "TaskNotFoundError",
        "cancel_ended": "TaskNotCancelableError",  # -32002
        "message_to_ended_task": "UnsupportedOperationError",  # -32004
        "subscribe_ended": "UnsupportedOperationError",
        "file_part": "ContentTypeNotSupportedError",  # -32005
        "empty_message": "InvalidParamsError",  # -32602
        "page_too_big": "InvalidParamsError",
        "push_config": "PushNotificationNotSupportedError",  # -32003
        "version": "VersionNotSupportedError",  # -32009
    }
