"""Agents with a store: the conversation committed before each model call and each tool
call, run records, the tool-call journal, resuming interrupted runs, store failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import Message
from satsuma.store import MemoryStore, RunRecord, SQLiteStore, Store
from satsuma.testing import FunctionModel, Reply, ScriptedModel, check_conversation

side_effects: list[str] = []


@satsuma.tool
async def send_email(to: str) -> str:
    """Send an email (not idempotent)."""
    side_effects.append(f"email {to}")
    return f"sent to {to}"


@satsuma.tool(idempotent=True)
async def read_inbox(folder: str) -> str:
    """Read a folder (idempotent)."""
    side_effects.append(f"read {folder}")
    return f"3 messages in {folder}"


class Secretary(satsuma.Agent):
    name = "secretary"
    tools = [send_email, read_inbox]


@pytest.fixture(autouse=True)
def _clear() -> None:
    side_effects.clear()


async def test_the_conversation_survives_the_agent_and_run_records_are_kept(store: Store) -> None:
    usage = satsuma.Usage(input_tokens=7, output_tokens=3)
    model = ScriptedModel(
        [
            Reply(tool_calls=[("read_inbox", {"folder": "in"})], usage=usage),
            Reply(text="3 new.", usage=usage),
            "Still 3.",
        ]
    )
    async with satsuma.open_agent(Secretary, model=model, store=store, agent_id="sec-1") as agent:
        first = await agent.run("Any mail?")
    assert len(await store.load_messages("sec-1")) == 4
    async with satsuma.open_agent(Secretary, model=model, store=store, agent_id="sec-1") as agent:
        assert len(agent.history) == 4  # loaded
        second = await agent.run("And now?")
        check_conversation(agent.history)
    stored = await store.load_messages("sec-1")
    assert [m.role for m in stored] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    runs = await store.runs("sec-1")
    assert [(r.run_id, r.status, r.prompt) for r in runs] == [
        (first.run_id, "completed", "Any mail?"),
        (second.run_id, "completed", "And now?"),
    ]
    assert runs[0].usage == satsuma.Usage(input_tokens=14, output_tokens=6)
    assert runs[0].ended_at is not None and runs[0].ended_at >= runs[0].started_at
    journal = await store.calls(first.run_id)
    assert [(e.tool_name, e.finished, e.content) for e in journal] == [
        ("read_inbox", True, "3 messages in in")
    ]


async def test_messages_are_committed_before_each_model_call_and_each_tool_call(
    store: Store,
) -> None:
    seen_by_model: list[int] = []
    seen_by_tool: list[list[str]] = []

    @satsuma.tool
    async def look(ctx: satsuma.ToolContext) -> str:
        """Look at what is stored."""
        stored = await store.load_messages("watched")
        seen_by_tool.append([m.role for m in stored])
        return "looked"

    class Watched(satsuma.Agent):
        name = "watched"
        tools = [look]

    async def reply(request: satsuma.ModelRequest) -> Reply | str:
        seen_by_model.append(len(await store.load_messages("watched")))
        return Reply(tool_calls=[("look", {})]) if len(request.messages) == 1 else "done"

    async with satsuma.open_agent(
        Watched, model=FunctionModel(reply), store=store, agent_id="watched"
    ) as agent:
        await agent.run("go")
    assert seen_by_model == [1, 3]  # the prompt, then prompt + tool_use + results
    assert seen_by_tool == [["user", "assistant"]]  # the tool_use message was there first


async def interrupted_state(store: Store, *, finished: bool) -> None:
    """What a kill in the middle of a tool turn leaves in the store: the prompt, the
    assistant's two calls, the run still 'running', the first call journaled as finished
    (if ``finished``) and the second as started only."""
    await store.write_tail(
        "sec-1",
        0,
        [
            Message.user("Read the inbox and email Bob"),
            Message(
                role="assistant",
                content=[
                    {
                        "type": "tool_use",
                        "id": "t_email",
                        "name": "send_email",
                        "input": {"to": "bob"},
                    },
                    {
                        "type": "tool_use",
                        "id": "t_read",
                        "name": "read_inbox",
                        "input": {"folder": "in"},
                    },
                ],
            ),
        ],
    )
    await store.start_run(
        RunRecord(
            run_id="run_killed",
            agent_id="sec-1",
            status="running",
            prompt="Read the inbox and email Bob",
            started_at=1.0,
        )
    )
    await store.call_started("run_killed", "t_email", "send_email", {"to": "bob"})
    if finished:
        await store.call_finished(
            "run_killed", "t_email", content="sent to bob", is_error=False, error_kind=None
        )
    await store.call_started("run_killed", "t_read", "read_inbox", {"folder": "in"})


@pytest.mark.parametrize("email_finished", [True, False])
async def test_resume_reuses_finished_calls_reruns_idempotent_ones_and_never_repeats_others(
    store: Store, email_finished: bool
) -> None:
    await interrupted_state(store, finished=email_finished)
    model = ScriptedModel(["Done: inbox read, Bob emailed."])
    async with satsuma.open_agent(Secretary, model=model, store=store, agent_id="sec-1") as agent:
        (record,) = [r for r in await store.runs("sec-1") if r.run_id == "run_killed"]
        assert record.status == "interrupted"
        result = await agent.resume("run_killed")
        history = agent.history
    assert result.status == "completed"
    assert result.run_id == "run_killed"
    check_conversation(history)
    answers = {r["tool_use_id"]: r["content"] for r in history[2].tool_results}
    if email_finished:
        assert answers["t_email"] == "sent to bob"  # the journaled outcome, not a second email
    else:
        assert answers["t_email"] == (
            "Error: Interrupted: the process stopped while this tool was running; "
            "not re-run because the tool is not idempotent."
        )
    assert answers["t_read"] == "3 messages in in"  # idempotent: run again
    assert side_effects == ["read in"]  # the email was never sent twice
    assert (await store.get_run("run_killed")).status == "completed"  # type: ignore[union-attr]


async def test_an_agent_that_says_so_resumes_interrupted_runs_when_it_starts(store: Store) -> None:
    await interrupted_state(store, finished=True)

    class Resuming(Secretary):
        name = "resuming"
        resume_interrupted = True

    async with satsuma.open_agent(
        Resuming, model=ScriptedModel(["Resumed."]), store=store, agent_id="sec-1"
    ) as agent:
        with trio.fail_after(10):  # the resumed run goes on by itself: wait for its end
            # A resumed run has no caller to wake: poll its record.
            while (await store.get_run("run_killed")).status != "completed":  # type: ignore[union-attr]  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert agent.history[-1].text == "Resumed."
    assert (await store.get_run("run_killed")).status == "completed"  # type: ignore[union-attr]


async def test_a_new_run_after_an_interrupted_one_first_answers_its_calls(store: Store) -> None:
    await interrupted_state(store, finished=True)
    async with satsuma.open_agent(
        Secretary, model=ScriptedModel(["OK."]), store=store, agent_id="sec-1"
    ) as agent:
        result = await agent.run("Something else")
        history = agent.history
    assert result.status == "completed"
    check_conversation(history)
    contents = [r["content"] for r in history[2].tool_results]
    assert contents[0] == "sent to bob"
    assert contents[1].startswith("Error: Interrupted:")  # not resumed: nothing is re-run
    assert side_effects == []
    # The new run went past the interrupted one, which can no longer be resumed.
    killed = await store.get_run("run_killed")
    assert killed is not None and killed.status == "cancelled"
    async with satsuma.open_agent(
        Secretary, model=ScriptedModel([]), store=store, agent_id="sec-1"
    ) as agent:
        with pytest.raises(ValueError, match="only an interrupted run can be resumed"):
            await agent.resume("run_killed")


async def test_the_prompt_is_stored_with_its_run_record(store: Store) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class Spy:
        def __init__(self, inner: Store) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            method = getattr(self.inner, name)

            async def spied(*args: Any, **kwargs: Any) -> Any:
                calls.append((name, kwargs))
                return await method(*args, **kwargs)

            return spied

    async with satsuma.open_agent(
        Secretary,
        model=ScriptedModel(["ok"]),
        store=Spy(store),
        agent_id="spy",  # type: ignore[arg-type]
    ) as agent:
        await agent.run("hello")
    names = [name for name, _ in calls]
    started = names.index("start_run")
    # One call, one transaction: the run record and its prompt.
    assert [m.text for m in calls[started][1]["messages"]] == ["hello"]
    assert calls[started][1]["start"] == 0
    assert "write_tail" not in names[:started]
    (record,) = await store.runs("spy")
    assert record.position == 0


async def test_resume_refuses_what_cannot_be_resumed(store: Store) -> None:
    async with satsuma.open_agent(
        Secretary, model=ScriptedModel(["x"]), store=store, agent_id="sec-1"
    ) as agent:
        done = await agent.run("hi")
        with pytest.raises(ValueError, match="only an interrupted run can be resumed"):
            await agent.resume(done.run_id)
        with pytest.raises(ValueError, match="has no run 'nope'"):
            await agent.resume("nope")
    async with satsuma.open_agent(Secretary, model=ScriptedModel([])) as agent:
        with pytest.raises(ValueError, match="has no store"):
            await agent.resume("x")
    with pytest.raises(ValueError, match="needs an agent_id"):
        async with satsuma.open_agent(Secretary, model=ScriptedModel([]), store=store):
            pass


async def test_a_full_disk_fails_the_run_clearly_and_keeps_what_was_committed(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        async with satsuma.open_agent(
            Secretary,
            model=ScriptedModel(["first answer", "x" * 300_000]),
            store=store,
            agent_id="a",
        ) as agent:
            assert (await agent.run("first")).status == "completed"
            connection = store._connection
            assert connection is not None
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {pages + 2}")
            result = await agent.run("y" * 300_000)
            assert result.status == "failed"
            assert result.error is not None
            assert "the disk is full" in result.error
        stored = await store.load_messages("a")
    assert [m.text for m in stored[:2]] == ["first", "first answer"]


async def test_a_supervised_agent_restarted_after_a_crash_reloads_its_conversation(
    tmp_path: Path,
) -> None:
    def reply(request: satsuma.ModelRequest) -> str:
        text = request.messages[-1].content[-1].get("text", "")
        if "crash" in text:
            raise RuntimeError("model bug")
        return f"echo: {text}"

    async with SQLiteStore(tmp_path / "s.db") as store, satsuma.Supervisor() as sup:
        agent = await sup.start_child(
            Secretary, model=FunctionModel(reply), store=store, agent_id="sec-9"
        )
        await agent.run("remember me")
        with pytest.raises(satsuma.AgentCrashed):
            await agent.run("crash")
        result = await agent.run("still there?")
        assert result.output == "echo: still there?"
        stored = await store.load_messages("sec-9")
    check_conversation(stored)
    assert stored[0].text == "remember me"
    runs = await SQLiteStore(tmp_path / "s.db").runs("sec-9")
    assert [r.status for r in runs] == ["completed", "failed", "completed"]


async def test_a_bad_database_file_fails_open_agent_at_start_with_a_clear_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"not a database " * 500)
    with pytest.raises(satsuma.StoreError, match="is not a SQLite database, or is corrupt"):
        async with satsuma.open_agent(
            Secretary, model=ScriptedModel([]), store=SQLiteStore(path), agent_id="a"
        ):
            pytest.fail("the agent must not start")


async def test_a_run_interrupted_before_an_earlier_restart_can_still_be_resumed(
    store: Store,
) -> None:
    await interrupted_state(store, finished=True)
    async with satsuma.open_agent(
        Secretary, model=ScriptedModel([]), store=store, agent_id="sec-1"
    ):
        pass  # started and stopped again without resuming (as a second kill would)
    async with satsuma.open_agent(
        Secretary, model=ScriptedModel(["Done."]), store=store, agent_id="sec-1"
    ) as agent:
        result = await agent.resume("run_killed")
    assert result.status == "completed"


async def test_a_resumed_run_stays_completed_when_a_new_run_follows(store: Store) -> None:
    await interrupted_state(store, finished=True)
    async with satsuma.open_agent(
        Secretary, model=ScriptedModel(["Resumed.", "Next."]), store=store, agent_id="sec-1"
    ) as agent:
        await agent.resume("run_killed")
        await agent.run("next")
    killed = await store.get_run("run_killed")
    assert killed is not None and killed.status == "completed"


async def test_two_hundred_agents_on_one_sqlite_store_lose_nothing(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "shared.db") as store:

        async def one(n: int) -> None:
            model = ScriptedModel(
                [Reply(tool_calls=[("read_inbox", {"folder": f"f{n}"})]), f"agent {n} done"]
            )
            async with satsuma.open_agent(
                Secretary, model=model, store=store, agent_id=f"a{n}"
            ) as agent:
                result = await agent.run(f"task {n}")
                assert result.status == "completed", result.error

        async with trio.open_nursery() as nursery:
            for n in range(200):
                nursery.start_soon(one, n)
        for n in range(200):
            stored = await store.load_messages(f"a{n}")
            check_conversation(stored)
            assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
            assert stored[-1].text == f"agent {n} done"
            (record,) = await store.runs(f"a{n}")
            assert record.status == "completed"


class _FailingJournal(MemoryStore):
    """A store whose journal fails, on start or on finish, as a full disk would."""

    def __init__(self, fail_on: str) -> None:
        super().__init__()
        self.fail_on = fail_on

    async def call_started(
        self, run_id: str, tool_use_id: str, tool_name: str, input: Any, **kwargs: Any
    ) -> None:
        if self.fail_on == "start":
            raise satsuma.StoreError("journal", "disk full")
        await super().call_started(run_id, tool_use_id, tool_name, input, **kwargs)

    async def call_finished(self, run_id: str, tool_use_id: str, **outcome: Any) -> None:
        if self.fail_on == "finish":
            raise satsuma.StoreError("journal", "disk full")
        await super().call_finished(run_id, tool_use_id, **outcome)


async def test_a_journal_that_cannot_record_a_start_fails_the_run_before_any_tool_runs() -> None:
    # The model never reads a "Denied" for a store problem: the run fails, truthfully.
    store = _FailingJournal("start")
    model = ScriptedModel([Reply(tool_calls=[("send_email", {"to": "bob"})]), "never"])
    async with satsuma.open_agent(Secretary, model=model, store=store, agent_id="s") as agent:
        result = await agent.run("mail bob")
        history = agent.history
    assert result.status == "failed"
    assert result.error == "Store journal: disk full"
    assert side_effects == []
    assert not any("Denied" in str(m.content) for m in history)
    check_conversation(history)
    assert history[-1].tool_results[0]["content"] == (
        "Error: Cancelled: the run failed on a store error before this tool finished."
    )


async def test_a_journal_that_cannot_record_an_outcome_leaves_the_outcome_standing() -> None:
    store = _FailingJournal("finish")
    model = ScriptedModel([Reply(tool_calls=[("send_email", {"to": "bob"})]), "Sent."])
    async with satsuma.open_agent(Secretary, model=model, store=store, agent_id="s") as agent:
        result = await agent.run("mail bob")
        history = agent.history
    assert result.status == "completed"
    assert history[2].tool_results[0]["content"] == "sent to bob"
    check_conversation(history)
