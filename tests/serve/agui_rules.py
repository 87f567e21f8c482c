"""AG-UI's rules for one run's event stream, checked on events parsed by the protocol's
own models (``ag_ui.core``). The Python package ships no verifier of event order (the
TypeScript client's ``verifyEvents`` is not available offline), so the rules it enforces
are written out here from the protocol's documentation."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pydantic
from ag_ui.core import Event, EventType

_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Event)


def parse(data: str | dict[str, Any]) -> Any:
    """One event, validated by ag_ui's discriminated Event union (extra keys refused)."""
    raw = json.loads(data) if isinstance(data, str) else data
    event = _EVENT.validate_python(raw)
    # The models keep unknown fields; a key the protocol does not know is a mistake here.
    assert not event.model_extra, f"unknown fields {event.model_extra} in {raw}"
    return event


def check_order(events: Iterable[Any]) -> None:
    """Assert the sequence is one well-formed run."""
    events = list(events)
    assert events, "no event"
    assert events[0].type == EventType.RUN_STARTED, events[0]
    last = events[-1].type
    assert last in (EventType.RUN_FINISHED, EventType.RUN_ERROR), events[-1]
    open_messages: set[str] = set()
    open_calls: set[str] = set()
    ended_calls: set[str] = set()
    open_steps: set[str] = set()
    open_reasoning: set[str] = set()
    for index, event in enumerate(events):
        kind = event.type
        if index and kind == EventType.RUN_STARTED:
            raise AssertionError("RUN_STARTED twice")
        if kind in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
            assert index == len(events) - 1, "events after the run ended"
            if kind == EventType.RUN_FINISHED:
                assert not open_messages, f"messages left open: {open_messages}"
                assert not open_calls, f"tool calls left open: {open_calls}"
                assert not open_steps, f"steps left open: {open_steps}"
                assert not open_reasoning, f"reasoning left open: {open_reasoning}"
        elif kind == EventType.TEXT_MESSAGE_START:
            assert event.message_id not in open_messages
            open_messages.add(event.message_id)
        elif kind == EventType.TEXT_MESSAGE_CONTENT:
            assert event.message_id in open_messages, "content outside its message"
            assert event.delta, "empty delta"
        elif kind == EventType.TEXT_MESSAGE_END:
            open_messages.remove(event.message_id)
        elif kind == EventType.TOOL_CALL_START:
            assert event.tool_call_id not in open_calls | ended_calls
            open_calls.add(event.tool_call_id)
        elif kind == EventType.TOOL_CALL_ARGS:
            assert event.tool_call_id in open_calls, "args outside their call"
        elif kind == EventType.TOOL_CALL_END:
            open_calls.remove(event.tool_call_id)
            ended_calls.add(event.tool_call_id)
        elif kind == EventType.TOOL_CALL_RESULT:
            assert event.tool_call_id in ended_calls, "a result for no ended call"
        elif kind == EventType.REASONING_START:
            assert event.message_id not in open_reasoning
            open_reasoning.add(event.message_id)
        elif kind in (EventType.REASONING_MESSAGE_START, EventType.REASONING_MESSAGE_END):
            assert event.message_id in open_reasoning, "a reasoning message outside its block"
        elif kind == EventType.REASONING_MESSAGE_CONTENT:
            assert event.message_id in open_reasoning and event.delta
        elif kind == EventType.REASONING_END:
            open_reasoning.remove(event.message_id)
        elif kind == EventType.STEP_STARTED:
            assert event.step_name not in open_steps
            open_steps.add(event.step_name)
        elif kind == EventType.STEP_FINISHED:
            open_steps.remove(event.step_name)
