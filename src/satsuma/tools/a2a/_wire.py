"""What an A2A client reads and writes: JSON-RPC envelopes, task states, parts, errors.

The A2A 1.0 JSON-RPC binding writes the protocol's messages as their protobuf JSON form
(``TASK_STATE_COMPLETED``, ``ROLE_USER``, a part is ``{"text": ...}`` or ``{"data":
...}``); 0.3 servers wrote lower-case states and ``kind``-tagged parts. Both are read, so
that a task from either reads the same; requests are written in 1.0.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Final

import attrs

PROTOCOL_VERSION: Final = "1.0"
SEND: Final = "SendMessage"
SEND_STREAMING: Final = "SendStreamingMessage"
CANCEL: Final = "CancelTask"
GET: Final = "GetTask"

# The states a task stops in: it ended, or it waits for its client.
TERMINAL: Final = frozenset({"completed", "failed", "canceled", "rejected"})
INTERRUPTED: Final = frozenset({"input-required", "auth-required"})

# JSON-RPC's own codes and A2A's (the specification's "Error Handling" section).
ERROR_NAMES: Final[Mapping[int, str]] = {
    -32700: "JSON parse error",
    -32600: "invalid request",
    -32601: "method not found",
    -32602: "invalid params",
    -32603: "internal error",
    -32001: "TaskNotFoundError",
    -32002: "TaskNotCancelableError",
    -32003: "PushNotificationNotSupportedError",
    -32004: "UnsupportedOperationError",
    -32005: "ContentTypeNotSupportedError",
    -32006: "InvalidAgentResponseError",
    -32007: "ExtendedAgentCardNotConfiguredError",
    -32008: "ExtensionSupportRequiredError",
    -32009: "VersionNotSupportedError",
}


class WireError(Exception):
    """What the remote answered cannot be read as A2A; the text says how."""


def request(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC 2.0 request with a fresh id."""
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": dict(params)}


def user_message(text: str, task_id: str | None, context_id: str | None) -> dict[str, Any]:
    """A user's text message; the ids continue an earlier task or conversation."""
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    if context_id:
        message["contextId"] = context_id
    return message


def describe_error(error: object) -> str:
    """A JSON-RPC error object as one line: its code's name, code and message."""
    if not isinstance(error, Mapping):
        return f"a malformed error: {_excerpt(error)}"
    code = error.get("code")
    message = error.get("message")
    name = ERROR_NAMES.get(code, "error") if isinstance(code, int) else "error"
    text = f"{name} ({code})"
    return f"{text}: {message}" if isinstance(message, str) and message else text


def result_of(envelope: object) -> Mapping[str, Any]:
    """The ``result`` of a JSON-RPC response.

    Raises:
        WireError: it is an error response, or not a JSON-RPC response at all.
    """
    if not isinstance(envelope, Mapping):
        raise WireError(f"answered something that is not a JSON-RPC response: {_excerpt(envelope)}")
    if "error" in envelope and envelope["error"] is not None:
        raise WireError(f"answered with a JSON-RPC error: {describe_error(envelope['error'])}")
    result = envelope.get("result")
    if not isinstance(result, Mapping):
        raise WireError(f"answered a JSON-RPC response without a result: {_excerpt(envelope)}")
    return result


def state_name(raw: object) -> str:
    """A task state as the specification names it in prose (``input-required``), from
    its 1.0 form (``TASK_STATE_INPUT_REQUIRED``) or its 0.3 form (``input-required``)."""
    if not isinstance(raw, str) or not raw:
        return "unknown"
    name = raw.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return "canceled" if name == "cancelled" else name


def parts_text(parts: object) -> str:
    """The text of a list of parts: text as it is, data as JSON, files named."""
    if not isinstance(parts, list):
        return ""
    pieces = [_part_text(part) for part in parts if isinstance(part, Mapping)]
    return "\n".join(piece for piece in pieces if piece)


def _part_text(part: Mapping[str, Any]) -> str:
    if isinstance(part.get("text"), str):
        return str(part["text"])
    if "data" in part:
        data = part["data"]
        # 0.3 wrote {"kind": "data", "data": {...}}; 1.0 writes {"data": ...} directly.
        return json.dumps(data, ensure_ascii=False, sort_keys=True)
    name = part.get("filename") or part.get("name") or "unnamed"
    media = part.get("mediaType") or "unknown type"
    if isinstance(part.get("url"), str):
        return f"[file {name} ({media}) at {part['url']}]"
    if "raw" in part:
        return f"[file {name} ({media}), {len(str(part['raw']))} characters of base64]"
    if isinstance(part.get("file"), Mapping):  # 0.3
        file = part["file"]
        return f"[file {file.get('name') or 'unnamed'} ({file.get('mimeType') or media})]"
    return ""


