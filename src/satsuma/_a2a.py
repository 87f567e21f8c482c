"""The A2A wire format: the Agent2Agent protocol's JSON-RPC binding, version 1.0, as
plain JSON values in and out.

Both ends of A2A in satsuma use it: the server surface (``satsuma.serve``) and the
remote agent as a tool (``satsuma.tools.a2a``). It is in the shared kernel so that
neither room imports the other. Nothing here does I/O, and nothing needs asyncio or
pydantic: the official ``a2a-sdk`` is only a test dependency, used to prove that what
this module writes, the SDK reads.

Where the names come from (the A2A specification 1.0, ``specification/a2a.proto`` and
the "JSON-RPC binding" section of ``specification/`` in github.com/a2aproject/A2A):

- the method names are the proto service's RPC names (``SendMessage``, ...); the 0.3
  names (``message/send``, ...) are the specification 0.3's, accepted as aliases;
- the field names are the proto fields in ProtoJSON's lowerCamelCase (``contextId``);
- the task states and roles are the proto enum value names (``TASK_STATE_COMPLETED``,
  ``ROLE_USER``), as ProtoJSON writes enums; the 0.3 spellings (``completed``,
  ``input-required``, ``user``) are read too;
- a ``Part`` is one of ``text``, ``data``, ``url`` or ``raw`` (base64) with optional
  ``mediaType`` and ``filename``; 0.3's ``{"kind": "text" | "data" | "file"}`` parts are
  read too;
- the error codes are JSON-RPC 2.0's (-32700 to -32603) and the specification's A2A
  errors (-32001 to -32009), numbered as the 1.0 specification numbers them;
- the ``A2A-Version`` header carries the protocol version (``1.0``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ._a2a_values import (
    CONTENT_TYPE_NOT_SUPPORTED as CONTENT_TYPE_NOT_SUPPORTED,
)
from ._a2a_values import (
    EXTENDED_CARD_NOT_CONFIGURED as EXTENDED_CARD_NOT_CONFIGURED,
)
from ._a2a_values import (
    EXTENSION_SUPPORT_REQUIRED as EXTENSION_SUPPORT_REQUIRED,
)
from ._a2a_values import INTERNAL_ERROR as INTERNAL_ERROR
from ._a2a_values import INVALID_AGENT_RESPONSE as INVALID_AGENT_RESPONSE
from ._a2a_values import INVALID_PARAMS as INVALID_PARAMS
from ._a2a_values import INVALID_REQUEST as INVALID_REQUEST
from ._a2a_values import METHOD_NOT_FOUND as METHOD_NOT_FOUND
from ._a2a_values import PARSE_ERROR as PARSE_ERROR
from ._a2a_values import (
    PUSH_NOTIFICATION_NOT_SUPPORTED as PUSH_NOTIFICATION_NOT_SUPPORTED,
)
from ._a2a_values import TASK_NOT_CANCELABLE as TASK_NOT_CANCELABLE
from ._a2a_values import TASK_NOT_FOUND as TASK_NOT_FOUND
from ._a2a_values import TERMINAL_STATES as TERMINAL_STATES
from ._a2a_values import UNSUPPORTED_OPERATION as UNSUPPORTED_OPERATION
from ._a2a_values import VERSION_NOT_SUPPORTED as VERSION_NOT_SUPPORTED
from ._a2a_values import A2AError as A2AError
from ._a2a_values import Artifact as Artifact
from ._a2a_values import ArtifactUpdate as ArtifactUpdate
from ._a2a_values import Message as Message
from ._a2a_values import Part as Part
from ._a2a_values import Role as Role
from ._a2a_values import StatusUpdate as StatusUpdate
from ._a2a_values import StreamItem as StreamItem
from ._a2a_values import Task as Task
from ._a2a_values import TaskState as TaskState
from ._a2a_values import error_response as error_response
from ._a2a_values import json_object, text_field
from ._a2a_values import new_id as new_id
from ._a2a_values import result_response as result_response
from ._a2a_values import rfc3339 as rfc3339

PROTOCOL_VERSION: Final = "1.0"
VERSION_HEADER: Final = "A2A-Version"
# The versions this module reads and answers; an absent header means 0.3 (the spec).
_SUPPORTED_VERSIONS: Final = ("1.0", "0.3")
CARD_PATH: Final = "/.well-known/agent-card.json"
JSONRPC_BINDING: Final = "JSONRPC"

# -- methods ------------------------------------------------------------------------

METHODS: Final = frozenset(
    {
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    }
)
"""Every method of the 1.0 JSON-RPC binding."""

METHODS_0_3: Final[Mapping[str, str]] = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/list": "ListTasks",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
"""The 0.3 method names, each to its 1.0 name."""

STREAMING_METHODS: Final = frozenset({"SendStreamingMessage", "SubscribeToTask"})
"""The methods answered with an SSE stream of JSON-RPC responses."""


def canonical_method(name: str) -> str | None:
    """The 1.0 name of a method named in 1.0 or 0.3, or None for no A2A method."""
    if name in METHODS:
        return name
    return METHODS_0_3.get(name)


def version_supported(header: str | None) -> bool:
    """True if an ``A2A-Version`` header names a version this module speaks (its
    major.minor; an absent or empty header means 0.3, as the spec says)."""
    if not header or not header.strip():
        return True
    parts = header.strip().split(".")
    return ".".join(parts[:2]) in _SUPPORTED_VERSIONS and all(p.isdigit() for p in parts)


# -- streamed responses ------------------------------------------------------------


def stream_response(item: StreamItem) -> dict[str, Any]:
    """A ``StreamResponse`` (also a ``SendMessageResponse`` for a task or a message):
    the item under its member's name."""
    if isinstance(item, Task):
        return {"task": item.to_json()}
    if isinstance(item, Message):
        return {"message": item.to_json()}
    if isinstance(item, StatusUpdate):
        return {"statusUpdate": item.to_json()}
    return {"artifactUpdate": item.to_json()}


