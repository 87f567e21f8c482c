"""The runner against hostile tools and hostile input: whatever a tool raises or returns,
and whatever arguments arrive, every call gets exactly one outcome that can go back to
the API as JSON, siblings keep theirs, and only the three exceptions that must go on
(a real trio.Cancelled, KeyboardInterrupt, SystemExit) leave ``execute``."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
import trio

import satsuma
from satsuma import ToolResult, ToolRunner
from satsuma.testing import tool_call


class Boom(BaseException):
    """A BaseException of the user's own, neither cancellation nor a request to stop."""


def _asyncio_cancelled_in_thread() -> Any:
    async def inner() -> None:
        raise asyncio.CancelledError

    return asyncio.run(inner())


def _generator_exit() -> Any:
    raise GeneratorExit


def _stale_cancelled_factory() -> Any:
    """A Cancelled caught inside a scope that was cancelled then, kept for later."""
    kept: list[BaseException] = []

    async def catch() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.sleep(1)
            except trio.Cancelled as exc:
                kept.append(exc)
                raise

    return catch, kept


class Raiser(satsuma.Tool):
    name = "raiser"
    description = "Raise what the test says"
    parameters = {"kind": {"type": "string", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        kind = args["kind"]
        if kind == "asyncio":
            raise asyncio.CancelledError("from asyncio")
        if kind == "generator_exit":
            raise GeneratorExit
        if kind == "custom":
            raise Boom("mine")
        if kind == "group":
            raise BaseExceptionGroup("several", [Boom("a"), ValueError("b")])
        if kind == "stale":
            catch, kept = _stale_cancelled_factory()
            await catch()
            raise kept[0]
        raise AssertionError(kind)


class SyncRaiser(satsuma.Tool):
    name = "sync_raiser"
    description = "Raise from a worker thread"
    parameters = {"kind": {"type": "string", "required": True}}

    def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        if args["kind"] == "asyncio_run":
            return _asyncio_cancelled_in_thread()
        if args["kind"] == "generator_exit":
            return _generator_exit()
        raise Boom("from a thread")


class Fine(satsuma.Tool):
    name = "fine"
    description = "Answer after a moment, so that siblings overlap"

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(0.01)
        return "fine"


class Slow(satsuma.Tool):
    name = "slow"
    description = "Answer after a second"

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(1)
        return "slow"


@pytest.mark.parametrize(
    ("name", "kind", "type_name"),
    [
        ("raiser", "asyncio", "CancelledError"),
        ("raiser", "generator_exit", "GeneratorExit"),
        ("raiser", "custom", "Boom"),
        ("raiser", "group", "Boom"),
        ("raiser", "stale", "Cancelled"),
        ("sync_raiser", "asyncio_run", "CancelledError"),
        ("sync_raiser", "generator_exit", "GeneratorExit"),
        ("sync_raiser", "custom", "Boom"),
    ],
)
async def test_a_base_exception_that_is_not_cancellation_is_that_calls_crash(
    name: str, kind: str, type_name: str
) -> None:
    # Real time: the autojump clock would jump past the deadline while a thread runs.
    runner = ToolRunner([Raiser, SyncRaiser, Fine])
    outcomes = await runner.execute(
        [tool_call("fine", {}), tool_call(name, {"kind": kind}), tool_call("fine", {})]
    )
    assert [o.content for o in (outcomes[0], outcomes[2])] == ["fine", "fine"]
    crash = outcomes[1]
    assert crash.is_error and crash.error_kind == "crashed"
    assert isinstance(crash.content, str)
    assert crash.content.startswith(f"Error: Tool crashed: {type_name}")


async def test_a_real_cancellation_still_goes_through_a_tool_that_reraises_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner = ToolRunner([Slow])
    with trio.move_on_after(0.5) as scope:
        await runner.execute([tool_call("slow", {})])
    assert scope.cancelled_caught


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
async def test_keyboard_interrupt_and_system_exit_go_on(stop: type[BaseException]) -> None:
    class Stops(satsuma.Tool):
        name = "stops"
        description = "Ask the process to stop"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            raise stop

    with pytest.raises(BaseException) as caught:
        await ToolRunner([Stops]).execute([tool_call("stops", {})])
    leaves = caught.value.exceptions if isinstance(caught.value, BaseExceptionGroup) else []
    assert isinstance(caught.value, stop) or all(isinstance(leaf, stop) for leaf in leaves)


# --- non-finite numbers and deep nesting in arguments ---------------------------------


class Amount(satsuma.Tool):
    name = "amount"
    description = "Take an amount"
    parameters = {
        "value": {"type": "number", "required": True, "minimum": 0, "maximum": 10},
        "extra": {"type": "object"},
    }

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return f"took {args['value']}"


class RawAmount(satsuma.Tool):
    name = "raw_amount"
    description = "Take anything"
    input_schema = {
        "type": "object",
        "properties": {"value": {"type": "number", "minimum": 0, "maximum": 10}},
    }

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return "took it"


@pytest.mark.parametrize("tool", ["amount", "raw_amount"])
@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ('{"value": NaN}', "NaN"),
        ('{"value": Infinity}', "Infinity"),
        ('{"value": -Infinity}', "-Infinity"),
        ('{"value": 1e999}', "Infinity"),
        ('{"value": 1, "extra": {"deep": [1, NaN]}}', "NaN"),
    ],
)
async def test_non_finite_numbers_are_refused_with_their_path(
    tool: str, raw: str, shown: str
) -> None:
    outcome = (await ToolRunner([Amount, RawAmount]).execute([tool_call(tool, raw)]))[0]
    assert outcome.error_kind == "invalid_args"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Invalid arguments: expected ")
    assert f"to be a finite number, got: {shown}" in outcome.content
    assert ("extra.deep[1]" in outcome.content) == ("extra" in raw)


