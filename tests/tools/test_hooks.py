"""Hooks: allow, rewrite, deny before; replace after; and failing closed."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

import satsuma
from satsuma import Deny, Rewrite, ToolCall, ToolHook, ToolOutcome, ToolRunner
from satsuma.testing import tool_call

ran: list[dict[str, Any]] = []


class Echo(satsuma.Tool):
    name = "echo"
    description = "Echo the arguments"
    parameters = {"text": {"type": "string", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        ran.append(args)
        return f"echo: {args['text']} (secret=hunter2)"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


async def run_with(hooks: Any, text: Any = "hi", **options: Any) -> ToolOutcome:
    runner = ToolRunner([Echo], hooks=hooks, **options)
    (outcome,) = await runner.execute([tool_call("echo", {"text": text})])
    return outcome


class DenyAll(ToolHook):
    def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
        return Deny("writes are disabled")


async def test_before_call_can_deny() -> None:
    outcome = await run_with(DenyAll())
    assert outcome.content == "Error: Denied: writes are disabled"
    assert outcome.error_kind == "denied"
    assert ran == []


async def test_before_call_may_allow_by_returning_none() -> None:
    class Allow(ToolHook):
        async def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            return None

    outcome = await run_with(Allow())
    assert outcome.content == "echo: hi (secret=hunter2)"


async def test_before_call_can_rewrite_and_the_rewrite_is_validated() -> None:
    class Shout(ToolHook):
        async def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            return Rewrite({"text": call.input["text"].upper(), "extra": "dropped"})

    class Break(ToolHook):
        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            return Rewrite({"text": 5})

    assert (await run_with(Shout())).content == "echo: HI (secret=hunter2)"
    assert ran == [{"text": "HI"}]
    broken = await run_with(Break())
    assert broken.content == "Error: Invalid arguments: expected text to be a string, got: integer"


async def test_hooks_chain_in_order_and_the_first_denial_wins() -> None:
    seen: list[str] = []

    class Record(ToolHook):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            seen.append(self.tag)
            return Rewrite({"text": call.input["text"] + self.tag})

    outcome = await run_with([Record("a"), Record("b"), DenyAll(), Record("c")])
    assert seen == ["a", "b"]
    assert outcome.error_kind == "denied"
    assert (await run_with([Record("x"), Record("y")])).content.startswith("echo: hixy")


async def test_after_call_can_redact() -> None:
    class Redact(ToolHook):
        def after_call(self, call: ToolCall, outcome: ToolOutcome) -> Any:
            assert isinstance(outcome.content, str)
            return attrs.evolve(outcome, content=outcome.content.replace("hunter2", "***"))

    outcome = await run_with(Redact())
    assert outcome.content == "echo: hi (secret=***)"


async def test_after_call_sees_every_outcome_even_unknown_tools() -> None:
    seen: list[str | None] = []

    class Watch(ToolHook):
        async def after_call(self, call: ToolCall, outcome: ToolOutcome) -> Any:
            seen.append(outcome.error_kind)
            return None

    runner = ToolRunner([Echo], hooks=Watch(), strategy="sequential")
    await runner.execute(
        [tool_call("nope"), tool_call("echo", {}), tool_call("echo", {"text": "x"})]
    )
    assert seen == ["unknown_tool", "invalid_args", None]


async def test_a_before_call_that_raises_denies_the_call() -> None:
    class Broken(ToolHook):
        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            raise RuntimeError("policy service down")

    outcome = await run_with(Broken())
    assert (
        outcome.content
        == "Error: Denied: before_call hook failed: RuntimeError: policy service down"
    )
    assert outcome.error_kind == "denied"
    assert ran == []


async def test_an_after_call_that_raises_withholds_the_content_and_says_the_tool_ran() -> None:
    class Broken(ToolHook):
        def after_call(self, call: ToolCall, outcome: ToolOutcome) -> Any:
            raise RuntimeError("redactor crashed")

    outcome = await run_with(Broken())
    assert "hunter2" not in str(outcome.content)
    # Fail closed, but truthfully: a model told "Denied" alone would believe the side
    # effect never happened, and do it again.
    assert outcome.content == (
        "Error: Denied: echo ran, but its result was withheld: "
        "after_call hook failed: RuntimeError: redactor crashed"
    )
    assert outcome.error_kind == "denied"
    assert ran == [{"text": "hi"}]


async def test_a_hook_that_hangs_is_denied_at_hook_timeout(autojump_clock: trio.abc.Clock) -> None:
    class Hangs(ToolHook):
        async def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            await trio.sleep_forever()

    outcome = await run_with(Hangs(), hook_timeout=2)
    assert outcome.content == "Error: Denied: before_call hook timed out after 2s"
    assert trio.current_time() == 2


async def test_a_hook_returning_nonsense_denies() -> None:
    class Nonsense(ToolHook):
        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            return "yes please"

    class NonsenseAfter(ToolHook):
        def after_call(self, call: ToolCall, outcome: ToolOutcome) -> Any:
            return "replaced"

    before = await run_with(Nonsense())
    assert before.error_kind == "denied"
    assert "returned 'yes please', not None, Rewrite, Deny or Ask" in before.text
    after = await run_with(NonsenseAfter())
    assert after.error_kind == "denied"
    assert "returned str, not None or a ToolOutcome" in after.text


async def test_a_duck_typed_hook_object_works() -> None:
    class Plain:
        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            return Deny("plain object")

    assert (await run_with(Plain())).content == "Error: Denied: plain object"


def test_an_object_with_no_hook_method_is_refused() -> None:
    with pytest.raises(TypeError, match="has neither before_call nor after_call"):
        ToolRunner([Echo], hooks=[object()])


async def test_hooks_do_not_see_arguments_that_are_not_an_object() -> None:
    outcome = await run_with(DenyAll(), text=None)  # {"text": None}: fine for the hook
    assert outcome.error_kind == "denied"
    runner = ToolRunner([Echo], hooks=DenyAll())
    (outcome,) = await runner.execute([tool_call("echo", [1, 2])])
    assert (
        outcome.content
        == "Error: Invalid arguments: expected arguments to be an object, got: array"
    )


async def test_hooks_see_decoded_arguments_and_after_call_sees_the_rewritten_call() -> None:
    before_inputs: list[Any] = []
    after_inputs: list[Any] = []

    class Both(ToolHook):
        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            before_inputs.append(call.input)
            return Rewrite({"text": "rewritten"})

        def after_call(self, call: ToolCall, outcome: ToolOutcome) -> Any:
            after_inputs.append(call.input)
            return None

    runner = ToolRunner([Echo], hooks=Both())
    (outcome,) = await runner.execute([tool_call("echo", '{"text": "sent as JSON text"}')])
    assert before_inputs == [{"text": "sent as JSON text"}]
    assert after_inputs == [{"text": "rewritten"}]
    assert outcome.content == "echo: rewritten (secret=hunter2)"


async def test_time_spent_in_hooks_does_not_count_against_the_tools_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Slow(ToolHook):
        async def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            await trio.sleep(4)
            return None

    class Takes3(satsuma.Tool):
        name = "takes3"
        description = "Take three seconds"
        timeout = 5

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            await trio.sleep(3)
            return "done"

    (outcome,) = await ToolRunner([Takes3], hooks=Slow()).execute([tool_call("takes3")])
    assert outcome.content == "done"
    assert outcome.duration == 7
