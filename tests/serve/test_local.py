"""LocalRuns: runs owned by the server, numbered events, approvals decided one call at a
time, if_busy, cancellation, and what survives a restart (a new LocalRuns on the same
SQLite file)."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest
import serve_agents
import trio
import trio.lowlevel
import trio.testing
from serve_agents import Banker, Greeter, scripted, two_transfers

from satsuma import Approve, Deny
from satsuma.serve._eventlog import EventLog
from satsuma.serve._local import LocalRuns
from satsuma.serve._open_runs import open_local_runs
from satsuma.serve._runs import AlreadyDecided, BadDecision, Busy, UnknownAgent, UnknownRun
from satsuma.serve._views import stored_id
from satsuma.store import SQLiteStore
from satsuma.testing import Reply


async def tool_started(runs: LocalRuns, run_id: str) -> None:
    """Until the run's slow tool has started (its model call is then spent)."""
    async with aclosing(runs.events(run_id)) as events:
        async for event in events:
            if event.type == "ToolCallStart":
                return


@pytest.fixture(autouse=True)
def _reset() -> None:
    serve_agents.done.clear()
    serve_agents.gate["open"] = trio.Event()


async def test_a_run_is_started_then_waited_for_and_its_events_are_numbered() -> None:
    async with open_local_runs([Banker], model=scripted("Hello.")) as runs:
        started = await runs.start("banker", "t-1", "Hi")
        assert started.status == "queued"
        ended = await runs.wait(started.run_id)
        assert (ended.status, ended.output, ended.pending) == ("completed", "Hello.", ())
        assert ended.usage["output_tokens"] > 0
        events = [event async for event in runs.events(started.run_id)]
        assert [e.id for e in events] == list(range(1, len(events) + 1))
        assert (events[0].type, events[-1].type) == ("RunStart", "RunEnd")
        # Resuming after any id gives exactly the rest.
        for after in range(len(events) + 1):
            rest = [e.id async for e in runs.events(started.run_id, after=after)]
            assert rest == [e.id for e in events[after:]]
        assert await runs.get(started.run_id) == ended
        assert await runs.ready()


async def test_the_conversation_is_kept_under_the_agents_name() -> None:
    models = {"banker": scripted("From the bank."), "greeter": scripted("Hello there.")}
    async with open_local_runs([Banker, Greeter], model=models) as runs:
        await runs.wait((await runs.start("banker", "same", "Money?")).run_id)
        await runs.wait((await runs.start("greeter", "same", "Hi?")).run_id)
        bank = await runs.messages("banker", "same")
        greet = await runs.messages("greeter", "same")
        assert [m["role"] for m in bank] == ["user", "assistant"]
        assert bank[0]["content"][0]["text"] == "Money?"
        assert greet[0]["content"][0]["text"] == "Hi?"
        assert await runs.messages("greeter", "never") == []
        with pytest.raises(UnknownAgent):
            await runs.messages("nobody", "same")
        with pytest.raises(UnknownAgent):
            await runs.start("nobody", "same", "Hi")
    assert stored_id("banker", "same") == "banker/same"


async def test_unknown_runs_and_bad_prompts() -> None:
    async with open_local_runs([Banker], model=scripted()) as runs:
        with pytest.raises(UnknownRun):
            await runs.get("run_nope")
        with pytest.raises(UnknownRun):
            await runs.wait("run_nope")
        with pytest.raises(UnknownRun):
            [e async for e in runs.events("run_nope")]
        with pytest.raises(ValueError, match="prompt"):
            await runs.start("banker", "t", "  ")


