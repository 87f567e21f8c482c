"""Exceptions whose own methods are hostile (issue 29, item 4's class).

An exception raised by user code (a tool, a hook, an approver, a verifier, a history
processor, a custom Model) is formatted in many places: the text the model reads, the
outcome's details, log lines, telemetry spans, the AgentCrashed message, a supervisor's
log. Its ``__str__`` or ``__repr__`` may raise, return something that is not a str, or a
str subclass with methods of its own, or a text of megabytes; its ``args`` may hold
objects whose repr raises; a ToolError's reason may be no str at all. Whatever it is,
the call ends as one outcome naming the exception's type, the sibling keeps its own, the
agent serves the next run, and where a crash of the agent is the contract (a history
processor, a Model), the AgentCrashed is still raised, with a message that says the type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import satsuma
from satsuma import Message, PendingCall, ToolCall, ToolContext, ToolOutcome
from satsuma.store import SQLiteStore
from satsuma.testing import MessagesServer, Reply, tool_call


class Unreadable(Exception):
    """Its message cannot be read at all."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class NotAStr(Exception):
    def __str__(self) -> Any:
        return 42

    def __repr__(self) -> Any:
        return 42


class _LyingStr(str):
    def __len__(self) -> int:
        raise RuntimeError("no len")

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __format__(self, spec: str) -> str:
        raise RuntimeError("no format")

    def __hash__(self) -> int:
        raise RuntimeError("no hash")


class LyingStr(Exception):
    def __str__(self) -> str:
        return _LyingStr("lying")


class Enormous(Exception):
    def __str__(self) -> str:
        return "e" * 5_000_000


class _Meta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


class Nameless(Exception, metaclass=_Meta):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class _HostileArg:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "__str__ and __repr__ raise": Unreadable,
    "__str__ returns an int": NotAStr,
    "__str__ returns a lying str": LyingStr,
    "__str__ is 5 MB": Enormous,
    "a metaclass hides the name": Nameless,
    "args hold a hostile object": lambda: ValueError(_HostileArg()),
    "a surrogate in the message": lambda: ValueError("bad \ud800"),
    "a group of them": lambda: ExceptionGroup("g", [Unreadable(), NotAStr()]),
    "a ToolError whose reason is an object": lambda: satsuma.ToolError(_HostileArg()),  # type: ignore[arg-type]
    "a ToolError whose reason is a lying str": lambda: satsuma.ToolError(_LyingStr("why")),
}

# What each one's outcome text starts with, the model's side.
EXPECTED = {
    "__str__ and __repr__ raise": "Error: Tool crashed: Unreadable (its message could not be read)",
    "__str__ returns an int": "Error: Tool crashed: NotAStr (its message could not be read)",
    "__str__ returns a lying str": "Error: Tool crashed: LyingStr: lying",
    "__str__ is 5 MB": "Error: Tool crashed: Enormous: eeee",
    "a metaclass hides the name": "Error: Tool crashed: Nameless (its message could not be read)",
    "args hold a hostile object": "Error: Tool crashed: ValueError (its message could not be read)",
    "a surrogate in the message": "Error: Tool crashed: ValueError: bad \ufffd",
    "a group of them": "Error: Tool crashed: Unreadable (its message could not be read); "
    "NotAStr (its message could not be read)",
    "a ToolError whose reason is an object": "Error: <_HostileArg whose str() failed",
    "a ToolError whose reason is a lying str": "Error: why",
}

current: list[BaseException] = []


def _raise() -> None:
    raise current[0]


@satsuma.tool
async def boom() -> str:
    """Raise the exception of the case."""
    _raise()
    return "unreachable"


@satsuma.tool
async def sibling() -> str:
    """Finish after a moment."""
    await trio.sleep(0.01)
    return "sibling done"


@satsuma.tool(requires_approval=True)
async def guarded() -> str:
    """Needs an approval."""
    return "ran"


class HostileHooks(satsuma.ToolHook):
    def __init__(self, stage: str) -> None:
        self.stage = stage

    def before_call(self, call: ToolCall, ctx: ToolContext) -> None:
        if self.stage == "before_call" and call.name == "boom":
            _raise()

    def after_call(self, call: ToolCall, outcome: ToolOutcome) -> None:
        if self.stage == "after_call" and call.name == "boom":
            _raise()

    def __repr__(self) -> str:
        raise RuntimeError("the hook's repr")


async def hostile_approver(call: PendingCall) -> Any:
    _raise()


verified: list[str] = []


def hostile_verifier(ctx: satsuma.VerifyContext) -> satsuma.Verdict:
    verified.append(ctx.run_id)
    if len(verified) == 1:  # once: the model then reads why, and its next answer passes
        _raise()
    return satsuma.Verdict.ok()


class HostileHistory:
    def process(self, messages: Sequence[Message], last_usage: Any) -> Sequence[Message]:
        _raise()
        return messages


