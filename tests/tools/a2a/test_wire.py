"""The A2A client's reading of answers: both protocol versions, and anything at all."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma import _a2a
from satsuma.tools.a2a import _wire
from satsuma.tools.a2a._wire import TaskView, WireError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "task",
                    "message",
                    "statusUpdate",
                    "artifactUpdate",
                    "status",
                    "state",
                    "parts",
                    "text",
                    "data",
                    "artifacts",
                    "artifact",
                    "artifactId",
                    "append",
                    "id",
                    "taskId",
                    "contextId",
                    "kind",
                    "result",
                    "error",
                    "code",
                    "url",
                    "raw",
                    "file",
                ]
            )
            | st.text(max_size=5),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_anything_is_read_or_refused_with_a_wire_error(envelope: Any) -> None:
    view = TaskView()
    try:
        view.apply(_wire.result_of(envelope))
    except WireError as exc:
        assert str(exc).startswith("answered ")
    assert isinstance(view.result_text(), str)
    assert isinstance(view.state, str)


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("TASK_STATE_INPUT_REQUIRED", "input-required"),
        ("TASK_STATE_COMPLETED", "completed"),
        ("input-required", "input-required"),
        ("cancelled", "canceled"),
        (None, "unknown"),
    ],
)
def test_states_of_both_versions(raw: object, name: str) -> None:
    assert _wire.state_name(raw) == name


def test_a_0_3_task_reads_as_a_1_0_task() -> None:
    old = {
        "kind": "task",
        "id": "t",
        "contextId": "c",
        "status": {"state": "completed"},
        "artifacts": [
            {"artifactId": "a", "parts": [{"kind": "text", "text": "hi"}]},
            {"artifactId": "b", "parts": [{"kind": "data", "data": {"n": 1}}]},
        ],
    }
    view = TaskView()
    view.apply(old)
    assert (view.task_id, view.context_id, view.state) == ("t", "c", "completed")
    assert view.result_text() == 'hi\n{"n": 1}'


def test_appended_chunks_join_one_artifact() -> None:
    view = TaskView()
    for text, append in [("a", False), ("b", True), ("c", True)]:
        update = {"taskId": "t", "artifact": {"artifactId": "x", "parts": [{"text": text}]}}
        view.apply({"artifactUpdate": {**update, "append": append}})
    assert view.result_text() == "a\nb\nc"


def test_json_rpc_errors_are_named_by_the_specification() -> None:
    with pytest.raises(WireError, match=r"TaskNotCancelableError \(-32002\): too late"):
        _wire.result_of(
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "too late"}}
        )
    with pytest.raises(WireError, match=r"error \(7\)$"):
        _wire.result_of({"error": {"code": 7}})


_BEARER_1_0 = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
_BEARER_0_3 = {"jwt": {"type": "http", "scheme": "bearer"}}


@pytest.mark.parametrize(
    "security,required",
    [
        ({}, False),
        ({"securitySchemes": _BEARER_1_0, "securityRequirements": []}, False),
        (
            {
                "securitySchemes": _BEARER_1_0,
                "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
            },
            True,
        ),
        ({"securitySchemes": _BEARER_0_3, "security": [{"jwt": []}]}, True),
        # Anonymous callers are let in too (an empty requirement): no token required.
        ({"securitySchemes": _BEARER_0_3, "security": [{"jwt": []}, {}]}, False),
        # Another scheme may do instead: the card does not require a bearer token.
        (
            {
                "securitySchemes": {**_BEARER_0_3, "key": {"type": "apiKey", "in": "header"}},
                "security": [{"jwt": []}, {"key": []}],
            },
            False,
        ),
        ({"securitySchemes": _BEARER_0_3, "security": [{"missing": []}]}, False),
    ],
)
def test_a_card_requires_a_bearer_token_when_every_way_in_is_one(
    security: dict[str, Any], required: bool
) -> None:
    card = {"name": "a", "url": "http://127.0.0.1:1/a2a/a", **security}
    assert _a2a.AgentCard.from_json(card).bearer_required is required