async def test_approvals_are_decided_one_call_at_a_time() -> None:
    async with open_local_runs([Banker], model=scripted(*two_transfers("Paid."))) as runs:
        paused = await runs.wait((await runs.start("banker", "t", "Pay")).run_id)
        assert paused.status == "awaiting_approval"
        first, second = paused.pending
        assert (first.tool, first.input) == ("transfer", {"to": "bob", "amount": 10})
        assert [p.call_id for p in await runs.pending()] == [first.call_id, second.call_id]
        assert await runs.decide(paused.run_id, first.call_id, Approve(by="ops")) is None
        assert serve_agents.done == []  # nothing runs before every call is decided
        assert [p.call_id for p in await runs.pending("banker")] == [second.call_id]
        # The run's view waits on the undecided call only, as the approvals list does.
        assert [p.call_id for p in (await runs.get(paused.run_id)).pending] == [second.call_id]
        with pytest.raises(AlreadyDecided):
            await runs.decide(paused.run_id, first.call_id, Deny("changed my mind"))
        with pytest.raises(BadDecision):
            await runs.decide(paused.run_id, "toolu_nope", Approve())
        with pytest.raises(BadDecision, match="amount"):
            await runs.decide(paused.run_id, second.call_id, Approve(input={"to": "al"}))
        resumed = await runs.decide(paused.run_id, second.call_id, Deny("too small"))
        assert resumed is not None and resumed.run_id == paused.run_id
        ended = await runs.wait(paused.run_id)
        assert (ended.status, ended.output) == ("completed", "Paid.")
        assert serve_agents.done == ["transfer 10 to bob"]
        assert await runs.pending() == []
        decided = await runs._store.approvals(paused.run_id)
        assert [(a.decision.verdict, a.decision.decided_by) for a in decided if a.decision] == [
            ("approved", "ops"),
            ("denied", None),
        ]
        with pytest.raises(AlreadyDecided):
            await runs.decide(paused.run_id, second.call_id, Approve())
        # One log across the pause: numbers go on, a reader from 0 stops at the pause.
        ids = [e.id async for e in runs.events(paused.run_id)]
        later = [e.id async for e in runs.events(paused.run_id, after=ids[-1])]
        assert later[0] == ids[-1] + 1
        assert ids + later == list(range(1, len(ids) + len(later) + 1))


async def test_a_pending_approval_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "agents.db"
    async with (
        SQLiteStore(db) as store,
        open_local_runs([Banker], store=store, model=scripted(*two_transfers())) as runs,
    ):
        paused = await runs.wait((await runs.start("banker", "t", "Pay")).run_id)
        assert paused.status == "awaiting_approval"
    async with (
        SQLiteStore(db) as store,
        open_local_runs([Banker], store=store, model=scripted("Paid after a restart.")) as runs,
    ):
        view = await runs.get(paused.run_id)
        assert (view.status, len(view.pending)) == ("awaiting_approval", 2)
        calls = await runs.pending()
        assert [c.call_id for c in calls] == [p.call_id for p in paused.pending]
        assert await runs.decide(paused.run_id, calls[0].call_id, Approve()) is None
    async with (  # the decision taken before this restart still stands, and shows
        SQLiteStore(db) as store,
        open_local_runs([Banker], store=store, model=scripted("Paid after a restart.")) as runs,
    ):
        view = await runs.get(paused.run_id)
        assert [p.call_id for p in view.pending] == [calls[1].call_id]
        assert await runs.decide(paused.run_id, calls[1].call_id, Approve()) is not None
        ended = await runs.wait(paused.run_id)
        assert (ended.status, ended.output) == ("completed", "Paid after a restart.")
        assert sorted(serve_agents.done) == ["transfer 10 to bob", "transfer 2 to al"]
        # An ended run from the store: its view and its end.
        assert (await runs.get(paused.run_id)).status == "completed"


async def test_a_run_belongs_to_the_server_not_to_its_waiter() -> None:
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with open_local_runs([Banker], model=model) as runs:
        started = await runs.start("banker", "t", "Go")
        with trio.move_on_after(0.01):
            await runs.wait(started.run_id)  # the waiter gives up
        serve_agents.gate["open"].set()
        ended = await runs.wait(started.run_id)
        assert (ended.status, ended.output) == ("completed", "Finished.")


