"""Lone surrogates from every source of text (issue 29, item 4's class).

A Python str may hold U+D800..U+DFFF unpaired, which no UTF-8 encoder, HTTP request nor
PostgreSQL jsonb accepts. One in a tool's result used to crash the agent when the next
request was encoded. Here every source sends one at once, over the wire (the real
AsyncAnthropic client against MessagesServer, whose JSON carries ``\\ud800`` escapes as
a hostile provider's would), on every store: the runs complete, the agent serves the
next run, and what the history and the store hold is valid Unicode with U+FFFD where
each lone surrogate was (a surrogate pair, as two code points, is joined).
"""

from __future__ import annotations

import json
from typing import Any

import satsuma
from satsuma import (
    ApprovalDecided,
    Approve,
    Deny,
    ModelListener,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    PendingCall,
    ToolCall,
    ToolContext,
    ToolError,
    ToolResult,
)
from satsuma.store import Store
from satsuma.testing import Failure, MessagesServer, Reply, check_conversation, tool_call

BAD = "\ud800"
PAIR = "\ud83d\ude00"  # two code points that stand for one character, 😀


@satsuma.tool
async def echo(text: str) -> str:
    """Say text back, with a lone surrogate of its own.

    Args:
        text: What to say.
    """
    return f"{text}|{BAD}|{PAIR}"


class Blocks(satsuma.Tool):
    name = "blocks"
    description = "Text blocks and details with lone surrogates."
    parameters: dict[str, Any] = {}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ctx.progress(f"progress {BAD}")
        ctx.update(f"partial {BAD}", details={f"k{BAD}": f"v{BAD}"})
        return ToolResult([{"type": "text", "text": f"block {BAD}"}], details={f"d{BAD}": 1})


@satsuma.tool
async def refuse() -> str:
    """Raise a ToolError whose reason holds a lone surrogate."""
    raise ToolError(f"no {BAD}")


@satsuma.tool
async def crash() -> str:
    """Raise an exception whose message holds a lone surrogate."""
    raise RuntimeError(f"boom {BAD}")


class Surrogates(satsuma.Agent):
    name = "surrogates"
    tools = [echo, Blocks, refuse, crash]


def _valid(value: Any) -> None:
    """Encodes as UTF-8 JSON, as a request or a jsonb column needs."""
    json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")


async def test_every_source_of_a_lone_surrogate_is_replaced_and_the_agent_serves_on(
    store: Store,
) -> None:
    script = [
        Reply(
            text=f"thinking {BAD}",
            tool_calls=[
                # Raw JSON text: the escapes go over the wire as a hostile provider's would.
                tool_call("echo", '{"text": "in \\ud800", "extra\\udc00": 1}'),
                tool_call("blocks", {}),
                tool_call("refuse", {}),
                tool_call("crash", {}),
            ],
        ),
        Reply(text=f"done {BAD}"),
        Reply(text="second run done"),
    ]
    events: list[Any] = []
    async with MessagesServer(script) as server:
        model = satsuma.AnthropicModel(server.client(), backoff_base=0.001, jitter=False)
        async with satsuma.open_agent(Surrogates, model=model, store=store, agent_id="s") as agent:
            first = await agent.run(f"go {BAD}", events=events.append)
            second = await agent.run(f"again {PAIR}")
            history = agent.history
    assert first.status == "completed", first.error
    assert first.output == "done \ufffd"
    assert second.status == "completed", second.error
    assert second.output == "second run done"
    stored = await store.load_messages("s")
    assert list(stored) == list(history)
    check_conversation(stored)
    text = json.dumps([message.content for message in stored], ensure_ascii=False)
    text.encode("utf-8")  # nothing unencodable is left
    for expected in (
        "go \ufffd",
        "thinking \ufffd",
        "in \ufffd|\ufffd|\U0001f600",
        "block \ufffd",
        "Error: no \ufffd",
        "Error: Tool crashed: RuntimeError: boom \ufffd",
        "again \U0001f600",
    ):
        assert expected in text, expected
    for event in events:
        _valid(repr(event))
    records = await store.runs("s")
    assert [record.status for record in records] == ["completed", "completed"]
    assert records[0].prompt == "go \ufffd"
    journal = await store.calls(records[0].run_id)
    assert len(journal) == 4
    for entry in journal:
        _valid(repr(entry))


