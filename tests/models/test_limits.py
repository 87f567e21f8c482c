"""ModelLimits: the limiter alone on trio's virtual clock (bounds, rates, pauses, FIFO,
random cancellations), then agents sharing it, and AnthropicModel against the loopback
MessagesServer (a 429 with retry-after pauses every user of the configuration)."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import satsuma
from satsuma import (
    AnthropicModel,
    ModelLimits,
    ModelRetry,
    ModelWaitEnd,
    ModelWaitStart,
    open_agent,
    set_model_limits,
)
from satsuma._messages import Message, Usage
from satsuma.models._limiter import LimiterStatistics, ModelLimiter, Permit
from satsuma.models._limits import estimate_input_tokens
from satsuma.models._model import ModelRequest
from satsuma.models._run_limiters import _BY_NAME, limiter_for, model_limits
from satsuma.testing import Failure, FunctionModel, MessagesServer, Reply

IDLE = LimiterStatistics(in_use=0, waiting=0, paused_for=0.0)


@pytest.fixture(autouse=True)
def _no_limits_by_name() -> Iterator[None]:
    saved = dict(_BY_NAME)
    _BY_NAME.clear()
    yield
    _BY_NAME.clear()
    _BY_NAME.update(saved)


def _limiter(agent: Any) -> ModelLimiter | None:
    limiter: ModelLimiter | None = agent._target.current_actor().limiter
    return limiter


async def _admit(limiter: ModelLimiter, cost: int = 0) -> Permit:
    return limiter.admit_nowait(cost) or await limiter.admit(cost)


# --- ModelLimits ---------------------------------------------------------------------


def test_limits_name_every_wrong_field_at_once() -> None:
    with pytest.raises(ValueError) as caught:
        ModelLimits(max_concurrency=0, requests_per_minute=-1, tokens_per_minute="many")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "ModelLimits: max_concurrency must be an integer >= 1 or None, got: 0; "
        "requests_per_minute must be a positive number or None, got: -1; "
        "tokens_per_minute must be a positive number or None, got: 'many'"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"max_concurrency": True},
        {"max_concurrency": 2.0},
        {"requests_per_minute": math.inf},
        {"tokens_per_minute": math.nan},
        {"requests_per_minute": False},
    ],
)
def test_limits_refuse_what_is_not_a_bound(fields: dict[str, Any]) -> None:
    (name,) = fields
    with pytest.raises(ValueError, match=f"ModelLimits: {name} must be"):
        ModelLimits(**fields)


def test_limits_take_bounds_and_none() -> None:
    limits = ModelLimits(max_concurrency=20, requests_per_minute=50, tokens_per_minute=1e5)
    assert (limits.max_concurrency, limits.requests_per_minute) == (20, 50)
    assert ModelLimits() == ModelLimits(max_concurrency=None)


def test_set_model_limits_refuses_wrong_arguments_and_resolves_aliases() -> None:
    with pytest.raises(TypeError, match="model must be a model string, got: 3"):
        set_model_limits(3, ModelLimits())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="set_model_limits: unknown model 'sonet': use an alias"):
        set_model_limits("sonet", ModelLimits())
    with pytest.raises(ValueError, match="unknown provider 'azure'"):
        set_model_limits("azure:gpt-5", ModelLimits())
    with pytest.raises(TypeError, match=r"limits must be a satsuma.ModelLimits or None, got: \{"):
        set_model_limits("sonnet", {"max_concurrency": 2})  # type: ignore[arg-type]
    limits = ModelLimits(max_concurrency=2)
    set_model_limits("sonnet", limits)
    assert model_limits(satsuma.MODEL_ALIASES["sonnet"]) is limits
    set_model_limits(satsuma.MODEL_ALIASES["sonnet"], None)
    assert model_limits("sonnet") is None
    # The same model id at two providers: two models.
    set_model_limits("openai:claude-sonnet-5-5", limits)
    assert model_limits("openai:claude-sonnet-5-5") is limits
    assert model_limits("bedrock:claude-sonnet-5-5") is None
    assert model_limits("sonnet") is None


# --- the limiter, on the virtual clock -------------------------------------------------


async def test_max_concurrency_bounds_calls_in_progress(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(max_concurrency=3))
    in_progress = peak = 0

    async def call() -> None:
        nonlocal in_progress, peak
        permit = await _admit(limiter)
        try:
            in_progress += 1
            peak = max(peak, in_progress)
            await trio.sleep(1)
        finally:
            in_progress -= 1
            permit.release()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(call)
    assert peak == 3
    assert trio.current_time() - start == pytest.approx(4.0)  # 3 + 3 + 3 + 1
    assert limiter.statistics() == IDLE


async def test_a_permit_held_with_async_with_is_released_however_the_block_ends(
    autojump_clock: Any,
) -> None:
    # As trio's CapacityLimiter is held: the block's exit releases the slot, once, also
    # when the block raises; a waiter cancelled in the queue never held one.
    limiter = ModelLimiter(ModelLimits(max_concurrency=1))
    async with limiter.admit(0) as permit:
        assert limiter.statistics().in_use == 1 and not permit.released
        with trio.move_on_after(5) as scope:
            async with limiter.admit(0):
                pytest.fail("admitted past a full limiter")
        assert scope.cancelled_caught
        assert limiter.statistics() == LimiterStatistics(in_use=1, waiting=0, paused_for=0.0)
        permit.release()  # released early: the block's exit does not release it again
    assert limiter.statistics() == IDLE
    with pytest.raises(ZeroDivisionError):
        async with limiter.admit(0):
            1 / 0  # noqa: B018  # the block fails
    assert limiter.statistics() == IDLE
    taken = limiter.admit_nowait(0)
    assert taken is not None
    async with taken:
        assert limiter.statistics().in_use == 1
    assert taken.released and limiter.statistics() == IDLE


async def test_a_busy_caller_goes_behind_those_already_waiting(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(max_concurrency=1))
    order: list[str] = []

    async def busy() -> None:
        for _ in range(4):
            permit = await _admit(limiter)
            order.append("busy")
            await trio.sleep(1)
            permit.release()  # and asks again at once

    async def other(name: str, arrive: float) -> None:
        await trio.sleep(arrive)
        permit = await _admit(limiter)
        order.append(name)
        await trio.sleep(1)
        permit.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy)
        for index, name in enumerate("abc"):
            nursery.start_soon(other, name, 0.25 + index * 0.25)
    assert order == ["busy", "a", "b", "c", "busy", "busy", "busy"]
    assert limiter.statistics() == IDLE


async def test_requests_per_minute_lets_a_minute_go_then_paces(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(requests_per_minute=60))
    start = trio.current_time()
    admitted: list[float] = []

    async def call() -> None:
        permit = await _admit(limiter)
        admitted.append(trio.current_time() - start)
        permit.release()

    async with trio.open_nursery() as nursery:
        for _ in range(63):
            nursery.start_soon(call)
    assert admitted[:60] == [0.0] * 60
    assert admitted[60:] == pytest.approx([1.0, 2.0, 3.0])


async def test_a_retry_is_one_more_request(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(requests_per_minute=2))
    start = trio.current_time()
    permit = await _admit(limiter)
    permit.retried()  # the bucket is empty now: 2 requests sent
    permit.release()
    await _admit(limiter)
    assert trio.current_time() - start == pytest.approx(30.0)  # a request's worth refilled


async def test_tokens_are_corrected_with_the_reported_usage(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(tokens_per_minute=600))  # 10 tokens a second
    start = trio.current_time()
    first = await _admit(limiter, 600)
    first.settle(Usage(input_tokens=50, cache_creation_input_tokens=50, cache_read_input_tokens=9))
    first.release()
    second = await _admit(limiter, 500)  # 500 given back: no wait
    assert trio.current_time() == start
    second.settle(Usage(input_tokens=800))  # 300 more than estimated: a debt
    second.release()
    await _admit(limiter, 100)
    # -300 after the second; 100 needed: 400 tokens at 10 a second.
    assert trio.current_time() - start == pytest.approx(40.0)


async def test_a_call_larger_than_a_minute_waits_for_a_full_bucket(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(tokens_per_minute=600))
    start = trio.current_time()
    (await _admit(limiter, 300)).release()
    (await _admit(limiter, 10_000)).release()
    assert trio.current_time() - start == pytest.approx(30.0)


async def test_a_pause_holds_new_calls_but_not_those_in_progress(autojump_clock: Any) -> None:
    limiter = ModelLimiter(ModelLimits(max_concurrency=5))
    start = trio.current_time()
    holding = await _admit(limiter)
    limiter.pause(5)
    limiter.pause(2)  # a shorter pause does not shorten the longer one
    assert limiter.statistics().paused_for == pytest.approx(5.0)
    assert limiter.blocked(0) == "paused 5.0s by the API's retry-after"
    assert limiter.admit_nowait(0) is None
    await _admit(limiter)
    assert trio.current_time() - start == pytest.approx(5.0)
    assert limiter.statistics().in_use == 2 and not holding.released


async def test_a_call_behind_the_queue_does_not_jump_it(autojump_clock: Any) -> None:
    # The first of the queue needs many tokens: calls after it, small as they are, wait.
    limiter = ModelLimiter(ModelLimits(tokens_per_minute=600))
    order: list[str] = []
    (await _admit(limiter, 600)).release()

    async def call(name: str, cost: int, arrive: float) -> None:
        await trio.sleep(arrive)
        permit = await _admit(limiter, cost)
        order.append(name)
        permit.release()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "big", 500, 0)
        nursery.start_soon(call, "small", 1, 1)
    assert order == ["big", "small"]


_PLANS = st.lists(
    st.tuples(
        st.floats(0, 4, allow_nan=False),  # when it asks
        st.floats(0, 3, allow_nan=False),  # how long it holds its slot
        st.none() | st.floats(0, 8, allow_nan=False),  # when it is cancelled, if it is
        st.integers(1, 3),  # how many calls it makes in a row (asking again at once)
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(1, 4),
    per_minute=st.none() | st.integers(1, 120),
    pauses=st.lists(st.tuples(st.floats(0, 6), st.floats(0.1, 3)), max_size=3),
    plans=_PLANS,
)
def test_cancelled_waiters_never_hold_a_slot_and_no_waiter_is_lost(
    capacity: int,
    per_minute: int | None,
    pauses: list[tuple[float, float]],
    plans: list[tuple[float, float, float | None, int]],
) -> None:
    limits = ModelLimits(max_concurrency=capacity, requests_per_minute=per_minute)
    asked: list[tuple[int, int]] = []  # (waiter, call) in the order they asked
    admitted: list[tuple[int, int]] = []
    finished: set[int] = set()
    cancelled: set[int] = set()
    over_capacity: list[int] = []

    async def scenario() -> LimiterStatistics:
        limiter = ModelLimiter(limits)

        async def waiter(
            number: int, arrive: float, hold: float, cancel: float | None, calls: int
        ) -> None:
            scope = trio.move_on_after(cancel) if cancel is not None else nullcontext()
            with scope:
                await trio.sleep(arrive)
                for call in range(calls):
                    asked.append((number, call))
                    permit = await _admit(limiter)
                    try:
                        admitted.append((number, call))
                        if limiter.statistics().in_use > capacity:
                            over_capacity.append(number)
                        await trio.sleep(hold)
                    finally:
                        permit.release()
                finished.add(number)
            if isinstance(scope, trio.CancelScope) and scope.cancelled_caught:
                cancelled.add(number)

        async def pauser(at: float, seconds: float) -> None:
            await trio.sleep(at)
            limiter.pause(seconds)

        # A slot that leaked would leave a waiter waiting forever: on the virtual clock,
        # this deadline comes at once then, and the test fails instead of hanging.
        with trio.fail_after(10_000):
            await _everyone(pauser, waiter)
        return limiter.statistics()

    async def _everyone(pauser: Any, waiter: Any) -> None:
        async with trio.open_nursery() as nursery:
            for at, seconds in pauses:
                nursery.start_soon(pauser, at, seconds)
            for number, plan in enumerate(plans):
                nursery.start_soon(waiter, number, *plan)

    statistics = trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    assert statistics.in_use == 0 and statistics.waiting == 0
    assert over_capacity == []
    # Every waiter either got through or was cancelled; none is left waiting forever.
    assert finished | cancelled == set(range(len(plans)))
    assert not finished & cancelled
    # FIFO: the calls admitted went in the order they asked.
    taken = set(admitted)
    assert admitted == [call for call in asked if call in taken]


# --- agents sharing a limiter ------------------------------------------------------------


class Sonnet(satsuma.Agent):
    name = "sonnet_agent"
    model = "sonnet"


class SonnetById(satsuma.Agent):
    name = "sonnet_by_id"
    model = satsuma.MODEL_ALIASES["sonnet"]


class Haiku(satsuma.Agent):
    name = "haiku_agent"
    model = "haiku"


def _slow_model(seconds: float) -> tuple[FunctionModel, list[int]]:
    """A model whose calls take ``seconds``; the list holds the peak of calls at once."""
    state = {"now": 0}
    peak = [0]

    async def answer(request: ModelRequest) -> str:
        state["now"] += 1
        peak[0] = max(peak[0], state["now"])
        try:
            await trio.sleep(seconds)
        finally:
            state["now"] -= 1
        return "done"

    return FunctionModel(answer), peak


async def test_agents_naming_one_model_share_its_limits(autojump_clock: Any) -> None:
    set_model_limits("sonnet", ModelLimits(max_concurrency=1))
    model, peak = _slow_model(1.0)
    events: dict[str, list[object]] = {"sonnet": [], "by_id": [], "haiku": []}
    async with (
        open_agent(Sonnet, model=model) as sonnet,
        open_agent(SonnetById, model=model) as by_id,
        open_agent(Haiku, model=model) as haiku,
    ):
        limiter = _limiter(sonnet)
        assert limiter is _limiter(by_id) is not None
        assert _limiter(haiku) is None  # no limits for haiku: nothing to pay
        async with trio.open_nursery() as nursery:
            for agent, name in ((sonnet, "sonnet"), (by_id, "by_id"), (haiku, "haiku")):
                nursery.start_soon(lambda a=agent, n=name: a.run("Hi", events=events[n].append))
    assert peak[0] == 2  # the two sonnet agents one at a time, haiku beside them
    waits = [
        event
        for event in events["sonnet"] + events["by_id"]
        if isinstance(event, ModelWaitStart | ModelWaitEnd)
    ]
    assert [type(event) for event in waits] == [ModelWaitStart, ModelWaitEnd]
    start, end = waits
    assert isinstance(start, ModelWaitStart) and isinstance(end, ModelWaitEnd)
    assert (start.reason, start.queued) == ("1 of 1 slots in use", 1)
    assert end.seconds == pytest.approx(1.0)
    assert not any(isinstance(e, ModelWaitStart | ModelWaitEnd) for e in events["haiku"])
    assert limiter.statistics() == IDLE


async def test_the_last_limits_set_hold_for_every_agent_sharing_them(autojump_clock: Any) -> None:
    model, _ = _slow_model(0.0)
    set_model_limits("sonnet", ModelLimits(max_concurrency=1))
    async with open_agent(Sonnet, model=model) as first:
        set_model_limits("sonnet", ModelLimits(max_concurrency=4))
        async with open_agent(SonnetById, model=model) as second:
            limiter = _limiter(first)
            assert limiter is _limiter(second) is not None
            assert limiter.limits == ModelLimits(max_concurrency=4)
    other, _ = _slow_model(0.0)  # another model object: another configuration
    assert limiter_for(other, "sonnet") is not limiter


class OpenAIChat(satsuma.Agent):
    name = "openai_chat"
    model = "openai:gpt-5"


async def test_limits_set_for_a_provider_model_hold_for_its_agents_only() -> None:
    set_model_limits("openai:gpt-5", ModelLimits(max_concurrency=1))
    model, _ = _slow_model(0.0)
    async with (
        open_agent(OpenAIChat, model=model) as chat,
        open_agent(Sonnet, model=model) as sonnet,
    ):
        limiter = _limiter(chat)
        assert limiter is not None and limiter.limits == ModelLimits(max_concurrency=1)
        assert _limiter(sonnet) is None


async def test_a_run_cancelled_while_it_waits_frees_its_place(autojump_clock: Any) -> None:
    set_model_limits("sonnet", ModelLimits(max_concurrency=1))
    model, _ = _slow_model(10.0)
    waiting = trio.Event()

    def seen(event: object) -> None:
        if isinstance(event, ModelWaitStart):
            waiting.set()

    async with (
        open_agent(Sonnet, model=model) as first,
        open_agent(SonnetById, model=model) as second,
    ):
        limiter = _limiter(first)
        assert limiter is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "Take the slot")
            await trio.sleep(1)
            results: list[Any] = []

            async def run_second() -> None:
                results.append(await second.run("Wait", events=seen))

            nursery.start_soon(run_second)
            await waiting.wait()
            assert limiter.statistics().waiting == 1
            await second.cancel()
        assert results[0].status == "cancelled"
        assert limiter.statistics() == IDLE


def test_the_estimate_counts_system_messages_and_tools() -> None:
    request = ModelRequest(
        model="claude-x",
        system="s" * 400,
        messages=(Message.user("m" * 800),),
        tools=({"name": "t", "description": "d" * 380},),
    )
    estimate = estimate_input_tokens(request)
    assert 100 + 200 + 95 <= estimate <= 100 + 200 + 95 + 20


# --- AnthropicModel against the loopback API ---------------------------------------------


async def test_anthropic_model_refuses_limits_of_the_wrong_type() -> None:
    async with MessagesServer() as server:
        with pytest.raises(TypeError, match=r"limits must be a satsuma\.ModelLimits or None"):
            AnthropicModel(server.client(), limits=20)  # type: ignore[arg-type]


async def test_concurrency_holds_against_the_api() -> None:
    in_flight = peak = 0

    async def answer(body: dict[str, Any]) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await trio.sleep(0.02)
        finally:
            in_flight -= 1
        return "ok"

    async with MessagesServer(then=answer) as server:
        model = AnthropicModel(server.client(), limits=ModelLimits(max_concurrency=2))
        results: list[Any] = []
        async with trio.open_nursery() as nursery:
            for _ in range(6):

                async def run() -> None:
                    async with open_agent(Sonnet, model=model) as agent:
                        results.append(await agent.run("Hi"))

                nursery.start_soon(run)
    assert [result.output for result in results] == ["ok"] * 6
    assert peak == 2  # 6 at once without the limit
    assert len(server.requests) == 6


async def test_retry_after_pauses_every_user_of_the_configuration() -> None:
    arrivals: list[float] = []

    def answer(body: dict[str, Any]) -> Any:
        arrivals.append(trio.current_time())
        if len(arrivals) == 1:
            return Failure.rate_limited(retry_after=0.3)
        return "ok"

    retried = trio.Event()

    def seen(event: object) -> None:
        if isinstance(event, ModelRetry):
            retried.set()

    async with MessagesServer(then=answer) as server:
        model = AnthropicModel(
            server.client(), backoff_base=0.001, jitter=False, limits=ModelLimits()
        )
        results: list[Any] = []
        async with (
            open_agent(Sonnet, model=model) as first,
            open_agent(Haiku, model=model) as second,
        ):
            events: list[object] = []

            async def run_first() -> None:
                results.append(await first.run("Hi", events=seen))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_first)
                await retried.wait()  # the 429 has come
                results.append(await second.run("Hi", events=events.append))
    assert [result.output for result in results] == ["ok", "ok"]
    assert len(arrivals) == 3
    # Neither the call that got the 429 nor the other agent's asked before the pause ended.
    assert min(arrivals[1:]) >= arrivals[0] + 0.3


class _AskedToWait:
    """A model whose first answer says what a 429 with ``retry-after: 5`` says."""

    def __init__(self) -> None:
        self.calls = 0

    async def respond(self, request: ModelRequest, listener: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            listener.retry_after(5.0)
        await trio.sleep(1)
        return await FunctionModel(lambda request: "ok").respond(request, listener)


async def test_a_pause_asked_by_one_call_makes_the_others_wait(autojump_clock: Any) -> None:
    model = _AskedToWait()
    set_model_limits("sonnet", ModelLimits())
    set_model_limits("haiku", ModelLimits())  # another configuration: not paused
    events: list[object] = []
    async with (
        open_agent(Sonnet, model=model) as first,
        open_agent(SonnetById, model=model) as second,
        open_agent(Haiku, model=model) as third,
    ):
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "Hi")
            await trio.sleep(0.5)
            nursery.start_soon(lambda: second.run("Hi", events=events.append))
            await third.run("Hi")
            assert trio.current_time() - start == pytest.approx(1.5)
    assert trio.current_time() - start == pytest.approx(6.0)  # 0.5 + 4.5 paused + 1
    start_event, end_event = [e for e in events if isinstance(e, ModelWaitStart | ModelWaitEnd)]
    assert isinstance(start_event, ModelWaitStart) and isinstance(end_event, ModelWaitEnd)
    assert start_event.reason == "paused 4.5s by the API's retry-after"
    assert end_event.seconds == pytest.approx(4.5)


class _RetriedOnce:
    """A model whose call is retried once (as after a 529), then answers with a known
    usage."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def respond(self, request: ModelRequest, listener: Any) -> Any:
        self.requests.append(request)
        listener.retry(1, 0.0, "529: Overloaded")
        usage = Usage(input_tokens=100, cache_creation_input_tokens=20, output_tokens=1)
        reply = FunctionModel(lambda request: Reply(text="ok", usage=usage))
        return await reply.respond(request, listener)


