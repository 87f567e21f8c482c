"""The values of the A2A wire format (``satsuma._a2a``): parts, messages, artifacts,
tasks and the streamed task events, with the JSON-RPC error they raise when a peer sends
something malformed. Each value writes the 1.0 JSON binding (ProtoJSON of the
specification's ``a2a.proto``: lowerCamelCase fields, enum value names such as
``TASK_STATE_COMPLETED`` and ``ROLE_USER``) and reads 1.0 or 0.3 (``kind``, lower-case
states and roles). Split from ``_a2a`` to keep each module one concept: the protocol
(methods, versions, the card) there, the values here.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

# -- errors -------------------------------------------------------------------------

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED: Final = -32003
UNSUPPORTED_OPERATION: Final = -32004
CONTENT_TYPE_NOT_SUPPORTED: Final = -32005
INVALID_AGENT_RESPONSE: Final = -32006
EXTENDED_CARD_NOT_CONFIGURED: Final = -32007
EXTENSION_SUPPORT_REQUIRED: Final = -32008
VERSION_NOT_SUPPORTED: Final = -32009


class A2AError(Exception):
    """A JSON-RPC error object: ``code``, ``message`` and optional ``data``. Raised by
    the parsers here (``INVALID_PARAMS``) and by a server for any A2A error; read from a
    response by a client."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (A2A error {code})")
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    @classmethod
    def from_json(cls, error: Any) -> A2AError:
        """The error a JSON-RPC response's ``error`` member holds (leniently: a
        malformed one is an ``INTERNAL_ERROR`` saying so)."""
        if isinstance(error, Mapping) and isinstance(error.get("code"), int):
            return cls(int(error["code"]), str(error.get("message", "")), error.get("data"))
        return cls(INTERNAL_ERROR, f"malformed JSON-RPC error: {error!r:.200}")


def result_response(request_id: Any, result: Any) -> dict[str, Any]:
    """A JSON-RPC 2.0 success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: Any, error: A2AError) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response (``id`` null when the request's id is unknown)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def new_id() -> str:
    """A fresh id for a message, a task, a context or an artifact."""
    return str(uuid.uuid4())


def rfc3339(seconds: float | None = None) -> str:
    """Seconds since the epoch (now when None) as an RFC 3339 UTC timestamp, as
    ProtoJSON writes a ``google.protobuf.Timestamp``."""
    seconds = time.time() if seconds is None else seconds
    whole = int(seconds)
    millis = round((seconds - whole) * 1000)
    if millis == 1000:
        whole, millis = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def _invalid(message: str) -> A2AError:
    return A2AError(INVALID_PARAMS, message)


def text_field(obj: Mapping[str, Any], name: str, where: str, *, required: bool) -> str | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise _invalid(f"{where}.{name} is required")
        return None
    if not isinstance(value, str):
        raise _invalid(f"{where}.{name} must be a string")
    return value


def json_object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _invalid(f"{where} must be an object")
    return value


# -- task states --------------------------------------------------------------------

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_UNSPECIFIED",
]
"""A task's state as the 1.0 JSON binding spells it."""

_STATES: Final[frozenset[str]] = frozenset(TaskState.__args__)  # type: ignore[attr-defined]
_STATES_0_3: Final[Mapping[str, str]] = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}

TERMINAL_STATES: Final = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
)
"""The states a task never leaves."""


def _state(value: Any, where: str) -> TaskState:
    if isinstance(value, str):
        if value in _STATES:
            return value  # type: ignore[return-value]
        if value in _STATES_0_3:
            return _STATES_0_3[value]  # type: ignore[return-value]
    raise _invalid(f"{where} is not a task state: {value!r:.60}")


