"""Typed answers (``output_type``): the final-answer tool, validation and retries,
events, verifiers, per-run types and declaration mistakes. Scripted models for the
loop's rules; the real AsyncAnthropic against the loopback MessagesServer for what goes
over the wire."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal, TypedDict

import attrs
import pytest
import trio

import satsuma
from satsuma import AnthropicModel
from satsuma.testing import FakeModel, MessagesServer, Reply, ScriptedModel, check_conversation
from satsuma.tools import ToolCall


@attrs.frozen
class Invoice:
    """An invoice's figures.

    Attributes:
        total: The amount due.
    """

    total: float
    currency: Literal["EUR", "USD"]


@dataclasses.dataclass
class Contact:
    name: str
    emails: list[str] = dataclasses.field(default_factory=list)


class Address(TypedDict):
    street: str
    city: str


class Sentiment(enum.Enum):
    GOOD = "good"
    BAD = "bad"


@attrs.frozen
class Refund:
    order: str
    amount: float


@attrs.frozen
class Escalate:
    order: str
    reason: str
    urgent: bool


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"


def answer(value: Any) -> Reply:
    return Reply(tool_calls=[("final_answer", value)])


# (output_type, the final_answer input, the typed value, the tool's input schema)
FAMILIES = [
    pytest.param(
        Invoice,
        {"total": 12.5, "currency": "EUR"},
        Invoice(12.5, "EUR"),
        {
            "type": "object",
            "properties": {
                "total": {"type": "number", "description": "The amount due."},
                "currency": {"type": "string", "enum": ["EUR", "USD"]},
            },
            "required": ["total", "currency"],
        },
        id="attrs",
    ),
    pytest.param(
        Contact,
        {"name": "Ada"},
        Contact("Ada", []),
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "emails": {"type": "array", "items": {"type": "string"}, "default": []},
            },
            "required": ["name"],
        },
        id="dataclass",
    ),
    pytest.param(
        Address,
        {"street": "1 Main St", "city": "Lyon", "zip": "69001"},
        {"street": "1 Main St", "city": "Lyon"},
        {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            "required": ["street", "city"],
        },
        id="typeddict",
    ),
    pytest.param(
        Sentiment,
        {"value": "bad"},
        Sentiment.BAD,
        {
            "type": "object",
            "properties": {"value": {"type": "string", "enum": ["good", "bad"]}},
            "required": ["value"],
        },
        id="enum",
    ),
    pytest.param(
        Literal["spam", "ham"],
        {"value": "ham"},
        "ham",
        {
            "type": "object",
            "properties": {"value": {"type": "string", "enum": ["spam", "ham"]}},
            "required": ["value"],
        },
        id="literal",
    ),
    pytest.param(
        int,
        {"value": 42},
        42,
        {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]},
        id="int",
    ),
    pytest.param(
        float,
        {"value": 2},
        2,
        {"type": "object", "properties": {"value": {"type": "number"}}, "required": ["value"]},
        id="float",
    ),
    pytest.param(
        bool,
        {"value": False},
        False,
        {"type": "object", "properties": {"value": {"type": "boolean"}}, "required": ["value"]},
        id="bool",
    ),
    pytest.param(
        list[Invoice],
        {"value": [{"total": 1, "currency": "USD"}, {"total": 2.5, "currency": "EUR"}]},
        [Invoice(1, "USD"), Invoice(2.5, "EUR")],
        None,
        id="list",
    ),
    pytest.param(
        Refund | Escalate,
        {"value": {"order": "A-1", "reason": "broken", "urgent": True}},
        Escalate("A-1", "broken", True),
        {
            "type": "object",
            "properties": {
                "value": {
                    "anyOf": [
                        {
                            "type": "object",
                            "properties": {
                                "order": {"type": "string"},
                                "amount": {"type": "number"},
                            },
                            "required": ["order", "amount"],
                        },
                        {
                            "type": "object",
                            "properties": {
                                "order": {"type": "string"},
                                "reason": {"type": "string"},
                                "urgent": {"type": "boolean"},
                            },
                            "required": ["order", "reason", "urgent"],
                        },
                    ]
                }
            },
            "required": ["value"],
        },
        id="union",
    ),
]


@pytest.mark.parametrize(("output_type", "given", "expected", "schema"), FAMILIES)
async def test_every_type_family_is_asked_for_by_its_schema_and_comes_back_typed(
    output_type: Any, given: Any, expected: Any, schema: Any
) -> None:
    class Typed(satsuma.Agent):
        name = "typed"

    model = ScriptedModel([answer(given)])
    async with satsuma.open_agent(Typed, model=model) as agent:
        result = await agent.run("Answer", output_type=output_type)
        check_conversation(agent.history)
    assert result.status == "completed"
    assert result.output == expected
    assert type(result.output) is type(expected)
    (tool,) = model.requests[0].tools
    assert tool["name"] == "final_answer"
    if schema is not None:
        assert tool["input_schema"] == schema
    # Declared on the class, the same type gives the same tool.
    declared = type("Declared", (satsuma.Agent,), {"name": "declared", "output_type": output_type})
    spec = declared.__satsuma_agent__
    assert spec.output is not None and spec.output.tool == tool


@pytest.mark.parametrize(("output_type", "given", "expected", "schema"), FAMILIES)
async def test_the_fake_model_answers_every_type_family(
    output_type: Any, given: Any, expected: Any, schema: Any
) -> None:
    class Typed(satsuma.Agent):
        name = "typed"

    model = FakeModel()
    async with satsuma.open_agent(Typed, model=model) as agent:
        result = await agent.run("Answer", output_type=output_type)
    assert (result.status, result.iterations) == ("completed", 1)
    members = (Refund, Escalate) if output_type == Refund | Escalate else (type(expected),)
    assert type(result.output) in members
    (request,) = model.requests
    assert request.tools[-1]["name"] == "final_answer"


async def test_a_model_that_answers_wrongly_twice_then_rightly_over_http() -> None:
    script = [
        Reply(text="Reading the invoice.", tool_calls=[("final_answer", {"total": "12"})]),
        answer({"total": 12, "currency": "GBP"}),
        answer({"total": 12, "currency": "EUR"}),
    ]
    events: list[Any] = []
    async with (
        MessagesServer(script) as server,
        satsuma.open_agent(Extractor, model=AnthropicModel(server.client())) as agent,
    ):
        result = await agent.run("Invoice: twelve euros", events=events.append)
        history = agent.history
        requests = list(server.requests)
    assert result.status == "completed"
    assert result.output == Invoice(12.0, "EUR")
    assert result.iterations == 3
    check_conversation(history)
    assert requests[0]["tools"][-1]["name"] == "final_answer"
    # Each error went back as the answer's is_error tool_result, path-precise.
    first_error, second_error = (request["messages"][-1]["content"][0] for request in requests[1:])
    assert first_error["is_error"] is True
    assert first_error["content"] == (
        "Error: Invalid answer: expected total to be a number, got: string; "
        "missing required parameter: currency. Call final_answer again with the corrected answer."
    )
    assert second_error["content"].startswith(
        'Error: Invalid answer: currency must be one of ["EUR", "USD"], got: "GBP".'
    )
    rejected = [e for e in events if isinstance(e, satsuma.OutputRejected)]
    assert [(e.iteration, e.retries_left) for e in rejected] == [(1, 1), (2, 0)]
    # The JSON streamed piece by piece, then the validated value.
    pieces = [e.text for e in events if isinstance(e, satsuma.OutputDelta) and e.iteration == 3]
    assert len(pieces) > 1  # streamed by the real client, not given whole
    assert json.loads("".join(pieces)) == {"total": 12, "currency": "EUR"}
    (validated,) = [e for e in events if isinstance(e, satsuma.OutputValidated)]
    assert validated.output == Invoice(12.0, "EUR")
    assert isinstance(events[-1], satsuma.RunEnd) and events[-1].result.output == result.output
    assert satsuma.event_to_json(events[-1])["result"]["output"] == {
        "total": 12.0,
        "currency": "EUR",
    }


async def test_a_model_that_never_answers_rightly_fails_the_run_with_its_last_answer() -> None:
    model = ScriptedModel([answer({"total": -1}), answer({"total": "a lot", "currency": "EUR"})])
    async with satsuma.open_agent(Extractor, model=model) as agent:
        result = await agent.run("Invoice?", output_retries=1)
        check_conversation(agent.history)
        assert (await agent.run("Again", output_type=str)).status == "failed"  # script is over
    assert result.status == "failed"
    assert result.error == (
        'no valid answer after 1 retries (output_retries): the last answer, {"total": "a lot", '
        '"currency": "EUR"}, is invalid: expected total to be a number, got: string'
    )
    assert result.iterations == 2
    # Its output is not None under a type that says Invoice: reading it says why.
    with pytest.raises(satsuma.NoOutput) as no_output:
        result.output  # noqa: B018
    assert str(no_output.value) == (
        f"run {result.run_id} has no typed output: it ended failed: {result.error} "
        "(check result.status before reading result.output)"
    )
    assert (no_output.value.run_id, no_output.value.status) == (result.run_id, "failed")
    # As JSON (a RunEnd event, the CLI's --json), it is null.
    end = satsuma.RunEnd(agent="extractor", run_id=result.run_id, iteration=2, result=result)
    assert satsuma.event_to_json(end)["result"]["output"] is None


async def test_a_failed_text_run_keeps_its_text_output() -> None:
    # Backward compatible: a text agent's output never raises; a failed run has its
    # last text (or "").
    class Talker(satsuma.Agent):
        name = "talker"
        max_iterations = 1

    async with satsuma.open_agent(
        Talker, model=ScriptedModel([Reply(text="Let me look.", tool_calls=[("nothing", {})])])
    ) as agent:
        result = await agent.run("Hi")
    assert (result.status, result.output) == ("max_iterations", "Let me look.")


async def test_text_turns_before_the_answer_stay_and_a_text_ending_is_reminded() -> None:
    model = ScriptedModel(
        [
            Reply(text="Let me think about the total."),
            Reply(
                text="It is 30 dollars.",
                tool_calls=[("final_answer", {"total": 30, "currency": "USD"})],
            ),
        ]
    )
    async with satsuma.open_agent(Extractor, model=model) as agent:
        result = await agent.run("Invoice?")
        history = agent.history
    assert result.output == Invoice(30, "USD")
    assert history[1].text == "Let me think about the total."
    assert history[2].text.startswith("Your answer must be given by calling the final_answer tool")
    assert history[3].text == "It is 30 dollars."
    check_conversation(history)

    # A model that only ever writes text uses its retries up, and the run fails.
    talker = ScriptedModel(["Thirty.", "Thirty, really.", "I said thirty."])
    async with satsuma.open_agent(Extractor, model=talker) as agent:
        failed = await agent.run("Invoice?")
        check_conversation(agent.history)
    assert failed.status == "failed"
    assert failed.error == (
        "no valid answer after 2 retries (output_retries): the model ended its turn "
        "without calling final_answer; its last text: 'I said thirty.'"
    )


@satsuma.tool
async def lookup(order: str) -> str:
    """Look an order up.

    Args:
        order: The order's number.
    """
    ran.append(order)
    return f"{order}: 12 EUR"


ran: list[str] = []


class ToolUser(satsuma.Agent[Invoice]):
    name = "tool_user"
    tools = [lookup]


async def test_other_calls_of_the_answer_turn_run_only_if_the_answer_is_rejected() -> None:
    ran.clear()
    model = ScriptedModel(
        [
            Reply(tool_calls=[("lookup", {"order": "A-1"}), ("final_answer", {"total": 1})]),
            Reply(
                tool_calls=[
                    ("final_answer", {"total": 12, "currency": "EUR"}),
                    ("lookup", {"order": "B-2"}),
                    ("final_answer", {"total": 13, "currency": "EUR"}),
                ]
            ),
        ]
    )
    async with satsuma.open_agent(ToolUser, model=model) as agent:
        result = await agent.run("Invoice of A-1?")
        history = agent.history
    assert result.output == Invoice(12, "EUR")
    assert ran == ["A-1"]  # B-2 came with a valid answer: not run
    check_conversation(history)
    first = [r["content"] for r in history[2].tool_results]
    assert first[0] == "A-1: 12 EUR"
    assert first[1].startswith("Error: Invalid answer: missing required parameter: currency.")
    assert [r["content"] for r in history[4].tool_results] == [
        "Answer received.",
        "Error: Not run: the run ended with the final_answer answer of this turn.",
        "Error: Only the first final_answer call of a turn is read; this one was not.",
    ]


async def test_verifiers_receive_the_typed_value() -> None:
    seen: list[Any] = []

    def positive(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
        seen.append(ctx.output)
        if ctx.output.total > 0:
            return satsuma.Verdict.ok()
        return satsuma.Verdict.retry("the total must be positive")

    class Checked(satsuma.Agent[Invoice]):
        name = "checked"
        verifiers = [positive]

    model = ScriptedModel(
        [answer({"total": 0, "currency": "EUR"}), answer({"total": 5, "currency": "EUR"})]
    )
    async with satsuma.open_agent(Checked, model=model) as agent:
        result = await agent.run("Invoice?")
        history = agent.history
    assert seen == [Invoice(0, "EUR"), Invoice(5, "EUR")]
    assert result.output == Invoice(5, "EUR")
    (verdict,) = history[2].tool_results
    assert verdict["is_error"] is True
    assert verdict["content"].startswith("Verification failed: the total must be positive")


async def test_a_run_may_ask_for_its_own_type_and_text_agents_send_no_answer_tool() -> None:
    class Plain(satsuma.Agent):
        name = "plain"
        tools = [lookup]

    model = ScriptedModel(["Just text.", answer({"value": ["a", "b"]}), "Text again."])
    async with satsuma.open_agent(Plain, model=model) as agent:
        text = await agent.run("Talk")
        listed = await agent.run("List", output_type=list[str])
        back = await agent.run("Talk")
        with pytest.raises(
            TypeError, match=r"agent plain: output_type set\[str\] is not supported"
        ):
            await agent.run("Bad", output_type=set[str])
        with pytest.raises(ValueError, match="output_retries must be an integer >= 0, got: -1"):
            await agent.run("Bad", output_retries=-1)
    assert (text.output, listed.output, back.output) == ("Just text.", ["a", "b"], "Text again.")
    assert [[t["name"] for t in r.tools] for r in model.requests] == [
        ["lookup"],
        ["lookup", "final_answer"],
        ["lookup"],
    ]

    # And a typed agent may be asked for text, run by run.
    async with satsuma.open_agent(Extractor, model=ScriptedModel(["Twelve euros."])) as agent:
        prose = await agent.run("Say it", output_type=str)
    assert prose.output == "Twelve euros."


async def test_a_union_of_classes_takes_the_member_that_fits() -> None:
    model = ScriptedModel(
        [
            answer({"value": {"order": "A-1", "amount": 3}}),
            answer({"value": {"order": "A-1"}}),
            answer({"value": {"order": "A-1", "reason": "late", "urgent": False}}),
        ]
    )
    async with satsuma.open_agent(Extractor, model=model) as agent:
        refund = await agent.run("Decide", output_type=Refund | Escalate)
        escalate = await agent.run("Decide", output_type=Refund | Escalate)
        history = agent.history
    assert refund.output == Refund("A-1", 3.0)
    assert escalate.output == Escalate("A-1", "late", False)
    assert history[4].tool_results[0]["content"] == (
        "Error: Invalid answer: value matches none of Refund, Escalate (as Refund: missing "
        "required parameter: value.amount; as Escalate: missing required parameter: "
        "value.reason, missing required parameter: value.urgent). Call final_answer again "
        "with the corrected answer."
    )


def test_declaration_mistakes_are_named_when_the_class_is_created() -> None:
    with pytest.raises(satsuma.AgentDefinitionError) as unsupported:

        class Sets(satsuma.Agent):
            name = "sets"
            output_type = set[int]

    assert str(unsupported.value).startswith(
        "Agent sets: output_type set[int] is not supported: has unsupported type hint 'set[int]'. "
        "Supported: attrs classes, dataclasses"
    )

    with pytest.raises(satsuma.AgentDefinitionError) as nested:

        @attrs.frozen
        class Order:
            placed: complex

        class Orders(satsuma.Agent):
            name = "orders"
            output_type = list[Order]

    assert "its field [].placed has unsupported type hint 'complex'" in str(nested.value)

    with pytest.raises(satsuma.AgentDefinitionError) as twice:

        class Both(satsuma.Agent[Invoice]):
            name = "both"
            output_type = Contact

    assert str(twice.value) == (
        "Agent both: output_type is Contact but the class is declared Agent[Invoice]: give one type"
    )

    @satsuma.tool
    async def final_answer(text: str) -> str:
        """Mine."""
        return text

    with pytest.raises(satsuma.AgentDefinitionError, match="a tool is named 'final_answer'"):

        class Clash(satsuma.Agent[Invoice]):
            name = "clash"
            tools = [final_answer]

    class TextClash(satsuma.Agent):  # no typed answer: the name is free
        name = "text_clash"
        tools = [final_answer]

    with pytest.raises(satsuma.AgentDefinitionError, match="output_retries must be an integer"):

        class Negative(satsuma.Agent[Invoice]):
            name = "negative"
            output_retries = -1

    # Inherited from a generic base declared abstract.
    class Base(satsuma.Agent[Contact], abstract=True):
        system = "Extract contacts."

    class Concrete(Base):
        name = "concrete"

    spec = Concrete.__satsuma_agent__
    assert spec is not None and spec.output is not None and spec.output.type is Contact


async def test_a_clashing_tool_refuses_a_per_run_type() -> None:
    @satsuma.tool
    async def final_answer(text: str) -> str:
        """Mine."""
        return text

    class TextClash(satsuma.Agent):
        name = "text_clash"
        tools = [final_answer]

    async with satsuma.open_agent(TextClash, model=ScriptedModel([])) as agent:
        with pytest.raises(ValueError, match="has a tool named 'final_answer'"):
            await agent.run("Count", output_type=int)


async def test_a_cancelled_typed_run_has_no_output(autojump_clock: trio.abc.Clock) -> None:
    model = ScriptedModel([answer({"total": 1, "currency": "EUR"})], delay=10)
    results: list[Any] = []
    async with satsuma.open_agent(Extractor, model=model) as agent, trio.open_nursery() as nursery:

        async def run() -> None:
            results.append(await agent.run("Invoice?"))

        nursery.start_soon(run)
        await trio.sleep(1)
        await agent.cancel()
    (result,) = results
    assert result.status == "cancelled"
    with pytest.raises(satsuma.NoOutput, match="it ended cancelled"):
        result.output  # noqa: B018


async def test_an_answer_given_while_the_user_spoke_is_not_taken(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(
        [answer({"total": 5, "currency": "EUR"}), answer({"total": 5, "currency": "USD"})],
        delay=5,
    )
    results: list[Any] = []
    async with satsuma.open_agent(Extractor, model=model) as agent, trio.open_nursery() as nursery:

        async def run() -> None:
            results.append(await agent.run("Invoice?"))

        nursery.start_soon(run)
        await trio.sleep(1)  # the model is answering
        await agent.steer("It was in dollars.")
    (result,) = results
    history = agent.history
    assert result.output == Invoice(5, "USD")
    assert result.iterations == 2
    (skipped,) = history[2].tool_results
    assert skipped["content"].startswith("Error: Answer not taken: a new user message came")
    assert "It was in dollars." in history[2].text
    check_conversation(history)


@attrs.frozen
class Tree:
    name: str
    children: list[Tree] = attrs.Factory(list)


class Priority(enum.Enum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Ticket:
    contact: Contact
    priority: Priority
    counts: dict[str, int]


async def test_nested_optional_and_mapping_types_and_what_is_refused() -> None:
    model = ScriptedModel(
        [
            answer({"contact": {"name": "Ada"}, "priority": 2, "counts": {"open": "two"}}),
            answer({"contact": {"name": "Ada"}, "priority": 2, "counts": {"open": 2}}),
            answer({"value": None}),
            answer({}),
            answer({"value": {"any": ["thing", 1]}}),
        ]
    )
    async with satsuma.open_agent(Extractor, model=model) as agent:
        ticket = await agent.run("Ticket?", output_type=Ticket)
        history = agent.history
        nothing = await agent.run("Invoice, if any?", output_type=Invoice | None)
        absent = await agent.run("Invoice, if any?", output_type=Invoice | None)
        free = await agent.run("Anything?", output_type=dict[str, Any])
    # Nested classes and enums come back typed; a dict's values are checked as its type.
    assert ticket.output == Ticket(Contact("Ada", []), Priority.HIGH, {"open": 2})
    assert (
        history[2]
        .tool_results[0]["content"]
        .startswith("Error: Invalid answer: expected counts.open to be an integer, got: string.")
    )
    assert (nothing.output, absent.output) == (None, None)  # X | None: null or nothing
    assert free.output == {"any": ["thing", 1]}  # dict[str, Any]: any object
    schema = model.requests[0].tools[-1]["input_schema"]
    assert schema["properties"]["counts"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }

    # Refused, each with the reason: a recursive type, a set, a tuple of fixed length,
    # keys that are not strings, object.
    refused = {
        Tree: "its field children[] refers to Tree inside Tree: recursive types are not supported",
        set[str]: "has unsupported type hint 'set[str]'",
        tuple[int, str]: "use tuple[X, ...] or list[X]",
        dict[int, str]: "object keys are strings",
        object: "has unsupported type hint 'object'",
    }
    async with satsuma.open_agent(Extractor, model=ScriptedModel([])) as agent:
        for hint, why in refused.items():
            with pytest.raises(TypeError) as refusal:
                await agent.run("?", output_type=hint)
            assert why in str(refusal.value)
            assert str(refusal.value).startswith("agent extractor: output_type ")


@satsuma.tool(requires_approval=True)
async def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: The order's number.
    """
    ran.append(f"refund {order}")
    return "refunded"