async def test_cancel_a_running_a_queued_and_a_paused_run() -> None:
    model = scripted(
        Reply(tool_calls=[("slow", {"label": "a"})]),
        *two_transfers("unused"),
    )
    async with open_local_runs([Banker], model=model) as runs:
        running = await runs.start("banker", "t", "Go")
        queued = await runs.start("banker", "t", "Then this")
        assert (await runs.get(queued.run_id)).status == "queued"
        cancelled = await runs.cancel(queued.run_id)
        assert cancelled.status == "cancelled"
        await tool_started(runs, running.run_id)
        assert (await runs.cancel(running.run_id)).status == "cancelled"
        events = [e async for e in runs.events(running.run_id)]
        assert events[-1].type == "RunEnd"
        assert serve_agents.done == []
        paused = await runs.wait((await runs.start("banker", "t", "Pay")).run_id)
        assert paused.status == "awaiting_approval"
        assert (await runs.cancel(paused.run_id)).status == "cancelled"
        assert await runs.pending() == []
        assert serve_agents.done == []
        # Cancelling an ended run answers it as it is.
        assert (await runs.cancel(paused.run_id)).status == "cancelled"


async def test_if_busy_enqueue_reject_and_interrupt() -> None:
    model = scripted(
        Reply(tool_calls=[("slow", {"label": "a"})]),
        "First done.",
        "Second done.",
    )
    async with open_local_runs([Banker], model=model) as runs:
        first = await runs.start("banker", "t", "One")
        second = await runs.start("banker", "t", "Two", if_busy="enqueue")
        with pytest.raises(Busy):
            await runs.start("banker", "t", "Three", if_busy="reject")
        await tool_started(runs, first.run_id)
        steered = await runs.start("banker", "t", "Also this", if_busy="interrupt")
        assert steered.run_id == first.run_id
        serve_agents.gate["open"].set()
        assert (await runs.wait(first.run_id)).output == "First done."
        assert (await runs.wait(second.run_id)).output == "Second done."
        # The steering message reached the model in the first run.
        texts = str(model.requests[1].messages)
        assert "Also this" in texts
        newest = await runs.runs("banker", "t")
        assert [v.run_id for v in newest][:2] == [second.run_id, first.run_id]


async def test_idle_agents_are_closed_and_reopened(autojump_clock: trio.testing.MockClock) -> None:
    model = scripted("One.", "Two.")
    async with open_local_runs([Banker], model=model, idle_seconds=10) as runs:
        await runs.wait((await runs.start("banker", "t", "a")).run_id)
        await trio.sleep(60)
        assert runs._conversations == {}
        second = await runs.wait((await runs.start("banker", "t", "b")).run_id)
        assert second.output == "Two."
        assert len(await runs.messages("banker", "t")) == 4


async def test_events_past_retention_come_from_the_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_local_runs([Banker], model=scripted("Done."), retention_seconds=5) as runs:
        run_id = (await runs.wait((await runs.start("banker", "t", "a")).run_id)).run_id
        await trio.sleep(30)
        assert run_id not in runs._runs
        assert [e.type async for e in runs.events(run_id)] == ["RunEnd"]
        assert (await runs.get(run_id)).output == "Done."


async def test_a_bounded_log_tells_a_late_reader_what_it_lost() -> None:
    log = EventLog(limit=10)
    for n in range(25):
        log.append({"type": "TextDelta", "n": n})
    log.append({"type": "RunEnd"})
    log.settle()
    events = [e async for e in log.follow(0)]
    assert events[0].type == "EventsLost"
    assert events[0].data["first_id"] == 1
    ids = [e.id for e in events]
    assert ids == sorted(set(ids)) and ids[-1] == 26
    # A reader within the window misses nothing.
    assert [e.id async for e in log.follow(24)] == [25, 26]


async def test_events_dropped_while_a_reader_takes_its_loss_are_told_too() -> None:
    # The reader is suspended on the EventsLost event (its send blocked) while the run
    # goes on and the log drops more: every id after it is either given or told lost,
    # never skipped in silence.
    log = EventLog(limit=10)
    for n in range(25):
        log.append({"type": "TextDelta", "n": n})
    reader = log.follow(0)
    first = await reader.__anext__()
    assert (first.type, first.data["first_id"], first.id) == ("EventsLost", 1, 15)
    for n in range(25, 60):
        log.append({"type": "TextDelta", "n": n})
    log.append({"type": "RunEnd"})
    log.settle()
    rest = [event async for event in reader]
    given = {e.id for e in [first, *rest] if e.type != "EventsLost"}
    told = set()
    for event in (first, *rest):
        if event.type == "EventsLost":
            told |= set(range(event.data["first_id"], event.data["last_id"] + 1))
    ids = [e.id for e in (first, *rest)]
    assert ids == sorted(set(ids))  # in order, nothing twice
    assert given | told == set(range(1, 62)) and not given & told
    assert rest[-1].type == "RunEnd"


