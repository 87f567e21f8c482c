"""Whole agent runs against hostile tools and a hostile model, over the wire: the real
AsyncAnthropic client against the loopback MessagesServer (raw SSE), real SQLite files.

Whatever arrives — non-finite numbers and deep nesting in a tool's streamed input, a
response with duplicate tool_use ids or no content, a tool that raises a BaseException,
a run cancelled while calls finish — every call gets one result, the conversation stays
valid and sendable, later requests still serialise, and the agent goes on serving."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import AnthropicModel
from satsuma.store import SQLiteStore
from satsuma.testing import (
    MessagesServer,
    Reply,
    ScriptedModel,
    check_conversation,
    tool_call,
)

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@satsuma.tool
async def pay(amount: float, note: str = "") -> str:
    """Pay an amount.

    Args:
        amount: How much.
        note: What for.
    """
    ran.append(f"pay {amount}")
    return f"paid {amount}"


@satsuma.tool
def legacy(task: str) -> str:
    """Run a legacy job in a thread (it uses asyncio inside).

    Args:
        task: What to do.
    """

    async def inner() -> str:
        raise asyncio.CancelledError

    return asyncio.run(inner())


class Payer(satsuma.Agent):
    name = "payer"
    tools = [pay, legacy]


def wire(server: MessagesServer, *, stream: bool = True) -> AnthropicModel:
    return AnthropicModel(
        server.client(), backoff_base=0.001, backoff_cap=0.01, jitter=False, stream=stream
    )


def _deep_text(depth: int) -> str:
    return '{"amount": 1, "note": ' + "[" * depth + "]" * depth + "}"


HOSTILE_INPUTS = [
    ("nan", '{"amount": NaN}', "expected amount to be a finite number, got: NaN"),
    ("infinity", '{"amount": Infinity}', "expected amount to be a finite number, got: Infinity"),
    ("overflow", '{"amount": 1e999}', "expected amount to be a finite number, got: Infinity"),
    ("nested", '{"amount": 1, "note": [[[-Infinity]]]}', "note[0][0][0] to be a finite number"),
    ("deep-200", _deep_text(200), "levels deep"),
]


@pytest.mark.parametrize(
    ("raw", "expected", "stream"),
    [
        *(
            pytest.param(raw, text, stream, id=f"{name}-{mode}")
            for name, raw, text in HOSTILE_INPUTS
            for stream, mode in ((True, "sse"), (False, "whole"))
        ),
        # Deeper than json itself can read: only a stream carries it (as text), since the
        # whole-message server cannot even build such a body.
        pytest.param(_deep_text(5_000), "levels deep", True, id="deep-5000-sse"),
    ],
)
async def test_hostile_tool_input_over_the_wire_fails_that_call_and_nothing_is_poisoned(
    tmp_path: Path, raw: str, expected: str, stream: bool
) -> None:
    script: list[Reply | str] = [
        Reply(tool_calls=[("pay", raw), ("pay", {"amount": 2})]),
        "Paid 2; the other amount was refused.",
        "Still fine.",
    ]
    async with (
        MessagesServer(script) as server,
        SQLiteStore(tmp_path / "agents.db") as store,
        satsuma.open_agent(
            Payer, model=wire(server, stream=stream), store=store, agent_id="a"
        ) as agent,
    ):
        first = await agent.run("pay both")
        second = await agent.run("again?")
        history = agent.history
        requests = list(server.requests)
    assert first.status == "completed" and second.status == "completed"
    assert ran == ["pay 2"]
    refused, paid = history[2].tool_results
    assert refused["is_error"] and "Invalid arguments" in refused["content"]
    assert expected in refused["content"]
    assert paid == {**paid, "content": "paid 2", "is_error": False}
    check_conversation(history)
    # The poisoned input never entered the history: every message sends as strict JSON,
    # and the requests after it went out (the server got them).
    json.dumps([m.content for m in history], allow_nan=False)
    assert len(requests) == 3
    async with SQLiteStore(tmp_path / "agents.db") as reopened:
        stored = await reopened.load_messages("a")
    json.dumps([m.content for m in stored], allow_nan=False)


async def test_two_calls_sharing_an_id_in_one_response_each_run_under_an_id_of_their_own() -> None:
    # The stream gives two tool_use blocks (two calls) one id: the first keeps it, the
    # second gets its own (see tests/store/test_reused_ids.py for the whole class).
    twice = Reply(tool_calls=[tool_call("pay", {"amount": 1}, id="toolu_same")] * 2)
    events: list[Any] = []
    async with (
        MessagesServer([twice, "Done."]) as server,
        satsuma.open_agent(Payer, model=wire(server)) as agent,
    ):
        result = await agent.run("pay twice", events=events.append)
        history = agent.history
    assert result.status == "completed"
    assert ran == ["pay 1", "pay 1"]
    assert not [e for e in events if isinstance(e, satsuma.ModelRetry)]
    first, second = (block["id"] for block in history[1].tool_uses)
    assert first == "toolu_same" and second.startswith("toolu_same_")
    check_conversation(history)


async def test_two_calls_sharing_an_id_from_a_model_that_does_not_retry_both_run() -> None:
    twice = Reply(tool_calls=[tool_call("pay", {"amount": 1}, id="toolu_same")] * 2)
    async with satsuma.open_agent(Payer, model=ScriptedModel([twice, "next"])) as agent:
        result = await agent.run("pay")
        history = agent.history
    assert result.status == "completed"
    assert ran == ["pay 1", "pay 1"]
    check_conversation(history)


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "whole"])
async def test_an_empty_response_ends_the_turn_without_gluing_the_next_prompt(
    stream: bool,
) -> None:
    script: list[Reply | str] = [Reply(), "Second answer."]
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(Payer, model=wire(server, stream=stream)) as agent,
    ):
        first = await agent.run("first question")
        second = await agent.run("second question")
        history = agent.history
        last_request = server.requests[-1]
    assert first.status == "completed" and first.output == ""
    assert second.output == "Second answer."
    check_conversation(history)
    # (Without the cache breakpoint the end of the previous turn carries.)
    sent = [
        [{k: v for k, v in block.items() if k != "cache_control"} for block in m["content"]]
        for m in last_request["messages"]
        if m["role"] == "user"
    ]
    assert sent == [
        [{"type": "text", "text": "first question"}],
        [{"type": "text", "text": "second question"}],
    ]


async def test_a_paused_turn_is_continued_in_one_assistant_message() -> None:
    script: list[Reply | str] = [
        Reply(text="Searching the web...", stop_reason="pause_turn"),
        Reply(text=" Found it.", tool_calls=[("pay", {"amount": 3})]),
        "Paid 3.",
    ]
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(Payer, model=wire(server)) as agent,
    ):
        result = await agent.run("find and pay")
        history = agent.history
        continued = server.requests[1]["messages"][-1]
    assert result.status == "completed"
    assert continued["role"] == "assistant"  # the paused turn went back as it was
    check_conversation(history)
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[1].text == "Searching the web... Found it."


async def test_an_asyncio_cancelled_error_in_a_sync_tool_is_a_crash_and_spares_bystanders() -> None:
    script: list[Reply | str] = [
        Reply(tool_calls=[("legacy", {"task": "x"}), ("pay", {"amount": 4})]),
        "ok",
    ]
    async with satsuma.Supervisor() as sup:
        bystander = await sup.start_child(
            Payer, id="bystander", model=ScriptedModel(["I am fine."])
        )
        victim = await sup.start_child(Payer, id="victim", model=ScriptedModel(script))
        result = await victim.run("go")
        assert (await bystander.run("hello")).output == "I am fine."
        history = victim.history
        states = {entry.id: entry.state for entry in sup.which_children()}
    assert result.status == "completed"
    crash, paid = history[2].tool_results
    assert crash["content"] == "Error: Tool crashed: CancelledError"
    assert paid["content"] == "paid 4.0" or paid["content"] == "paid 4"
    assert set(states.values()) == {"running"}


@pytest.mark.parametrize("stored", [True, False], ids=["with a store", "without a store"])
async def test_a_cancelled_run_keeps_the_outcomes_of_calls_that_finished(
    tmp_path: Path, stored: bool
) -> None:
    sent, reporting = trio.Event(), trio.Event()

    @satsuma.tool
    async def send_email(to: str) -> str:
        """Send an e-mail.

        Args:
            to: Whom to.
        """
        sent.set()
        return f"sent to {to}"

    @satsuma.tool
    async def slow_report(name: str) -> str:
        """Build a report slowly.

        Args:
            name: Which.
        """
        reporting.set()
        await trio.sleep_forever()
        return "report"

    class Mailer(satsuma.Agent):
        name = "mailer"
        tools = [send_email, slow_report]

    script: list[Reply | str] = [
        Reply(tool_calls=[("send_email", {"to": "bob"}), ("slow_report", {"name": "q3"})])
    ]
    events: list[Any] = []
    results: list[satsuma.RunResult] = []
    async with (
        SQLiteStore(tmp_path / "m.db") as store,
        satsuma.open_agent(
            Mailer, model=ScriptedModel(script), store=store if stored else None, agent_id="m"
        ) as agent,
    ):

        async def run() -> None:
            results.append(await agent.run("mail bob and report", events=events.append))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await sent.wait()
            await reporting.wait()
            await agent.cancel()
        history = agent.history
        journal = {e.tool_use_id: e for e in await store.calls(results[0].run_id)}
    assert results[0].status == "cancelled"
    check_conversation(history)
    email, report = history[-1].tool_results
    # The e-mail went out: the model must read that, or it would send it again.
    assert email["content"] == "sent to bob" and not email["is_error"]
    assert report["content"] == "Error: Cancelled: the run was cancelled before this tool finished."
    # The journal agrees with the history, call by call.
    assert {key: (e.content, e.finished) for key, e in journal.items()} == (
        {
            email["tool_use_id"]: ("sent to bob", True),
            report["tool_use_id"]: (report["content"], True),
        }
        if stored
        else {}
    )
    starts = [e.tool_use_id for e in events if isinstance(e, satsuma.ToolCallStart)]
    ends = [e.tool_use_id for e in events if isinstance(e, satsuma.ToolCallEnd)]
    assert sorted(starts) == sorted(ends) and len(ends) == 2


async def _raw_sse_server(
    bodies: list[bytes], task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Answer each request with the next raw SSE body, byte for byte as given: events the
    MessagesServer could not even build (json.dumps would recurse)."""

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            while bodies:
                received = b""
                while b"\r\n\r\n" not in received:
                    chunk = await stream.receive_some()
                    if not chunk:
                        return
                    received += chunk
                head, _, body = received.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(body) < length:
                    body += await stream.receive_some()
                payload = bodies.pop(0)
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + f"content-length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