async def test_an_answer_beside_a_call_that_needs_approval_ends_the_run_unasked() -> None:
    asked: list[str] = []

    async def approver(call: satsuma.PendingCall) -> satsuma.Approve | satsuma.Deny:
        asked.append(call.tool_name)
        return satsuma.Approve()

    class Careful(satsuma.Agent[Invoice]):
        name = "careful"
        tools = [refund]

    ran.clear()
    model = ScriptedModel(
        [
            # An invalid answer: the approval is asked, the refund runs, the model retries.
            Reply(tool_calls=[("refund", {"order": "A-1"}), ("final_answer", {"total": 1})]),
            # A valid one: the run ends; the refund is neither asked about nor run.
            Reply(
                tool_calls=[
                    ("refund", {"order": "B-2"}),
                    ("final_answer", {"total": 1, "currency": "EUR"}),
                ]
            ),
        ]
    )
    async with satsuma.open_agent(Careful, model=model, approver=approver) as agent:
        result = await agent.run("Refund and invoice")
        history = agent.history
    assert result.output == Invoice(1, "EUR")
    assert (asked, ran) == (["refund"], ["refund A-1"])
    assert [r["content"] for r in history[4].tool_results] == [
        "Error: Not run: the run ended with the final_answer answer of this turn.",
        "Answer received.",
    ]
    check_conversation(history)


async def test_the_loop_guard_still_stops_a_repeated_call_beside_invalid_answers() -> None:
    class Guarded(satsuma.Agent[Invoice]):
        name = "guarded"
        tools = [lookup]
        loop_guard = 1
        output_retries = 5

    ran.clear()
    turns = [
        Reply(
            tool_calls=[
                ToolCall(id=f"toolu_{n}a", name="lookup", input={"order": "A-1"}),
                ToolCall(id=f"toolu_{n}b", name="final_answer", input={"total": 1}),
            ]
        )
        for n in range(3)
    ]
    async with satsuma.open_agent(Guarded, model=ScriptedModel(turns)) as agent:
        result = await agent.run("Invoice of A-1?")
        history = agent.history
    assert result.status == "failed"
    assert result.error is not None and "lookup" in result.error
    assert ran == ["A-1"]  # refused the second time, and the run stopped at the third
    assert history[4].tool_results[0]["content"].startswith("Error: ")
    check_conversation(history)
