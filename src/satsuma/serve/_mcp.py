"""The MCP surface: ``/mcp`` over streamable HTTP, each served agent class a tool.

Built on the official ``mcp`` SDK's server pieces (its low-level ``Server`` and
``StreamableHTTPSessionManager``), which run on anyio and so under trio. It is an ASGI
app of its own rather than a ``Surface``: the SDK reads and answers the HTTP itself.
The server's app authenticates a request before it reaches this one and leaves the
caller's ``Principal`` in the ASGI scope under ``PRINCIPAL_KEY``; listing tools needs
the ``read`` scope, calling one ``run`` (and a token that reaches that agent).

A tool is named by ``Agent.name`` and takes ``{"prompt": str, "agent_id"?: str}``.
Without ``agent_id`` each call is a new conversation (an id made up for it), since MCP
clients call tools with no notion of one. Its answer:

- a completed run: its output as text (a typed output as JSON text, and as
  ``structuredContent`` when it is an object);
- a run awaiting approval: a result naming the run and each pending call (decide them
  through ``/v1/approvals``);
- any other end: ``isError`` with the status and the error.

The session manager is stateless: each request is served on its own, so nothing of a
client's is kept between requests and nothing outlives the server's ``run()``.

A server without tokens refuses a browser's request from elsewhere before it reaches
this app, on every path (_rebinding); the SDK's own DNS-rebinding check is left off, as
it cannot tell a token's request from a tokenless one.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server as MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from ..agents import Agent
from ._app import PRINCIPAL_KEY
from ._hold import hand_back
from ._http import HTTPError, Principal
from ._runs import Busy, Runs, RunView, UnknownAgent, UnknownRun
from ._slots import RunSlots

__all__ = ["PRINCIPAL_KEY", "MCPApp", "agent_tool", "run_result", "tool_arguments"]

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "minLength": 1, "description": "The message to the agent."},
        "agent_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": ("The conversation to continue; leave it out for a new conversation."),
        },
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


def _description(cls: type[Agent[Any]]) -> str:
    text = getattr(cls, "description", None)
    if isinstance(text, str) and text.strip():
        return text.strip()
    doc = cls.__doc__
    if doc and doc.strip() and doc is not Agent.__doc__:
        return doc.strip()
    return f"Ask the {cls.name} agent."


def agent_tool(name: str, cls: type[Agent[Any]]) -> types.Tool:
    """The MCP tool that stands for a served agent class."""
    return types.Tool(name=name, description=_description(cls), input_schema=dict(_INPUT_SCHEMA))


class BadArguments(ValueError):
    """A tool call's arguments are not ``{"prompt": str, "agent_id"?: str}``."""


def tool_arguments(arguments: Mapping[str, Any] | None) -> tuple[str, str]:
    """The prompt and agent_id of a call (a new agent_id when none is given).

    Raises:
        BadArguments: naming what is wrong.
    """
    arguments = arguments or {}
    extra = sorted(set(arguments) - {"prompt", "agent_id"})
    if extra:
        raise BadArguments(f"unknown argument(s): {', '.join(extra)}")
    prompt = arguments.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadArguments("prompt must be a non-empty string")
    agent_id = arguments.get("agent_id")
    if agent_id is None:
        return prompt, f"mcp-{secrets.token_hex(8)}"
    if not isinstance(agent_id, str) or not 1 <= len(agent_id) <= 200:
        raise BadArguments("agent_id must be a string of 1 to 200 characters")
    if "/" in agent_id or any(ord(char) < 32 or ord(char) == 127 for char in agent_id):
        raise BadArguments("agent_id must contain no '/' and no control character")
    return prompt, agent_id


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def run_result(view: RunView) -> types.CallToolResult:
    """A run that ended or paused, as the tool call's result."""
    if view.status == "completed":
        output = view.output
        if isinstance(output, str):
            return types.CallToolResult(content=[types.TextContent(text=output)])
        text = json.dumps(output, ensure_ascii=False)
        structured = output if isinstance(output, dict) else None
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=structured
        )
    if view.status == "awaiting_approval":
        lines = [f"The run {view.run_id} (agent_id {view.agent_id}) is waiting for approval of:"]
        pending = []
        for call in view.pending:
            lines.append(
                f"- {call.tool} (call {call.call_id}) with input "
                f"{json.dumps(call.input, ensure_ascii=False)}: {call.reason}"
            )
            pending.append(
                {
                    "call_id": call.call_id,
                    "tool": call.tool,
                    "input": call.input,
                    "reason": call.reason,
                }
            )
        lines.append(f"Decide each call at POST /v1/approvals/{view.run_id}/{{call_id}}.")
        return types.CallToolResult(
            content=[types.TextContent(text="\n".join(lines))],
            structured_content={
                "status": "awaiting_approval",
                "run_id": view.run_id,
                "agent_id": view.agent_id,
                "pending": pending,
            },
        )
    error = (view.error or {}).get("message") if view.error else None
    text = f"The run {view.run_id} ended {view.status}"
    return _error(f"{text}: {error}" if error else text)


