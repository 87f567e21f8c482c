"""A missing API key is found when the agent starts, as one error that names the variable
and how to set it; under a supervisor the child could not start (no restart loop)."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import satsuma
from satsuma import AnthropicModel, ConfigurationError, Supervisor, SupervisorFailed
from satsuma.testing import MessagesServer, ScriptedModel


class Chat(satsuma.Agent):
    name = "chat"
    model = "sonnet"


class Loopback(satsuma.Agent):
    name = "loopback"
    model = "claude-test-1"  # a model the SDK has no deprecation warning for


@pytest.fixture(autouse=True)
def _no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _says_what_and_how(error: BaseException) -> None:
    text = str(error)
    assert text.startswith("ANTHROPIC_API_KEY is not set"), text
    assert "export ANTHROPIC_API_KEY=" in text, text
    assert "ScriptedModel" in text, text


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
async def test_open_agent_without_a_key_says_which_variable_and_how(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is not None:
        monkeypatch.setenv("ANTHROPIC_API_KEY", value)
    with pytest.raises(ConfigurationError) as caught:
        async with satsuma.open_agent(Chat):
            pytest.fail("the block must not run")
    _says_what_and_how(caught.value)
    assert "agent 'chat' declares its model by name ('sonnet')" in str(caught.value)


async def test_a_supervised_agent_without_a_key_could_not_start_and_is_not_restarted() -> None:
    events: list[Any] = []
    async with Supervisor(name="root", events=events.append) as sup:
        with pytest.raises(SupervisorFailed) as caught:
            await sup.start_child(Chat)
        assert sup.which_children() == []
    assert caught.value.reason == "could not start"
    assert isinstance(caught.value.cause, ConfigurationError)
    assert caught.value.__cause__ is caught.value.cause
    # Only this child failed: the supervisor runs on, and the message does not say
    # that it gave up.
    assert str(caught.value).startswith(
        "Supervisor root could not start child chat (it runs on): ConfigurationError: "
        "ANTHROPIC_API_KEY is not set"
    )
    _says_what_and_how(caught.value.cause)
    assert not [e for e in events if type(e).__name__ == "ChildRestarted"]
    # As an initial child, the supervisor does not start at all.
    with pytest.raises(SupervisorFailed, match="ANTHROPIC_API_KEY is not set"):
        async with Supervisor(children=[Chat]):
            pytest.fail("the body must not run")


async def test_a_bearer_token_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    async with MessagesServer(["hello"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "a-token")
        async with satsuma.open_agent(Loopback) as agent:
            assert (await agent.run("hi")).output == "hello"


async def test_a_model_passed_in_needs_no_key() -> None:
    async with satsuma.open_agent(Chat, model=ScriptedModel(["offline"])) as agent:
        assert (await agent.run("hi")).output == "offline"


def test_an_anthropic_model_without_a_key_is_refused_when_built() -> None:
    with pytest.raises(ConfigurationError) as caught:
        AnthropicModel()
    _says_what_and_how(caught.value)
    keyless = anthropic.AsyncAnthropic(api_key=None, auth_token=None)
    with pytest.raises(ConfigurationError, match=r"client has no API key.*api_key="):
        AnthropicModel(keyless)


async def test_the_key_set_later_is_used_by_the_next_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError):
        async with satsuma.open_agent(Chat):
            pass
    async with MessagesServer(["now it works"]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        async with satsuma.open_agent(Loopback) as agent:
            assert (await agent.run("hi")).output == "now it works"