# -- parts and messages -------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Part:
    """One piece of a message or an artifact: exactly one of ``text``, ``data`` (any
    JSON value), ``url`` or ``raw`` (bytes), with an optional media type and file name.
    """

    text: str | None = None
    data: Any = None
    url: str | None = None
    raw: bytes | None = None
    media_type: str | None = None
    filename: str | None = None
    metadata: Mapping[str, Any] | None = None

    @classmethod
    def of_text(cls, text: str) -> Part:
        """A text part."""
        return cls(text=text)

    @classmethod
    def of_data(cls, data: Any) -> Part:
        """A structured data part (any JSON value)."""
        return cls(data=data, media_type="application/json")

    @property
    def kind(self) -> Literal["text", "data", "url", "raw"]:
        """Which content it holds."""
        if self.text is not None:
            return "text"
        if self.url is not None:
            return "url"
        if self.raw is not None:
            return "raw"
        return "data"

    def to_json(self) -> dict[str, Any]:
        """The part as the 1.0 JSON binding writes it."""
        out: dict[str, Any]
        if self.text is not None:
            out = {"text": self.text}
        elif self.url is not None:
            out = {"url": self.url}
        elif self.raw is not None:
            out = {"raw": base64.b64encode(self.raw).decode("ascii")}
        else:
            out = {"data": self.data}
        if self.media_type is not None:
            out["mediaType"] = self.media_type
        if self.filename is not None:
            out["filename"] = self.filename
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_json(cls, value: Any, where: str = "part") -> Part:
        """A part written in 1.0 or in 0.3 (``kind``).

        Raises:
            A2AError: ``INVALID_PARAMS`` naming what is wrong.
        """
        obj = json_object(value, where)
        metadata = obj.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise _invalid(f"{where}.metadata must be an object")
        kind = obj.get("kind")
        if kind is not None:
            return cls._from_0_3(obj, str(kind), where, metadata)
        media_type = text_field(obj, "mediaType", where, required=False)
        filename = text_field(obj, "filename", where, required=False)
        present = [k for k in ("text", "data", "url", "raw") if k in obj]
        if len(present) != 1:
            raise _invalid(f"{where} must hold exactly one of text, data, url, raw")
        part = cls(media_type=media_type, filename=filename, metadata=metadata)
        if present == ["text"]:
            return attrs.evolve(part, text=text_field(obj, "text", where, required=True))
        if present == ["url"]:
            return attrs.evolve(part, url=text_field(obj, "url", where, required=True))
        if present == ["raw"]:
            return attrs.evolve(part, raw=_base64(obj["raw"], f"{where}.raw"))
        return attrs.evolve(part, data=obj["data"])

    @classmethod
    def _from_0_3(
        cls, obj: Mapping[str, Any], kind: str, where: str, metadata: Mapping[str, Any] | None
    ) -> Part:
        if kind == "text":
            return cls(text=text_field(obj, "text", where, required=True), metadata=metadata)
        if kind == "data":
            return cls(data=obj.get("data"), metadata=metadata)
        if kind == "file":
            file = json_object(obj.get("file"), f"{where}.file")
            media = text_field(file, "mimeType", f"{where}.file", required=False)
            name = text_field(file, "name", f"{where}.file", required=False)
            if "uri" in file:
                uri = text_field(file, "uri", f"{where}.file", required=True)
                return cls(url=uri, media_type=media, filename=name, metadata=metadata)
            raw = _base64(file.get("bytes"), f"{where}.file.bytes")
            return cls(raw=raw, media_type=media, filename=name, metadata=metadata)
        raise _invalid(f"{where}.kind must be text, data or file")