def _principal(ctx: Any) -> Principal | None:
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    if isinstance(scope, Mapping):
        principal = scope.get(PRINCIPAL_KEY)
        if isinstance(principal, Principal):
            return principal
    return None


class MCPApp:
    """``/mcp``: the served agents as MCP tools, an ASGI app.

    Use ``async with app.run():`` for the server's lifetime (the SDK's session manager
    keeps a task group for the requests in flight) and call the app within it.

    Args:
        runs: Where the runs happen.
        name: The MCP server's name, as ``initialize`` answers it.
        slots: The server's cap on runs in flight per token (None: no cap); past it a
            call is an error result saying to retry.
    """

    def __init__(self, runs: Runs, *, name: str = "satsuma", slots: RunSlots | None = None) -> None:
        self._runs = runs
        self._slots = slots
        self._server: MCPServer[Any] = MCPServer(
            name, on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )
        # The server's own body limit, should this app be reached without its app.
        self._manager = StreamableHTTPSessionManager(
            self._server, stateless=True, max_request_body_size=1 << 20
        )

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve requests within this block; requests in flight end with it."""
        async with self._manager.run():
            yield

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        """Answer one ASGI request (``http`` only). The endpoint is ``/mcp`` itself, and
        it takes POST: the session manager is stateless, so there is no stream of the
        server's own to GET, and a GET would be held open with nothing to send."""
        if scope["path"].rstrip("/") != "/mcp":
            await _refuse(send, 404, "not_found", "the MCP endpoint is /mcp")
        elif scope["method"] != "POST":
            await _refuse(send, 405, "method_not_allowed", "the MCP endpoint takes POST")
        else:
            await self._manager.handle_request(scope, receive, send)

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = _principal(ctx)
        # A token that may run an agent sees its tool too: MCP clients list the tools
        # before they call one (the SDK's client reads their schemas first).
        tools = [
            agent_tool(name, cls)
            for name, cls in sorted(self._runs.agents.items())
            if principal is None or principal.allows("read", name) or principal.allows("run", name)
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        if name not in self._runs.agents:
            return _error(f"no such tool: {name!r}")
        principal = _principal(ctx)
        if principal is not None and not principal.allows("run", name):
            return _error(f"this token may not run {name!r} (it needs the run scope)")
        try:
            prompt, agent_id = tool_arguments(params.arguments)
        except BadArguments as error:
            return _error(f"bad arguments: {error}")
        slot = None
        if self._slots is not None and principal is not None:
            try:
                slot = self._slots.take(principal)
            except HTTPError as error:
                return _error(error.message)
        try:
            view = await self._runs.start(name, agent_id, prompt)
        except BaseException as error:
            if slot is not None:
                slot.release()  # no run: nothing in flight
            if isinstance(error, UnknownAgent):
                return _error(f"no such tool: {name!r}")
            if isinstance(error, Busy):
                return _error(f"the conversation {agent_id!r} is busy: {error}")
            if isinstance(error, ValueError):
                return _error(f"bad arguments: {error}")
            if isinstance(error, HTTPError):  # the token's cap on runs in flight (CappedRuns)
                return _error(error.message)
            raise
        over = False
        try:
            ended = await self._runs.wait(view.run_id)
            over = True
            return run_result(ended)
        except UnknownRun:
            # Past its retention before the wait read it: unlikely, and not the caller's.
            over = True
            return _error(f"the run {view.run_id} is no longer known")
        finally:
            # A caller gone before the end leaves the run in flight: its slot with it.
            hand_back(self._runs, view.run_id, slot, run_over=over)


async def _refuse(send: Any, status: int, kind: str, message: str) -> None:
    """A JSON error, as the server's app writes them."""
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 405:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