def parse_stream_response(value: Any) -> StreamItem:
    """The item of a ``StreamResponse`` or ``SendMessageResponse`` in 1.0; a 0.3 result
    (the item itself, with ``kind``) is read too.

    Raises:
        A2AError: ``INVALID_AGENT_RESPONSE`` when it is none of them.
    """
    try:
        obj = json_object(value, "result")
        kind = obj.get("kind")
        if "task" in obj or kind == "task":
            return Task.from_json(obj.get("task", obj))
        if ("message" in obj and kind is None) or kind == "message":
            return Message.from_json(obj.get("message", obj))
        if "statusUpdate" in obj or kind == "status-update":
            event = json_object(obj.get("statusUpdate", obj), "statusUpdate")
            task = Task.from_json({"id": event.get("taskId"), **event}, "statusUpdate")
            return StatusUpdate(
                task_id=task.id,
                context_id=task.context_id,
                state=task.state,
                message=task.message,
                timestamp=task.timestamp,
            )
        if "artifactUpdate" in obj or kind == "artifact-update":
            event = json_object(obj.get("artifactUpdate", obj), "artifactUpdate")
            return ArtifactUpdate(
                task_id=text_field(event, "taskId", "artifactUpdate", required=True) or "",
                context_id=text_field(event, "contextId", "artifactUpdate", required=False) or "",
                artifact=Artifact.from_json(event.get("artifact"), "artifactUpdate.artifact"),
                append=bool(event.get("append", False)),
                last_chunk=bool(event.get("lastChunk", True)),
            )
    except A2AError as error:
        raise A2AError(INVALID_AGENT_RESPONSE, error.message) from None
    raise A2AError(INVALID_AGENT_RESPONSE, "the result is no task, message or task event")


