"""The A2A wire module against the official SDK's types: what satsuma writes, the
a2a-sdk's protobuf messages parse strictly (ProtoJSON, unknown fields refused), and what
the SDK writes, satsuma reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format

from satsuma import _a2a as wire


def sdk_parse(value: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(value, message)  # strict: an unknown field raises


def a_task() -> wire.Task:
    question = wire.Message(
        role="ROLE_AGENT",
        parts=(wire.Part.of_text("approve?"), wire.Part.of_data({"pending": [{"tool": "pay"}]})),
        context_id="c1",
        task_id="t1",
    )
    return wire.Task(
        id="t1",
        context_id="c1",
        state="TASK_STATE_INPUT_REQUIRED",
        message=question,
        timestamp=wire.rfc3339(1_700_000_000.25),
        artifacts=(wire.Artifact(parts=(wire.Part.of_data({"amount": 3}),), name="output"),),
    )


def test_a_task_is_read_by_the_sdk() -> None:
    task = sdk_parse(a_task().to_json(), a2a_pb2.Task())
    assert task.id == "t1" and task.context_id == "c1"
    assert task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    assert task.status.message.role == a2a_pb2.ROLE_AGENT
    assert task.status.message.parts[0].text == "approve?"
    assert json_format.MessageToDict(task.status.message.parts[1].data) == {
        "pending": [{"tool": "pay"}]
    }
    assert task.status.timestamp.seconds == 1_700_000_000
    assert task.artifacts[0].name == "output"


@pytest.mark.parametrize(
    "item,member",
    [
        (a_task(), "task"),
        (wire.Message(role="ROLE_AGENT", parts=(wire.Part.of_text("hi"),)), "message"),
        (
            wire.StatusUpdate(task_id="t", context_id="c", state="TASK_STATE_WORKING"),
            "status_update",
        ),
        (
            wire.ArtifactUpdate(
                task_id="t", context_id="c", artifact=wire.Artifact(parts=(wire.Part.of_text("x"),))
            ),
            "artifact_update",
        ),
    ],
)
def test_stream_responses_are_read_by_the_sdk_and_read_back(item: Any, member: str) -> None:
    written = wire.stream_response(item)
    parsed = sdk_parse(written, a2a_pb2.StreamResponse())
    assert parsed.WhichOneof("payload") == member
    again = wire.parse_stream_response(json_format.MessageToDict(parsed))
    assert type(again) is type(item)


def test_what_the_sdk_writes_is_read() -> None:
    sdk = a2a_pb2.Message(
        message_id="m1",
        context_id="c1",
        role=a2a_pb2.ROLE_USER,
        parts=[
            a2a_pb2.Part(text="hello"),
            a2a_pb2.Part(url="https://example.invalid/f.pdf", media_type="application/pdf"),
            a2a_pb2.Part(raw=b"\x00\x01", filename="b.bin"),
        ],
    )
    sdk.parts.add().data.struct_value.update({"decisions": {"toolu_1": {"decision": "approve"}}})
    message = wire.Message.from_json(json_format.MessageToDict(sdk))
    assert message.role == "ROLE_USER" and message.context_id == "c1"
    assert message.text == "hello"
    assert [p.kind for p in message.parts] == ["text", "url", "raw", "data"]
    assert message.parts[2].raw == b"\x00\x01"
    assert message.data == [{"decisions": {"toolu_1": {"decision": "approve"}}}]


def test_0_3_shapes_are_read() -> None:
    message = wire.Message.from_json(
        {
            "kind": "message",
            "messageId": "m",
            "role": "user",
            "parts": [
                {"kind": "text", "text": "hi"},
                {"kind": "data", "data": {"a": 1}},
                {"kind": "file", "file": {"uri": "https://x.invalid/a", "mimeType": "text/plain"}},
            ],
        }
    )
    assert message.role == "ROLE_USER"
    assert [p.kind for p in message.parts] == ["text", "data", "url"]
    task = wire.parse_stream_response(
        {"kind": "task", "id": "t", "contextId": "c", "status": {"state": "input-required"}}
    )
    assert isinstance(task, wire.Task) and task.state == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize(
    "value,complaint",
    [
        ([], "message must be an object"),
        ({"role": "ROLE_USER", "parts": []}, "message.messageId is required"),
        ({"messageId": "m", "role": "boss", "parts": []}, "message.role"),
        ({"messageId": "m", "role": "ROLE_USER", "parts": "hi"}, "message.parts must be a list"),
        (
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "data": 1}]},
            "message.parts[0] must hold exactly one",
        ),
        (
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "!!"}]},
            "message.parts[0].raw is not valid base64",
        ),
    ],
)
def test_a_bad_message_is_invalid_params_naming_the_problem(value: Any, complaint: str) -> None:
    with pytest.raises(wire.A2AError) as caught:
        wire.Message.from_json(value)
    assert caught.value.code == wire.INVALID_PARAMS == -32602
    assert complaint in caught.value.message


def test_methods_and_their_0_3_names_match_the_sdk() -> None:
    from a2a.client.transports import jsonrpc

    source = Path(jsonrpc.__file__).read_text()
    for method in wire.METHODS:
        assert f"method='{method}'" in source
    assert wire.canonical_method("message/send") == "SendMessage"
    assert wire.canonical_method("tasks/resubscribe") == "SubscribeToTask"
    assert wire.canonical_method("GetTask") == "GetTask"
    assert wire.canonical_method("tasks/delete") is None


def test_error_codes_match_the_sdk() -> None:
    from a2a.utils import errors

    codes = {cls.__name__: code for cls, code in errors.JSON_RPC_ERROR_CODE_MAP.items()}
    assert codes["TaskNotFoundError"] == wire.TASK_NOT_FOUND
    assert codes["TaskNotCancelableError"] == wire.TASK_NOT_CANCELABLE
    assert codes["PushNotificationNotSupportedError"] == wire.PUSH_NOTIFICATION_NOT_SUPPORTED
    assert codes["UnsupportedOperationError"] == wire.UNSUPPORTED_OPERATION
    assert codes["ContentTypeNotSupportedError"] == wire.CONTENT_TYPE_NOT_SUPPORTED
    assert codes["InvalidAgentResponseError"] == wire.INVALID_AGENT_RESPONSE
    assert codes["VersionNotSupportedError"] == wire.VERSION_NOT_SUPPORTED
    error = wire.A2AError.from_json(wire.error_response(1, wire.A2AError(-32001, "no"))["error"])
    assert (error.code, error.message) == (-32001, "no")


def test_versions() -> None:
    assert wire.version_supported(None) and wire.version_supported("1.0")
    assert wire.version_supported("0.3") and wire.version_supported("1.0.2")
    assert not wire.version_supported("2.0") and not wire.version_supported("1.x")


def test_the_agent_card_is_read_by_the_sdk_and_back() -> None:
    written = wire.agent_card(
        name="support",
        description="Answers questions.",
        url="http://127.0.0.1:8000/a2a/support",
        version="1",
        skills=[{"id": "support", "name": "support", "description": "d", "tags": ["chat"]}],
        bearer=True,
    )
    from a2a.client.card_resolver import parse_agent_card

    card = parse_agent_card(dict(written))
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert "bearer" in card.security_schemes
    read = wire.AgentCard.from_json(json_format.MessageToDict(card))
    assert read.url == "http://127.0.0.1:8000/a2a/support"
    assert read.protocol_version == "1.0" and read.streaming
    assert read.bearer_required  # as the SDK writes it back, too


def test_a_0_3_client_reads_the_card_and_its_bearer_scheme() -> None:
    from a2a.compat.v0_3 import types as v03

    written = wire.agent_card(
        name="support", description="d", url="http://127.0.0.1:8000/a2a/s", version="1", bearer=True
    )
    card = v03.AgentCard.model_validate(written)
    assert card.url == "http://127.0.0.1:8000/a2a/s"
    scheme = card.security_schemes["bearer"].root
    assert isinstance(scheme, v03.HTTPAuthSecurityScheme) and scheme.scheme == "Bearer"
    assert card.security == [{"bearer": []}]