async def test_nan_fails_a_bounded_number_when_validated_directly() -> None:
    definition = satsuma.ToolRunner([Amount]).definitions[0]
    _, errors = definition.check({"value": math.nan})
    assert errors == ["expected value to be a finite number, got: NaN"]


async def test_a_hook_cannot_rewrite_arguments_into_non_finite_ones() -> None:
    class Poison(satsuma.ToolHook):
        def before_call(self, call: satsuma.ToolCall, ctx: satsuma.ToolContext) -> Any:
            return satsuma.Rewrite({"value": math.inf})

    outcome = (
        await ToolRunner([Amount], hooks=Poison()).execute([tool_call("amount", {"value": 1})])
    )[0]
    assert outcome.content == (
        "Error: Invalid arguments: expected value to be a finite number, got: Infinity"
    )


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [65, 500, 5_000, 100_000])
@pytest.mark.parametrize("as_text", [True, False])
async def test_deeply_nested_arguments_fail_that_call_only(depth: int, as_text: bool) -> None:
    arguments = {"value": 1, "extra": _nested(depth)}
    given: Any = arguments
    if as_text:
        # json.dumps recurses; the text is built by hand as the wire would carry it.
        given = '{"value": 1, "extra": ' + _nested_text(depth) + "}"
    outcomes = await ToolRunner([Amount]).execute(
        [tool_call("amount", {"value": 2}), tool_call("amount", given)]
    )
    assert outcomes[0].content == "took 2"
    assert outcomes[1].error_kind == "invalid_args"
    assert isinstance(outcomes[1].content, str)
    assert "levels deep" in outcomes[1].content


def _nested_text(depth: int) -> str:
    opening = "".join('{"k": ' if level % 2 == 0 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 == 0 else "]" for level in reversed(range(depth)))
    return opening + "1" + closing


# --- results that cannot become JSON ----------------------------------------------------


class Returns(satsuma.Tool):
    """Returns whatever the test put in ``value``."""

    name = "returns"
    description = "Return the value set on the class"
    value: Any = None

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return type(self).value


class ArrayLike:
    """Answers == with an array, as numpy does: its truth value is an error."""

    def __eq__(self, other: object) -> Any:
        return ArrayLike()

    def __bool__(self) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (("ok", b"\x89PNG"), "got: bytes"),
        (b"raw", "got: bytes"),
        (("ok", [{"type": "text", "text": "x", "meta": object()}]), "content[0].meta is an object"),
        (("ok", [{"type": "text", "text": "x", "n": math.nan}]), "got: NaN"),
        (("ok", [{"type": "text", "text": "x", "deep": _nested(200)}]), "levels deep"),
        (
            ("ok", [{"type": "image", "source": {"type": "base64", "data": b"x"}}]),
            "media_type",
        ),
        (
            (
                "ok",
                [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": b"x"},
                    }
                ],
            ),
            "base64 text",
        ),
        (ToolResult([{"type": "text", "text": "x", "k": {1: 2}}]), "key that is not a string"),
        ((ArrayLike(), "x"), "expected"),
        ((ArrayLike(), "x", True), "expected"),
    ],
)
async def test_a_result_that_cannot_become_json_is_that_calls_invalid_result(
    value: Any, problem: str
) -> None:
    class These(Returns):
        pass

    These.value = value
    outcomes = await ToolRunner([These, Amount]).execute(
        [tool_call("returns", {}), tool_call("amount", {"value": 3})]
    )
    assert outcomes[1].content == "took 3"
    bad = outcomes[0]
    assert bad.error_kind == "invalid_result", bad
    assert isinstance(bad.content, str)
    assert bad.content.startswith("Error: Invalid tool result: ")
    assert problem in bad.content
    # Whatever the outcome, it goes back to the API as strict JSON.
    json.dumps(satsuma.format_results(outcomes), allow_nan=False)


async def test_an_image_block_with_base64_text_goes_through_as_plain_json() -> None:
    class Image(Returns):
        pass

    source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    Image.value = ("ok", ({"type": "image", "source": source}, {"type": "text", "text": "a"}))
    outcome = (await ToolRunner([Image]).execute([tool_call("returns", {})]))[0]
    assert outcome.error_kind is None
    assert outcome.content == [
        {"type": "image", "source": source},
        {"type": "text", "text": "a"},
    ]


