"""satsuma.evals: cases from a real SQLite store's runs, replayed without side effects,
scored, reported and compared with a baseline; datasets from files with clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import satsuma
from satsuma.evals import (
    Case,
    CaseRun,
    Dataset,
    DatasetError,
    Evaluator,
    Judge,
    MaxCost,
    MaxTokens,
    OutputMatches,
    RecordedCall,
    Report,
    ReportError,
    Score,
    ToolTrajectory,
    evaluate,
)
from satsuma.store import SQLiteStore
from satsuma.testing import FunctionModel, Reply, ScriptedModel

SENT: list[dict[str, Any]] = []  # the side effect a replay must never repeat
LOOKUPS: list[str] = []


@satsuma.tool
async def send_refund(order: str, amount: int) -> str:
    """Refund an order (a side effect)."""
    SENT.append({"order": order, "amount": amount})
    return f"refunded {amount} on {order}"


@satsuma.tool(idempotent=True)
async def lookup(order: str) -> str:
    """Read an order (harmless to run again)."""
    LOOKUPS.append(order)
    return f"order {order}: shipped"


class Support(satsuma.Agent):
    name = "support"
    system = "You help customers."
    tools = [send_refund, lookup]


@pytest.fixture(autouse=True)
def _clean() -> None:
    SENT.clear()
    LOOKUPS.clear()


def refunds(order: str, amount: int, answer: str) -> ScriptedModel:
    return ScriptedModel(
        [Reply(tool_calls=[("send_refund", {"order": order, "amount": amount})]), answer]
    )


async def stored_runs(path: Path) -> SQLiteStore:
    """Two real runs of one conversation in a SQLite store: what production left."""
    store = SQLiteStore(path)
    model = ScriptedModel(
        [
            "Hello! How can I help?",
            Reply(tool_calls=[("send_refund", {"order": "A1", "amount": 30})]),
            "Refunded 30 on A1.",
        ]
    )
    async with satsuma.open_agent(Support, model=model, store=store, agent_id="t-1") as agent:
        assert (await agent.run("hi")).status == "completed"
        assert (await agent.run("refund A1 30")).status == "completed"
    return store


async def test_cases_from_a_store_hold_the_conversation_before_the_run_and_its_calls(
    tmp_path: Path,
) -> None:
    store = await stored_runs(tmp_path / "prod.db")
    dataset = await Dataset.from_store(store, "t-1")
    assert [case.prompt for case in dataset] == ["hi", "refund A1 30"]
    first, second = dataset.cases
    assert first.history == () and first.recorded == () and first.output == "Hello! How can I help?"
    assert [m.role for m in second.history] == ["user", "assistant"]
    assert second.recorded == (
        RecordedCall("send_refund", {"order": "A1", "amount": 30}, "refunded 30 on A1"),
    )
    assert second.output == "Refunded 30 on A1."
    assert second.id == (await store.runs("t-1"))[1].run_id
    assert len(await Dataset.from_store(store, "t-1", limit=1)) == 1
    assert len(await Dataset.from_store(store, "nobody")) == 0


async def test_a_replay_answers_recorded_calls_and_repeats_no_side_effect(tmp_path: Path) -> None:
    store = await stored_runs(tmp_path / "prod.db")
    dataset = await Dataset.from_store(store, "t-1")
    SENT.clear()
    runs_before = await store.runs("t-1")

    def model(case: Case) -> ScriptedModel:
        if case.prompt == "hi":
            return ScriptedModel(["Hello! How can I help?"])
        return refunds("A1", 30, "Refunded 30 on A1.")

    report = await evaluate(
        Support, dataset, [ToolTrajectory(inputs=True), OutputMatches()], model=model
    )
    assert report.passed, report.markdown()
    assert SENT == []  # the refund was answered from the record, not sent again
    refund = report.cases[1].runs[0]
    assert refund.replayed == 1 and refund.missed == 0
    assert refund.tool_calls == (("send_refund", {"order": "A1", "amount": 30}),)
    # The production store is untouched: the runs went to the evaluation's own store.
    assert await store.runs("t-1") == runs_before


async def test_a_changed_agent_regresses_against_its_baseline(tmp_path: Path) -> None:
    store = await stored_runs(tmp_path / "prod.db")
    dataset = await Dataset.from_store(store, "t-1")
    evaluators = [ToolTrajectory(inputs=True), OutputMatches(mode="contains")]
    SENT.clear()  # what production sent; the evaluation must add nothing

    def good(case: Case) -> ScriptedModel:
        if case.prompt == "hi":
            return ScriptedModel(["Hello! How can I help?"])
        return refunds("A1", 30, "Refunded 30 on A1.")

    worse_models: list[ScriptedModel] = []

    def worse(case: Case) -> ScriptedModel:
        if case.prompt == "hi":
            return ScriptedModel(["Hello! How can I help?"])
        worse_models.append(refunds("A1", 300, "Refunded 300 on A1."))  # the wrong amount
        return worse_models[-1]

    baseline = await evaluate(Support, dataset, evaluators, model=good)
    baseline.save(tmp_path / "baseline.json")
    now = await evaluate(Support, dataset, evaluators, model=worse)
    assert SENT == []  # an unrecorded call is not run either
    refund = now.cases[1]
    assert not refund.passed
    assert refund.runs[0].missed == 1
    # What the model read back for the call nobody recorded:
    (request,) = worse_models[0].requests[1:]
    (result,) = request.messages[-1].content
    assert result["is_error"] and "not recorded" in json.dumps(result["content"])
    assert any("tools_exact_inputs" in reason for reason in refund.reasons)
    comparison = now.compare(Report.load(tmp_path / "baseline.json"))
    assert comparison.regressed == (dataset.cases[1].id,)
    assert comparison.improved == comparison.new == comparison.missing == ()
    assert not comparison.ok
    table = now.markdown()
    assert dataset.cases[1].id in table and "**no**" in table


async def test_an_unrecorded_call_reads_not_recorded_and_an_idempotent_tool_runs() -> None:
    case = Case(id="c", prompt="check B2 then refund it", expected_tools=["lookup", "send_refund"])
    seen: list[str] = []

    def model(_: Case) -> ScriptedModel:
        return ScriptedModel(
            [
                Reply(tool_calls=[("lookup", {"order": "B2"})]),
                Reply(tool_calls=[("send_refund", {"order": "B2", "amount": 5})]),
                "done",
            ]
        )

    report = await evaluate(
        Support, [case], [ToolTrajectory()], model=model, on_case=lambda c: seen.append(c.case_id)
    )
    assert LOOKUPS == ["B2"]  # idempotent: it ran
    assert SENT == []  # not idempotent, not recorded: it did not
    run = report.cases[0].runs[0]
    assert run.missed == 2 and run.replayed == 0
    assert report.passed and seen == ["c"]


async def test_one_crashing_case_fails_that_case_only() -> None:
    cases = [
        Case(id="ok", prompt="hi", expected_output="hello"),
        Case(id="boom", prompt="hi"),
        Case(id="crash", prompt="hi"),
    ]

    def model(case: Case) -> Any:
        if case.id == "crash":
            raise RuntimeError("no model for this case")
        if case.id == "boom":
            return ScriptedModel([satsuma.ModelError("the API is down", retryable=False)])
        return ScriptedModel(["hello"])

    report = await evaluate(Support, cases, [OutputMatches()], model=model)
    ok, boom, crash = report.cases
    assert ok.passed
    assert crash.runs[0].status == "crashed" and not crash.passed
    assert crash.runs[0].error == "RuntimeError: no model for this case"
    assert not boom.passed and boom.runs[0].status == "failed"
    assert boom.reasons[0].startswith("1 of 1 runs did not complete (failed: ")
    assert not report.passed and report.pass_rate == pytest.approx(1 / 3)


async def test_repeats_pass_by_share_and_a_failing_evaluator_never_passes() -> None:
    answers = iter(["yes", "no", "yes"])

    def model(_: Case) -> ScriptedModel:
        return ScriptedModel([next(answers)])

    class Broken(Evaluator):
        threshold = 0.5

        @property
        def name(self) -> str:
            return "broken"

        def score(self, case: Case, run: Any) -> Score:
            raise RuntimeError("judge offline")

    case = Case(id="c", prompt="?", expected_output="yes")
    report = await evaluate(
        Support, [case], [OutputMatches()], model=model, repeat=3, pass_share=0.6, max_concurrency=1
    )
    assert report.passed and report.cases[0].mean("output_equal") == pytest.approx(2 / 3)
    answers = iter(["yes"])
    broken = await evaluate(Support, [case], [Broken()], model=model)
    (run,) = broken.cases[0].runs
    assert run.scores["broken"] == (0.0, "the evaluator failed: RuntimeError: judge offline")
    assert not broken.passed

    class Vague(Evaluator):
        threshold = 0.0

        @property
        def name(self) -> str:
            return "vague"

        def score(self, case: Case, run: Any) -> Score:
            return 1.0  # type: ignore[return-value]

    answers = iter(["yes"])
    vague = await evaluate(Support, [case], [Vague()], model=model)
    assert vague.cases[0].runs[0].scores["vague"] == (
        0.0,
        "the evaluator failed: TypeError: returned float, not a Score",
    )
    assert not vague.passed


async def test_token_threshold_and_bad_arguments() -> None:
    case = Case(id="c", prompt="hi")
    report = await evaluate(Support, [case], [MaxTokens(0)], model=lambda _: ScriptedModel(["x"]))
    assert report.cases[0].runs[0].scores["max_tokens"][0] in (0.0, 1.0)
    for kwargs, text in [
        ({"repeat": 0}, "repeat"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"tools": "both"}, "tools"),
        ({"pass_share": 0}, "pass_share"),
    ]:
        with pytest.raises(ValueError, match=text):
            await evaluate(Support, [case], [], **kwargs)
    with pytest.raises(ValueError, match="share a name"):
        await evaluate(Support, [case], [OutputMatches(), OutputMatches(mode="equal")])


def test_dataset_files_round_trip_and_bad_files_name_the_case_and_field(tmp_path: Path) -> None:
    dataset = Dataset(
        [
            Case(
                id="a",
                prompt="refund A1",
                expected_output="done",
                expected_tools=["send_refund"],
                history=[satsuma.Message.user("hi")],
                recorded=[RecordedCall("send_refund", {"order": "A1", "amount": 1}, "ok")],
            )
        ]
    )
    dataset.save(tmp_path / "cases.json")
    assert Dataset.load(tmp_path / "cases.json").cases == dataset.cases

    def refused(text: str, name: str = "bad.json") -> str:
        (tmp_path / name).write_text(text)
        with pytest.raises(DatasetError) as caught:
            Dataset.load(tmp_path / name)
        return str(caught.value)

    assert "line 2, column" in refused('[\n  {"id": "a",, }]')
    assert "cases[1] ('b'): field 'prompt' is missing" in refused(
        '[{"id": "a", "prompt": "x"}, {"id": "b"}]'
    )
    assert "unknown field 'promt'" in refused('[{"id": "a", "promt": "x"}]')
    assert "expected_tools must be a list" in refused(
        '[{"id": "a", "prompt": "x", "expected_tools": "lookup"}]'
    )
    assert "two cases have the id 'a'" in refused(
        '[{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}]'
    )
    assert "history[0]" in refused('[{"id": "a", "prompt": "x", "history": [{"role": "system"}]}]')
    assert "version 2" in refused('{"version": 2, "cases": []}')
    with pytest.raises(DatasetError, match="cannot be read"):
        Dataset.load(tmp_path / "missing.json")
    (tmp_path / "cases.yaml").write_text("- id: y\n  prompt: hello\n  expected_tools: [lookup]\n")
    assert Dataset.load(tmp_path / "cases.yaml").cases[0].expected_tools == ("lookup",)
    assert "line 2, column 1: not YAML" in refused("- id: [unclosed\n", "bad.yaml")


def test_redact_runs_on_every_case_and_reports_load_only_reports(tmp_path: Path) -> None:
    dataset = Dataset([Case(id="a", prompt="my card is 4111"), Case(id="b", prompt="hi")])
    clean = dataset.redact(
        lambda case: Case(id=case.id, prompt=case.prompt.replace("4111", "****"))
    )
    assert [c.prompt for c in clean] == ["my card is ****", "hi"]
    with pytest.raises(TypeError, match="not a Case"):
        dataset.redact(lambda case: None)  # type: ignore[arg-type,return-value]
    for text in ('{"version": 1}', "[]", '{"version": 1, "cases": [1]}', "null"):
        (tmp_path / "r.json").write_text(text)
        with pytest.raises(ReportError, match="not a satsuma evals report"):
            Report.load(tmp_path / "r.json")


@pytest.mark.parametrize(
    "case",
    [
        {"id": "a", "prompt": "x", "metadata": 5},
        {"id": "a", "prompt": "x", "metadata": "text"},
        {"id": "a", "prompt": "x", "history": "text"},
        {"id": "a", "prompt": "x", "history": 5},
        {"id": "a", "prompt": "x", "recorded": 5},
        {"id": "a", "prompt": "x", "recorded": [{"name": "t", "input": float("nan")}]},
        {"id": "a", "prompt": "x", "recorded": [{"name": "t", "content": 5}]},
        {"id": "a", "prompt": "x", "expected_tools": [1]},
        {"id": 5, "prompt": "x"},
        {"id": "a", "prompt": ""},
        {"id": "a", "prompt": ["x"]},
        {"id": "a", "prompt": "x", "history": [{"role": "user", "content": [5]}]},
    ],
)
def test_every_odd_shape_in_a_file_is_a_dataset_error(tmp_path: Path, case: dict[str, Any]) -> None:
    (tmp_path / "cases.json").write_text(json.dumps([case]))
    with pytest.raises(DatasetError, match=r"cases\[0\]"):
        Dataset.load(tmp_path / "cases.json")


def verdict(score: float, reason: str) -> Reply:
    return Reply(tool_calls=[("final_answer", {"score": score, "reason": reason})])


async def test_a_judge_scores_with_a_typed_verdict_and_a_judge_that_fails_never_passes() -> None:
    case = Case(id="c", prompt="refund A1", expected_output="Refunded.")
    answer = lambda _: ScriptedModel(["Refunded A1, sorry for the trouble."])  # noqa: E731
    judge_model = ScriptedModel([verdict(0.9, "polite and correct")])
    report = await evaluate(
        Support,
        [case],
        [Judge("Polite, and says what was refunded.", model=judge_model)],
        model=answer,
    )
    assert report.passed
    assert report.cases[0].runs[0].scores["judge"] == (0.9, "polite and correct")
    # The judge read the rubric, the request, the answer and the reference answer.
    asked = judge_model.requests[0].messages[0].text
    for text in (
        "Polite, and says what was refunded.",
        "refund A1",
        "Refunded A1, sorry",
        '"Refunded."',
    ):
        assert text in asked

    for judge_model, reason in [
        (ScriptedModel([verdict(1.5, "too generous")]), "the judge's score 1.5 is not in [0, 1]"),
        (
            ScriptedModel([satsuma.ModelError("overloaded", retryable=False)]),
            "the judge's run ended failed",
        ),
    ]:
        failed = await evaluate(
            Support, [case], [Judge("Polite.", model=judge_model, threshold=0.0)], model=answer
        )
        value, why = failed.cases[0].runs[0].scores["judge"]
        assert (
            value == 0.0 and reason in why and why.startswith("the evaluator failed: JudgeFailed")
        )


async def test_max_cost_passes_a_cheap_run_and_never_an_unknown_cost(tmp_path: Path) -> None:
    case = Case(id="c", prompt="hi")
    cheap = CaseRun(
        status="completed", output="x", usage=satsuma.Usage(input_tokens=10, cost_usd=0.002)
    )
    dear = CaseRun(
        status="completed", output="x", usage=satsuma.Usage(input_tokens=10, cost_usd=0.2)
    )
    assert MaxCost(0.01).score(case, cheap).value == 1.0
    assert MaxCost(0.01).score(case, dear) == Score(0.0, "$0.2000 (limit $0.0100)")
    # A scripted model has no prices: its runs' cost is unknown, and unknown never passes.
    report = await evaluate(Support, [case], [MaxCost(1.0)], model=lambda _: ScriptedModel(["x"]))
    assert report.cases[0].runs[0].scores["max_cost"][0] == 0.0 and not report.passed
    report.save(tmp_path / "r.json")
    assert Report.load(tmp_path / "r.json") == report


async def test_cancelling_an_evaluation_stops_every_run_and_reports_what_finished(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(request: Any) -> str:
        prompt = request.messages[-1].text
        await trio.sleep(0 if prompt == "quick" else 3600)
        return "done"

    cases = [Case(id="quick", prompt="quick"), Case(id="slow", prompt="slow")]
    finished: list[str] = []
    with trio.move_on_after(60) as scope:
        await evaluate(
            Support,
            cases,
            [OutputMatches()],
            model=FunctionModel(slow),
            on_case=lambda case: finished.append(case.case_id),
        )
    assert scope.cancelled_caught  # the slow run did not hold the evaluation past its scope
    assert finished == ["quick"]


class Billing(satsuma.Agent):
    name = "billing"
    tools = [lookup]


async def test_cases_are_taken_by_agent_class_across_conversations(tmp_path: Path) -> None:
    store = await stored_runs(tmp_path / "prod.db")
    async with satsuma.open_agent(
        Support, model=ScriptedModel(["Hi again."]), store=store, agent_id="t-2"
    ) as agent:
        await agent.run("hello")
    async with satsuma.open_agent(
        Billing, model=ScriptedModel(["Paid."]), store=store, agent_id="t-1"
    ) as other:
        await other.run("pay")
    support = await Dataset.from_store(store, agent="support")
    assert [case.prompt for case in support] == ["hi", "refund A1 30", "hello"]
    assert {case.metadata["agent_id"] for case in support} == {"t-1", "t-2"}
    assert all(case.metadata["agent"] == "support" for case in support)
    # The conversation of t-1 holds both classes' runs: each case's output is its own.
    (billing,) = (await Dataset.from_store(store, agent="billing")).cases
    assert billing.output == "Paid." and len(billing.history) == 6
    assert [c.prompt for c in await Dataset.from_store(store, "t-1", agent="support")] == [
        "hi",
        "refund A1 30",
    ]
    assert [c.prompt for c in await Dataset.from_store(store, limit=2)] == ["hello", "pay"]
    assert len(await Dataset.from_store(store, agent="support", since=2e9)) == 0
    with pytest.raises(ValueError, match=r"give agent .* agent_id, or a limit"):
        await Dataset.from_store(store)
    await store.aclose()


class NamesTheOrder(satsuma.Verifier):
    def verify(self, ctx: satsuma.VerifyContext) -> satsuma.Verdict:
        if "A1" in str(ctx.output):
            return satsuma.Verdict.ok()
        return satsuma.Verdict.retry("the answer does not name the order")


def called_a_tool(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
    used = [block["name"] for m in ctx.messages for block in m.tool_uses]
    return satsuma.Verdict.ok() if used else satsuma.Verdict.retry("no tool was called")


class Checked(satsuma.Agent):
    name = "checked"
    tools = [send_refund]
    verifiers = [NamesTheOrder, called_a_tool]


async def test_a_verifier_of_the_agent_scores_each_run_with_its_verdict() -> None:
    cases = [
        Case(
            id="good",
            prompt="refund A1",
            recorded=[RecordedCall("send_refund", {"order": "A1", "amount": 5}, "ok")],
        ),
        Case(id="vague", prompt="refund it"),
    ]

    def model(case: Case) -> ScriptedModel:
        if case.id == "good":
            return refunds("A1", 5, "Refunded A1.")
        return ScriptedModel(["Done."] * 5)  # the agent's verifiers send it back: it insists

    report = await evaluate(
        Support,
        cases,
        [
            satsuma.evals.Verifier(NamesTheOrder),
            satsuma.evals.Verifier(called_a_tool, label="used_tools"),
            satsuma.evals.Verifier(Checked, label="all", threshold=0.5),
        ],
        model=model,
    )
    good, vague = report.cases
    assert good.passed, good.reasons
    assert good.runs[0].scores == {
        "verifier": (1.0, "the verifier passed"),
        "used_tools": (1.0, "the verifier passed"),
        "all": (1.0, "every verifier passed"),
    }
    assert not vague.passed
    assert vague.runs[0].scores["verifier"] == (0.0, "the answer does not name the order")
    assert vague.runs[0].scores["all"] == (
        0.0,
        "the answer does not name the order; no tool was called",
    )
    assert vague.runs[0].result is None  # a scored run keeps no conversation
    # A run that did not complete has no answer to verify: a 0, never a pass.
    crashed = CaseRun(status="failed", output=None)
    score = await satsuma.evals.Verifier(NamesTheOrder).score(cases[0], crashed)
    assert score == Score(0.0, "no answer to verify: the run ended failed")
    with pytest.raises(TypeError, match=r"Verifier takes a satsuma\.Verifier"):
        satsuma.evals.Verifier("not a verifier")
    with pytest.raises(ValueError, match="agent support lists no verifiers"):
        satsuma.evals.Verifier(Support)


async def test_a_stopped_evaluation_reports_what_ran_and_marks_the_rest_not_run(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async def slow(request: Any) -> str:
        prompt = request.messages[-1].text
        await trio.sleep({"quick": 0, "twice": 10}.get(prompt, 3600))
        return "done"

    cases = [
        Case(id="quick", prompt="quick", expected_output="done"),
        Case(id="twice", prompt="twice", expected_output="done"),
        Case(id="slow", prompt="slow", expected_output="done"),
    ]
    stop = trio.Event()
    seen: list[str] = []

    def finished(case: Any) -> None:
        seen.append(case.case_id)
        if case.case_id == "twice":
            stop.set()

    report = await evaluate(
        Support,
        cases,
        [OutputMatches()],
        model=FunctionModel(slow),
        repeat=2,
        max_concurrency=5,  # quick x2, twice x2, one slow run in flight; one slow not started
        on_case=finished,
        stop=stop,
    )
    assert seen == ["quick", "twice"]
    assert not report.complete and not report.passed
    assert [c.case_id for c in report.finished] == ["quick", "twice"]
    assert report.not_run == ("slow",)
    (slow_case,) = [c for c in report.cases if c.case_id == "slow"]
    assert not slow_case.finished and not slow_case.passed and slow_case.runs == ()
    assert slow_case.reasons[0].startswith("not run: the evaluation was stopped")
    table = report.markdown()
    assert "| slow | not run |" in table and "2 of 3 cases ran" in table
    report.save(tmp_path / "partial.json")
    assert Report.load(tmp_path / "partial.json") == report
    # A case not run is neither a regression nor an improvement against a baseline.
    baseline = await evaluate(
        Support, cases, [OutputMatches()], model=lambda _: ScriptedModel(["done"] * 2), repeat=2
    )
    assert baseline.complete and baseline.passed
    assert report.compare(baseline).regressed == ()
    # Stopped before it starts: every case is marked not run, none ran.
    stop_now = trio.Event()
    stop_now.set()
    nothing = await evaluate(
        Support, cases, [OutputMatches()], model=FunctionModel(slow), stop=stop_now
    )
    assert nothing.not_run == ("quick", "twice", "slow") and not nothing.complete


async def test_a_case_stopped_between_its_repeats_keeps_the_runs_that_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def second_is_slow(request: Any) -> str:
        second_is_slow.calls += 1  # type: ignore[attr-defined]
        await trio.sleep(0 if second_is_slow.calls == 1 else 3600)  # type: ignore[attr-defined]
        return "done"

    second_is_slow.calls = 0  # type: ignore[attr-defined]
    stop = trio.Event()

    async def stop_later() -> None:
        await trio.sleep(60)
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_later)
        report = await evaluate(
            Support,
            [Case(id="c", prompt="hi")],
            [OutputMatches()],
            model=FunctionModel(second_is_slow),
            repeat=2,
            stop=stop,
        )
    (case,) = report.cases
    assert not case.finished and len(case.runs) == 1 and case.runs[0].output == "done"
    assert case.reasons == (
        "not run: the evaluation was stopped before this case's runs ended (1 of 2 runs ended)",
    )


def test_a_bad_file_names_the_line_and_the_field(tmp_path: Path) -> None:
    json_file = tmp_path / "cases.json"
    json_file.write_text(
        "[\n"
        '  {"id": "one", "prompt": "hi"},\n'
        "  {\n"
        '    "id": "two",\n'
        '    "prompt": "refund",\n'
        '    "expected_tools": "lookup"\n'
        "  }\n"
        "]\n"
    )
    with pytest.raises(DatasetError) as caught:
        Dataset.load(json_file)
    assert str(caught.value) == (
        f"{json_file}: line 6: cases[1] ('two'): field 'expected_tools': expected_tools must "
        "be a list of tool names, got: 'lookup'"
    )
    json_file.write_text(
        '{"version": 1,\n "cases": [\n  {"id": "a", "prompt": "hi",\n   "colour": "red"}]}\n'
    )
    with pytest.raises(DatasetError, match=r"line 4: cases\[0\] \('a'\): unknown field 'colour'"):
        Dataset.load(json_file)
    json_file.write_text('[{"id": "a", "prompt": "hi"},\n {"id": "b"}]')
    with pytest.raises(
        DatasetError, match=r"line 2: cases\[1\] \('b'\): field 'prompt' is missing"
    ):
        Dataset.load(json_file)

    yaml_file = tmp_path / "cases.yaml"
    yaml_file.write_text(
        "cases:\n"
        "  - id: one\n"
        "    prompt: hi\n"
        "  - id: two\n"
        "    prompt: refund\n"
        "    history:\n"
        "      - role: system\n"
        "        content: be nice\n"
    )
    with pytest.raises(DatasetError) as caught:
        Dataset.load(yaml_file)
    assert str(caught.value).startswith(f"{yaml_file}: line 6: cases[1] ('two'): history[0]")
    yaml_file.write_text("- id: one\n  prompt: hi\n- id: two\n  prompt: [1, 2]\n")
    with pytest.raises(DatasetError, match=r"line 4: cases\[1\] \('two'\): field 'prompt'"):
        Dataset.load(yaml_file)


def test_the_schema_describes_the_files_satsuma_writes_and_reads(tmp_path: Path) -> None:
    import jsonschema

    from satsuma.evals import DATASET_SCHEMA

    dataset = Dataset(
        [
            Case(id="a", prompt="hi", expected_output="Hello!"),
            Case(
                id="b",
                prompt="refund A1",
                expected_tools=["send_refund"],
                history=[satsuma.Message(role="user", content=[{"type": "text", "text": "x"}])],
                recorded=[RecordedCall("send_refund", {"order": "A1"}, "ok")],
                metadata={"agent_id": "t-1"},
            ),
        ]
    )
    dataset.save(tmp_path / "cases.json")
    jsonschema.Draft202012Validator.check_schema(DATASET_SCHEMA)
    jsonschema.validate(json.loads((tmp_path / "cases.json").read_text()), DATASET_SCHEMA)
    hand_written = [{"id": "c", "prompt": "hi", "history": [{"role": "user", "content": "x"}]}]
    jsonschema.validate(hand_written, DATASET_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"id": "c", "prompt": "hi", "colour": "red"}], DATASET_SCHEMA)
    (tmp_path / "hand.json").write_text(json.dumps(hand_written))
    assert Dataset.load(tmp_path / "hand.json").cases[0].history[0].text == "x"
