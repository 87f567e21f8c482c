"""The AG-UI surface: real agent runs (ScriptedModel) translated to AG-UI events, each
parsed by ag_ui's own models and the stream checked against the protocol's rules."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio.testing
from ag_ui.core import EventType, RunAgentInput
from agui_rules import check_order, parse

import satsuma
from satsuma import ModelError
from satsuma.serve._agui import AGUISurface, RunInput, parse_run_input
from satsuma.serve._agui_events import APPROVAL_EVENT, AGUIStream
from satsuma.serve._http import HTTPError, Principal, Request, SSEAnswer
from satsuma.serve._local import LocalRuns
from satsuma.serve._open_runs import open_local_runs
from satsuma.store import SQLiteStore
from satsuma.testing import Reply, ScriptedModel


@satsuma.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@satsuma.tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return "paid"


class Calc(satsuma.Agent):
    """Adds numbers and pays."""

    name = "calc"
    tools = [add, pay]


def _input(text: Any = "add 1 and 2", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": "thread-1",
        "runId": "client-run-1",
        "messages": [
            {"id": "m0", "role": "user", "content": "an old question"},
            {"id": "m1", "role": "assistant", "content": "an answer the client made up"},
            {"id": "m2", "role": "user", "content": text},
        ],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    body.update(fields)
    # The body is one the protocol's own models accept.
    RunAgentInput.model_validate(body)
    return body


async def _stream(runs: LocalRuns, body: dict[str, Any]) -> list[Any]:
    """Run ``body`` through the surface's stream and parse every event."""
    run_input = parse_run_input(body)
    view = await runs.start("calc", run_input.thread_id, run_input.prompt)
    surface = AGUISurface(runs)
    events = []
    async for sse in surface._stream(run_input, view.run_id):
        assert sse.id is None and sse.event is None
        events.append(parse(sse.data))
    check_order(events)
    return events


def _types(events: list[Any]) -> list[str]:
    return [event.type.value for event in events]


async def test_a_run_with_a_tool_call_is_a_well_formed_stream() -> None:
    model = ScriptedModel(
        [Reply(text="Let me add.", tool_calls=[("add", {"a": 1, "b": 2})]), "It is 3."]
    )
    async with open_local_runs([Calc], model=model) as runs:
        events = await _stream(runs, _input())
    assert _types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    started, finished = events[0], events[-1]
    assert (started.thread_id, started.run_id) == ("thread-1", "client-run-1")
    satsuma_run_id = started.metadata["satsuma"]["run_id"]
    assert (finished.thread_id, finished.run_id) == ("thread-1", "client-run-1")
    assert finished.result == {
        "run_id": satsuma_run_id,
        "status": "completed",
        "output": "It is 3.",
    }
    assert finished.outcome is None
    texts = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert texts == "Let me add.It is 3."
    call = next(e for e in events if e.type == EventType.TOOL_CALL_START)
    assert call.tool_call_name == "add"
    assert call.parent_message_id == events[2].message_id
    args = next(e for e in events if e.type == EventType.TOOL_CALL_ARGS)
    assert json.loads(args.delta) == {"a": 1, "b": 2}
    result = next(e for e in events if e.type == EventType.TOOL_CALL_RESULT)
    assert (result.tool_call_id, result.content) == (call.tool_call_id, "3")
    steps = [e.step_name for e in events if e.type == EventType.STEP_STARTED]
    assert steps == ["model_turn_1", f"tool_call_{call.tool_call_id}", "model_turn_2"]


async def test_only_the_new_user_message_reaches_the_agent() -> None:
    model = ScriptedModel(["Hello."])
    async with open_local_runs([Calc], model=model) as runs:
        await _stream(
            runs, _input([{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}])
        )
        (run,) = await runs.runs("calc", "thread-1")
    assert run.prompt == "hi there"
    # The model saw the server's history (none) and the new message, not the client's.
    (request,) = model.requests
    assert len(request.messages) == 1
    assert "an old question" not in json.dumps(attrs.asdict(request.messages[0]), default=str)


async def test_a_pause_for_approval_is_a_custom_event_then_run_finished() -> None:
    model = ScriptedModel([Reply(tool_calls=[("pay", {"amount": 5})])])
    async with open_local_runs([Calc], model=model) as runs:
        events = await _stream(runs, _input("pay 5"))
    custom, finished = events[-2], events[-1]
    assert custom.type == EventType.CUSTOM and custom.name == APPROVAL_EVENT
    (call,) = custom.value["pending"]
    assert call["tool"] == "pay" and call["input"] == {"amount": 5}
    assert call["reason"] == "pay requires approval"
    assert finished.type == EventType.RUN_FINISHED
    assert finished.result["status"] == "awaiting_approval"
    assert finished.result["pending"] == [call]
    assert finished.outcome.type == "interrupt"
    (interrupt,) = finished.outcome.interrupts
    assert interrupt.id == interrupt.tool_call_id == call["call_id"]
    # The call was started (its arguments shown) and left without a result.
    assert EventType.TOOL_CALL_START in [e.type for e in events]
    assert EventType.TOOL_CALL_RESULT not in [e.type for e in events]