async def test_a_run_charges_its_retries_and_corrects_its_tokens(autojump_clock: Any) -> None:
    set_model_limits("sonnet", ModelLimits(requests_per_minute=10, tokens_per_minute=6000))
    model = _RetriedOnce()
    async with open_agent(Sonnet, model=model) as agent:
        limiter = _limiter(agent)
        assert limiter is not None
        result = await agent.run("Hi")
        assert result.output == "ok"
        estimate = estimate_input_tokens(model.requests[0])
        # Two requests sent (the first attempt and its retry), each with the input; the
        # one answered corrected to what the API reported: 100 + 20 (cache reads free).
        assert limiter._requests is not None and limiter._tokens is not None
        assert limiter._requests.level == pytest.approx(10 - 2)
        assert limiter._tokens.level == pytest.approx(6000 - estimate - 120)


async def test_a_model_dropped_takes_its_limiter_with_it(
    collect_garbage: Callable[[], int],
) -> None:
    class Limited:
        limits = ModelLimits(max_concurrency=1)

    class Slotted:  # takes no weak reference: kept for the run instead
        __slots__ = ()
        limits = ModelLimits(max_concurrency=1)

    model = Limited()
    limiter = limiter_for(model, "sonnet")
    assert limiter is not None and limiter is limiter_for(model, "haiku")  # its own limits
    gone = weakref.ref(limiter)
    del model, limiter
    collect_garbage()
    assert gone() is None
    slotted = Slotted()
    assert limiter_for(slotted, "sonnet") is limiter_for(slotted, "sonnet") is not None


