"""What a client sees of the server's internals when a run fails, through real HTTP: a
crashed tool, a crashed model and a store that stops taking writes mid-run. The run's
JSON, its events, the A2A task's status and AG-UI's RUN_ERROR name what failed, never a
file of the server's (its store, its code) nor a stack frame; those go to its log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

import satsuma
from conftest import ServeHTTP
from satsuma.store import SQLiteStore
from satsuma.testing import FunctionModel, Reply, ScriptedModel

_SECRET = "/srv/secret-keys/model.json"
_gate = {"open": trio.Event(), "entered": trio.Event()}


@satsuma.tool
async def read_config(name: str) -> str:
    """Read a configuration file.

    Args:
        name: Its name.
    """
    return await trio.Path(f"/srv/secret-config/{name}").read_text()


@satsuma.tool
async def wait_for_gate(label: str) -> str:
    """Wait until the test opens the gate.

    Args:
        label: A label.
    """
    _gate["entered"].set()
    await _gate["open"].wait()
    return label


class Reader(satsuma.Agent):
    """Reads files."""

    name = "reader"
    tools = [read_config, wait_for_gate]


def _crashing_model(*args: Any, **kwargs: Any) -> Any:
    raise OSError(2, "No such file or directory", _SECRET)


def _leaks(text: str, *paths: str) -> list[str]:
    found = [
        p for p in (_SECRET, __file__, str(Path(satsuma.__file__).parent), *paths) if p in text
    ]
    if "Traceback" in text or "traceback" in text:
        found.append("a traceback")
    return found


async def _events(client: Any, run_id: str) -> str:
    return (await client.get(f"/v1/runs/{run_id}/events")).text


async def test_a_crashed_tool_shows_no_stack_frame(serve_http: ServeHTTP) -> None:
    model = ScriptedModel([Reply(tool_calls=[("read_config", {"name": "db.ini"})]), "No file."])
    async with serve_http([Reader], model={"reader": model}) as served:
        run = (await served.client.post("/v1/agents/reader/a/runs", json={"prompt": "x"})).json()
        assert run["status"] == "completed"
        events = await _events(served.client, run["run_id"])
        (end,) = [line for line in events.splitlines() if '"ToolCallEnd"' in line]
        outcome = json.loads(end.removeprefix("data: "))["outcome"]
        # What failed is said: the kind and the exception's class.
        assert outcome["error_kind"] == "crashed"
        assert outcome["details"] == {"exception": "FileNotFoundError"}
        assert _leaks(events) == []


async def test_a_crashed_model_names_no_file_on_any_surface(serve_http: ServeHTTP) -> None:
    model = FunctionModel(_crashing_model)
    async with serve_http([Reader], model={"reader": model}) as served:
        client = served.client
        run = (await client.post("/v1/agents/reader/b/runs", json={"prompt": "x"})).json()
        assert run["status"] == "failed"
        assert "FileNotFoundError" in run["error"]["message"]
        # The usage before the crash (none: the first call crashed), with every key.
        assert run["usage"] == {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cost_usd": None,
        }
        assert _leaks(json.dumps(run)) == []
        assert _leaks(await _events(client, run["run_id"])) == []

        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]}
        sent = await client.post(
            "/a2a/reader",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            },
            headers={"A2A-Version": "1.0"},
        )
        task = sent.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert "FileNotFoundError" in json.dumps(task["status"])
        assert _leaks(sent.text) == []

        agui = {
            "threadId": "c",
            "runId": "r-1",
            "messages": [{"id": "u1", "role": "user", "content": "x"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        streamed = (await client.post("/ag-ui/reader", json=agui)).text
        (error,) = [line for line in streamed.splitlines() if '"RUN_ERROR"' in line]
        assert "FileNotFoundError" in error
        assert _leaks(streamed) == []


async def test_a_store_failing_mid_run_names_no_file(serve_http: ServeHTTP, tmp_path: Path) -> None:
    _gate.update(open=trio.Event(), entered=trio.Event())
    model = ScriptedModel([Reply(tool_calls=[("wait_for_gate", {"label": "a"})]), "Done."])
    async with (
        SQLiteStore(tmp_path / "agents.db") as store,
        serve_http([Reader], store=store, model={"reader": model}) as served,
    ):
        client = served.client
        started = await client.post("/v1/agents/reader/c/runs", json={"prompt": "x", "wait": False})
        run_id = started.json()["run_id"]
        await _gate["entered"].wait()  # the run is in its tool
        # The file stops taking writes (SQLite's real error), then the tool ends.
        connection = store._connection
        assert connection is not None
        await trio.to_thread.run_sync(
            connection.execute, "PRAGMA query_only = ON", limiter=store._limiter
        )
        _gate["open"].set()
        events = await _events(client, run_id)  # to the run's end
        view = (await client.get(f"/v1/runs/{run_id}")).json()
        assert view["status"] == "failed", view
        assert _leaks(json.dumps(view), str(tmp_path)) == []
        assert _leaks(events, str(tmp_path)) == []


async def test_a_run_that_crashes_keeps_the_usage_it_spent(serve_http: ServeHTTP) -> None:
    calls: list[Any] = []

    def answer_once(request: Any) -> Any:
        calls.append(request)
        if len(calls) == 1:
            return Reply(tool_calls=[("wait_for_gate", {"label": "a"})])
        return _crashing_model()

    _gate.update(open=trio.Event(), entered=trio.Event())
    _gate["open"].set()
    async with serve_http([Reader], model={"reader": FunctionModel(answer_once)}) as served:
        run = (await served.client.post("/v1/agents/reader/d/runs", json={"prompt": "x"})).json()
        assert run["status"] == "failed", run
        # The first call's tokens, spent before the second crashed.
        assert run["usage"]["input_tokens"] > 0 and run["usage"]["output_tokens"] > 0, run
        assert set(run["usage"]) == {
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "cost_usd",
        }
