"""Every return form a tool may use, every fixed text the model may read, truncation, and
the helpers over lists of outcomes."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import satsuma
from satsuma import ToolOutcome, ToolResult, format_results, get_errors, has_errors
from satsuma.testing import run_tool, tool_call


def returning(value: Any) -> type[satsuma.Tool]:
    class Returns(satsuma.Tool):
        name = "returns"
        description = "Returns a fixed value"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            return value

    return Returns


def raising(exc: BaseException) -> type[satsuma.Tool]:
    class Raises(satsuma.Tool):
        name = "raises"
        description = "Raises a fixed exception"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            raise exc

    return Raises


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


@pytest.mark.parametrize(
    ("value", "content", "is_error", "kind"),
    [
        (("ok", "fine"), "fine", False, None),
        (("ok", "exit 1", True), "exit 1", True, "failed"),
        (("ok", "fine", False), "fine", False, None),
        (("error", "Permission denied"), "Error: Permission denied", True, "failed"),
        ("plain", "plain", False, None),
        (ToolResult("full"), "full", False, None),
        (ToolResult("bad", is_error=True), "bad", True, "failed"),
        (
            ("ok", [{"type": "text", "text": "a"}, IMAGE]),
            [{"type": "text", "text": "a"}, IMAGE],
            False,
            None,
        ),
        (("ok", ""), "", False, None),
    ],
)
async def test_every_result_form(
    value: Any, content: Any, is_error: bool, kind: str | None
) -> None:
    outcome = await run_tool(returning(value))
    assert outcome.content == content
    assert outcome.is_error is is_error
    assert outcome.error_kind == kind


async def test_tool_result_details_reach_the_outcome_but_not_the_model() -> None:
    outcome = await run_tool(returning(ToolResult("x", details={"rows": 3})))
    assert outcome.details == {"rows": 3}
    assert format_results([outcome]) == [
        {
            "type": "tool_result",
            "tool_use_id": outcome.tool_use_id,
            "content": "x",
            "is_error": False,
        }
    ]


async def test_tool_error_is_the_same_as_returning_an_error() -> None:
    outcome = await run_tool(raising(satsuma.ToolError("File not found: /x")))
    assert outcome.content == "Error: File not found: /x"
    assert outcome.error_kind == "failed"
    assert outcome.is_error


async def test_a_raise_is_a_crash_with_type_and_message() -> None:
    outcome = await run_tool(raising(ValueError("bad value")))
    assert outcome.content == "Error: Tool crashed: ValueError: bad value"
    assert outcome.error_kind == "crashed"
    assert outcome.details is not None
    assert "Traceback" in outcome.details["traceback"]
    assert outcome.details["exception"] == "ValueError"


async def test_a_raise_without_message_names_the_type() -> None:
    outcome = await run_tool(raising(KeyError()))
    assert outcome.content == "Error: Tool crashed: KeyError"


async def test_an_exception_group_from_the_tools_nursery_is_a_crash_by_its_leaves() -> None:
    class Nursery(satsuma.Tool):
        name = "nursery"
        description = "Two children fail"

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            async def fail(exc: Exception) -> None:
                raise exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(fail, ValueError("a"))
                nursery.start_soon(fail, KeyError("b"))
            return "unreachable"

    outcome = await run_tool(Nursery)
    assert outcome.error_kind == "crashed"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Tool crashed: ")
    leaves = outcome.content.removeprefix("Error: Tool crashed: ").split("; ")
    assert sorted(leaves) == ["KeyError: 'b'", "ValueError: a"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            None,
            'expected ("ok", content), ("ok", content, is_error), ("error", reason), a str or a ToolResult, got: None',
        ),
        (42, "got: 42"),
        (("ok",), "got: ('ok',)"),
        (("maybe", "x"), "got: ('maybe', 'x')"),
        (("ok", 1), "content must be a str or a list of content blocks, got: 1"),
        (("ok", "x", "yes"), "is_error must be True or False, got: 'yes'"),
        (("error", 5), "the error reason must be a str, got: 5"),
        (("ok", ["text"]), "content block 0 must be a dict, got: 'text'"),
        (
            ("ok", [{"type": "video"}]),
            "content block 0 has type 'video'; expected 'text' or 'image'",
        ),
        (("ok", [{"type": "text", "text": 3}]), "content block 0 (text) must have a str 'text'"),
        (("ok", [{"type": "image"}]), "content block 0 (image) must have a 'source' dict"),
        (ToolResult(5), "content must be a str or a list of content blocks, got: 5"),  # type: ignore[arg-type]
    ],
)
async def test_anything_else_is_an_invalid_result(value: Any, problem: str) -> None:
    outcome = await run_tool(returning(value))
    assert outcome.error_kind == "invalid_result"
    assert outcome.is_error
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Invalid tool result: ")
    assert problem in outcome.content


async def test_an_object_whose_repr_raises_is_still_an_invalid_result() -> None:
    class Nasty:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    outcome = await run_tool(returning(Nasty()))
    assert outcome.error_kind == "invalid_result"
    assert "<Nasty object>" in outcome.text


async def test_fixed_texts_unknown_tool_and_invalid_arguments() -> None:
    runner = satsuma.ToolRunner([returning("ok")])
    unknown, invalid = await runner.execute(
        [tool_call("nope", {}), tool_call("returns", "not json")]
    )
    assert unknown.content == "Error: Unknown tool: nope"
    assert unknown.error_kind == "unknown_tool"
    assert isinstance(invalid.content, str)
    assert invalid.content.startswith(
        "Error: Invalid arguments: expected arguments to be an object"
    )
    assert invalid.error_kind == "invalid_args"


async def test_fixed_text_timeout(autojump_clock: trio.abc.Clock) -> None:
    class Hangs(satsuma.Tool):
        name = "hangs"
        description = "Never returns"
        timeout = 5

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            await trio.sleep_forever()

    outcome = await run_tool(Hangs)
    assert outcome.content == "Error: Tool timed out after 5s"
    assert outcome.error_kind == "timeout"
    assert outcome.duration == 5.0


async def test_fixed_text_fractional_timeout(autojump_clock: trio.abc.Clock) -> None:
    class Hangs(satsuma.Tool):
        name = "hangs"
        description = "Never returns"
        timeout = 0.25

        async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
            await trio.sleep_forever()

    outcome = await run_tool(Hangs)
    assert outcome.content == "Error: Tool timed out after 0.25s"


def outcome(call_id: str, content: Any, is_error: bool, kind: Any = None) -> ToolOutcome:
    return ToolOutcome(
        tool_use_id=call_id, tool_name="t", content=content, is_error=is_error, error_kind=kind
    )


def test_format_results_has_errors_get_errors() -> None:
    outcomes = [
        outcome("a", "fine", False),
        outcome("b", "Exit code: 1\n\nboom", True, "failed"),
        outcome(
            "c", [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}], True, "failed"
        ),
    ]
    assert format_results(outcomes) == [
        {"type": "tool_result", "tool_use_id": "a", "content": "fine", "is_error": False},
        {
            "type": "tool_result",
            "tool_use_id": "b",
            "content": "Exit code: 1\n\nboom",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "c",
            "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
            "is_error": True,
        },
    ]
    assert has_errors(outcomes)
    assert not has_errors(outcomes[:1])
    assert get_errors(outcomes) == [("b", "Exit code: 1\n\nboom"), ("c", "x\ny")]


async def test_long_content_is_truncated_with_a_marker_and_kept_in_details() -> None:
    text = "H" * 600 + "T" * 600
    outcome = await run_tool(returning(("ok", text)), max_result_chars=300)
    assert isinstance(outcome.content, str)
    assert len(outcome.content) <= 300
    assert outcome.content.startswith("H")
    assert outcome.content.endswith("T")
    assert "[... 900 characters truncated ...]" in outcome.content
    assert outcome.details is not None
    assert outcome.details["full_content"] == text
    assert outcome.details["truncated_chars"] == 900


async def test_truncation_keeps_the_tools_own_details_and_applies_to_errors() -> None:
    outcome = await run_tool(
        returning(ToolResult("x" * 1000, is_error=True, details={"exit": 1})), max_result_chars=200
    )
    assert outcome.is_error
    assert outcome.details is not None
    assert outcome.details["exit"] == 1
    assert outcome.details["truncated_chars"] == 800


async def test_truncation_of_text_blocks_leaves_images_alone() -> None:
    blocks = [{"type": "text", "text": "a" * 500}, IMAGE, {"type": "text", "text": "b" * 500}]
    outcome = await run_tool(returning(("ok", blocks)), max_result_chars=400)
    assert isinstance(outcome.content, list)
    assert outcome.content[1] == IMAGE
    texts = [block["text"] for block in outcome.content if block["type"] == "text"]
    assert sum(len(text) for text in texts) <= 400 + 2 * len(
        "\n\n[... 1,000 characters truncated ...]\n\n"
    )
    assert outcome.details is not None
    assert outcome.details["truncated_chars"] == 600


async def test_short_content_is_untouched_and_truncation_can_be_disabled() -> None:
    assert (await run_tool(returning(("ok", "x" * 100)), max_result_chars=100)).details is None
    outcome = await run_tool(returning(("ok", "x" * 200_000)), max_result_chars=None)
    assert outcome.content == "x" * 200_000


async def test_default_cap_is_100_000_characters() -> None:
    outcome = await run_tool(returning(("ok", "x" * 150_000)))
    assert isinstance(outcome.content, str)
    assert len(outcome.content) <= 100_000
    assert "[... 50,000 characters truncated ...]" in outcome.content
