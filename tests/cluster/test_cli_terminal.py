"""``satsuma cluster status`` shows what the shared database holds (node names, hosts,
served classes, agent ids, run ids) with its control characters made visible: anyone who
can write a row there (a node, a client submitting runs) must not command the terminal
of the operator who looks. The rules of that escaping are in tests/test_terminal.py."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from satsuma.cli import main
from satsuma.store import Owner, PostgresStore
from satsuma.store._queue import claim, enqueue, register_node

# C0 controls but "\n" and "\t", DEL, C1 controls, bidi controls, separators, surrogates.
RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\u2028\u2029\ud800-\udfff]"
)
MARKUP = "[bold red]red[/]"
HOSTILE = f"{MARKUP}\x1b]52;c;ZXZpbA==\x07\x1b[1A\x1b[2K\nFAKE\r\u202eevil\x9b31m\x7f"
NICE = "café 中文 👩\u200d💻"


def assert_clean(output: str) -> None:
    found = sorted({f"U+{ord(char):04X}" for char in RAW.findall(output)})
    assert not found, f"raw control characters reached the output: {found}\n{output!r}"


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """For ``main`` called here: the satsuma logger's level and handlers put back."""
    monkeypatch.chdir(tmp_path)
    log = logging.getLogger("satsuma")
    level, handlers = log.level, list(log.handlers)
    try:
        yield
    finally:
        log.setLevel(level)
        log.handlers[:] = handlers


async def fill(dsn: str) -> None:
    """A node, a lease, a queued run and a run in flight, each named by hostile text."""
    async with PostgresStore(dsn) as store:
        await register_node(
            store,
            "node-1",
            name=f"web{HOSTILE}",
            host=f"host{HOSTILE}",
            pid=1,
            agents=[f"echo{HOSTILE}", NICE],
            lease_seconds=60,
        )
        owner = Owner(owner_id=f"o{HOSTILE}", pid=2, host=f"h{HOSTILE}")
        await store.acquire_lease(f"ticket{HOSTILE}", owner, seconds=60)
        await enqueue(store, f"run_a{HOSTILE}", f"echo{HOSTILE}", f"id{HOSTILE}", HOSTILE)
        await enqueue(store, f"run_b{HOSTILE}", f"echo{HOSTILE}", f"id2{HOSTILE}", NICE)
        claimed = await claim(store, "node-1", [f"echo{HOSTILE}"])
        assert claimed is not None


@pytest.mark.usefixtures("in_process")
def test_cluster_status_shows_hostile_names_and_ids_visibly(
    postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trio.run(fill, postgres_dsn)
    url = dsn_url(postgres_dsn)
    assert main(["cluster", "status", "--store", url]) == 0
    out, err = capsys.readouterr()
    assert_clean(out + err)
    assert err == ""
    assert MARKUP in out and NICE in out
    escaped = "\\x1b]52;c;ZXZpbA==\\x07\\x1b[1A\\x1b[2K\\nFAKE\\r\\u202eevil\\x9b31m\\x7f"
    for name in ("web", "host", "echo", "ticket", "run_a", "id", "h"):
        assert f"{name}{MARKUP}{escaped}" in out, name
    # Every line is the table's own: a name cannot start one.
    assert not [line for line in out.splitlines() if line.startswith("FAKE")]
    # The JSON for scripts is the database's text, exactly.
    assert main(["cluster", "status", "--store", url, "--json"]) == 0
    out, _ = capsys.readouterr()
    assert_clean(out)
    [node] = json.loads(out)["nodes"]
    assert (node["name"], node["agents"]) == (f"web{HOSTILE}", [f"echo{HOSTILE}", NICE])


AGENTS = """
import satsuma


class Echo(satsuma.Agent):
    name = "echo"
"""


async def test_a_node_shows_a_hostile_name_visibly(postgres_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "node_agents.py").write_text(AGENTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    name = f"web{HOSTILE}".replace("\n", "")  # argv: no NUL; a line break is fine too
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "satsuma.cli", "node", "node_agents:Echo", "--model", "fake",
         "--store", dsn_url(postgres_dsn), "--name", f"{name}\nFAKE"],
        cwd=tmp_path,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        out = b""
        while b"serving" not in out:
            chunk = await process.stdout.receive_some()
            assert chunk, out.decode()
            out += chunk
        process.send_signal(signal.SIGTERM)
        async for chunk in process.stdout:
            out += chunk
        assert await process.wait() == 0, out.decode()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    shown = out.decode()
    assert_clean(shown)
    # Every line that names the node shows the whole name escaped on that one line (a
    # loaded machine may add log lines of its own: a slow heartbeat, say).
    escaped = "web[bold red]red[/]\\x1b]52;c;ZXZpbA==\\x07\\x1b[1A\\x1b[2KFAKE\\r\\u202eevil"
    named = [line for line in shown.splitlines() if "web[bold red]" in line]
    assert named and all(escaped in line for line in named), shown
    assert any(line.startswith(f"satsuma node {escaped}") for line in named), shown
    assert any(line.endswith("\\nFAKE: stopped") for line in named), shown


def dsn_url(dsn: str) -> str:
    """The fixture's connection string (key=value) as the URL --store takes."""
    params = conninfo_to_dict(dsn)
    secret = params.get("password")
    user = quote(str(params.get("user", "")), safe="")
    auth = f"{user}:{quote(str(secret), safe='')}@" if secret else f"{user}@"
    host = str(params.get("host") or "")
    port = f":{params['port']}" if params.get("port") else ""
    dbname = quote(str(params.get("dbname", "")), safe="")
    if host.startswith("/"):
        return f"postgresql://{auth}{port}/{dbname}?host={quote(host, safe='/')}"
    return f"postgresql://{auth}{host}{port}/{dbname}"
