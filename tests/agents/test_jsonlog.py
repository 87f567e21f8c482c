"""JsonLinesLog: one JSON object per event per line, for agents, tools and supervisors;
a failing file is logged once and never fails a run."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import JsonLinesLog, event_to_json
from satsuma.testing import Reply, ScriptedModel


@satsuma.tool
async def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


class Echo(satsuma.Agent):
    name = "echo"
    tools = [shout]
    system = "You shout."


def script(*more: str) -> ScriptedModel:
    return ScriptedModel([Reply(tool_calls=[("shout", {"text": "hi"})]), "HI", *more])


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_a_run_is_written_one_event_per_line_in_the_cattrs_form(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    seen: list[Any] = []
    with JsonLinesLog(path) as log:
        async with satsuma.open_agent(Echo, model=script()) as agent:

            def both(event: Any) -> None:
                seen.append(event)
                log(event)

            result = await agent.run("shout hi", events=both)
    assert result.status == "completed"
    lines = read_lines(path)
    assert lines == [event_to_json(event) for event in seen]
    types = [line["type"] for line in lines]
    assert types[0] == "RunStart" and types[-1] == "RunEnd"
    assert {"ToolCallStart", "ToolCallEnd", "TurnEnd"} <= set(types)
    assert lines[-1]["result"]["output"] == "HI"
    assert log.closed


async def test_the_log_appends_and_is_usable_with_stream(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "earlier"}\n', encoding="utf-8")
    log = JsonLinesLog(path)
    async with satsuma.open_agent(Echo, model=script("again")) as agent:
        await agent.run("one", events=log)
        # Each line is on disk as soon as the event happened.
        assert read_lines(path)[-1]["type"] == "RunEnd"
        async for event in agent.stream("two"):
            log(event)
    log.close()
    log.close()  # again: nothing happens
    types = [line["type"] for line in read_lines(path)]
    assert types[0] == "earlier"
    assert types.count("RunStart") == types.count("RunEnd") == 2
    assert types[-1] == "RunEnd"


async def test_supervisor_events_are_logged_too(autojump_clock: trio.abc.Clock) -> None:
    out = io.StringIO()
    log = JsonLinesLog(out)
    async with satsuma.Supervisor(events=log) as sup:
        await sup.start_child(Echo, id="echo", model=script())
    log.close()
    assert not out.closed  # a file object passed in stays its owner's
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["type"] for line in lines] == ["ChildStarted", "ChildExited"]
    assert lines[0]["child_id"] == "echo"
    assert lines[1]["reason"] == "shutdown"


def test_values_json_cannot_hold_are_written_as_their_repr() -> None:
    out = io.StringIO()
    outcome = satsuma.ToolOutcome(
        tool_use_id="t1",
        tool_name="x",
        content="ok",
        is_error=False,
        error_kind=None,
        details={"raw": b"\x00bytes", "when": object},
    )
    JsonLinesLog(out)(satsuma.ToolCallEnd(tool_use_id="t1", tool_name="x", outcome=outcome))
    [line] = out.getvalue().splitlines()
    data = json.loads(line)
    assert data["type"] == "ToolCallEnd"
    assert data["outcome"]["details"]["raw"] == repr(b"\x00bytes")


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


async def test_a_failing_file_is_logged_once_and_never_fails_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = JsonLinesLog(_FullDisk())
    with caplog.at_level(logging.WARNING, logger="satsuma"):
        async with satsuma.open_agent(Echo, model=script()) as agent:
            result = await agent.run("shout hi", events=log)
    assert result.status == "completed"
    [record] = [r for r in caplog.records if "JsonLinesLog" in r.getMessage()]
    assert record.name.startswith("satsuma")
    assert record.levelno == logging.ERROR
    assert "No space left on device" in record.getMessage()


async def test_a_closed_file_or_log_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handle = (tmp_path / "x.jsonl").open("a", encoding="utf-8")
    borrowed = JsonLinesLog(handle)
    handle.close()
    owned = JsonLinesLog(tmp_path / "y.jsonl")
    owned.close()
    event = satsuma.ToolCallStart(tool_use_id="t1", tool_name="x", input={})
    with caplog.at_level(logging.WARNING, logger="satsuma"):
        for log in (borrowed, owned):
            log(event)
            log(event)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "closed" in messages[0] and "closed" in messages[1]
    assert (tmp_path / "y.jsonl").read_text(encoding="utf-8") == ""


def test_bad_targets_and_events_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="a path or a text file object"):
        JsonLinesLog(42)  # type: ignore[arg-type]
    with pytest.raises(OSError):
        JsonLinesLog(tmp_path / "missing-dir" / "x.jsonl")
    with JsonLinesLog(io.StringIO()) as log, pytest.raises(TypeError, match="attrs"):
        log({"type": "not an event"})
