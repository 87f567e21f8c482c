"""A node whose agent crashes: the crash is logged at ERROR with its traceback (logger
``satsuma.cluster``) and the run's result names the exception's type and message, in
process and from ``satsuma node`` (its log lines go to stderr)."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
import trio

import satsuma
from satsuma.cluster import Cluster, Node
from satsuma.store import PostgresStore
from satsuma.testing import FunctionModel

from .test_cli_node import environment, satsuma_node, url_of


class Brittle(satsuma.Agent):
    name = "brittle"


# How an agent crashes, and what the result's error says of it: the type, and the
# message when there is one.
CRASHES = [
    (RuntimeError("the model function blew up"), "RuntimeError: the model function blew up"),
    (KeyError(), "KeyError"),  # no message at all: the type still says what it was
    (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
]


@pytest.mark.parametrize(("crash", "says"), CRASHES, ids=[type(c).__name__ for c, _ in CRASHES])
async def test_an_agent_crash_is_logged_with_its_traceback_and_named_in_the_result(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture, crash: Exception, says: str
) -> None:
    def model_function_that_crashes(request: satsuma.ModelRequest) -> str:
        raise crash

    caplog.set_level(logging.INFO, logger="satsuma")
    async with PostgresStore(postgres_dsn) as store, trio.open_nursery() as nursery:
        node = Node(
            store,
            agents=[Brittle],
            name="n1",
            model=FunctionModel(model_function_that_crashes),
            poll_interval=0.5,
        )
        await nursery.start(node.serve)
        with trio.fail_after(20):
            result = await Cluster(store).run(Brittle, "t-1", "hello")
        nursery.cancel_scope.cancel()

    assert result.status == "failed"
    assert result.error == f"the agent crashed: {says}"
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.name == "satsuma.cluster"
    assert record.getMessage() == (
        f"node n1: the agent of run {result.run_id} (brittle 't-1') crashed: {says}"
    )
    # The traceback is the crash's own, down to the function that raised.
    assert record.exc_info is not None
    assert record.exc_info[1] is crash
    assert "model_function_that_crashes" in "".join(traceback.format_tb(record.exc_info[2]))


CRASHING_AGENT = """
import satsuma


class NoHistory:
    def process(self, messages, last_usage):
        raise LookupError("the history processor blew up")


class Brittle(satsuma.Agent):
    name = "brittle"
    history = NoHistory()
"""


async def test_satsuma_node_shows_an_agent_crash_with_its_traceback_on_stderr(
    postgres_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "brittle_agents.py").write_text(CRASHING_AGENT)
    async with PostgresStore(postgres_dsn) as store:
        await store.open()
        cluster = Cluster(store, poll_interval=1.0)
        async with satsuma_node(
            "brittle_agents:Brittle",
            "--store",
            url_of(postgres_dsn),
            "--model",
            "fake",
            "--poll-interval",
            "0.2",
            cwd=tmp_path,
            env=environment(COLUMNS="500"),  # rich wraps its log lines at the width
        ) as node:
            with trio.fail_after(30):
                await node.line()  # serving
                result = await cluster.run(Brittle, "t-1", "hello")
            assert result.status == "failed"
            assert result.error == "the agent crashed: LookupError: the history processor blew up"
            with trio.fail_after(30):
                while "LookupError" not in node.stderr.read_text():  # noqa: ASYNC110  (another process)
                    await trio.sleep(0.05)
            node.process.terminate()
            with trio.fail_after(30):
                await node.process.wait()
        err = node.stderr.read_text()
    assert f"the agent of run {result.run_id} (brittle 't-1') crashed" in err
    assert "Traceback" in err
    # The frame that raised, in the agent's own module.
    assert "brittle_agents.py" in err
    assert "the history processor blew up" in err