async def test_a_failed_run_ends_with_run_error() -> None:
    model = ScriptedModel([ModelError("the model is down")])
    async with open_local_runs([Calc], model=model) as runs:
        events = await _stream(runs, _input())
    assert _types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1].code == "failed"
    assert "the model is down" in events[-1].message


def test_a_cancelled_run_finishes_with_the_cancelled_outcome() -> None:
    stream = AGUIStream("t", "r")
    out = stream.feed({"type": "TextDelta", "run_id": "x", "iteration": 1, "text": "Hal"})
    out += stream.feed(
        {"type": "RunEnd", "result": {"run_id": "x", "status": "cancelled", "output": "Hal"}}
    )
    events = [parse(stream.start("x"))] + [parse(e) for e in out]
    check_order(events)
    assert events[-1].outcome.type == "cancelled"
    assert stream.feed({"type": "TextDelta", "text": "late"}) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the body must be a RunAgentInput object"),
        ({"runId": "r", "messages": []}, "threadId must be a string"),
        ({"threadId": "a/b", "runId": "r", "messages": []}, "threadId must contain no '/'"),
        ({"threadId": "", "runId": "r", "messages": []}, "threadId must be 1 to 200"),
        ({"threadId": "t" * 201, "runId": "r", "messages": []}, "threadId must be 1 to 200"),
        ({"threadId": "t\n", "runId": "r", "messages": []}, "no control character"),
        ({"threadId": "t", "messages": []}, "runId must be a string"),
        ({"threadId": "t", "runId": "r", "messages": {}}, "messages must be a list"),
        ({"threadId": "t", "runId": "r", "messages": []}, "messages must end with the new user"),
        (
            {"threadId": "t", "runId": "r", "messages": [{"role": "tool", "content": "4"}]},
            "messages must end with the new user message",
        ),
        (
            {"threadId": "t", "runId": "r", "messages": [{"role": "user", "content": " "}]},
            "the user message is empty",
        ),
        (
            {"threadId": "t", "runId": "r", "messages": [{"role": "user", "content": 3}]},
            "must be a string or a list of text parts",
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"role": "user", "content": [{"type": "image"}]}],
            },
            "only text parts",
        ),
    ],
)
def test_a_bad_run_input_is_a_400_naming_the_problem(body: Any, message: str) -> None:
    with pytest.raises(HTTPError) as caught:
        parse_run_input(body)
    assert caught.value.status == 400
    assert message in caught.value.message


def test_a_good_run_input_is_read() -> None:
    assert parse_run_input(_input("hello")) == RunInput("thread-1", "client-run-1", "hello")


async def test_a_client_that_goes_away_cancels_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The model's delay passes on the virtual clock: the stream closes before it ends.
    model = ScriptedModel(["Still here."], delay=1.0)
    async with open_local_runs([Calc], model=model) as runs:
        run_input = parse_run_input(_input("go on"))
        view = await runs.start("calc", run_input.thread_id, run_input.prompt)
        stream = AGUISurface(runs)._stream(run_input, view.run_id)
        async with aclosing(stream):
            first = await anext(stream)
        assert parse(first.data).type == EventType.RUN_STARTED
        # The stream is closed; the run goes on to its end.
        ended = await runs.wait(view.run_id)
    assert ended.status == "completed" and ended.output == "Still here."


async def _events_of(answer: Any) -> list[Any]:
    events = [parse(sse.data) async for sse in answer.events]
    check_order(events)
    return events


