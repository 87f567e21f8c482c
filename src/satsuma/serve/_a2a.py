"""A2A 1.0 under ``/a2a/``: each served agent class is an A2A agent, over the
specification's JSON-RPC binding with SSE (DESIGN, "Serving agents over HTTP";
docs/serve.md, "A2A").

- ``GET /a2a/{name}/.well-known/agent-card.json``: its agent card (and
  ``/.well-known/agent-card.json`` when one class is served);
- ``POST /a2a/{name}``: one JSON-RPC request: ``SendMessage``,
  ``SendStreamingMessage``, ``GetTask``, ``ListTasks``, ``CancelTask``,
  ``SubscribeToTask`` (or their 0.3 names); the push-notification methods answer
  PushNotificationNotSupported, the extended card ExtendedAgentCardNotConfigured.

A translation only: the mapping of runs to tasks is ``_a2a_tasks``, the wire format the
kernel's ``satsuma._a2a``, and every run goes through ``Runs``. A JSON-RPC error is an
HTTP 200 whose body is the error response, as the binding says; what the app refuses
before (a missing token: 401, a body over the limit: 413) keeps its HTTP status.
Scopes: ``run`` to send and cancel, ``read`` to get, list and subscribe, ``approve``
(besides ``run``) to answer an input-required task with decisions. The cards need no
token: clients discover a server through them (they name no task and no conversation);
on a server with tokens each card declares the bearer scheme its endpoint requires.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final

import trio

from .. import _a2a as wire
from ._a2a_tasks import (
    artifact_of,
    decisions_in,
    prompt_of,
    status_update_of,
    task_of,
)
from ._http import HTTPError, JSONAnswer, Request, ServerSentEvent, SSEAnswer, agent_id_from
from ._runs import AlreadyDecided, BadDecision, Runs, RunView, UnknownRun

__all__ = ["A2ASurface", "A2ACardSurface"]

_HEADERS: Final = {wire.VERSION_HEADER: wire.PROTOCOL_VERSION}
_PAGE_SIZE: Final = 50
_MAX_PAGE_SIZE: Final = 100
_PUSH = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)


def _invalid(message: str) -> wire.A2AError:
    return wire.A2AError(wire.INVALID_PARAMS, message)


def _base_url(request: Request) -> str:
    """The server's URL as the client reached it: the host it asked for and the scheme
    it used (https under TLS), a proxy's ``X-Forwarded-Host``/``-Proto`` first."""
    host = request.headers.get("x-forwarded-host") or request.headers.get("host") or "localhost"
    scheme = request.headers.get("x-forwarded-proto") or request.scheme
    return f"{scheme.split(',')[0].strip()}://{host.split(',')[0].strip()}"


def _card(agents: Mapping[str, type[Any]], name: str, request: Request) -> dict[str, Any]:
    doc = inspect.getdoc(agents[name]) or f"The satsuma agent {name!r}."
    return wire.agent_card(
        name=name,
        description=doc,
        url=f"{_base_url(request)}/a2a/{name}",
        version="1.0.0",
        skills=[{"id": name, "name": name, "description": doc, "tags": ["satsuma"]}],
        streaming=True,
        bearer=request.tokens_required,
    )


class A2ASurface:
    """A2A over a ``Runs`` (``/a2a/``)."""

    def __init__(self, runs: Runs) -> None:
        self._runs = runs

    @property
    def prefix(self) -> str:
        """The path prefix it answers."""
        return "/a2a/"

    def is_public(self, path: str) -> bool:
        """True for an agent card's path: a client reads it before it holds a token."""
        name, _, tail = path.removeprefix("/a2a/").partition("/")
        return bool(name) and "/" + tail == wire.CARD_PATH

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        """Answer one request (see the module)."""
        rest = request.path.removeprefix("/a2a/")
        name, _, tail = rest.partition("/")
        if name not in self._runs.agents:
            raise HTTPError(404, "unknown_agent", "no agent of that name is served over A2A")
        if tail == wire.CARD_PATH.lstrip("/"):
            return self._card(request, name)
        if tail:
            raise HTTPError(404, "not_found", "no such path")
        if request.method != "POST":
            raise HTTPError(
                405,
                "method_not_allowed",
                f"{request.path} answers POST (JSON-RPC)",
                headers={"Allow": "POST"},
            )
        return await _Call(self._runs, request, name).answer()

    def _card(self, request: Request, name: str) -> JSONAnswer:
        if request.method not in ("GET", "HEAD"):
            raise HTTPError(
                405, "method_not_allowed", "the card answers GET", headers={"Allow": "GET"}
            )
        return JSONAnswer(200, _card(self._runs.agents, name, request), _HEADERS)


