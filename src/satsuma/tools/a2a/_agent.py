"""A2AAgent: a remote agent, reached over A2A 1.0 (JSON-RPC), as one tool.

Starting fetches the remote's agent card (the tool's name and description, whether it
streams, where its JSON-RPC endpoint is) and opens one HTTP client; a call sends the
model's message as a new task, or as the next message of a task or conversation the
model names, and waits for the task to end or to ask for input. The call runs in the
ToolRunner's own task, so its deadline and cancellation come as ``trio.Cancelled``: the
remote task is then cancelled with ``CancelTask`` (shielded, bounded) before the call
ends, so that a remote agent never works on for a caller that has gone.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, TypeAlias, final
from urllib.parse import urljoin

import httpx2
import trio

from ... import _a2a
from ..._exceptions import A2AAgentError
from ..._sse import sse_data
from .. import Tool, ToolContext, ToolResult, ToolServer
from . import _wire
from ._card import CARD_PATH, INPUT_SCHEMA, tool_description, tool_name
from ._wire import TaskView, WireError

__all__ = ["A2AAgent", "A2ATool", "Headers"]

logger = logging.getLogger("satsuma.a2a")

Headers: TypeAlias = (
    Mapping[str, str] | Callable[[], Mapping[str, str] | Awaitable[Mapping[str, str]]]
)
"""Headers for every request to the remote (``Authorization``, say): a mapping, or a
function (sync or async) called before each request, for tokens that expire."""

_EXCERPT: Final = 300  # characters of a remote's unreadable answer quoted in an error
_POLL_FIRST: Final = 0.5  # seconds before a task left working is first asked after
_POLL_MOST: Final = 5.0


class State(enum.Enum):
    """Where an A2AAgent is in its life."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


class A2ATool(Tool, abstract=True):
    """The tool that sends the model's message to a remote A2A agent."""

    remote: ClassVar[A2AAgent]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        return await self.remote._call(args, ctx)


class _Failed(Exception):
    """The call cannot go on; its text is what the model reads."""