def message_text(message: object) -> str:
    """The text of a message (a status's, or a whole answer)."""
    return parts_text(message.get("parts")) if isinstance(message, Mapping) else ""


@attrs.define
class TaskView:
    """What the client knows of one remote task, updated event by event.

    Attributes:
        task_id: The task's id, once the remote has named it.
        context_id: The conversation it belongs to.
        state: Its state in prose form (``working``, ``completed``, ...).
        status_text: The text of its latest status message.
        artifacts: Its artifacts by id, in the order they first came.
        answer: The text of a plain message, when the remote answered without a task.
    """

    task_id: str = ""
    context_id: str = ""
    state: str = "submitted"
    status_text: str = ""
    artifacts: dict[str, list[Any]] = attrs.field(factory=dict)
    answer: str | None = None

    @property
    def finished(self) -> bool:
        """The task ended or waits for its client: nothing more will come."""
        return self.answer is not None or self.state in TERMINAL | INTERRUPTED

    def apply(self, result: Mapping[str, Any]) -> str | None:
        """Takes in one response or stream event; returns a status text to report.

        Raises:
            WireError: it is neither a task, a message nor an update.
        """
        if "task" in result or result.get("kind") == "task":
            self._task(result.get("task", result))
            return None
        if "message" in result or result.get("kind") == "message":
            message = result.get("message", result)
            self._ids(message)
            self.answer = message_text(message)
            return None
        if "statusUpdate" in result or result.get("kind") == "status-update":
            update = result.get("statusUpdate", result)
            self._ids(update)
            return self._status(update.get("status"))
        if "artifactUpdate" in result or result.get("kind") == "artifact-update":
            update = result.get("artifactUpdate", result)
            self._ids(update)
            self._artifact(update.get("artifact"), append=bool(update.get("append")))
            return None
        raise WireError(f"answered an event that is not A2A: {_excerpt(result)}")

    def apply_task(self, result: Mapping[str, Any]) -> None:
        """Takes in the answer to ``GetTask``: a task itself, not wrapped.

        Raises:
            WireError: it is not a task.
        """
        self._task(result.get("task", result))

    def result_text(self) -> str:
        """The task's output: its artifacts' text, else its latest status text."""
        if self.answer is not None:
            return self.answer
        texts = [parts_text(parts) for parts in self.artifacts.values()]
        text = "\n".join(t for t in texts if t)
        return text or self.status_text

    def _ids(self, item: object) -> None:
        if not isinstance(item, Mapping):
            raise WireError(f"answered an event that is not A2A: {_excerpt(item)}")
        task_id = item.get("taskId") or item.get("id")
        if isinstance(task_id, str) and task_id and not self.task_id:
            self.task_id = task_id
        context_id = item.get("contextId")
        if isinstance(context_id, str) and context_id:
            self.context_id = context_id

    def _task(self, task: object) -> None:
        self._ids(task)
        assert isinstance(task, Mapping)
        self._status(task.get("status"))
        artifacts = task.get("artifacts")
        if isinstance(artifacts, list):
            self.artifacts.clear()
            for artifact in artifacts:
                self._artifact(artifact, append=False)

    def _status(self, status: object) -> str | None:
        if not isinstance(status, Mapping):
            raise WireError(f"answered a task status that is not A2A: {_excerpt(status)}")
        self.state = state_name(status.get("state"))
        text = message_text(status.get("message"))
        if text:
            self.status_text = text
        return text or None

    def _artifact(self, artifact: object, *, append: bool) -> None:
        if not isinstance(artifact, Mapping):
            raise WireError(f"answered an artifact that is not A2A: {_excerpt(artifact)}")
        key = str(artifact.get("artifactId") or len(self.artifacts))
        parts = artifact.get("parts")
        parts = list(parts) if isinstance(parts, list) else []
        if append and key in self.artifacts:
            self.artifacts[key].extend(parts)
        else:
            self.artifacts[key] = parts


def _excerpt(value: object, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit] + "…"