def _sse_body(events: list[str]) -> bytes:
    return "".join(f"data: {event}\n\n" for event in events).encode()


def _text_reply_events(text: str) -> list[str]:
    from satsuma.models import _codec

    return [
        json.dumps(event)
        for event in _codec.stream_events(
            id="msg_ok",
            model="m",
            content=[{"type": "text", "text": text}],
            stop_reason="end_turn",
            usage={"input_tokens": 1, "output_tokens": 1},
        )
    ]


@pytest.mark.parametrize("depth", [500, 100_000])
async def test_a_stream_event_nested_too_deep_is_a_malformed_response_not_a_crash(
    depth: int,
) -> None:
    import anthropic

    deep_input = '{"amount": 1, "note": ' + "[" * depth + "]" * depth + "}"
    start = json.dumps(
        {"type": "message_start", "message": {"id": "m1", "model": "m", "usage": {}}}
    )
    block = (
        '{"type": "content_block_start", "index": 0, "content_block": '
        '{"type": "tool_use", "id": "toolu_deep", "name": "pay", "input": ' + deep_input + "}}"
    )
    deep_turn = [
        start,
        block,
        '{"type": "content_block_stop", "index": 0}',
        '{"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}',
        '{"type": "message_stop"}',
    ]
    bodies = [_sse_body(deep_turn), _sse_body(_text_reply_events("Done."))]
    if depth < 1000:
        bodies.append(_sse_body(_text_reply_events("And again.")))
    events: list[Any] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_raw_sse_server, bodies)
        client = anthropic.AsyncAnthropic(api_key="test", base_url=f"http://127.0.0.1:{port}")
        model = AnthropicModel(client, backoff_base=0.001, backoff_cap=0.01, jitter=False)
        async with satsuma.open_agent(Payer, model=model) as agent:
            result = await agent.run("pay", events=events.append)
            history = agent.history
        await client.close()
        nursery.cancel_scope.cancel()
    assert result.status == "completed"
    assert ran == []
    check_conversation(history)
    json.dumps([m.content for m in history], allow_nan=False)
    retries = [e.reason for e in events if isinstance(e, satsuma.ModelRetry)]
    if depth < 1000:
        # Readable: the call is refused by itself and the agent goes on.
        assert retries == []
        assert "levels deep" in history[2].tool_results[0]["content"]
    else:
        # Past what json can read: the response is malformed and retried.
        assert retries == ["malformed response: it is nested too deeply to read"]