async def test_many_readers_follow_one_live_run() -> None:
    log = EventLog()
    seen: list[list[int]] = [[] for _ in range(50)]

    async def read(into: list[int]) -> None:
        async for event in log.follow(0):
            into.append(event.id)

    async with trio.open_nursery() as nursery:
        for into in seen:
            nursery.start_soon(read, into)
        await trio.testing.wait_all_tasks_blocked()
        for n in range(5):
            log.append({"type": "TextDelta", "n": n})
            await trio.lowlevel.checkpoint()
        log.append({"type": "RunEnd"})
        log.settle()
    assert all(ids == [1, 2, 3, 4, 5, 6] for ids in seen)


async def test_an_event_appended_unencoded_is_encoded_once_when_first_read() -> None:
    log = EventLog()
    encoded: list[int] = []

    def encoder(n: int) -> dict[str, object]:
        encoded.append(n)
        return {"type": "TextDelta", "n": n}

    log.append_lazy("TextDelta", lambda: encoder(1))
    log.append_lazy("TextDelta", lambda: encoder(2))
    assert (log.last_type, log.last_id, encoded) == ("TextDelta", 2, [])
    seen: list[list[object]] = [[], []]

    async def read(into: list[object]) -> None:
        async for event in log.follow(0):
            into.append((event.id, event.data["n"] if event.type == "TextDelta" else None))

    async with trio.open_nursery() as nursery:
        for into in seen:
            nursery.start_soon(read, into)
        await trio.testing.wait_all_tasks_blocked()
        # Readers waiting for more are woken by an unencoded event too.
        log.append_lazy("TextDelta", lambda: encoder(3))
        await trio.testing.wait_all_tasks_blocked()
        log.append({"type": "RunEnd"})
        log.settle()
    assert seen[0] == seen[1] == [(1, 1), (2, 2), (3, 3), (4, None)]
    assert encoded == [1, 2, 3]  # once each, however many read them


async def test_when_stopped_calls_back_once_when_the_run_ends() -> None:
    async with open_local_runs([Greeter], model=scripted("Hi.")) as runs:
        assert not runs.when_stopped("no-such-run", lambda: None)
        called: list[str] = []
        started = await runs.start("greeter", "w", "Hello")
        assert runs.when_stopped(started.run_id, lambda: called.append(started.run_id))
        ended = await runs.wait(started.run_id)
        assert ended.status == "completed" and called == [started.run_id]
        # Stopped already: the caller is told to wait another way.
        assert not runs.when_stopped(started.run_id, lambda: called.append("again"))
    assert called == [started.run_id]


async def test_a_new_run_goes_past_a_paused_one() -> None:
    async with open_local_runs([Banker], model=scripted(*two_transfers(), "Hi.")) as runs:
        paused = await runs.wait((await runs.start("banker", "t", "Pay")).run_id)
        assert paused.status == "awaiting_approval"
        later = await runs.wait((await runs.start("banker", "t", "Hello")).run_id)
        assert (later.status, later.output) == ("completed", "Hi.")
        gone = await runs.get(paused.run_id)
        assert (gone.status, gone.pending) == ("cancelled", ())
        assert await runs.pending() == []
        with pytest.raises(AlreadyDecided):
            await runs.decide(paused.run_id, paused.pending[0].call_id, Approve())
        assert serve_agents.done == []


async def test_cancelling_a_paused_run_with_some_calls_decided_denies_them_all() -> None:
    async with open_local_runs([Banker], model=scripted(*two_transfers(), "Hi.")) as runs:
        paused = await runs.wait((await runs.start("banker", "t", "Pay")).run_id)
        first, _ = paused.pending
        assert await runs.decide(paused.run_id, first.call_id, Approve()) is None
        cancelled = await runs.cancel(paused.run_id)
        assert (cancelled.status, cancelled.pending) == ("cancelled", ())
        assert serve_agents.done == []  # the approved call did not run either
        assert await runs.pending() == []
        after = await runs.wait((await runs.start("banker", "t", "Hello")).run_id)
        assert after.status == "completed"
