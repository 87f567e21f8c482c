"""The suite's own PostgreSQL server never outlives the test process that started it, even
when that process is killed and its fixtures' teardown never runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DSN_VARIABLE = "SATSUMA_TEST_POSTGRES_DSN"  # as in conftest.py

# Starts an embedded server the way the session fixture does, says where, then waits.
_CHILD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("_conftest", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
server = module.PostgresServer.embedded()
print(server.folder, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(bool(os.environ.get(DSN_VARIABLE)), reason="the environment's server")
def test_a_killed_test_process_leaves_no_server_behind() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(Path(__file__).with_name("conftest.py"))],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            folder = Path(child.stdout.readline().strip())
            postmaster = int((folder / "data" / "postmaster.pid").read_text().split()[0])
            assert _alive(postmaster)
        finally:
            child.send_signal(signal.SIGKILL)  # no teardown runs
    deadline = time.monotonic() + 60
    while (_alive(postmaster) or folder.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(postmaster), "the server outlived the process that started it"
    assert not folder.exists()