def test_a_cluster_stream_reads_the_wait_events_back() -> None:
    from satsuma.cluster._events import decode_event, encode_event

    run = {"agent": "sonnet_agent", "run_id": "run_1", "iteration": 2}
    events = [
        ModelWaitStart(**run, reason="20 of 20 slots in use", queued=3),
        ModelWaitEnd(**run, seconds=1.5),
    ]
    assert [decode_event(encode_event(event)) for event in events] == events


# --- limits raised while calls wait ---------------------------------------------------

RAISES = {
    "requests_per_minute": (
        ModelLimits(requests_per_minute=1),
        ModelLimits(requests_per_minute=600),
    ),
    "tokens_per_minute": (
        ModelLimits(tokens_per_minute=100),
        ModelLimits(tokens_per_minute=60_000),
    ),
    "max_concurrency": (ModelLimits(max_concurrency=1), ModelLimits(max_concurrency=8)),
}


@pytest.mark.parametrize(("old", "new"), RAISES.values(), ids=RAISES.keys())
async def test_raised_limits_wake_the_calls_waiting_at_the_old_ones(
    autojump_clock: Any, old: ModelLimits, new: ModelLimits
) -> None:
    limiter = ModelLimiter(old)
    held = await _admit(limiter, cost=100)  # uses up the minute (or the one slot)
    admitted: list[float] = []

    async def call() -> None:
        permit = await _admit(limiter, cost=100)
        admitted.append(trio.current_time())
        permit.release()

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(call)
        await trio.sleep(5)
        assert admitted == []  # they wait at the old limits
        raised = trio.current_time()
        limiter.reconfigure(new)
    held.release()
    assert len(admitted) == 4
    assert max(admitted) - raised <= 1.0  # within a second of the raise, not of the old pace


async def test_set_model_limits_raises_them_for_agents_already_waiting(
    autojump_clock: Any,
) -> None:
    set_model_limits("sonnet", ModelLimits(requests_per_minute=1))
    calls: list[float] = []

    def answer(request: ModelRequest) -> str:
        calls.append(trio.current_time())
        return "done"

    model = FunctionModel(answer)
    async with (
        open_agent(Sonnet, model=model) as first,
        open_agent(SonnetById, model=model) as second,
    ):
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for agent in (first, second, first, second):
                nursery.start_soon(agent.run, "Hi")
            await trio.sleep(5)
            assert len(calls) == 1  # the minute's one request went; three wait
            raised = trio.current_time()
            set_model_limits("sonnet", ModelLimits(requests_per_minute=600))
        limiter = _limiter(first)
        assert limiter is not None and limiter.limits == ModelLimits(requests_per_minute=600)
    assert len(calls) == 4 and calls[0] == start
    assert max(calls) - raised <= 1.0