# -- the 0.3 dialect ----------------------------------------------------------------
# A request named by its 0.3 method name is answered in 0.3's shapes: each object says
# its ``kind``, states and roles are lower-case, a part is ``{"kind": ...}``, a result
# is the task or message itself (not under ``task``/``message``), and a status update
# says whether it is ``final``.

_STATE_0_3: Final[Mapping[str, str]] = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_UNSPECIFIED": "unknown",
}
_ROLE_0_3: Final[Mapping[str, str]] = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}


def _part_0_3(part: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any]
    if "text" in part:
        out = {"kind": "text", "text": part["text"]}
    elif "data" in part:
        data = part["data"]
        # 0.3's data part holds an object only: another value goes under "value".
        out = {"kind": "data", "data": data if isinstance(data, Mapping) else {"value": data}}
    else:
        file: dict[str, Any] = (
            {"uri": part["url"]} if "url" in part else {"bytes": part.get("raw", "")}
        )
        if "mediaType" in part:
            file["mimeType"] = part["mediaType"]
        if "filename" in part:
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    if "metadata" in part:
        out["metadata"] = part["metadata"]
    return out


def _message_0_3(message: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **message,
        "kind": "message",
        "role": _ROLE_0_3.get(message.get("role", ""), "agent"),
        "parts": [_part_0_3(p) for p in message.get("parts", ())],
    }


def _status_0_3(status: Mapping[str, Any]) -> dict[str, Any]:
    out = {**status, "state": _STATE_0_3.get(status.get("state", ""), "unknown")}
    if "message" in status:
        out["message"] = _message_0_3(status["message"])
    return out


def _artifact_0_3(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {**artifact, "parts": [_part_0_3(p) for p in artifact.get("parts", ())]}


def _task_0_3(task: Mapping[str, Any]) -> dict[str, Any]:
    out = {**task, "kind": "task", "status": _status_0_3(task["status"])}
    if "artifacts" in task:
        out["artifacts"] = [_artifact_0_3(a) for a in task["artifacts"]]
    if "history" in task:
        out["history"] = [_message_0_3(m) for m in task["history"]]
    return out


def result_0_3(method: str, result: Any) -> Any:
    """A 1.0 result of ``method`` (its 1.0 name) in 0.3's shapes."""
    if method in ("GetTask", "CancelTask"):
        return _task_0_3(result)
    if method == "ListTasks":
        return {**result, "tasks": [_task_0_3(t) for t in result.get("tasks", ())]}
    if "task" in result:
        return _task_0_3(result["task"])
    if "message" in result:
        return _message_0_3(result["message"])
    if "statusUpdate" in result:
        update = result["statusUpdate"]
        state = update["status"].get("state")
        return {
            **update,
            "kind": "status-update",
            "status": _status_0_3(update["status"]),
            "final": state in TERMINAL_STATES or state == "TASK_STATE_INPUT_REQUIRED",
        }
    if "artifactUpdate" in result:
        update = result["artifactUpdate"]
        return {
            **update,
            "kind": "artifact-update",
            "artifact": _artifact_0_3(update["artifact"]),
        }
    return result


# -- the agent card -----------------------------------------------------------------


def agent_card(
    *,
    name: str,
    description: str,
    url: str,
    version: str,
    skills: Sequence[Mapping[str, Any]] = (),
    streaming: bool = True,
    bearer: bool = False,
) -> dict[str, Any]:
    """An ``AgentCard`` for an agent served over the JSON-RPC binding at ``url``; with
    ``bearer``, it declares HTTP bearer authentication as required. Push notifications
    and an extended card are not declared."""
    card: dict[str, Any] = {
        "name": name,
        "description": description,
        "version": version,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": JSONRPC_BINDING, "protocolVersion": PROTOCOL_VERSION}
        ],
        # 0.3's connection fields, for 0.3 clients: the same endpoint answers 0.3's
        # method names in 0.3's shapes. A 1.0 client reads supportedInterfaces.
        "url": url,
        "preferredTransport": JSONRPC_BINDING,
        "protocolVersion": "0.3.0",
        "capabilities": {"streaming": streaming, "pushNotifications": False},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [dict(s) for s in skills],
    }
    if bearer:
        card["securitySchemes"] = {
            # 1.0's oneof, and beside it 0.3's type-tagged fields: a 0.3 client (whose
            # scheme is a union on "type") reads the card too, as it reads "url".
            "bearer": {
                "httpAuthSecurityScheme": {"scheme": "Bearer"},
                "type": "http",
                "scheme": "Bearer",
            },
        }
        card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
        card["security"] = [{"bearer": []}]  # 0.3's name for the requirements
    return card


