"""Capabilities: a tool declares what the context must grant, and fails closed without it."""

from __future__ import annotations

from typing import Any

import pytest

import satsuma
from satsuma import ToolCall, ToolDefinitionError, ToolHook, ToolRunner
from satsuma.testing import run_tool, tool_call

ran: list[str] = []


class Deploy(satsuma.Tool):
    name = "deploy"
    description = "Deploy the service"
    capabilities = {"shell", "network"}
    parameters = {"target": {"type": "string", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> str:
        ran.append(args["target"])
        return f"deployed {args['target']}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def test_the_declaration_is_compiled_to_a_frozenset() -> None:
    assert satsuma.tools.ToolRunner([Deploy]).definitions[0].capabilities == {"shell", "network"}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("read", "capabilities must be a set or list of names, got: 'read'"),
        (3, "capabilities must be a set or list of names, got: 3"),
        (["read", 3], "capabilities must be non-empty strings"),
        ([""], "capabilities must be non-empty strings"),
    ],
)
def test_a_bad_declaration_fails_at_class_creation(value: object, problem: str) -> None:
    with pytest.raises(ToolDefinitionError, match=problem):

        class Bad(satsuma.Tool):
            name = "bad"
            description = "Bad"
            capabilities = value  # type: ignore[assignment]

            async def run(self, args: Any, ctx: Any) -> str:
                return "never"


async def test_without_the_capability_the_call_is_denied_and_run_never_called() -> None:
    outcome = await run_tool(Deploy, {"target": "prod"}, {"capabilities": {"shell"}})
    assert outcome.content == "Error: Tool capability denied: network"
    assert outcome.is_error
    assert outcome.error_kind == "denied"
    assert ran == []


async def test_with_no_capabilities_at_all_the_first_missing_name_is_reported() -> None:
    outcome = await run_tool(Deploy, {"target": "prod"})
    assert outcome.content == "Error: Tool capability denied: network"  # sorted: network < shell


async def test_granted_as_a_set_or_a_list_the_tool_runs() -> None:
    for granted in ({"shell", "network", "read"}, ["network", "shell"]):
        outcome = await run_tool(Deploy, {"target": "prod"}, {"capabilities": granted})
        assert outcome.content == "deployed prod"
    assert ran == ["prod", "prod"]


async def test_denial_comes_before_hooks_and_argument_validation() -> None:
    seen: list[str] = []

    class Watch(ToolHook):
        def before_call(self, call: ToolCall, ctx: satsuma.ToolContext) -> Any:
            seen.append(call.name)
            return None

    runner = ToolRunner([Deploy], hooks=[Watch()])
    (outcome,) = await runner.execute([tool_call("deploy", {"target": 42})])
    assert outcome.error_kind == "denied"
    assert seen == []


async def test_a_function_tool_declares_capabilities_in_the_decorator() -> None:
    @satsuma.tool(capabilities=["read"])
    def peek(path: str) -> str:
        """Peek at a path."""
        return f"peeked {path}"

    denied = await run_tool(peek, {"path": "x"})
    allowed = await run_tool(peek, {"path": "x"}, {"capabilities": ["read"]})
    assert (denied.content, allowed.content) == ("Error: Tool capability denied: read", "peeked x")


async def test_a_capability_of_the_users_own_naming_works_the_same() -> None:
    @satsuma.tool(capabilities={"billing"})
    async def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    outcome = await run_tool(refund, {"order": "A1"}, {"capabilities": {"read"}})
    assert outcome.content == "Error: Tool capability denied: billing"
