"""``satsuma serve`` and ``satsuma serve token create`` as a user runs them: real
subprocesses, real HTTP, a token made on the command line, SIGTERM draining to exit 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

AGENTS = Path(__file__).with_name("serve_agents.py")


def satsuma(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "satsuma.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_token_create_prints_only_the_token(tmp_path: Path) -> None:
    made = satsuma(
        "serve", "token", "create", "--token-file", "tokens.txt", "--scopes", "run,read",
        "--agents", "greeter", "--name", "ops", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.removesuffix("\n")
    assert token.startswith("sat_") and "\n" not in token
    text = (tmp_path / "tokens.txt").read_text()
    assert token not in text and " ops read,run greeter" in text
    again = satsuma(
        "serve", "token", "create", "--token-file", "tokens.txt", "--scopes", "read",
        "--name", "ops", cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 2
    assert again.stdout == ""
    assert "has a token named 'ops' already" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "0.0.0.0"], "refusing to serve on 0.0.0.0 without tokens"),
        (["--node"], "needs --store postgresql://"),
        (["--node", "--store", "agents.db"], "needs --store postgresql://"),
        (["--store", "sqlite:///x.db"], "by its path"),
        (["--token-file", "missing.txt"], "cannot read the token file missing.txt"),
        (["--certfile", "c.pem"], "certfile and keyfile"),
    ],
)
def test_refusals_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    refused = satsuma("serve", f"{AGENTS}:Greeter", "--model", "fake", *args, cwd=tmp_path)
    assert refused.returncode == 2
    assert message in refused.stderr
    assert "Traceback" not in refused.stderr


async def test_serve_answers_and_drains_on_sigterm(tmp_path: Path) -> None:
    made = satsuma(
        "serve", "token", "create", "--token-file", "tokens.txt", "--scopes", "run,read",
        "--name", "ops", cwd=tmp_path,
    )  # fmt: skip
    token = made.stdout.strip()
    process = await trio.lowlevel.open_process(
        [
            sys.executable, "-m", "satsuma.cli", "serve", f"{AGENTS}:Greeter", "--model", "fake",
            "--port", "0", "--token-file", "tokens.txt", "--store", "agents.db",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "ANTHROPIC_API_KEY": ""},
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        first = b""
        while not first.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, "satsuma serve ended before it listened"
            first += chunk
        line = first.decode().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.removeprefix("listening on ")
        assert not url.endswith(":0")
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/readyz")).status_code == 200
            answer = await client.post(
                "/v1/agents/greeter/t-1/runs",
                json={"prompt": "Hello"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
        rest = await process.stdout.receive_some(65536)
        assert rest == b""  # nothing on stdout but the one line
        err = (await process.stderr.receive_some(65536)).decode()
        assert "SIGTERM: draining" in err and "stopped" in err
        assert token not in err
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