class A2ACardSurface:
    """``/.well-known/agent-card.json``: the card of the one class served (404 when
    several are: each has its own under ``/a2a/{name}/``)."""

    exact_paths: Final = (wire.CARD_PATH,)

    def __init__(self, runs: Runs) -> None:
        self._runs = runs

    @property
    def prefix(self) -> str:
        """The path it answers (as a prefix: nothing else lies under it)."""
        return wire.CARD_PATH

    def is_public(self, path: str) -> bool:
        """True: the card is read before a token is held (and nothing else is here)."""
        return True

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        """Answer the card, or 404."""
        if request.path != wire.CARD_PATH or len(self._runs.agents) != 1:
            raise HTTPError(
                404, "not_found", "several agents are served: see /a2a/{name}" + wire.CARD_PATH
            )
        if request.method not in ("GET", "HEAD"):
            raise HTTPError(
                405, "method_not_allowed", "the card answers GET", headers={"Allow": "GET"}
            )
        (name,) = self._runs.agents
        return JSONAnswer(200, _card(self._runs.agents, name, request), _HEADERS)


class _Call:
    """One JSON-RPC request to one agent."""

    def __init__(self, runs: Runs, request: Request, name: str) -> None:
        self.runs = runs
        self.request = request
        self.name = name
        self.id: Any = None
        self.method = ""
        self.legacy = False  # named by its 0.3 name: answered in 0.3's shapes

    async def answer(self) -> JSONAnswer | SSEAnswer:
        try:
            method, params = self._envelope()
            if not wire.version_supported(self.request.headers.get("a2a-version")):
                raise wire.A2AError(
                    wire.VERSION_NOT_SUPPORTED,
                    f"A2A-Version {self.request.headers.get('a2a-version')!r:.40} is not "
                    f"supported; this server speaks {wire.PROTOCOL_VERSION} (and 0.3)",
                )
            self.method = method
            handler = self._handlers().get(method)
            if handler is None:
                raise self._unsupported(method)
            result = await handler(params)
        except wire.A2AError as error:
            return JSONAnswer(200, wire.error_response(self.id, error), _HEADERS)
        if isinstance(result, SSEAnswer):
            return result
        return JSONAnswer(200, wire.result_response(self.id, self._shaped(result)), _HEADERS)

    def _shaped(self, result: Any) -> Any:
        return wire.result_0_3(self.method, result) if self.legacy else result

    def _envelope(self) -> tuple[str, Mapping[str, Any]]:
        try:
            body = json.loads(self.request.body)
        except (ValueError, UnicodeDecodeError):
            raise wire.A2AError(wire.PARSE_ERROR, "the body is not valid JSON") from None
        if isinstance(body, list):
            raise wire.A2AError(wire.INVALID_REQUEST, "batches are not supported")
        if not isinstance(body, dict):
            raise wire.A2AError(wire.INVALID_REQUEST, "a JSON-RPC request is a JSON object")
        request_id = body.get("id")
        if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
            self.id = request_id
        else:
            raise wire.A2AError(wire.INVALID_REQUEST, "'id' must be a string or an integer")
        if body.get("jsonrpc") != "2.0":
            raise wire.A2AError(wire.INVALID_REQUEST, "'jsonrpc' must be \"2.0\"")
        method = body.get("method")
        if not isinstance(method, str):
            raise wire.A2AError(wire.INVALID_REQUEST, "'method' must be a string")
        params = body.get("params", {})
        if not isinstance(params, dict):
            raise _invalid("'params' must be an object")
        canonical = wire.canonical_method(method)
        self.legacy = method in wire.METHODS_0_3
        if canonical is None:
            raise wire.A2AError(wire.METHOD_NOT_FOUND, f"no method {method[:80]!r}")
        return canonical, params

    def _handlers(self) -> Mapping[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]:
        return {
            "SendMessage": self._send,
            "SendStreamingMessage": self._send_streaming,
            "GetTask": self._get,
            "ListTasks": self._list,
            "CancelTask": self._cancel,
            "SubscribeToTask": self._subscribe,
        }

    @staticmethod
    def _unsupported(method: str) -> wire.A2AError:
        if method in _PUSH:
            return wire.A2AError(
                wire.PUSH_NOTIFICATION_NOT_SUPPORTED, "push notifications are not supported"
            )
        return wire.A2AError(
            wire.EXTENDED_CARD_NOT_CONFIGURED, "this agent has no extended agent card"
        )

    # -- tasks ------------------------------------------------------------------------

    async def _task(self, params: Mapping[str, Any], scope: Any) -> RunView:
        """The run a request names (``id``), if it is this agent's (else TaskNotFound)."""
        self.request.require(scope, self.name)
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise _invalid("'id' (the task's id) must be a non-empty string")
        return await self._view(task_id)

    async def _view(self, task_id: str) -> RunView:
        try:
            view = await self.runs.get(task_id)
        except UnknownRun:
            view = None
        if view is None or view.agent != self.name:
            raise wire.A2AError(wire.TASK_NOT_FOUND, f"no task {task_id[:80]!r}")
        return view

    async def _get(self, params: Mapping[str, Any]) -> Any:
        view = await self._task(params, "read")
        return task_of(view, history=params.get("historyLength") != 0).to_json()

    async def _cancel(self, params: Mapping[str, Any]) -> Any:
        view = await self._task(params, "run")
        if view.ended:
            raise wire.A2AError(
                wire.TASK_NOT_CANCELABLE, f"the task has ended ({task_of(view).state})"
            )
        return task_of(await self.runs.cancel(view.run_id)).to_json()

    async def _list(self, params: Mapping[str, Any]) -> Any:
        self.request.require("read", self.name)
        context = params.get("contextId")
        if context is not None and not isinstance(context, str):
            raise _invalid("'contextId' must be a string")
        size = params.get("pageSize", _PAGE_SIZE)
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= _MAX_PAGE_SIZE:
            raise _invalid(f"'pageSize' must be an integer from 1 to {_MAX_PAGE_SIZE}")
        token = params.get("pageToken") or "0"
        if not isinstance(token, str) or not token.isdigit() or len(token) > 9:
            raise _invalid("'pageToken' is not one this server gave")
        state = params.get("status")
        offset = int(token)
        views = await self.runs.runs(self.name, context or None, limit=offset + size + 1)
        tasks = [task_of(v, history=params.get("historyLength") != 0) for v in views]
        if state is not None:
            tasks = [t for t in tasks if t.state == state]
        page = tasks[offset : offset + size]
        more = len(tasks) > offset + size
        include = params.get("includeArtifacts", True) is not False
        return {
            "tasks": [t.to_json() if include else {**t.to_json(), "artifacts": []} for t in page],
            "nextPageToken": str(offset + size) if more else "",
            "pageSize": size,
            # A lower bound once there are more pages: runs are not counted past this one.
            "totalSize": len(tasks),
        }

    # -- messages ---------------------------------------------------------------------

    def _message(self, params: Mapping[str, Any]) -> tuple[wire.Message, bool]:
        """The message sent, and whether to wait for the run (``returnImmediately``, or
        0.3's ``blocking``)."""
        message = wire.Message.from_json(params.get("message"), "params.message")
        if message.role != "ROLE_USER":
            raise _invalid("params.message.role must be ROLE_USER")
        config = params.get("configuration") or {}
        if not isinstance(config, Mapping):
            raise _invalid("params.configuration must be an object")
        if config.get("taskPushNotificationConfig") or config.get("pushNotificationConfig"):
            raise wire.A2AError(
                wire.PUSH_NOTIFICATION_NOT_SUPPORTED, "push notifications are not supported"
            )
        if "blocking" in config:
            wait = config["blocking"] is not False
        else:
            wait = config.get("returnImmediately") is not True
        return message, wait

    async def _submit(self, message: wire.Message) -> RunView:
        """Start a run for the message, or decide the calls its task waits on."""
        if message.task_id is not None:
            view = await self._view(message.task_id)
            if message.context_id is not None and message.context_id != view.agent_id:
                raise _invalid("params.message.contextId is not the task's context")
            return await self._decide(view, message)
        self.request.require("run", self.name)
        if message.context_id is not None:
            try:
                agent_id = agent_id_from(message.context_id)
            except HTTPError as error:
                raise _invalid(f"contextId: {error.message}") from None
        else:
            agent_id = wire.new_id()
        try:
            return await self.runs.start(self.name, agent_id, prompt_of(message))
        except ValueError as error:
            raise _invalid(str(error)) from None

    async def _decide(self, view: RunView, message: wire.Message) -> RunView:
        self.request.require("run", self.name)
        self.request.require("approve", self.name)
        if view.status != "awaiting_approval":
            raise wire.A2AError(
                wire.UNSUPPORTED_OPERATION,
                f"the task is {task_of(view).state}, not input-required: it takes no message",
            )
        resumed: RunView | None = None
        for item in decisions_in(message, self.request.principal.name):
            try:
                resumed = await self.runs.decide(view.run_id, item.call_id, item.decision)
            except BadDecision as error:
                raise _invalid(str(error)) from None
            except AlreadyDecided as error:
                raise wire.A2AError(wire.UNSUPPORTED_OPERATION, str(error)) from None
        return resumed or await self.runs.get(view.run_id)

    async def _send(self, params: Mapping[str, Any]) -> Any:
        message, wait = self._message(params)
        view = await self._submit(message)
        if wait:
            view = await self.runs.wait(view.run_id)
        return {"task": task_of(view).to_json()}

    async def _send_streaming(self, params: Mapping[str, Any]) -> SSEAnswer:
        message, _ = self._message(params)
        return self._stream(await self._submit(message))

    async def _subscribe(self, params: Mapping[str, Any]) -> SSEAnswer:
        view = await self._task(params, "read")
        if view.ended:
            raise wire.A2AError(
                wire.UNSUPPORTED_OPERATION,
                f"the task has ended ({task_of(view).state}): there is nothing to follow",
            )
        return self._stream(view)

    def _stream(self, first: RunView) -> SSEAnswer:
        runs, request_id, shaped = self.runs, self.id, self._shaped

        def event(item: wire.StreamItem) -> ServerSentEvent:
            body = wire.result_response(request_id, shaped(wire.stream_response(item)))
            return ServerSentEvent(json.dumps(body, default=str))

        async def events() -> AsyncIterator[ServerSentEvent]:
            yield event(task_of(first))
            async with aclosing(_follow(runs, first)) as items:
                async for item in items:
                    yield event(item)

        return SSEAnswer(events(), headers={**_HEADERS, "Cache-Control": "no-store"})


