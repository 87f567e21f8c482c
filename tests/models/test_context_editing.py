"""ContextEditing: the Anthropic API's server-side context editing, turned on on an
AnthropicModel: what reaches the server (through the real AsyncAnthropic client), the
settings refused, and the providers that do not take it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import satsuma
import satsuma.testing
from satsuma import AnthropicModel, ContextEditing, OpenAIModel
from satsuma._messages import Message
from satsuma.models._context_editing import log_applied_edits
from satsuma.models._model import ModelRequest
from satsuma.testing import MessagesServer

BETA = "context-management-2025-06-27"


class Listener:
    wants_deltas = False

    def text(self, delta: str) -> None:
        pass

    def thinking(self, delta: str) -> None:
        pass


def make_request() -> ModelRequest:
    return ModelRequest(
        model="claude-test-1",
        system="You help.",
        messages=(Message.user("Hello"),),
        tools=(),
        max_tokens=100,
    )


async def test_the_default_sends_one_tool_clearing_edit_and_the_beta_header() -> None:
    async with MessagesServer(["whole", "streamed"]) as server, server.client() as client:
        model = AnthropicModel(client, context_editing=ContextEditing())
        whole = await model.respond(make_request(), Listener())
        model.stream = True
        streamed = await model.respond(make_request(), Listener())
    # The server's answers report no edit applied: read without harm, whole or streamed.
    assert (whole.text, streamed.text) == ("whole", "streamed")
    for received in server.received:
        assert received.headers["anthropic-beta"] == BETA
        assert received.body["context_management"] == {
            "edits": [{"type": "clear_tool_uses_20250919"}]
        }
    assert [r.body.get("stream", False) for r in server.received] == [False, True]


async def test_every_setting_reaches_the_server_as_documented() -> None:
    editing = ContextEditing(
        trigger_tokens=30_000,
        keep_tool_uses=2,
        clear_at_least_tokens=5_000,
        exclude_tools=["memory"],
        clear_tool_inputs=True,
        keep_thinking_turns=2,
    )
    async with MessagesServer(["ok"]) as server, server.client() as client:
        await AnthropicModel(client, context_editing=editing).respond(make_request(), Listener())
    (received,) = server.received
    assert received.headers["anthropic-beta"] == BETA
    assert received.body["context_management"] == {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 30_000},
                "keep": {"type": "tool_uses", "value": 2},
                "clear_at_least": {"type": "input_tokens", "value": 5_000},
                "exclude_tools": ["memory"],
                "clear_tool_inputs": True,
            },
        ]
    }


async def test_thinking_alone_and_the_clients_own_betas_are_kept() -> None:
    editing = ContextEditing(clear_tool_uses=False, keep_thinking_turns="all")
    headers = {"anthropic-beta": "context-1m-2025-08-07"}
    async with MessagesServer(["ok"]) as server, server.client(default_headers=headers) as client:
        await AnthropicModel(client, context_editing=editing).respond(make_request(), Listener())
    (received,) = server.received
    assert received.headers["anthropic-beta"] == f"context-1m-2025-08-07,{BETA}"
    assert received.body["context_management"] == {
        "edits": [{"type": "clear_thinking_20251015", "keep": "all"}]
    }


async def test_without_it_no_field_and_no_header_are_sent() -> None:
    async with MessagesServer(["ok"]) as server, server.client() as client:
        await AnthropicModel(client).respond(make_request(), Listener())
    (received,) = server.received
    assert "context_management" not in received.body
    assert "anthropic-beta" not in received.headers


async def test_the_token_count_carries_it_too() -> None:
    async with MessagesServer([]) as server, server.client() as client:
        model = AnthropicModel(client, context_editing=ContextEditing(keep_tool_uses=0))
        assert await model.count_tokens(make_request()) is not None
    (counted,) = server.count_requests
    assert counted["context_management"] == {
        "edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 0}}]
    }


@satsuma.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return "value " * 50


class Helper(satsuma.Agent):
    name = "helper"
    tools = [lookup]


async def test_an_agent_run_sends_it_on_every_request() -> None:
    script: list[Any] = [
        satsuma.testing.Reply(tool_calls=[satsuma.ToolCall("t1", "lookup", {"key": "a"})]),
        "done",
    ]
    async with MessagesServer(script) as server, server.client() as client:
        model = AnthropicModel(client, context_editing=ContextEditing(trigger_tokens=1000))
        async with satsuma.open_agent(Helper, model=model) as agent:
            result = await agent.run("Look a up")
    assert result.output == "done"
    assert len(server.received) == 2
    for received in server.received:
        assert received.headers["anthropic-beta"] == BETA
        assert received.body["context_management"]["edits"][0]["trigger"]["value"] == 1000


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"trigger_tokens": 0}, ValueError, "ContextEditing.trigger_tokens must be a positive"),
        ({"trigger_tokens": 1.5}, ValueError, "ContextEditing.trigger_tokens"),
        ({"trigger_tokens": True}, ValueError, "ContextEditing.trigger_tokens"),
        ({"keep_tool_uses": -1}, ValueError, "ContextEditing.keep_tool_uses must be a whole"),
        ({"clear_at_least_tokens": -5}, ValueError, "ContextEditing.clear_at_least_tokens"),
        ({"keep_thinking_turns": 0}, ValueError, "ContextEditing.keep_thinking_turns"),
        ({"keep_thinking_turns": "some"}, ValueError, "ContextEditing.keep_thinking_turns"),
        ({"exclude_tools": "memory"}, TypeError, "ContextEditing.exclude_tools must be a list"),
        ({"exclude_tools": ["a", 3]}, TypeError, "ContextEditing.exclude_tools must hold"),
        ({"clear_tool_inputs": "yes"}, TypeError, "ContextEditing.clear_tool_inputs must be"),
        ({"clear_tool_uses": False}, ValueError, "ContextEditing clears nothing"),
        (
            {"clear_tool_uses": False, "keep_thinking_turns": 1, "keep_tool_uses": 2},
            ValueError,
            "ContextEditing.keep_tool_uses is set but clear_tool_uses is False",
        ),
        (
            {"clear_tool_uses": False, "keep_thinking_turns": 1, "exclude_tools": ["a"]},
            ValueError,
            "ContextEditing.exclude_tools is set but clear_tool_uses is False",
        ),
    ],
)
def test_settings_that_make_no_sense_are_refused_naming_the_field(
    settings: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ContextEditing(**settings)


async def test_a_model_refuses_anything_else_as_context_editing() -> None:
    async with MessagesServer([]) as server, server.client() as client:
        with pytest.raises(TypeError, match=r"context_editing must be a satsuma\.ContextEditing"):
            AnthropicModel(client, context_editing={"edits": []})  # type: ignore[arg-type]


def test_openai_has_no_context_editing() -> None:
    # OpenAI's APIs have no such field: the option does not exist there, so it cannot be
    # sent by mistake; Python names the argument.
    with pytest.raises(TypeError, match="context_editing"):
        OpenAIModel(context_editing=ContextEditing())  # type: ignore[call-arg]


def test_the_edits_the_api_reports_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="satsuma.models")
    log_applied_edits(
        {
            "type": "message_delta",
            "context_management": {
                "applied_edits": [
                    {
                        "type": "clear_tool_uses_20250919",
                        "cleared_tool_uses": 8,
                        "cleared_input_tokens": 50_000,
                    }
                ]
            },
        }
    )
    log_applied_edits({"context_management": {"applied_edits": []}})
    log_applied_edits({"context_management": "not a report"})
    (record,) = caplog.records
    assert "clear_tool_uses_20250919" in record.getMessage()
    assert "'cleared_tool_uses': 8" in record.getMessage()