# --- exceptions that fail to describe themselves ----------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class Unreadable(Exception):
    def __str__(self) -> Any:
        return 42  # not a str: str() raises TypeError


@pytest.mark.parametrize("exc_type", [Unprintable, Unreadable])
async def test_an_exception_that_cannot_describe_itself_is_named_by_its_type(
    exc_type: type[Exception],
) -> None:
    class Raises(satsuma.Tool):
        name = "raises"
        description = "Raise an unprintable exception"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            raise exc_type

    outcome = (await ToolRunner([Raises]).execute([tool_call("raises", {})]))[0]
    assert outcome.error_kind == "crashed"
    assert (
        outcome.content
        == f"Error: Tool crashed: {exc_type.__name__} (its message could not be read)"
    )


async def test_a_tool_error_whose_reason_cannot_be_printed_still_answers() -> None:
    class Reasonless(satsuma.Tool):
        name = "reasonless"
        description = "Raise ToolError with a hostile reason"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            raise satsuma.ToolError(Unprintable())  # type: ignore[arg-type]

    outcome = (await ToolRunner([Reasonless]).execute([tool_call("reasonless", {})]))[0]
    assert outcome.error_kind == "failed"
    assert outcome.content == "Error: <Unprintable whose str() failed: RuntimeError>"


# --- cancellation: every start has its end, finished calls keep their outcome -----------


@pytest.mark.parametrize("kind", ["async", "plain"])
async def test_a_cancelled_execute_ends_every_started_call_and_reports_finished_ones(
    autojump_clock: trio.abc.Clock, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Quick(satsuma.Tool):
        name = "quick"
        description = "Answer at once"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return "sent the e-mail"

    events: list[Any] = []
    finished: dict[str, satsuma.ToolOutcome] = {}

    async def keep(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> None:
        finished[call.id] = outcome

    def keep_plainly(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> None:
        finished[call.id] = outcome

    runner = ToolRunner([Quick, Slow])
    with trio.move_on_after(0.5):
        await runner.execute(
            [tool_call("quick", {}, id="q"), tool_call("slow", {}, id="f")],
            events=events.append,
            on_outcome=keep if kind == "async" else keep_plainly,
        )
    assert finished["q"].content == "sent the e-mail"
    assert "f" not in finished
    assert not [r for r in caplog.records if "on_outcome" in r.getMessage()]
    starts = [e.tool_use_id for e in events if isinstance(e, satsuma.ToolCallStart)]
    ends = {e.tool_use_id: e.outcome for e in events if isinstance(e, satsuma.ToolCallEnd)}
    assert sorted(starts) == sorted(ends) == ["f", "q"]
    assert ends["q"].content == "sent the e-mail"
    assert ends["f"].error_kind == "cancelled"


async def test_an_async_on_outcome_finishes_even_when_execute_is_cancelled_meanwhile(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Quick(satsuma.Tool):
        name = "quick"
        description = "Answer at once"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return "done"

    journaled: list[str] = []

    async def journal(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> None:
        await trio.sleep(2)  # a slow store; the cancellation comes at 1 s
        journaled.append(call.id)

    with trio.move_on_after(1):
        await ToolRunner([Quick]).execute([tool_call("quick", {}, id="q")], on_outcome=journal)
    assert journaled == ["q"]
    assert trio.current_time() == pytest.approx(2)


async def test_an_async_on_outcome_that_hangs_is_given_up_after_ten_seconds(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    class Quick(satsuma.Tool):
        name = "quick"
        description = "Answer at once"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return "done"

    async def hang(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> None:
        await trio.sleep_forever()

    outcomes = await ToolRunner([Quick]).execute([tool_call("quick", {})], on_outcome=hang)
    assert outcomes[0].content == "done"
    assert trio.current_time() == pytest.approx(10)


@pytest.mark.parametrize("kind", ["raises", "returns garbage", "async raises"])
async def test_a_failing_on_outcome_is_logged_and_the_outcome_stands(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Quick(satsuma.Tool):
        name = "quick"
        description = "Answer at once"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return "done"

    def raises(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> None:
        raise RuntimeError("journal down")

    def garbage(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> Any:
        return 42

    async def async_raises(call: satsuma.ToolCall, outcome: satsuma.ToolOutcome) -> None:
        raise RuntimeError("journal down")

    callback = {"raises": raises, "returns garbage": garbage, "async raises": async_raises}[kind]
    outcomes = await ToolRunner([Quick]).execute(
        [tool_call("quick", {}, id="q1"), tool_call("quick", {}, id="q2")], on_outcome=callback
    )
    assert [o.content for o in outcomes] == ["done", "done"]
    failures = [r for r in caplog.records if "on_outcome callback failed" in r.getMessage()]
    assert sorted(r.getMessage() for r in failures) == [
        "on_outcome callback failed for call q1; the outcome stands",
        "on_outcome callback failed for call q2; the outcome stands",
    ]