@attrs.frozen(kw_only=True)
class AgentCard:
    """What a client needs of an agent card: where to send JSON-RPC, and what the agent
    says it can do."""

    name: str
    description: str
    url: str
    protocol_version: str
    streaming: bool
    bearer_required: bool = False

    @classmethod
    def from_json(cls, value: Any) -> AgentCard:
        """The card of a 1.0 agent (its JSON-RPC interface) or a 0.3 one (``url``).

        Raises:
            A2AError: ``INVALID_AGENT_RESPONSE`` when it names no JSON-RPC endpoint.
        """
        if not isinstance(value, Mapping):
            raise A2AError(INVALID_AGENT_RESPONSE, "the agent card is not a JSON object")
        url, version = None, None
        for interface in value.get("supportedInterfaces") or ():
            if isinstance(interface, Mapping) and interface.get("protocolBinding") in (
                JSONRPC_BINDING,
                None,
            ):
                url, version = interface.get("url"), interface.get("protocolVersion")
                break
        if url is None and value.get("preferredTransport", JSONRPC_BINDING) == JSONRPC_BINDING:
            url, version = value.get("url"), value.get("protocolVersion", "0.3")
        if not isinstance(url, str):
            raise A2AError(INVALID_AGENT_RESPONSE, "the agent card names no JSON-RPC endpoint")
        capabilities = value.get("capabilities")
        streaming = isinstance(capabilities, Mapping) and bool(capabilities.get("streaming"))
        return cls(
            name=str(value.get("name", "")),
            description=str(value.get("description", "")),
            url=url,
            protocol_version=str(version or PROTOCOL_VERSION),
            streaming=streaming,
            bearer_required=_bearer_required(value),
        )


def _is_bearer(scheme: Any) -> bool:
    """An HTTP bearer scheme: 1.0's ``{"httpAuthSecurityScheme": {"scheme": "Bearer"}}``
    or 0.3's ``{"type": "http", "scheme": "bearer"}``."""
    if not isinstance(scheme, Mapping):
        return False
    http = scheme.get("httpAuthSecurityScheme")
    if isinstance(http, Mapping):
        return str(http.get("scheme", "")).lower() == "bearer"
    return scheme.get("type") == "http" and str(scheme.get("scheme", "")).lower() == "bearer"


def _bearer_required(card: Mapping[str, Any]) -> bool:
    """Whether every way the card lets a client in is a bearer token (1.0's
    ``securityRequirements``, 0.3's ``security``). A card that also admits anonymous
    callers (an empty requirement) or other schemes does not require one."""
    schemes = card.get("securitySchemes")
    requirements = card.get("securityRequirements", card.get("security"))
    if not isinstance(schemes, Mapping) or not isinstance(requirements, list) or not requirements:
        return False
    for requirement in requirements:
        if not isinstance(requirement, Mapping):
            return False
        # 1.0 wraps the names in "schemes"; 0.3 names them at the top level.
        named = requirement.get("schemes", requirement)
        if not isinstance(named, Mapping) or not named:
            return False
        if not all(_is_bearer(schemes.get(name)) for name in named):
            return False
    return True