async def test_resume_answers_the_interrupts_and_streams_the_rest_of_the_run() -> None:
    model = ScriptedModel([Reply(tool_calls=[("pay", {"amount": 5})]), "Paid 7."])
    async with open_local_runs([Calc], model=model) as runs:
        paused = await _stream(runs, _input("pay 5"))
        (interrupt,) = paused[-1].outcome.interrupts
        body = _input(
            "ignored",
            runId="client-run-2",
            resume=[
                {
                    "interruptId": interrupt.id,
                    "status": "resolved",
                    "payload": {"decision": "approve", "input": {"amount": 7}},
                }
            ],
        )
        run_input = parse_run_input(body)
        assert run_input.prompt is None
        surface = AGUISurface(runs)
        events = await _events_of(await surface._resume("calc", run_input, "ann"))
        # The resumed call shows again, with the model's arguments (as satsuma's
        # ToolCallStart carries them; the edit is the approval's).
        args = next(e for e in events if e.type == EventType.TOOL_CALL_ARGS)
        assert (args.tool_call_id, json.loads(args.delta)) == (interrupt.id, {"amount": 5})
        # The call gets its result; the run goes on to its end.
        result = next(e for e in events if e.type == EventType.TOOL_CALL_RESULT)
        assert (result.tool_call_id, result.content) == (interrupt.id, "paid")
        assert events[-1].type == EventType.RUN_FINISHED
        assert events[-1].run_id == "client-run-2"
        assert events[-1].result["output"] == "Paid 7."
        # Answering again is a conflict: nothing waits any more.
        with pytest.raises(HTTPError) as caught:
            await surface._resume("calc", run_input, "ann")
        assert caught.value.status == 409
    # The model saw the edited input run.
    assert "paid" in json.dumps([attrs.asdict(m) for m in model.requests[-1].messages], default=str)


async def test_a_cancelled_interrupt_denies_the_call() -> None:
    model = ScriptedModel([Reply(tool_calls=[("pay", {"amount": 5})]), "Not paid."])
    async with open_local_runs([Calc], model=model) as runs:
        paused = await _stream(runs, _input("pay 5"))
        (interrupt,) = paused[-1].outcome.interrupts
        body = _input(resume=[{"interruptId": interrupt.id, "status": "cancelled"}])
        answer = await AGUISurface(runs)._resume("calc", parse_run_input(body), None)
        events = await _events_of(answer)
        result = next(e for e in events if e.type == EventType.TOOL_CALL_RESULT)
        assert "Denied: the person dismissed the question" in result.content
        assert events[-1].result["output"] == "Not paid."


@pytest.mark.parametrize(
    ("resume", "message"),
    [
        ({}, "resume must be a list"),
        ([3], "resume[0] must be an object"),
        ([{"status": "resolved"}], "resume[0].interruptId must be the id"),
        ([{"interruptId": "c", "status": "done"}], "status must be 'resolved' or 'cancelled'"),
        ([{"interruptId": "c", "status": "resolved"}], "resume[0].payload must be an object"),
        (
            [{"interruptId": "c", "status": "resolved", "payload": {"decision": "maybe"}}],
            "decision must be 'approve' or 'deny'",
        ),
        (
            [
                {
                    "interruptId": "c",
                    "status": "resolved",
                    "payload": {"decision": "deny", "input": {}},
                }
            ],
            "only on an approval",
        ),
        (
            [
                {"interruptId": "c", "status": "cancelled"},
                {"interruptId": "c", "status": "cancelled"},
            ],
            "answers the call 'c' twice",
        ),
    ],
)
def test_a_bad_resume_is_a_400_naming_the_problem(resume: Any, message: str) -> None:
    with pytest.raises(HTTPError) as caught:
        parse_run_input({"threadId": "t", "runId": "r", "messages": [], "resume": resume})
    assert caught.value.status == 400
    assert message in caught.value.message


async def test_an_answer_to_no_waiting_call_is_a_409() -> None:
    async with open_local_runs([Calc], model=ScriptedModel([])) as runs:
        body = _input(resume=[{"interruptId": "nope", "status": "cancelled"}])
        with pytest.raises(HTTPError) as caught:
            await AGUISurface(runs)._resume("calc", parse_run_input(body), None)
    assert caught.value.status == 409
    assert "no call 'nope' waits for a decision" in caught.value.message


def test_a_resumed_call_started_in_an_earlier_stream_still_gets_its_result() -> None:
    stream = AGUIStream("t", "r", resumed=["call-1"])
    end = {"type": "ToolCallEnd", "tool_use_id": "call-1", "outcome": {"content": "ok"}}
    (result,) = [parse(e) for e in stream.feed(end)]
    assert (result.type, result.tool_call_id, result.content) == (
        EventType.TOOL_CALL_RESULT,
        "call-1",
        "ok",
    )
    assert stream.feed({**end, "tool_use_id": "call-2"}) == []


@attrs.frozen
class _Token(Principal):
    """A token's principal, deciding as the server's tokens do (admin aside)."""

    def allows(self, scope: Any, agent: str | None = None) -> bool:
        reaches = self.agents is None or agent is None or agent in self.agents
        return scope in self.scopes and reaches


