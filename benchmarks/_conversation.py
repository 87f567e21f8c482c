"""The scripted conversation every library in ``run.py`` has with the loopback servers.

The model's side is a function of the conversation so far, not of the order requests
arrive in, so that a thousand runs at once each get the answers of their own run. The
prompt names the plan, e.g. ``"bench turns=10 calls=noop:3"``: every turn but the last
asks for the listed calls (in that order), the last answers ``done``. The turn is the
number of assistant messages already in the conversation.

The same plan is spoken in two protocols: the Anthropic Messages API (as a
``MessagesServer`` script function) and OpenAI's Chat Completions (for ``_openai_server``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from satsuma import ToolCall
from satsuma.testing import Reply

__all__ = ["Captures", "Plan", "anthropic_responder", "openai_responder", "parse_plan", "prompt"]

FINAL_TEXT = "done"


class Plan:
    """What the model asks for: ``turns`` turns, each but the last with ``calls``."""

    def __init__(self, turns: int, calls: list[tuple[str, int]], capture: str | None) -> None:
        self.turns = turns
        self.calls = calls
        self.capture = capture

    def calls_for(self, turn: int) -> list[tuple[str, dict[str, Any]]]:
        """The (tool, input) pairs of ``turn``; empty for the last turn. Every input is
        distinct, so that no library's loop guard sees the same call twice."""
        if turn >= self.turns - 1:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        for name, count in self.calls:
            for _ in range(count):
                out.append((name, {"n": turn * 1000 + len(out)}))
        return out


def prompt(turns: int, calls: list[tuple[str, int]], *, capture: str | None = None) -> str:
    """The prompt that makes the model follow this plan; with ``capture``, the server
    keeps the tool results of the last turn under that key."""
    spec = ",".join(f"{name}:{count}" for name, count in calls)
    return f"bench turns={turns} calls={spec}" + (f" capture={capture}" if capture else "")


def parse_plan(text: str) -> Plan:
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
    calls = []
    for item in filter(None, fields.get("calls", "").split(",")):
        name, count = item.split(":")
        calls.append((name, int(count)))
    return Plan(int(fields["turns"]), calls, capture=fields.get("capture"))


def _text_of(content: Any) -> str:
    """The text of a message's or a tool result's content: a string or a list of blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, Mapping))


Received = list[tuple[str, bool | None, str]]


class Captures:
    """The tool results the server received in the last turn of a plan with a
    ``capture`` key, each as ``(tool name, is_error, text)``: the first such turn per key
    is kept (workload 5)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Received] = {}

    def add(self, key: str, results: Received) -> None:
        with self._lock:
            self._items.setdefault(key, results)

    def get(self, key: str) -> Received | None:
        with self._lock:
            return self._items.get(key)


def anthropic_responder(captures: Captures) -> Callable[[dict[str, Any]], Reply]:
    """A ``MessagesServer`` script function playing the plan of the request's prompt."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        plan = parse_plan(_text_of(messages[0]["content"]))
        turn = sum(1 for message in messages if message["role"] == "assistant")
        if plan.capture and turn == plan.turns - 1:
            names = {}
            for message in messages:
                if message["role"] == "assistant" and not isinstance(message["content"], str):
                    for block in message["content"]:
                        if block.get("type") == "tool_use":
                            names[block["id"]] = block["name"]
            last = messages[-1]["content"]
            captures.add(
                plan.capture,
                [
                    (
                        names.get(block["tool_use_id"], "?"),
                        block.get("is_error"),
                        _text_of(block.get("content")),
                    )
                    for block in last
                    if isinstance(block, Mapping) and block.get("type") == "tool_result"
                ],
            )
        calls = plan.calls_for(turn)
        if not calls:
            return Reply(text=FINAL_TEXT)
        return Reply(
            tool_calls=[
                ToolCall(id=f"toolu_{turn}_{index}", name=name, input=tool_input)
                for index, (name, tool_input) in enumerate(calls)
            ]
        )

    return respond


def openai_responder(captures: Captures) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function from a Chat Completions request body to its ``message`` (the
    ``choices[0].message`` object) playing the plan of the request's prompt."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        first_user = next(message for message in messages if message["role"] == "user")
        plan = parse_plan(_text_of(first_user["content"]))
        turn = sum(1 for message in messages if message["role"] == "assistant")
        if plan.capture and turn == plan.turns - 1:
            names = {}
            for message in messages:
                for call in message.get("tool_calls") or ():
                    names[call["id"]] = call["function"]["name"]
            captures.add(
                plan.capture,
                [
                    (names.get(message["tool_call_id"], "?"), None, _text_of(message["content"]))
                    for message in messages
                    if message["role"] == "tool"
                ][-sum(count for _, count in plan.calls) :],
            )
        calls = plan.calls_for(turn)
        if not calls:
            return {"role": "assistant", "content": FINAL_TEXT}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(tool_input)},
                }
                for index, (name, tool_input) in enumerate(calls)
            ],
        }

    return respond