def _agent(stage: str) -> type[satsuma.Agent]:
    class Hostile(satsuma.Agent):
        name = "hostile"
        tools = [boom, sibling, guarded]
        hooks = [HostileHooks(stage)] if stage in ("before_call", "after_call") else None
        verifiers = [hostile_verifier] if stage == "verifier" else []

    return Hostile


def _replies(stage: str) -> list[Reply | str]:
    first = "guarded" if stage == "approver" else "boom"
    return [
        Reply(tool_calls=[tool_call(first, {}), tool_call("sibling", {})]),
        Reply(text="done"),
        # The verifier's retry, when it runs; then the next run.
        Reply(text="done again"),
        Reply(text="next run"),
        Reply(text="next run again"),
    ]


def _tool_results(messages: Sequence[Message]) -> dict[str, Any]:
    return {
        block["tool_use_id"]: block["content"]
        for message in messages
        for block in message.content
        if block.get("type") == "tool_result"
    }


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block["text"] for block in content if block.get("type") == "text")


STAGES = ["tool", "before_call", "after_call", "approver", "verifier"]


# A ToolError is a tool's own way to fail: raised elsewhere it is just an exception.
PAIRS = [
    (stage, case)
    for stage in STAGES
    for case in sorted(EXCEPTIONS)
    if stage == "tool" or not case.startswith("a ToolError")
]


@pytest.mark.parametrize(("stage", "case"), PAIRS)
async def test_a_hostile_exception_is_that_calls_outcome_and_the_agent_serves_on(
    stage: str, case: str, tmp_path: Path
) -> None:
    current[:] = [EXCEPTIONS[case]()]
    verified.clear()
    async with (
        MessagesServer(_replies(stage)) as server,
        SQLiteStore(tmp_path / "s.db") as store,
    ):
        model = satsuma.AnthropicModel(server.client(), backoff_base=0.001, jitter=False)
        async with satsuma.open_agent(
            _agent(stage),
            model=model,
            store=store,
            agent_id="h",
            approver=hostile_approver if stage == "approver" else None,
        ) as agent:
            first = await agent.run("go")
            second = await agent.run("again")
        stored = await store.load_messages("h")
    assert first.status == "completed", first.error
    assert second.status == "completed", second.error
    json.dumps([message.content for message in stored], ensure_ascii=False).encode("utf-8")
    results = {_text_of(text) for text in _tool_results(stored).values()}
    assert "sibling done" in results
    (other,) = results - {"sibling done"}
    described = EXPECTED[case].removeprefix("Error: Tool crashed: ")
    if stage == "tool":
        assert other.startswith(EXPECTED[case]), other
    elif stage == "before_call":
        assert other.startswith(f"Error: Denied: before_call hook failed: {described}"), other
    elif stage == "after_call":
        assert other.startswith(
            f"Error: Denied: boom ran, but its result was withheld: after_call hook failed: "
            f"{described}"
        ), other
    elif stage == "approver":
        assert other.startswith(f"Error: Denied: the approver failed: {described}"), other
    else:
        assert other == "ran" or other.startswith("Error: Tool crashed"), other
        feedback = [
            block["text"]
            for message in stored
            if message.role == "user"
            for block in message.content
            if block.get("type") == "text" and "Verifier crashed" in block["text"]
        ]
        assert feedback and described in feedback[0], feedback
    for result in (first, second):
        for message in result.messages:
            assert len(json.dumps(message.content)) < 200_000  # the 5 MB message was cut


@pytest.mark.parametrize("case", sorted(set(EXCEPTIONS) - {"a group of them"}))
@pytest.mark.parametrize("where", ["history processor", "model"])
async def test_a_hostile_exception_that_crashes_the_agent_still_says_what_it_was(
    where: str, case: str
) -> None:
    """A history processor's or a Model's exception crashes the agent (the contract:
    docs/failure-semantics.md); the AgentCrashed is still raised, naming the type."""
    current[:] = [EXCEPTIONS[case]()]

    class Buggy:
        async def respond(self, request: Any, listener: Any) -> Any:
            _raise()

    class Crashing(satsuma.Agent):
        name = "crashing"
        tools = [sibling]
        history = HostileHistory() if where == "history processor" else satsuma.KeepAll()

    model: Any = Buggy() if where == "model" else satsuma.testing.ScriptedModel(["unused"])
    with pytest.raises(satsuma.AgentCrashed) as info:
        async with satsuma.open_agent(Crashing, model=model) as agent:
            await agent.run("go")
    message = str(info.value)
    assert re.match(r"Agent crashing \(crashing-\d+\) crashed: ", message), message
    assert len(message) < 3_000
    raised = current[0]
    assert type.__dict__["__name__"].__get__(type(raised)) in message
    cause = info.value.cause
    # The exception itself; or, when trio could not print it (its __repr__ fails), a
    # RuntimeError that says what it was, raised from it.
    assert cause is raised or (type(cause) is RuntimeError and cause.__cause__ is raised)
