"""What the A2A client reads and writes, on the shared kernel's A2A wire module.

``satsuma._a2a`` parses and builds the protocol's values (1.0 written, 1.0 and 0.3
read); this module adds what only a client needs: the JSON-RPC envelope of a request and
the reading of a response's, the error codes' names for the model to read, and a task's
state followed event by event into the tool's result.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ... import _a2a

PROTOCOL_VERSION: Final = _a2a.PROTOCOL_VERSION
SEND: Final = "SendMessage"
SEND_STREAMING: Final = "SendStreamingMessage"
CANCEL: Final = "CancelTask"
GET: Final = "GetTask"

# The states a task stops in: it ended, or it waits for its client (in prose form).
TERMINAL: Final = frozenset({"completed", "failed", "canceled", "rejected"})
INTERRUPTED: Final = frozenset({"input-required", "auth-required"})

# JSON-RPC's own codes and A2A's (the specification's "Error Handling" section), named
# as the specification names them, for the model and the logs to read.
ERROR_NAMES: Final[Mapping[int, str]] = {
    _a2a.PARSE_ERROR: "JSON parse error",
    _a2a.INVALID_REQUEST: "invalid request",
    _a2a.METHOD_NOT_FOUND: "method not found",
    _a2a.INVALID_PARAMS: "invalid params",
    _a2a.INTERNAL_ERROR: "internal error",
    _a2a.TASK_NOT_FOUND: "TaskNotFoundError",
    _a2a.TASK_NOT_CANCELABLE: "TaskNotCancelableError",
    _a2a.PUSH_NOTIFICATION_NOT_SUPPORTED: "PushNotificationNotSupportedError",
    _a2a.UNSUPPORTED_OPERATION: "UnsupportedOperationError",
    _a2a.CONTENT_TYPE_NOT_SUPPORTED: "ContentTypeNotSupportedError",
    _a2a.INVALID_AGENT_RESPONSE: "InvalidAgentResponseError",
    _a2a.EXTENDED_CARD_NOT_CONFIGURED: "ExtendedAgentCardNotConfiguredError",
    _a2a.EXTENSION_SUPPORT_REQUIRED: "ExtensionSupportRequiredError",
    _a2a.VERSION_NOT_SUPPORTED: "VersionNotSupportedError",
}


class WireError(Exception):
    """What the remote answered cannot be read as A2A; the text says how."""


def request(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC 2.0 request with a fresh id."""
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": dict(params)}


def user_message(text: str, task_id: str | None, context_id: str | None) -> dict[str, Any]:
    """A user's text message; the ids continue an earlier task or conversation."""
    message = _a2a.Message(
        role="ROLE_USER",
        parts=(_a2a.Part.of_text(text),),
        task_id=task_id or None,
        context_id=context_id or None,
    )
    return message.to_json()


def describe_error(error: object) -> str:
    """A JSON-RPC error object as one line: its code's name, code and message."""
    read = _a2a.A2AError.from_json(error)
    text = f"{ERROR_NAMES.get(read.code, 'error')} ({read.code})"
    return f"{text}: {read.message}" if read.message else text


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


def parts_text(parts: tuple[_a2a.Part, ...] | list[_a2a.Part]) -> str:
    """The text of parts: text as it is, data as JSON, files named."""
    return "\n".join(piece for piece in map(_part_text, parts) if piece)


def _part_text(part: _a2a.Part) -> str:
    kind = part.kind
    if kind == "text":
        return part.text or ""
    if kind == "data":
        return json.dumps(part.data, ensure_ascii=False, sort_keys=True)
    name = part.filename or "unnamed"
    media = part.media_type or "unknown type"
    if kind == "url":
        return f"[file {name} ({media}) at {part.url}]"
    return f"[file {name} ({media}), {len(part.raw or b'')} bytes]"


def message_text(message: _a2a.Message | None) -> str:
    """The text of a message (a status's, or a whole answer)."""
    return parts_text(message.parts) if message is not None else ""


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
    artifacts: dict[str, list[_a2a.Part]] = attrs.field(factory=dict)
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
        try:
            item = _a2a.parse_stream_response(result)
        except _a2a.A2AError as exc:
            raise WireError(f"answered an event that is not A2A: {exc.message}") from None
        if isinstance(item, _a2a.Task):
            self._task(item)
            return None
        self._ids(item.task_id, item.context_id)
        if isinstance(item, _a2a.Message):
            self.answer = message_text(item)
            return None
        if isinstance(item, _a2a.StatusUpdate):
            return self._status(item.state, item.message)
        self._artifact(item.artifact, append=item.append)
        return None

    def apply_task(self, result: Mapping[str, Any]) -> None:
        """Takes in the answer to ``GetTask``: a task itself, not wrapped.

        Raises:
            WireError: it is not a task.
        """
        try:
            task = _a2a.Task.from_json(result.get("task", result))
        except _a2a.A2AError as exc:
            raise WireError(f"answered a task that is not A2A: {exc.message}") from None
        self._task(task)

    def result_text(self) -> str:
        """The task's output: its artifacts' text, else its latest status text."""
        if self.answer is not None:
            return self.answer
        texts = [parts_text(parts) for parts in self.artifacts.values()]
        text = "\n".join(t for t in texts if t)
        return text or self.status_text

    def _ids(self, task_id: str | None, context_id: str | None) -> None:
        if task_id and not self.task_id:
            self.task_id = task_id
        if context_id:
            self.context_id = context_id

    def _task(self, task: _a2a.Task) -> None:
        self._ids(task.id, task.context_id)
        self._status(task.state, task.message)
        if task.artifacts:
            self.artifacts.clear()
            for artifact in task.artifacts:
                self._artifact(artifact, append=False)

    def _status(self, state: str, message: _a2a.Message | None) -> str | None:
        self.state = state_name(state)
        text = message_text(message)
        if text:
            self.status_text = text
        return text or None

    def _artifact(self, artifact: _a2a.Artifact, *, append: bool) -> None:
        key = artifact.artifact_id
        if append and key in self.artifacts:
            self.artifacts[key].extend(artifact.parts)
        else:
            self.artifacts[key] = list(artifact.parts)


def _excerpt(value: object, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit] + "…"