@satsuma.tool(requires_approval=True)
async def send(to: str) -> str:
    """Send something; a person approves it.

    Args:
        to: Whom to.
    """
    return f"sent to {to}"


class DenyBlocks(satsuma.ToolHook):
    def before_call(self, call: ToolCall, ctx: ToolContext) -> Deny | None:
        return Deny(f"not now {BAD}") if call.name == "blocks" else None


class Custom(satsuma.Agent):
    name = "custom"
    tools = [echo, Blocks, send]
    hooks = [DenyBlocks()]


class SurrogateModel:
    """A Model of the user's own that returns lone surrogates everywhere it can: text, a
    tool_use's id, its input's keys and values (no wire: no JSON decoder in between)."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        # What the SDK would send: every request must encode as UTF-8 JSON.
        json.dumps([m.content for m in request.messages], ensure_ascii=False).encode("utf-8")
        self.requests.append(request)
        if len(self.requests) == 1:
            calls = (
                ToolCall(f"id{BAD}", "echo", {f"text{BAD}": 1, "text": f"v{BAD}"}),
                ToolCall("b", "blocks", {}),
                ToolCall("c", "send", {"to": "bob"}),
            )
            content = (
                {"type": "text", "text": f"text {BAD}"},
                *(
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input}
                    for c in calls
                ),
            )
            return ModelResponse(content=content, calls=calls, stop_reason="tool_use")
        return ModelResponse(
            content=({"type": "text", "text": f"ok {BAD}"},), stop_reason="end_turn"
        )


async def edit_with_a_surrogate(call: PendingCall) -> Approve:
    return Approve(input={"to": f"eve{BAD}"}, by=f"ann{BAD}")


async def test_a_custom_model_hooks_approvers_and_steering_with_lone_surrogates(
    store: Store,
) -> None:
    model = SurrogateModel()
    events: list[Any] = []
    async with satsuma.open_agent(
        Custom, model=model, store=store, agent_id="c", approver=edit_with_a_surrogate
    ) as agent:
        await agent.steer(f"steered {BAD}")
        first = await agent.run(f"go {BAD}", events=events.append)
        second = await agent.run("again")
    assert first.status == "completed", first.error
    assert first.output == "ok \ufffd"
    assert second.status == "completed", second.error
    stored = await store.load_messages("c")
    check_conversation(stored)
    text = json.dumps([message.content for message in stored], ensure_ascii=False)
    text.encode("utf-8")
    for expected in (
        "steered \ufffd",
        "go \ufffd",
        "text \ufffd",
        "v\ufffd|\ufffd|\U0001f600",
        "Error: Denied: not now \ufffd",
        "sent to eve\ufffd",
    ):
        assert expected in text, expected
    decided = [event for event in events if isinstance(event, ApprovalDecided)]
    assert [event.decided_by for event in decided] == ["ann\ufffd"]


async def test_a_provider_error_with_a_lone_surrogate_is_a_retry_or_a_failed_run(
    store: Store,
) -> None:
    """The API's error body is JSON: its message can decode to a lone surrogate, which
    reaches a retry's reason, the run's error and the store's run record."""
    script: list[Any] = [
        Failure(kind="status", status=529, message=f"overloaded {BAD}"),
        Reply(text="after the retry"),
        Failure.bad_request(f"refused {BAD}"),
        Reply(text="the next run"),
    ]
    events: list[Any] = []
    async with MessagesServer(script) as server:
        model = satsuma.AnthropicModel(server.client(), backoff_base=0.001, jitter=False)
        async with satsuma.open_agent(Surrogates, model=model, store=store, agent_id="p") as agent:
            retried = await agent.run("go", events=events.append)
            refused = await agent.run("again")
            served = await agent.run("once more")
    assert retried.status == "completed", retried.error
    (retry,) = [event for event in events if isinstance(event, ModelRetry)]
    assert "overloaded \ufffd" in retry.reason
    assert refused.status == "failed"
    assert refused.error is not None and "refused \ufffd" in refused.error
    assert served.status == "completed", served.error
    records = await store.runs("p")
    assert [record.status for record in records] == ["completed", "failed", "completed"]
    assert records[1].error == refused.error