def _base64(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise _invalid(f"{where} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise _invalid(f"{where} is not valid base64") from None


Role = Literal["ROLE_USER", "ROLE_AGENT"]
_ROLES: Final[Mapping[str, Role]] = {
    "ROLE_USER": "ROLE_USER",
    "ROLE_AGENT": "ROLE_AGENT",
    "user": "ROLE_USER",
    "agent": "ROLE_AGENT",
}


@attrs.frozen(kw_only=True)
class Message:
    """One message of a conversation: who sent it (``ROLE_USER`` or ``ROLE_AGENT``)
    and its parts, with the ids that place it."""

    role: Role
    parts: tuple[Part, ...]
    message_id: str = attrs.field(factory=new_id)
    context_id: str | None = None
    task_id: str | None = None
    metadata: Mapping[str, Any] | None = None

    @property
    def text(self) -> str:
        """Its text parts, joined by newlines."""
        return "\n".join(p.text for p in self.parts if p.text is not None)

    @property
    def data(self) -> list[Any]:
        """The values of its data parts, in order."""
        return [p.data for p in self.parts if p.kind == "data"]

    def to_json(self) -> dict[str, Any]:
        """The message as the 1.0 JSON binding writes it."""
        out: dict[str, Any] = {
            "messageId": self.message_id,
            "role": self.role,
            "parts": [p.to_json() for p in self.parts],
        }
        if self.context_id is not None:
            out["contextId"] = self.context_id
        if self.task_id is not None:
            out["taskId"] = self.task_id
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_json(cls, value: Any, where: str = "message") -> Message:
        """A message written in 1.0 or 0.3.

        Raises:
            A2AError: ``INVALID_PARAMS`` naming what is wrong.
        """
        obj = json_object(value, where)
        role = obj.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise _invalid(f"{where}.role must be ROLE_USER or ROLE_AGENT")
        raw_parts = obj.get("parts")
        if not isinstance(raw_parts, Sequence) or isinstance(raw_parts, str):
            raise _invalid(f"{where}.parts must be a list")
        parts = tuple(Part.from_json(p, f"{where}.parts[{i}]") for i, p in enumerate(raw_parts))
        metadata = obj.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise _invalid(f"{where}.metadata must be an object")
        return cls(
            role=_ROLES[role],
            parts=parts,
            message_id=text_field(obj, "messageId", where, required=True) or "",
            context_id=text_field(obj, "contextId", where, required=False) or None,
            task_id=text_field(obj, "taskId", where, required=False) or None,
            metadata=metadata,
        )


# -- tasks --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Artifact:
    """An output of a task."""

    parts: tuple[Part, ...]
    artifact_id: str = attrs.field(factory=new_id)
    name: str | None = None
    description: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The artifact as the 1.0 JSON binding writes it."""
        out: dict[str, Any] = {
            "artifactId": self.artifact_id,
            "parts": [p.to_json() for p in self.parts],
        }
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        return out

    @classmethod
    def from_json(cls, value: Any, where: str = "artifact") -> Artifact:
        """An artifact written in 1.0 or 0.3."""
        obj = json_object(value, where)
        raw_parts = obj.get("parts")
        if not isinstance(raw_parts, list):
            raise _invalid(f"{where}.parts must be a list")
        return cls(
            parts=tuple(Part.from_json(p, f"{where}.parts[{i}]") for i, p in enumerate(raw_parts)),
            artifact_id=text_field(obj, "artifactId", where, required=False) or new_id(),
            name=text_field(obj, "name", where, required=False),
            description=text_field(obj, "description", where, required=False),
        )


@attrs.frozen(kw_only=True)
class Task:
    """A task as it stands: its state, the message that goes with that state (the
    question of ``input-required``, the reason of a failure), its artifacts."""

    id: str
    context_id: str
    state: TaskState
    message: Message | None = None
    timestamp: str | None = None
    artifacts: tuple[Artifact, ...] = ()
    history: tuple[Message, ...] = ()

    def status_json(self) -> dict[str, Any]:
        """The ``TaskStatus`` object."""
        status: dict[str, Any] = {"state": self.state}
        if self.message is not None:
            status["message"] = self.message.to_json()
        if self.timestamp is not None:
            status["timestamp"] = self.timestamp
        return status

    def to_json(self) -> dict[str, Any]:
        """The task as the 1.0 JSON binding writes it."""
        out: dict[str, Any] = {
            "id": self.id,
            "contextId": self.context_id,
            "status": self.status_json(),
        }
        if self.artifacts:
            out["artifacts"] = [a.to_json() for a in self.artifacts]
        if self.history:
            out["history"] = [m.to_json() for m in self.history]
        return out

    @classmethod
    def from_json(cls, value: Any, where: str = "task") -> Task:
        """A task written in 1.0 or 0.3."""
        obj = json_object(value, where)
        status = json_object(obj.get("status"), f"{where}.status")
        message = status.get("message")
        artifacts = obj.get("artifacts") or []
        history = obj.get("history") or []
        if not isinstance(artifacts, list) or not isinstance(history, list):
            raise _invalid(f"{where}.artifacts and {where}.history must be lists")
        return cls(
            id=text_field(obj, "id", where, required=True) or "",
            context_id=text_field(obj, "contextId", where, required=False) or "",
            state=_state(status.get("state"), f"{where}.status.state"),
            message=None
            if message is None
            else Message.from_json(message, f"{where}.status.message"),
            timestamp=text_field(status, "timestamp", f"{where}.status", required=False),
            artifacts=tuple(
                Artifact.from_json(a, f"{where}.artifacts[{i}]") for i, a in enumerate(artifacts)
            ),
            history=tuple(
                Message.from_json(m, f"{where}.history[{i}]") for i, m in enumerate(history)
            ),
        )


@attrs.frozen(kw_only=True)
class StatusUpdate:
    """A streamed change of a task's state (``TaskStatusUpdateEvent``)."""

    task_id: str
    context_id: str
    state: TaskState
    message: Message | None = None
    timestamp: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as the 1.0 JSON binding writes it."""
        status: dict[str, Any] = {"state": self.state}
        if self.message is not None:
            status["message"] = self.message.to_json()
        if self.timestamp is not None:
            status["timestamp"] = self.timestamp
        return {"taskId": self.task_id, "contextId": self.context_id, "status": status}


@attrs.frozen(kw_only=True)
class ArtifactUpdate:
    """A streamed artifact, or a chunk of one (``TaskArtifactUpdateEvent``)."""

    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = True

    def to_json(self) -> dict[str, Any]:
        """The event as the 1.0 JSON binding writes it."""
        return {
            "taskId": self.task_id,
            "contextId": self.context_id,
            "artifact": self.artifact.to_json(),
            "append": self.append,
            "lastChunk": self.last_chunk,
        }


StreamItem = Task | Message | StatusUpdate | ArtifactUpdate