class _ArrayLike:
    def __eq__(self, other: object) -> Any:
        return _ArrayLike()

    def __bool__(self) -> bool:
        raise ValueError("ambiguous")

    __hash__ = object.__hash__


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def _returning(value: Any) -> Any:
    def run(kind: str) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value

    return run


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (b"\x89PNG", "Error: Invalid tool result: content must be a str or a list of content"),
        (("ok", [{"type": "text", "text": "x", "score": float("nan")}]), "got: NaN"),
        (("ok", [{"type": "text", "text": "x", "when": object()}]), "which JSON cannot hold"),
        ((_ArrayLike(), "x"), "Error: Invalid tool result: expected"),
        (_Unprintable(), "Error: Tool crashed: _Unprintable (its message could not be read)"),
        (GeneratorExit(), "Error: Tool crashed: GeneratorExit"),
    ],
    ids=[
        "bytes",
        "nan-in-block",
        "object-in-block",
        "array-like-tag",
        "unprintable",
        "generator-exit",
    ],
)
async def test_a_tool_result_or_crash_that_cannot_travel_is_answered_and_the_run_goes_on(
    tmp_path: Path, behaviour: Any, expected: str
) -> None:
    class Odd(satsuma.Tool):
        name = "odd"
        description = "Return or raise something hostile"
        parameters = {"kind": {"type": "string"}}

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return _returning(behaviour)("x")

    class Withholder(satsuma.ToolHook):
        def after_call(self, call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> Any:
            if call.name == "pay":
                raise RuntimeError("audit log down")
            return None

    class OddAgent(satsuma.Agent):
        name = "odd_agent"
        tools = [Odd, pay]
        hooks = [Withholder()]

    script: list[Reply | str] = [
        Reply(tool_calls=[("odd", {}), ("pay", {"amount": 5})]),
        "Noted.",
        "Still here.",
    ]
    async with (
        MessagesServer(script) as server,
        SQLiteStore(tmp_path / "o.db") as store,
        satsuma.open_agent(OddAgent, model=wire(server), store=store, agent_id="o") as agent,
    ):
        first = await agent.run("go")
        second = await agent.run("and now?")
        history = agent.history
    assert (first.status, second.status) == ("completed", "completed")
    odd, paid = history[2].tool_results
    assert odd["is_error"] and expected in odd["content"]
    # The payment happened; the model must read that, even with its result withheld.
    assert ran == ["pay 5.0"] or ran == ["pay 5"]
    assert paid["content"].startswith("Error: Denied: pay ran, but its result was withheld")
    check_conversation(history)
    json.dumps([m.content for m in history], allow_nan=False)


class _LenRaises(str):
    def __len__(self) -> int:
        raise ZeroDivisionError


class _EndlessList(list[Any]):
    def __iter__(self) -> Any:
        return itertools.count()

    def __len__(self) -> int:
        return 2**62


class _TupleGetitemRaises(tuple[Any, ...]):
    def __getitem__(self, index: Any) -> Any:
        raise RuntimeError("no")


class _DictItemsRaise(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("no")

    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("no")


class _ClassRaises:
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("no __class__")


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (_LenRaises("done"), "done"),
        (
            ("ok", _EndlessList([{"type": "text", "text": "listed"}])),
            [{"type": "text", "text": "listed"}],
        ),
        (_TupleGetitemRaises(("ok", "tupled")), "tupled"),
        (
            ("ok", [_DictItemsRaise(type="text", text="blocked")]),
            [{"type": "text", "text": "blocked"}],
        ),
        (
            ("ok", [{"type": "text", "text": "x", "odd": _ClassRaises()}]),
            "Error: Invalid tool result",
        ),
        ((_LenRaises("error"), _LenRaises("refused")), "Error: refused"),
    ],
    ids=[
        "str-len-raises",
        "endless-list",
        "tuple-getitem",
        "dict-items",
        "class-raises",
        "error-tuple",
    ],
)
async def test_a_hostile_result_in_an_agent_spares_its_sibling_and_the_agent_serves_on(
    tmp_path: Path, result: Any, expected: Any
) -> None:
    """Issue 29, item 4: the agent used to crash (AgentCrashed: RuntimeError) and lose
    the sibling's outcome."""

    @satsuma.tool
    async def odd() -> Any:
        """Return something hostile."""
        return result

    class OddAgent(satsuma.Agent):
        name = "odd_agent"
        tools = [odd, pay]

    events: list[Any] = []
    script: list[Reply | str] = [
        Reply(tool_calls=[("odd", {}), ("pay", {"amount": 5})]),
        "Noted.",
        "Still here.",
    ]
    async with (
        MessagesServer(script) as server,
        SQLiteStore(tmp_path / "o.db") as store,
        satsuma.open_agent(OddAgent, model=wire(server), store=store, agent_id="o") as agent,
    ):
        async for event in agent.stream("go"):
            events.append(event)
        second = await agent.run("and now?")
        history = agent.history
        journal = await store.calls(second.run_id) + await store.calls(
            next(e.run_id for e in events if hasattr(e, "run_id"))
        )
    assert second.status == "completed"
    outcome, paid = history[2].tool_results
    if isinstance(expected, str) and expected.startswith("Error"):
        assert outcome["is_error"] and outcome["content"].startswith(expected)
    else:
        assert outcome["content"] == expected and not outcome["is_error"]
    assert type(outcome["content"]) in (str, list)
    assert paid["content"] == "paid 5" or paid["content"] == "paid 5.0"
    check_conversation(history)
    json.dumps([m.content for m in history], allow_nan=False)
    assert [entry.tool_name for entry in journal] == ["odd", "pay"]
    json.dumps([entry.content for entry in journal], allow_nan=False)