async def _follow(runs: Runs, first: RunView) -> AsyncGenerator[wire.StreamItem, None]:
    """A run's progress as task events, until it ends or waits for input: a working
    status as it starts and as each tool is called, then the output's artifact and the
    final status."""
    run_id, after = first.run_id, 0
    while True:
        seen = False
        stream = runs.events(run_id, after=after)
        try:
            async for item in stream:
                seen, after = True, item.id
                if item.type in ("RunStart", "ToolCallStart"):
                    yield wire.StatusUpdate(
                        task_id=run_id,
                        context_id=first.agent_id,
                        state="TASK_STATE_WORKING",
                        message=_progress(first, item.data),
                        timestamp=wire.rfc3339(),
                    )
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        view = await runs.get(run_id)
        if view.ended or view.status == "awaiting_approval":
            artifact = artifact_of(view)
            if artifact is not None:
                yield wire.ArtifactUpdate(
                    task_id=run_id, context_id=view.agent_id, artifact=artifact
                )
            yield status_update_of(view)
            return
        if not seen:
            # The log ended on a pause the run has since left: follow what comes next.
            await trio.sleep(0.05)


def _progress(view: RunView, data: Mapping[str, Any]) -> wire.Message | None:
    if data.get("type") != "ToolCallStart":
        return None
    return wire.Message(
        role="ROLE_AGENT",
        parts=(wire.Part.of_text(f"calling {data.get('tool_name')}"),),
        context_id=view.agent_id,
        task_id=view.run_id,
    )
