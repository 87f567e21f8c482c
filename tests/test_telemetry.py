"""OpenTelemetry spans: invoke_agent per run, chat per model call, execute_tool per tool
call, with the GenAI conventions' attributes, parented as a trace viewer shows them.

The global TracerProvider can be set only once per process: the ``spans`` fixture sets
an SDK provider with an in-memory exporter for this module (or adds its processor to the
SDK provider already set), and each test clears the exporter; a switch in front of the
exporter keeps other tests' spans out of it.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

import satsuma
from satsuma import ModelError, ModelListener, ModelRequest, ModelResponse, ToolRunner, _telemetry
from satsuma.testing import Failure, MessagesServer, Reply, ScriptedModel


class _Switch(SpanProcessor):
    """Exports only while on: the provider stays set for the rest of the session."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.on = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.inner.on_end(span)


_EXPORTER = InMemorySpanExporter()
_SWITCH = _Switch(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture(scope="module")
def _provider() -> Iterator[TracerProvider]:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        # Set earlier in this process (docs/observability.md's example does): join it.
        current.add_span_processor(_SWITCH)
        yield current
        return
    provider = TracerProvider()
    provider.add_span_processor(_SWITCH)
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "a provider of another kind was set"
    yield provider
    # Unset again, as OpenTelemetry's own test utilities (reset_trace_globals) do, so
    # that the tests after these run as an application without a provider would, and a
    # later test (a docs example) may set its own.
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def spans(_provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    _SWITCH.on = True
    try:
        yield _EXPORTER
    finally:
        _SWITCH.on = False
        _EXPORTER.clear()


def by_name(finished: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in finished if span.name.startswith(prefix)]


def only(finished: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in finished if span.name == name]
    assert len(found) == 1, [span.name for span in finished]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --- tools and agents -----------------------------------------------------------------


@satsuma.tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    await trio.sleep(1)
    return str(a + b)


@satsuma.tool
async def explode() -> str:
    """Always crashes."""
    raise RuntimeError("kaboom")


@satsuma.tool(timeout=5)
async def hang() -> str:
    """Never answers."""
    await trio.sleep_forever()
    return "never"


@satsuma.tool
def traced_in_a_thread() -> str:
    """A sync tool (a worker thread) that makes a span of its own."""
    with trace.get_tracer("user-code").start_as_current_span("inside the thread"):
        return "done"


class Calculator(satsuma.Agent):
    name = "calculator"
    model = "claude-sonnet-5-5"
    tools = [add, explode, hang]
    system = "You add."
    max_tokens = 1000


def three_calls() -> Reply:
    return Reply(
        text="Trying three things.",
        tool_calls=[("add", {"a": 2, "b": 3}), ("explode", {}), ("hang", {})],
    )


# --- an agent's run -------------------------------------------------------------------


async def test_a_run_is_one_invoke_agent_span_with_chat_and_tool_children(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel([three_calls(), "2 + 3 = 5; the others failed."])
    user_tracer = trace.get_tracer("user-code")
    async with satsuma.open_agent(Calculator, model=model, agent_id="calc-1") as agent:
        # The caller's span is the run's parent, although the run happens in the
        # agent's own task.
        with user_tracer.start_as_current_span("handle request") as request_span:
            result = await agent.run("What is 2 + 3?")
    assert result.status == "completed"
    finished = spans.get_finished_spans()
    assert sorted(span.name for span in finished) == [
        "chat claude-sonnet-5-5",
        "chat claude-sonnet-5-5",
        "execute_tool add",
        "execute_tool explode",
        "execute_tool hang",
        "handle request",
        "invoke_agent calculator",
    ]
    run = only(finished, "invoke_agent calculator")
    assert parent_of(run) == request_span.get_span_context().span_id
    assert run.kind is SpanKind.INTERNAL
    assert run.status.status_code is StatusCode.UNSET
    assert attributes(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.agent.name": "calculator",
        "gen_ai.request.model": "claude-sonnet-5-5",
        "gen_ai.conversation.id": "calc-1",
        "satsuma.run_id": result.run_id,
        "satsuma.run.status": "completed",
        "satsuma.run.iterations": 2,
        "gen_ai.usage.input_tokens": result.usage.total_input_tokens,
        "gen_ai.usage.output_tokens": result.usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "gen_ai.usage.cache_creation.input_tokens": 0,
    }
    assert result.usage.output_tokens > 0

    chats = by_name(finished, "chat ")
    assert [parent_of(chat) for chat in chats] == [span_id(run)] * 2
    first = chats[0]
    assert first.kind is SpanKind.CLIENT
    assert first.status.status_code is StatusCode.UNSET
    first_attributes = attributes(first)
    assert first_attributes["gen_ai.operation.name"] == "chat"
    assert first_attributes["gen_ai.provider.name"] == "anthropic"
    assert first_attributes["gen_ai.request.model"] == "claude-sonnet-5-5"
    assert first_attributes["gen_ai.request.max_tokens"] == 1000
    assert first_attributes["gen_ai.response.model"] == "claude-sonnet-5-5"
    assert first_attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert "gen_ai.response.id" not in first_attributes  # a scripted model has none
    # ... nor prices: its cost is unknown, left out rather than 0.
    assert "satsuma.cost_usd" not in first_attributes
    assert attributes(chats[1])["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert sum(attributes(chat)["gen_ai.usage.output_tokens"] for chat in chats) == (
        result.usage.output_tokens
    )

    tools = {span.name: span for span in by_name(finished, "execute_tool ")}
    assert {parent_of(span) for span in tools.values()} == {span_id(run)}
    calls = {block["name"]: block["id"] for block in result.messages[1].content[1:]}
    ok = tools["execute_tool add"]
    assert ok.kind is SpanKind.INTERNAL
    assert ok.status.status_code is StatusCode.UNSET
    assert attributes(ok) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": calls["add"],
        "satsuma.tool.outcome": "ok",
        "satsuma.tool.duration": 1.0,
    }
    crashed = tools["execute_tool explode"]
    assert crashed.status.status_code is StatusCode.ERROR
    assert attributes(crashed)["satsuma.tool.outcome"] == "crashed"
    assert attributes(crashed)["error.type"] == "crashed"
    [event] = crashed.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "kaboom"
    timed_out = tools["execute_tool hang"]
    assert timed_out.status.status_code is StatusCode.ERROR
    assert attributes(timed_out)["error.type"] == "timeout"
    assert attributes(timed_out)["satsuma.tool.duration"] == 5.0
    assert timed_out.events == ()
    # The tools ran in parallel, inside the first model call's turn.
    assert chats[0].end_time is not None and ok.start_time is not None
    assert chats[0].end_time <= ok.start_time


async def test_a_model_failure_is_recorded_on_its_chat_span(
    spans: InMemorySpanExporter,
) -> None:
    model = ScriptedModel([ModelError("Overloaded", status=529, retryable=True)])
    async with satsuma.open_agent(Calculator, model=model) as agent:
        result = await agent.run("go")
    assert result.status == "failed"
    finished = spans.get_finished_spans()
    chat = only(finished, "chat claude-sonnet-5-5")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "529: Overloaded"
    assert attributes(chat)["error.type"] == "satsuma.ModelError"
    assert [event.name for event in chat.events] == ["exception"]
    run = only(finished, "invoke_agent calculator")
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == result.error
    assert attributes(run)["error.type"] == "failed"
    assert attributes(run)["satsuma.run.status"] == "failed"


async def test_retries_are_events_of_the_chat_span_with_the_response_id(
    spans: InMemorySpanExporter,
) -> None:
    async with (
        MessagesServer([Failure.overloaded(), "Hello."]) as server,
        satsuma.open_agent(
            Calculator,
            model=satsuma.AnthropicModel(
                server.client(), backoff_base=0.001, backoff_cap=0.01, jitter=False
            ),
        ) as agent,
    ):
        result = await agent.run("hi")
    assert result.status == "completed"
    chat = only(spans.get_finished_spans(), "chat claude-sonnet-5-5")
    assert chat.status.status_code is StatusCode.UNSET
    [retry] = chat.events
    assert retry.name == "satsuma.model.retry"
    assert retry.attributes is not None
    assert retry.attributes["satsuma.retry.attempt"] == 1
    assert retry.attributes["error.message"] == "529: Overloaded"
    assert str(attributes(chat)["gen_ai.response.id"]).startswith("msg_test_")
    assert attributes(chat)["gen_ai.response.model"] == "claude-sonnet-5-5"
    assert attributes(chat)["gen_ai.usage.input_tokens"] == result.usage.total_input_tokens
    # Priced from the table: the call's cost, and the run's (one call) the same.
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0
    assert attributes(chat)["satsuma.cost_usd"] == result.usage.cost_usd
    run = only(spans.get_finished_spans(), "invoke_agent calculator")
    assert attributes(run)["satsuma.cost_usd"] == result.usage.cost_usd


async def test_a_run_out_of_iterations_is_an_error(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    class Short(Calculator):
        name = "short"
        max_iterations = 1

    model = ScriptedModel([Reply(tool_calls=[("add", {"a": 1, "b": 1})])])
    async with satsuma.open_agent(Short, model=model) as agent:
        result = await agent.run("go")
    assert result.status == "max_iterations"
    run = only(spans.get_finished_spans(), "invoke_agent short")
    assert run.status.status_code is StatusCode.ERROR
    assert attributes(run)["error.type"] == "max_iterations"
    assert attributes(run)["satsuma.run.iterations"] == 1


async def test_a_cancelled_run_ends_its_spans_without_an_error(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    @satsuma.tool
    async def wait() -> str:
        """Wait a long time."""
        await trio.sleep(1000)
        return "waited"

    class Waiter(Calculator):
        name = "waiter"
        tools = [wait]

    model = ScriptedModel([Reply(tool_calls=[("wait", {})])])
    async with satsuma.open_agent(Waiter, model=model) as agent:
        results = []

        async def run() -> None:
            results.append(await agent.run("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.sleep(10)
            await agent.cancel()
    [result] = results
    assert result.status == "cancelled"
    finished = spans.get_finished_spans()
    run_span = only(finished, "invoke_agent waiter")
    tool = only(finished, "execute_tool wait")
    for span in (run_span, tool):
        assert span.status.status_code is StatusCode.UNSET
        assert attributes(span)["satsuma.cancelled"] is True
        assert "error.type" not in attributes(span)
        assert span.events == ()
    assert attributes(run_span)["satsuma.run.status"] == "cancelled"
    assert "satsuma.tool.outcome" not in attributes(tool)  # it has none: it never ended


async def test_a_caller_cancelled_during_a_model_call_ends_the_chat_span_cleanly(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel(["too late"], delay=100)
    async with satsuma.open_agent(Calculator, model=model) as agent:
        with trio.move_on_after(10) as scope:
            await agent.run("go")
        assert scope.cancelled_caught
    finished = spans.get_finished_spans()
    chat = only(finished, "chat claude-sonnet-5-5")
    assert chat.status.status_code is StatusCode.UNSET
    assert attributes(chat)["satsuma.cancelled"] is True
    assert chat.events == ()
    run = only(finished, "invoke_agent calculator")
    assert attributes(run)["satsuma.run.status"] == "cancelled"
    assert run.status.status_code is StatusCode.UNSET


async def test_an_agent_crash_is_recorded_and_still_raised(spans: InMemorySpanExporter) -> None:
    class Buggy:
        async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
            raise ZeroDivisionError("a bug in the model")

    with pytest.raises(satsuma.AgentCrashed) as info:
        async with satsuma.open_agent(Calculator, model=Buggy()) as agent:
            await agent.run("go")
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    finished = spans.get_finished_spans()
    run = only(finished, "invoke_agent calculator")
    assert run.status.status_code is StatusCode.ERROR
    assert attributes(run)["error.type"] == "ZeroDivisionError"
    assert attributes(run)["satsuma.run.status"] == "failed"
    assert [event.name for event in run.events] == ["exception"]
    chat = only(finished, "chat claude-sonnet-5-5")
    assert attributes(chat)["error.type"] == "ZeroDivisionError"


class _Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


async def test_an_exception_whose_str_raises_is_recorded_and_the_crash_still_raised(
    spans: InMemorySpanExporter,
) -> None:
    """record_exit read str(exc): an exception whose __str__ raised replaced the crash
    leaving the span with that RuntimeError (issue 29, item 4's class)."""

    class Buggy:
        async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
            raise _Unreadable

    with pytest.raises(satsuma.AgentCrashed) as info:
        async with satsuma.open_agent(Calculator, model=Buggy()) as agent:
            await agent.run("go")
    assert type(info.value.cause) is _Unreadable
    assert "_Unreadable (its message could not be read)" in str(info.value)
    finished = spans.get_finished_spans()
    run = only(finished, "invoke_agent calculator")
    assert run.status.status_code is StatusCode.ERROR
    assert attributes(run)["error.type"].endswith("_Unreadable")
    chat = only(finished, "chat claude-sonnet-5-5")
    assert attributes(chat)["error.type"].endswith("_Unreadable")


async def test_a_sub_agent_run_nests_under_the_tool_call_that_asked_for_it(
    spans: InMemorySpanExporter,
) -> None:
    class Child(satsuma.Agent):
        name = "child"
        system = "You help."

    class Parent(satsuma.Agent):
        name = "parent"
        system = "You delegate."
        tools = [satsuma.AgentTool(Child, description="Ask the child")]

    model = ScriptedModel(
        [Reply(tool_calls=[("child", {"task": "help"})]), "the child's answer", "thanks"]
    )
    async with satsuma.open_agent(Parent, model=model) as agent:
        result = await agent.run("go")
    assert result.status == "completed", result.error
    finished = spans.get_finished_spans()
    tool = only(finished, "execute_tool child")
    child = only(finished, "invoke_agent child")
    parent = only(finished, "invoke_agent parent")
    assert parent_of(tool) == span_id(parent)
    assert parent_of(child) == span_id(tool)


# --- a bare ToolRunner ----------------------------------------------------------------


async def test_a_bare_runner_makes_root_spans_or_children_of_the_callers(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    # No deadline: the worker thread takes real time, which the autojump clock skips.
    runner = ToolRunner([add, explode, traced_in_a_thread], timeout=None)
    calls = [
        {"id": "c1", "name": "add", "input": {"a": 1, "b": 2}},
        {"id": "c2", "name": "nope", "input": {}},
        {"id": "c3", "name": "traced_in_a_thread", "input": {}},
    ]
    outcomes = await runner.execute(calls)
    assert [o.error_kind for o in outcomes] == [None, "unknown_tool", None]
    finished = spans.get_finished_spans()
    tools = by_name(finished, "execute_tool ")
    assert sorted(span.name for span in tools) == [
        "execute_tool add",
        "execute_tool nope",
        "execute_tool traced_in_a_thread",
    ]
    assert all(span.parent is None for span in tools)
    assert len({span.context.trace_id for span in tools if span.context}) == 3
    unknown = only(finished, "execute_tool nope")
    assert unknown.status.status_code is StatusCode.ERROR
    assert attributes(unknown)["error.type"] == "unknown_tool"
    # The call's span is current inside the tool, worker threads included.
    inner = only(finished, "inside the thread")
    assert parent_of(inner) == span_id(only(finished, "execute_tool traced_in_a_thread"))

    spans.clear()
    with trace.get_tracer("user-code").start_as_current_span("batch") as batch:
        await runner.execute(calls[:2])
    finished = spans.get_finished_spans()
    assert {parent_of(span) for span in by_name(finished, "execute_tool ")} == {
        batch.get_span_context().span_id
    }


@pytest.mark.parametrize(
    "options",
    [{"max_concurrency": 1}, {"strategy": "sequential"}],
    ids=["capped", "sequential"],
)
async def test_each_call_has_its_span_however_the_runner_runs_them(
    options: dict[str, Any], spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    runner = ToolRunner([add, explode], **options)
    calls = [
        {"id": "c1", "name": "add", "input": {"a": 1, "b": 2}},
        {"id": "c2", "name": "explode", "input": {}},
        {"id": "c3", "name": "add", "input": {"a": 3, "b": 4}},
    ]
    outcomes = await runner.execute(calls)
    assert [o.content for o in outcomes[::2]] == ["3", "7"]
    assert outcomes[1].error_kind == "crashed"
    tools = by_name(spans.get_finished_spans(), "execute_tool ")
    assert sorted(attributes(span)["gen_ai.tool.call.id"] for span in tools) == ["c1", "c2", "c3"]
    crashed = only(spans.get_finished_spans(), "execute_tool explode")
    assert crashed.status.status_code is StatusCode.ERROR
    assert [event.name for event in crashed.events] == ["exception"]


async def test_a_runner_cancelled_from_outside_ends_its_spans_cleanly(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    runner = ToolRunner([hang, add])
    with trio.move_on_after(1.5):
        await runner.execute(
            [{"id": "h", "name": "hang", "input": {}}, {"id": "a", "name": "add", "input": {}}]
        )
    finished = spans.get_finished_spans()
    hung = only(finished, "execute_tool hang")
    assert hung.status.status_code is StatusCode.UNSET
    assert attributes(hung)["satsuma.cancelled"] is True
    assert hung.events == ()
    # A call that ended before the cancellation keeps its outcome.
    invalid = only(finished, "execute_tool add")
    assert attributes(invalid)["error.type"] == "invalid_args"


# --- human approval -------------------------------------------------------------------


@satsuma.tool(requires_approval=True)
async def pay(to: str) -> str:
    """Pay someone."""
    return f"paid {to}"


class Payer(satsuma.Agent):
    name = "payer"
    model = "claude-sonnet-5-5"
    tools = [pay]


def two_payments() -> Reply:
    return Reply(tool_calls=[("pay", {"to": "ann"}), ("pay", {"to": "bob"})])


def pay_spans(finished: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    """The execute_tool pay spans by call id."""
    return {
        attributes(span)["gen_ai.tool.call.id"]: span
        for span in by_name(finished, "execute_tool pay")
    }


async def test_an_inline_decision_and_who_made_it_are_on_the_calls_span(
    spans: InMemorySpanExporter,
) -> None:
    async def approver(call: satsuma.PendingCall) -> satsuma.Approve | satsuma.Deny:
        if call.input["to"] == "ann":
            return satsuma.Approve(input={"to": "ann"}, by="alice@example.com")
        return satsuma.Deny("not bob", by="carol")

    model = ScriptedModel([two_payments(), "One paid."])
    async with satsuma.open_agent(Payer, model=model, approver=approver) as agent:
        result = await agent.run("Pay Ann and Bob")
    ann, bob = (block["id"] for block in result.messages[1].content)
    found = pay_spans(spans.get_finished_spans())
    assert {key: value for key, value in attributes(found[ann]).items() if "approval" in key} == {
        "satsuma.approval.requested": True,
        "satsuma.approval.deferred": False,
        "satsuma.approval.approved": True,
        "satsuma.approval.edited": True,
        "satsuma.approval.decided_by": "alice@example.com",
    }
    assert attributes(found[ann])["satsuma.tool.outcome"] == "ok"
    denied = attributes(found[bob])
    assert (denied["satsuma.approval.approved"], denied["satsuma.approval.decided_by"]) == (
        False,
        "carol",
    )
    assert denied["error.type"] == "denied"
    # The person's reason and the input are content: they stay off the span.
    assert not any("not bob" in str(value) for value in denied.values())


async def test_a_denial_no_one_made_names_no_decider(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    async def away(call: satsuma.PendingCall) -> satsuma.Approve:
        await trio.sleep_forever()
        raise AssertionError

    model = ScriptedModel([Reply(tool_calls=[("pay", {"to": "ann"})]), "No."])
    async with satsuma.open_agent(Payer, model=model, approver=away, approval_timeout=10) as agent:
        await agent.run("Pay Ann")
    (span,) = pay_spans(spans.get_finished_spans()).values()
    assert attributes(span)["satsuma.approval.approved"] is False
    assert "satsuma.approval.decided_by" not in attributes(span)


async def test_a_paused_call_is_awaiting_on_its_span_and_decided_on_the_resumes(
    spans: InMemorySpanExporter,
) -> None:
    from satsuma.store import MemoryStore

    model = ScriptedModel([two_payments(), "Done."])
    async with (
        MemoryStore() as store,
        satsuma.open_agent(Payer, model=model, store=store, agent_id="p1") as agent,
    ):
        first = await agent.run("Pay Ann and Bob")
        assert first.status == "awaiting_approval"
        paused = pay_spans(spans.get_finished_spans())
        assert paused.keys() == {call.id for call in first.pending}
        for span in paused.values():
            assert span.status.status_code is StatusCode.UNSET  # waiting is no error
            assert attributes(span)["satsuma.tool.outcome"] == "awaiting_approval"
            assert attributes(span)["satsuma.approval.deferred"] is True
            assert "satsuma.approval.approved" not in attributes(span)
        run = only(spans.get_finished_spans(), "invoke_agent payer")
        assert attributes(run)["satsuma.run.status"] == "awaiting_approval"
        assert attributes(run)["satsuma.run.pending_calls"] == 2
        assert run.status.status_code is StatusCode.UNSET  # a pause is no failure
        spans.clear()
        ann, bob = (call.id for call in first.pending)
        decisions: dict[str, satsuma.Approve | satsuma.Deny] = {
            ann: satsuma.Approve(by="alice"),
            bob: satsuma.Deny("no", by="dan"),
        }
        await agent.resume(first.run_id, decisions=decisions)
    resumed = pay_spans(spans.get_finished_spans())
    assert attributes(resumed[ann])["satsuma.approval.decided_by"] == "alice"
    assert attributes(resumed[ann])["satsuma.approval.approved"] is True
    assert attributes(resumed[bob])["satsuma.approval.decided_by"] == "dan"
    assert attributes(resumed[bob])["satsuma.approval.approved"] is False
    # Decided in advance, not asked again.
    assert "satsuma.approval.requested" not in attributes(resumed[ann])


# --- failures of telemetry itself -----------------------------------------------------


class _BrokenTracer(trace.Tracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("the exporter is down")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the exporter is down")


class _BrokenSpan(trace.NonRecordingSpan):
    def set_attributes(self, attributes: Any) -> None:
        raise RuntimeError("no attributes today")

    def end(self, end_time: int | None = None) -> None:
        raise RuntimeError("no ending either")


class _HalfBrokenTracer(trace.Tracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return _BrokenSpan(trace.INVALID_SPAN_CONTEXT)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("broken", [_BrokenTracer(), _HalfBrokenTracer()])
async def test_a_telemetry_failure_never_breaks_a_run(
    broken: trace.Tracer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.abc.Clock,
) -> None:
    monkeypatch.setattr(_telemetry, "tracer", lambda: broken)
    monkeypatch.setattr(_telemetry, "_failure_logged", False)
    model = ScriptedModel([three_calls(), "done"])
    with caplog.at_level(logging.DEBUG, logger="satsuma.telemetry"):
        async with satsuma.open_agent(Calculator, model=model) as agent:
            result = await agent.run("go")
    assert result.status == "completed"
    assert [o["is_error"] for o in result.messages[2].tool_results] == [False, True, True]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "a failure is logged once"
    assert warnings[0].name == "satsuma.telemetry"
    assert "runs go on" in warnings[0].getMessage()


# --- no provider ----------------------------------------------------------------------


def test_without_a_provider_nothing_is_traced_and_runs_work() -> None:
    # A fresh interpreter: this one has had its global provider set by the fixture.
    code = textwrap.dedent(
        """
        import trio, satsuma
        from satsuma import _telemetry
        from satsuma.testing import Reply, ScriptedModel

        @satsuma.tool
        async def add(a: int, b: int) -> str:
            '''Add.'''
            return str(a + b)

        class A(satsuma.Agent):
            name = "a"
            tools = [add]
            system = "s"

        async def main():
            model = ScriptedModel([Reply(tool_calls=[("add", {"a": 1, "b": 2})]), "3"])
            async with satsuma.open_agent(A, model=model) as agent:
                result = await agent.run("1 + 2?")
            assert result.status == "completed" and result.output == "3", result
            assert _telemetry.tracer() is None
            print("ok")

        trio.run(main)
        """
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert out.stderr == ""


# --- limits on model calls --------------------------------------------------------------


async def test_a_chat_span_says_how_long_the_call_waited_for_its_limits(
    spans: InMemorySpanExporter, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel(["one", "two", "three"], delay=2.0)
    free = ScriptedModel(["free"])
    limited = satsuma.ModelLimits(max_concurrency=1)
    satsuma.set_model_limits("opus", limited)
    try:

        class Writer(satsuma.Agent):
            name = "writer"
            model = "opus"

        async with (
            satsuma.open_agent(Writer, model=model) as first,
            satsuma.open_agent(Writer, model=model) as second,
            satsuma.open_agent(Calculator, model=free) as unlimited,
        ):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.run, "Write")
                await trio.sleep(0.5)
                nursery.start_soon(second.run, "Write")
            await unlimited.run("Count")  # its model, sonnet, has no limits
    finally:
        satsuma.set_model_limits("opus", None)
    waits = [
        attributes(chat).get("satsuma.model.wait_seconds")
        for chat in by_name(spans.get_finished_spans(), "chat ")
    ]
    # Two calls of the limited model (one waited 1.5 s), one without limits: no attribute.
    assert sorted(waits, key=str) == [0.0, 1.5, None]