@final
class A2AAgent(ToolServer):
    """A remote A2A agent that a satsuma agent or a ToolRunner can call as a tool.

    Run it as ``async with A2AAgent(url) as remote:``, as a supervised child (``serve``),
    or list it in an Agent's ``tools`` (the agent starts it with itself). Starting
    fetches the agent card at ``URL/.well-known/agent-card.json``; ``tools()`` then gives
    one tool, ``{"message", "context_id"?, "task_id"?}``, described by the card.

    Args:
        url: The remote agent's base URL (where its card is, under ``.well-known``).
        name: The tool's name; by default the card's name.
        headers: Sent with every request: a mapping, or a function giving one.
        card_url: Where the card is, if not under ``url``.
        start_timeout: Seconds to fetch the card.
        read_timeout: Seconds the remote may stay silent during a call (between two
            stream events, or before a whole answer) before the call fails.
        cancel_timeout: Seconds given to ``CancelTask`` when a call is cancelled.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        headers: Headers | None = None,
        card_url: str | None = None,
        start_timeout: float = 30.0,
        read_timeout: float = 300.0,
        cancel_timeout: float = 5.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, got: {url!r}")
        if name is not None and not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
            raise ValueError(f"name must match [a-zA-Z0-9_-]{{1,64}}, got: {name!r}")
        self.url = url
        self.name = name
        self.headers = headers
        self.card_url = card_url or urljoin(url if url.endswith("/") else url + "/", CARD_PATH)
        self.start_timeout = start_timeout
        self.read_timeout = read_timeout
        self.cancel_timeout = cancel_timeout
        self.state = State.IDLE
        self.generation = 0  # bumped at each start: the card, so the tool, may change
        self.card: Mapping[str, Any] = {}
        self.endpoint = url
        self.streaming = False
        self._client: httpx2.AsyncClient | None = None
        self._tools: list[A2ATool] = []

    def __repr__(self) -> str:
        return f"<A2AAgent {self._label} {self.url} {self.state.value}>"

    @property
    def _label(self) -> str:
        return self.name or str(self.card.get("name") or self.url)

    @property
    def running(self) -> bool:
        return self.state is State.RUNNING

    def tools(self) -> list[A2ATool]:
        """The remote agent as a tool, for a ToolRunner or an Agent's ``tools``.

        Raises:
            A2AAgentError: it has not been started.
        """
        if self.state is not State.RUNNING:
            raise A2AAgentError(
                self._label,
                self.url,
                "is not running; start it with async with, serve, or an agent",
            )
        return list(self._tools)

    # --- running ------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch the card, then hold the HTTP client until cancelled (a supervisor's child).

        Raises:
            A2AAgentError: the card could not be fetched, or is not an A2A agent card.
        """
        if self.state in (State.STARTING, State.RUNNING):
            raise A2AAgentError(self._label, self.url, "is already running")
        self.state = State.STARTING
        timeout = httpx2.Timeout(10.0, read=self.read_timeout)
        try:
            async with httpx2.AsyncClient(timeout=timeout, follow_redirects=True) as client:
                await self._start(client)
                self._client = client
                self.state = State.RUNNING
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._client = None
            self.state = State.STOPPED

    # An agent that lists an A2AAgent in its tools starts it with this (as it does MCP
    # servers): there is no connection to lose, so it is ``serve`` itself.
    serve_quietly = serve

    async def _start(self, client: httpx2.AsyncClient) -> None:
        with trio.move_on_after(self.start_timeout) as timer:
            try:
                headers = await self._headers()
                response = await client.get(self.card_url, headers=headers)
            except httpx2.HTTPError as exc:
                raise A2AAgentError(
                    self._label, self.card_url, f"agent card not fetched: {_describe(exc)}"
                ) from None
        if timer.cancelled_caught:
            raise A2AAgentError(
                self._label,
                self.card_url,
                f"agent card not fetched: no answer within {self.start_timeout:g}s",
            )
        if response.status_code != 200:
            raise A2AAgentError(
                self._label,
                self.card_url,
                f"agent card not fetched: HTTP {response.status_code}: {_body(response)}",
            )
        try:
            card = response.json()
        except ValueError:
            card = None
        if not isinstance(card, dict) or not isinstance(card.get("name"), str):
            raise A2AAgentError(
                self._label,
                self.card_url,
                f"is not an A2A agent card (a JSON object with a name): {_body(response)}",
            )
        self.card = card
        try:
            read = _a2a.AgentCard.from_json(card)
        except _a2a.A2AError as exc:
            raise A2AAgentError(
                self._label, self.card_url, f"is not a usable A2A agent card: {exc.message}"
            ) from None
        if read.bearer_required and not any(k.lower() == "authorization" for k in headers):
            # The card is public; every call without the token would be a 401.
            raise A2AAgentError(
                self._label,
                self.card_url,
                "requires a bearer token (its agent card's security requirements): give "
                "headers={'Authorization': 'Bearer TOKEN'}",
            )
        self.streaming = read.streaming
        self.endpoint = read.url
        self._tools = [self._make_tool(card)]
        self.generation += 1

    def _make_tool(self, card: Mapping[str, Any]) -> A2ATool:
        name = self.name or tool_name(card)
        description = tool_description(card)
        namespace = {
            "name": name,
            "description": description,
            "label": str(card["name"]),
            "input_schema": dict(INPUT_SCHEMA),
            "remote": self,
            "__module__": __name__,
            "__qualname__": f"A2ATool[{name}]",
        }
        cls: type[A2ATool] = type(f"A2ATool_{name}", (A2ATool,), namespace)
        return cls()

    async def _headers(self) -> dict[str, str]:
        headers = {"A2A-Version": _wire.PROTOCOL_VERSION}
        given: Mapping[str, str] | Awaitable[Mapping[str, str]] | None
        given = self.headers() if callable(self.headers) else self.headers
        if inspect.isawaitable(given):
            given = await given
        if given:
            headers.update(given)
        return headers

    # --- a call -------------------------------------------------------------------------

    async def _call(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        client = self._client
        if client is None or self.state is not State.RUNNING:
            return "error", f"A2A agent {self._label} is not running"
        message = _wire.user_message(args["message"], args.get("task_id"), args.get("context_id"))
        params = {"message": message}
        view = TaskView()
        try:
            if self.streaming:
                await self._stream(client, params, view, ctx)
            else:
                await self._send(client, params, view, ctx)
        except _Failed as failure:
            await self._cancel_remote(client, view)
            return ToolResult(f"Error: {failure}", is_error=True, details=self._details(view))
        except BaseException:  # cancelled (the deadline, or the run), or a bug
            await self._cancel_remote(client, view)
            raise
        return self._result(view)

    async def _send(
        self,
        client: httpx2.AsyncClient,
        params: Mapping[str, Any],
        view: TaskView,
        ctx: ToolContext,
    ) -> None:
        envelope = await self._post(client, _wire.request(_wire.SEND, params))
        self._apply(view, envelope)
        # A server may answer before the task ends (it chose not to block): the task is
        # then asked after, more and more slowly, until it ends or asks for input.
        wait = _POLL_FIRST
        while not view.finished:
            if not view.task_id:
                raise _Failed(self._problem("answered a task without an id"))
            await trio.sleep(wait)
            wait = min(wait * 2, _POLL_MOST)
            before = view.status_text
            envelope = await self._post(client, _wire.request(_wire.GET, {"id": view.task_id}))
            try:
                view.apply_task(_wire.result_of(envelope))
            except WireError as exc:
                raise _Failed(self._problem(str(exc))) from None
            if view.state == "working" and view.status_text and view.status_text != before:
                ctx.progress(view.status_text)

    async def _post(self, client: httpx2.AsyncClient, body: Mapping[str, Any]) -> Any:
        try:
            response = await client.post(self.endpoint, json=body, headers=await self._headers())
        except httpx2.HTTPError as exc:
            raise _Failed(self._lost(exc)) from None
        self._check_status(response)
        return _json(response, self._problem)

    async def _stream(
        self,
        client: httpx2.AsyncClient,
        params: Mapping[str, Any],
        view: TaskView,
        ctx: ToolContext,
    ) -> None:
        body = _wire.request(_wire.SEND_STREAMING, params)
        headers = await self._headers()
        headers["Accept"] = "text/event-stream"
        try:
            async with client.stream("POST", self.endpoint, json=body, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._check_status(response)
                kind = response.headers.get("content-type", "")
                if not kind.startswith("text/event-stream"):
                    # A server may answer a stream request with one JSON-RPC response
                    # (an error, most often).
                    await response.aread()
                    self._apply(view, _json(response, self._problem))
                    return
                # Closed here, not by the garbage collector, when the task ends mid-stream.
                async with contextlib.aclosing(sse_data(response.aiter_lines())) as events:
                    async for data in events:
                        try:
                            envelope = json.loads(data)
                        except ValueError:
                            raise _Failed(
                                self._problem(
                                    f"sent a stream event that is not JSON: {data[:_EXCERPT]}"
                                )
                            ) from None
                        status = self._apply(view, envelope)
                        if status and view.state == "working":
                            ctx.progress(status)
                        if view.finished:
                            return
        except httpx2.HTTPError as exc:
            raise _Failed(self._lost(exc)) from None
        raise _Failed(
            self._problem(f"the stream ended before the task did (its last state: {view.state})")
        )

    def _apply(self, view: TaskView, envelope: object) -> str | None:
        try:
            return view.apply(_wire.result_of(envelope))
        except WireError as exc:
            raise _Failed(self._problem(str(exc))) from None

    def _check_status(self, response: httpx2.Response) -> None:
        if response.status_code != 200:
            raise _Failed(self._problem(f"answered HTTP {response.status_code}: {_body(response)}"))

    def _lost(self, exc: httpx2.HTTPError) -> str:
        if isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout)):
            return self._problem(f"could not be reached: {_describe(exc)}")
        if isinstance(exc, httpx2.ReadTimeout):
            return self._problem(f"went silent: nothing came for {self.read_timeout:g}s")
        return self._problem(f"dropped the connection: {_describe(exc)}")

    def _problem(self, text: str) -> str:
        return f"A2A agent {self._label} {text}"

    async def _cancel_remote(self, client: httpx2.AsyncClient, view: TaskView) -> None:
        """Cancels the remote task if it is still going: shielded, so that a cancelled
        call still tells the remote, and bounded, so that it cannot hold the call."""
        if not view.task_id or view.finished:
            return
        body = _wire.request(_wire.CANCEL, {"id": view.task_id})
        with trio.CancelScope(shield=True), trio.move_on_after(self.cancel_timeout):
            try:
                response = await client.post(
                    self.endpoint, json=body, headers=await self._headers()
                )
                _wire.result_of(response.json())
            except (httpx2.HTTPError, ValueError, WireError) as exc:
                logger.warning(
                    "A2A agent %s: task %s not cancelled: %s", self._label, view.task_id, exc
                )

    def _result(self, view: TaskView) -> ToolResult:
        details = self._details(view)
        state = view.state
        if view.answer is not None:
            text = view.answer or "(an empty answer)"
            if view.context_id:
                text += f"\n\n(context_id: {view.context_id})"
            return ToolResult(text, details=details)
        ids = f"task_id={view.task_id}, context_id={view.context_id}"
        if state == "completed":
            text = view.result_text() or "(the task completed without output)"
            return ToolResult(f"{text}\n\n(context_id: {view.context_id})", details=details)
        if state == "input-required":
            asked = view.status_text or "(no question given)"
            return ToolResult(
                f"The remote agent {self._label} needs more input before it can go on: "
                f"{asked}\nTo answer, call this tool again with your reply and {ids}.",
                details=details,
            )
        if state == "auth-required":
            return ToolResult(
                "Error: " + self._problem(f"needs authentication it was not given ({ids})"),
                is_error=True,
                details=details,
            )
        reason = view.status_text or "no reason given"
        return ToolResult(
            "Error: " + self._problem(f"task {view.task_id} ended {state}: {reason}"),
            is_error=True,
            details=details,
        )

    def _details(self, view: TaskView) -> dict[str, Any]:
        return {
            "agent": self._label,
            "url": self.endpoint,
            "task_id": view.task_id,
            "context_id": view.context_id,
            "state": view.state,
        }


def _json(response: httpx2.Response, problem: Callable[[str], str]) -> Any:
    try:
        return response.json()
    except ValueError:
        raise _Failed(problem(f"answered something that is not JSON: {_body(response)}")) from None


def _body(response: httpx2.Response) -> str:
    text = response.text.strip()
    return (text[:_EXCERPT] + "…" if len(text) > _EXCERPT else text) or "(empty body)"


def _describe(exc: httpx2.HTTPError) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
