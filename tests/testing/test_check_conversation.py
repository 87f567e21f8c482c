"""check_conversation: accepts every history satsuma writes and rejects the histories the
Messages API refuses."""

from __future__ import annotations

from typing import Any

import pytest

from satsuma.testing import check_conversation


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "t", "input": {}}


def result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok", "is_error": False}


def test_a_history_with_tools_steering_and_verification_passes() -> None:
    check_conversation(
        [
            user(text("go")),
            assistant(text("calling"), use("a"), use("b")),
            user(result("b"), result("a"), text("steered")),
            assistant(text("done")),
            user(text("Verification failed: x")),
            assistant(text("fixed")),
        ]
    )


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([assistant(text("hi"))], "must start with a user message"),
        ([user(text("a")), user(text("b"))], "same role"),
        ([user(text("a")), assistant()], "is empty"),
        ([user(text(""))], "text block 0 is empty"),
        (
            [user(text("a")), assistant(use("x"), use("x")), user(result("x"), result("x"))],
            "used twice",
        ),
        (
            [
                user(text("a")),
                assistant(use("x")),
                user(result("x")),
                assistant(use("x")),
                user(result("x")),
            ],
            "used twice",
        ),
        ([user(text("a")), assistant(use("x")), user(text("b"), result("x"))], "come before"),
        ([user(text("a")), assistant(use("x")), user(text("b"))], "expected ['x']"),
        ([user(text("a")), assistant(text("b")), user(result("zz"))], "expected []"),
        ([user(text("a")), assistant(use("x"))], "never answered"),
        ([user(text("a"), use("x"))], "tool_use in a user message"),
    ],
)
def test_histories_the_api_refuses_are_rejected(messages: list[Any], problem: str) -> None:
    with pytest.raises(AssertionError) as caught:
        check_conversation(messages)
    assert problem in str(caught.value)
