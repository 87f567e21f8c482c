"""The per-call path without its extra frames: a plain ``@tool`` function is called
directly (not through ``FunctionTool.run``), a call's own coroutine is its task when
nothing wraps it, and a plain ``on_outcome`` callback is called in place. Each keeps
what it replaced: every other tool still goes through its ``run``, each way of running
calls gives every call its outcome in call order, and every failure reads as before."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.util._once import Once

import satsuma
from satsuma import ToolCall, ToolContext, ToolError, ToolOutcome, ToolRunner, format_results
from satsuma._shapes import tool_result_block
from satsuma.tools import Batched
from satsuma.tools._ending import failed_outcome
from satsuma.tools._environment import finish_report
from satsuma.tools._gate import normalise
from satsuma.tools._registry import tool_entries
from satsuma.tools._schedule import run_call
from satsuma.tools._tool import FunctionTool, direct_function


@satsuma.tool
async def echo(n: int) -> str:
    """Echo.

    Args:
        n: A number.
    """
    return f"echo {n}"


@satsuma.tool
async def with_ctx(n: int, ctx: ToolContext) -> str:
    """Sees its context.

    Args:
        n: A number.
    """
    return f"ctx {ctx.tool_use_id} {n}"


@satsuma.tool
def blocking(n: int) -> str:
    """A sync tool, run in a worker thread.

    Args:
        n: A number.
    """
    return f"thread {n}"


@satsuma.tool(timeout=2)
async def slow() -> str:
    """Past its deadline."""
    await trio.sleep(10)
    return "never"


@satsuma.tool
async def refuses() -> str:
    """Raises ToolError."""
    raise ToolError("no such row")


@satsuma.tool
async def crashes() -> str:
    """Crashes."""
    raise RuntimeError("kaboom")


class Rows(satsuma.Toolset):
    @satsuma.tool
    async def row(self, n: int) -> str:
        """A toolset method.

        Args:
            n: A number.
        """
        return f"row {n}"


class Louder(FunctionTool[Any, Any], abstract=True):
    """A FunctionTool subclass with its own run."""

    def run(self, args: Any, ctx: ToolContext) -> Any:
        return super().run({"n": args["n"] * 10}, ctx)


@pytest.fixture(autouse=True)
def _no_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the frames of the untraced path, which an application without
    an OpenTelemetry provider takes. A provider set earlier in the session (the docs'
    observability example sets one for good) is put aside for each test, and put back
    after it, as OpenTelemetry's own test utilities reset it."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


@contextmanager
def counting(code: CodeType) -> Iterator[list[int]]:
    """How many times a frame of ``code`` is entered (or a coroutine's resumed) while
    the block runs, in this thread."""
    entered = [0]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            entered[0] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(previous)


def test_only_a_plain_async_tool_function_is_called_directly() -> None:
    assert direct_function(echo) is echo.__wrapped__
    assert direct_function(with_ctx) is None  # it needs its context
    assert direct_function(Rows().tools()[0]) is None  # it needs its self
    louder = Louder(echo.__wrapped__, echo.definition, context_param=None, is_method=False)
    assert direct_function(louder) is None  # its own run
    replaced = FunctionTool(echo.__wrapped__, echo.definition, context_param=None, is_method=False)
    replaced.run = lambda args, ctx: "replaced"  # type: ignore[method-assign]
    assert direct_function(replaced) is None
    entries = tool_entries([echo, blocking])
    assert entries["echo"].direct is echo.__wrapped__
    assert entries["blocking"].direct is None  # a sync function runs in a thread, via run


async def test_a_plain_tool_function_runs_without_its_run_frame() -> None:
    runner = ToolRunner([echo, with_ctx, blocking, Rows()])
    calls = [
        ToolCall("a", "echo", {"n": 1}),
        ToolCall("b", "with_ctx", {"n": 2}),
        ToolCall("c", "blocking", {"n": 3}),
        ToolCall("d", "row", {"n": 4}),
    ]
    with counting(FunctionTool.run.__code__) as entered:
        outcomes = await runner.execute(calls)
    assert [o.content for o in outcomes] == ["echo 1", "ctx b 2", "thread 3", "row 4"]
    # with_ctx and row through their run (blocking's runs in a thread, not profiled).
    assert entered == [2]
    with counting(FunctionTool.run.__code__) as entered:
        outcomes = await runner.execute(calls[:1])
    assert [o.content for o in outcomes] == ["echo 1"]
    assert entered == [0]


async def test_a_tool_whose_run_is_its_own_is_run_through_it() -> None:
    louder = Louder(echo.__wrapped__, echo.definition, context_param=None, is_method=False)
    outcomes = await ToolRunner([louder]).execute([ToolCall("a", "echo", {"n": 2})])
    assert outcomes[0].content == "echo 20"


async def test_a_direct_call_fails_as_through_run(autojump_clock: Any) -> None:
    runner = ToolRunner([slow, refuses, crashes, echo])
    calls = [
        ToolCall("s", "slow", {}),
        ToolCall("r", "refuses", {}),
        ToolCall("c", "crashes", {}),
        ToolCall("e", "echo", {"n": "x"}),
    ]
    outcomes = await runner.execute(calls)
    assert [o.error_kind for o in outcomes] == ["timeout", "failed", "crashed", "invalid_args"]
    assert [o.content for o in outcomes[:3]] == [
        "Error: Tool timed out after 2s",
        "Error: no such row",
        "Error: Tool crashed: RuntimeError: kaboom",
    ]
    assert outcomes[2].details is not None
    assert outcomes[2].details["exception"] == "RuntimeError"
    assert outcomes[3].text.startswith("Error: Invalid arguments:")


def test_a_late_call_is_a_timeout_whatever_it_raised() -> None:
    call = ToolCall("a", "slow", {})
    late = failed_outcome(call, None, 2.0, 2.5, traced=False)
    assert (late.error_kind, late.content, late.duration) == (
        "timeout",
        "Error: Tool timed out after 2s",
        2.5,
    )


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_concurrency": 2},
        {"strategy": "sequential"},
        {"strategy": Batched(2)},
        {"strategy": Batched(2), "max_concurrency": 1},
    ],
    ids=["parallel", "capped", "sequential", "batched", "batched-capped"],
)
async def test_every_way_of_running_gives_each_call_its_outcome_in_order(
    options: dict[str, Any],
) -> None:
    runner = ToolRunner([echo, with_ctx, crashes], **options)
    calls = [
        ToolCall("a", "echo", {"n": 1}),
        ToolCall("b", "with_ctx", {"n": 2}),
        ToolCall("c", "crashes", {}),
        ToolCall("d", "nope", {}),
        ToolCall("e", "echo", {"n": 5}),
    ]
    reported: list[str] = []
    outcomes = await runner.execute(calls, on_outcome=lambda call, o: reported.append(call.id))
    assert [o.tool_use_id for o in outcomes] == ["a", "b", "c", "d", "e"]
    assert [o.content for o in outcomes[:2]] == ["echo 1", "ctx b 2"]
    assert [o.error_kind for o in outcomes] == [None, None, "crashed", "unknown_tool", None]
    assert outcomes[4].content == "echo 5"
    assert sorted(reported) == ["a", "b", "c", "d", "e"]


async def test_parallel_calls_are_their_own_tasks_with_no_frame_around_them() -> None:
    runner = ToolRunner([echo])
    calls = [ToolCall(str(n), "echo", {"n": n}) for n in range(3)]
    with counting(run_call.__code__) as entered:
        outcomes = await runner.execute(calls)
    assert [o.content for o in outcomes] == ["echo 0", "echo 1", "echo 2"]
    assert entered == [0]
    capped = ToolRunner([echo], max_concurrency=1)
    with counting(run_call.__code__) as entered:
        outcomes = await capped.execute(calls)
    assert [o.content for o in outcomes] == ["echo 0", "echo 1", "echo 2"]
    assert entered == [3]  # each call gives its slot back when it ends


async def test_cancelling_parallel_calls_keeps_the_finished_ones_outcomes(
    autojump_clock: Any,
) -> None:
    runner = ToolRunner([echo, slow])
    kept: dict[str, ToolOutcome] = {}
    ended: list[Any] = []
    with trio.move_on_after(1):
        await runner.execute(
            [ToolCall("a", "echo", {"n": 1}), ToolCall("s", "slow", {})],
            on_outcome=lambda call, outcome: kept.__setitem__(call.id, outcome),
            events=ended.append,
        )
    assert list(kept) == ["a"]
    ends = {e.tool_use_id: e.outcome.error_kind for e in ended if type(e).__name__ == "ToolCallEnd"}
    assert ends == {"a": None, "s": "cancelled"}


async def test_a_plain_on_outcome_is_called_in_place_and_its_failure_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def raises(call: ToolCall, outcome: ToolOutcome) -> None:
        raise RuntimeError("journal down")

    with (
        caplog.at_level(logging.ERROR, logger="satsuma.tools"),
        counting(finish_report.__code__) as entered,
    ):
        outcomes = await ToolRunner([echo]).execute(
            [ToolCall("a", "echo", {"n": 1})], on_outcome=raises
        )
    assert outcomes[0].content == "echo 1"
    assert entered == [0]  # no coroutine of its own
    (record,) = [r for r in caplog.records if "on_outcome" in r.getMessage()]
    assert record.getMessage() == "on_outcome callback failed for call a; the outcome stands"
    assert record.exc_info is not None and "journal down" in str(record.exc_info[1])


async def test_an_async_on_outcome_is_awaited_shielded(autojump_clock: Any) -> None:
    journaled: list[str] = []

    async def journal(call: ToolCall, outcome: ToolOutcome) -> None:
        await trio.sleep(3)
        journaled.append(call.id)

    with trio.CancelScope() as scope:

        async def cancel_soon() -> None:
            await trio.sleep(1)
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_soon)
            with counting(finish_report.__code__) as entered:
                await ToolRunner([echo]).execute(
                    [ToolCall("a", "echo", {"n": 1})], on_outcome=journal
                )
    assert journaled == ["a"]
    assert entered[0] > 0  # entered, and resumed after its sleep


def test_a_text_answer_block_is_built_in_place_as_tool_result_block_builds_it() -> None:
    text = ToolOutcome(tool_use_id="a", tool_name="echo", content="echo 1", is_error=False)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    blocks = ToolOutcome(tool_use_id="b", tool_name="look", content=[image], is_error=True)
    with counting(tool_result_block.__code__) as entered:
        formatted = format_results([text, blocks])
    assert entered == [1]  # the blocks' answer only
    assert formatted == [
        tool_result_block("a", "echo 1", False),
        tool_result_block("b", [image], True),
    ]
    assert formatted[1]["content"][0] is not image  # blocks are copied, as before


class Shouty(str):
    """A result of a str subclass: the gate gives its plain text."""

    def upper(self) -> str:
        raise AssertionError("never called")


@satsuma.tool
async def answers(kind: str) -> Any:
    """Answers with a kind of text.

    Args:
        kind: ascii, unicode or subclass.
    """
    return {"ascii": "plain", "unicode": "caf\u00e9", "subclass": Shouty("sub")}[kind]


async def test_an_ascii_text_result_is_judged_in_place_and_any_other_by_the_gate() -> None:
    runner = ToolRunner([answers])
    calls = [ToolCall(kind, "answers", {"kind": kind}) for kind in ("ascii", "unicode", "subclass")]
    with counting(normalise.__code__) as entered:
        outcomes = await runner.execute(calls[:1])
    assert entered == [0]
    assert (outcomes[0].content, outcomes[0].is_error, outcomes[0].error_kind) == (
        "plain",
        False,
        None,
    )
    with counting(normalise.__code__) as entered:
        outcomes = await runner.execute(calls)
    assert entered == [2]
    assert [o.content for o in outcomes] == ["plain", "caf\u00e9", "sub"]
    assert [type(o.content) for o in outcomes] == [str, str, str]