@attrs.frozen(kw_only=True)
class _Request(Request):
    """A request as the server's app hands it over (body read, principal known)."""

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise HTTPError(400, "bad_request", "the body is not JSON") from None

    def require(self, scope: Any, agent: str | None = None) -> None:
        if not self.principal.allows(scope, agent):
            raise HTTPError(403, "forbidden", f"this token lacks the {scope} scope")


def _request(path: str, body: Any, *, method: str = "POST", scopes: Any = ("run",)) -> Request:
    return _Request(
        method=method,
        path=path,
        query={},
        headers={"content-type": "application/json"},
        body=json.dumps(body).encode(),
        principal=_Token("ops", frozenset(scopes)),
    )


async def test_handle_routes_checks_scopes_and_streams() -> None:
    async with open_local_runs([Calc], model=ScriptedModel(["Hi.", "Paid."])) as runs:
        surface = AGUISurface(runs)
        assert surface.prefix == "/ag-ui/"
        for request, status in [
            (_request("/ag-ui/nobody", _input()), 404),
            (_request("/ag-ui/calc/more", _input()), 404),
            (_request("/ag-ui/", _input()), 404),
            (_request("/ag-ui/calc", _input(), method="GET"), 405),
            (_request("/ag-ui/calc", _input(), scopes=("read",)), 403),
            (_request("/ag-ui/calc", {"threadId": "t"}), 400),
            (
                _request(
                    "/ag-ui/calc",
                    _input(resume=[{"interruptId": "c", "status": "cancelled"}]),
                ),
                403,  # answering interrupts needs approve too
            ),
        ]:
            with pytest.raises(HTTPError) as caught:
                await surface.handle(request)
            assert caught.value.status == status, request.path
        assert await runs.runs() == []

        answer = await surface.handle(_request("/ag-ui/calc", _input("hello")))
        assert isinstance(answer, SSEAnswer) and answer.status == 200
        events = await _events_of(answer)
        assert events[-1].result["output"] == "Hi."


@attrs.frozen
class Invoice:
    number: str
    total: int


class Billing(satsuma.Agent[Invoice]):
    name = "billing"


async def test_a_typed_output_is_the_result_as_json() -> None:
    answer = Reply(
        text="Here it is.", tool_calls=[("final_answer", {"number": "F-1", "total": 12})]
    )
    async with open_local_runs([Billing], model=ScriptedModel([answer])) as runs:
        run_input = parse_run_input(_input("the invoice"))
        view = await runs.start("billing", run_input.thread_id, run_input.prompt)
        events = [
            parse(sse.data) async for sse in AGUISurface(runs)._stream(run_input, view.run_id)
        ]
    check_order(events)
    # The answer is the result, not a tool call of its own.
    assert EventType.TOOL_CALL_START not in {e.type for e in events}
    assert events[-1].result["output"] == {"number": "F-1", "total": 12}


async def test_thinking_is_a_reasoning_message_before_the_text() -> None:
    model = ScriptedModel([Reply(thinking="Two and two.", text="Four.")])
    async with open_local_runs([Calc], model=model) as runs:
        events = await _stream(runs, _input("2+2?"))
    assert _types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert events[4].delta == "Two and two."


async def test_a_pause_is_answered_after_a_restart_one_call_at_a_time(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    two = Reply(tool_calls=[("pay", {"amount": 5}), ("pay", {"amount": 6})])
    async with (
        SQLiteStore(db) as store,
        open_local_runs([Calc], store=store, model=ScriptedModel([two])) as runs,
    ):
        paused = await _stream(runs, _input("pay twice"))
    first, second = (i.id for i in paused[-1].outcome.interrupts)
    async with (
        SQLiteStore(db) as store,
        open_local_runs([Calc], store=store, model=ScriptedModel(["Both paid."])) as runs,
    ):
        surface = AGUISurface(runs)

        def resume(call_id: str) -> RunInput:
            entry = {
                "interruptId": call_id,
                "status": "resolved",
                "payload": {"decision": "approve"},
            }
            return parse_run_input(_input(resume=[entry]))

        # One answer of two: the run still waits, for the other call only.
        waiting = await _events_of(await surface._resume("calc", resume(first), "ann"))
        assert _types(waiting) == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"]
        assert [i.id for i in waiting[-1].outcome.interrupts] == [second]
        # The second answer resumes it, in a server that never saw it start.
        done = await _events_of(await surface._resume("calc", resume(second), "ann"))
        assert done[-1].result["output"] == "Both paid."
        results = [e.content for e in done if e.type == EventType.TOOL_CALL_RESULT]
        assert results == ["paid", "paid"]
