"""Draining a server that a client holds up: ``satsuma serve`` under SIGTERM, a client
that opens a run's event stream and stops reading (its receive buffer as small as the
kernel allows), so that the server's writes to it block. The drain must end within
``--drain-timeout``, cut that connection, say so, and exit 0 (hypercorn shields its
writes from cancellation: this drain used to hang for good)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import trio
from serve_process import AGENTS, _environment

from satsuma.testing import MessagesServer

# Some 12 MB of events: the answer's deltas (over a megabyte each), then the RunEnd that
# carries it; far more than the kernel buffers of the slow client's connection hold.
_LONG = " ".join(["x" * 4000] * 1000)


async def _open_slow_stream(url: str, run_id: str) -> trio.SocketStream:
    """A connection to the run's events that reads the status line and then nothing."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    request = f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: localhost\r\n\r\n"
    await stream.send_all(request.encode())
    # Its first 16 KiB: the status, the headers, the RunStart event and the first bytes
    # of a TextDelta event over a megabyte long, which the server is now writing and
    # which no buffer between the two can hold: the write blocks until the client reads.
    received = b""
    while len(received) < 16384:
        chunk = await stream.receive_some(4096)
        assert chunk, "the server closed the event stream early"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    return stream


async def test_sigterm_cuts_a_client_that_reads_nothing_after_the_drain_timeout(
    tmp_path: Path,
) -> None:
    (tmp_path / "banker_agents.py").write_text(AGENTS)
    async with MessagesServer([_LONG]) as model:
        process = await trio.lowlevel.open_process(
            [
                sys.executable, "-m", "satsuma.cli", "serve", "banker_agents:Banker",
                "--port", "0", "--store", "agents.db", "--drain-timeout", "1",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_environment(model),
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        try:
            first = b""
            while not first.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "satsuma serve ended before it listened"
                first += chunk
            url = first.decode().strip().removeprefix("listening on ")
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                run = await client.post("/v1/agents/banker/b-1/runs", json={"prompt": "talk"})
                assert run.status_code == 200 and run.json()["status"] == "completed"
                run_id = run.json()["run_id"]
            slow = await _open_slow_stream(url, run_id)
            async with slow:
                process.send_signal(signal.SIGTERM)
                # A guard against the hang this test is about, not a measurement.
                with trio.fail_after(60):
                    status = await process.wait()
                assert status == 0
                err = (await process.stderr.receive_some(65536)).decode()
                assert "SIGTERM: draining" in err
                assert "1 connection(s) still open after the drain's 1s were cut" in err
                assert "stopped" in err and "Traceback" not in err
                # The slow client's connection is gone: reading drains what the kernel
                # held, then ends (a reset, or the end of the stream).
                try:
                    while await slow.receive_some(1 << 20):
                        pass
                except trio.BrokenResourceError:
                    pass
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
