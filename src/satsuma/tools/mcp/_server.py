"""MCPServer: a Model Context Protocol server's tools, run like satsuma's own.

One task owns the connection (the SDK's transports and ``ClientSession`` are context
managers that must be entered and left by the same task): it starts the server, lists
its tools, then waits until the connection ends or it is cancelled. Calls go through the
session from the ToolRunner's own per-call tasks, so they get the runner's deadline,
cancellation (the SDK tells the server with ``notifications/cancelled``), and crash
capture like any tool.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, final

import httpx2
import mcp.types as mcp_types
import trio
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client

from ..._exceptions import MCPServerError
from ..._text import leaf_exceptions
from .. import Tool, ToolContext, ToolDefinitionError, ToolResult, ToolServer
from ._content import convert_result
from ._ending import EndWatcher, describe_end

__all__ = ["MCPServer", "MCPTool"]

logger = logging.getLogger("satsuma.mcp")

_TOOL_NAME_INVALID: Final = re.compile(r"[^a-zA-Z0-9_-]")
_STDERR_KEPT: Final = 2_000  # characters of the server's stderr kept to explain an exit
_CLIENT_INFO: Final = mcp_types.Implementation(name="satsuma", version="1")


class State(enum.Enum):
    """Where a server is in its life."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    STOPPED = "stopped"


class MCPTool(Tool, abstract=True):
    """A tool of an MCP server. Its schema is the server's, as the server gives it."""

    server: ClassVar[MCPServer]
    remote_name: ClassVar[str]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        return await self.server._call(self.remote_name, args, ctx)


@final
class MCPServer(ToolServer):
    """A Model Context Protocol server whose tools an agent or a ToolRunner can use.

    Run it as ``async with MCPServer(...) as srv:`` (if the server dies, its calls answer
    ``Error: MCP server NAME exited: ...`` and the block goes on), as a supervised child
    (``serve``: a death is a crash, and the supervisor restarts it), or list it in an
    Agent's ``tools`` (the agent starts it with itself unless it is already running).

    Args:
        name: Names the server in messages and logs.
        command: The program to start (no shell).
        args: Its arguments.
        env: Variables for it, on top of a minimal environment (HOME, LOGNAME, PATH,
            SHELL, TERM, USER): the parent's secrets do not reach it unless given here.
        cwd: Its working directory.
        prefix: If set, each tool is named ``<prefix>__<tool>`` (``git__git_status``).
        start_timeout: Seconds for the server to start and list its tools.
    """

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        prefix: str | None = None,
        *,
        start_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.command = command
        self.args = tuple(args)
        self.env = dict(env) if env is not None else None
        self.cwd = Path(cwd) if cwd is not None else None
        self.url: str | None = None
        self.headers: dict[str, str] | None = None
        self.prefix = prefix
        self.start_timeout = start_timeout
        self.state = State.IDLE
        self.generation = 0  # bumped each time the tool list changes
        self._session: ClientSession | None = None
        self._tools: list[MCPTool] = []
        self._exit_detail = ""
        self._stderr_tail = ""
        self._lost = trio.Event()
        self._stderr_done = trio.Event()
        self._started = False
        self._tasks: trio.Nursery | None = None
        self._refreshed = trio.Event()
        self._refreshed.set()
        if prefix is not None and not re.fullmatch(r"[a-zA-Z0-9_-]{1,30}", prefix):
            raise ValueError(f"prefix must match [a-zA-Z0-9_-]{{1,30}}, got: {prefix!r}")

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        prefix: str | None = None,
        *,
        start_timeout: float = 30.0,
    ) -> MCPServer:
        """A server reached over the streamable HTTP transport at ``url``."""
        server = cls(name, "", prefix=prefix, start_timeout=start_timeout)
        server.url = url
        server.headers = dict(headers) if headers is not None else None
        return server

    def __repr__(self) -> str:
        where = self.url or " ".join([self.command, *self.args])
        return f"<MCPServer {self.name!r} {where} {self.state.value}>"

    # --- the tools ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.state is State.RUNNING

    def tools(self) -> list[MCPTool]:
        """The server's tools, for a ToolRunner or an Agent's ``tools``.

        Raises:
            MCPServerError: the server has not been started.
        """
        if self.state in (State.IDLE, State.STARTING):
            raise MCPServerError(
                self.name, "is not running; start it with async with, serve, or an agent"
            )
        return list(self._tools)

    async def _call(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        session = self._session
        if session is None or self.state is not State.RUNNING:
            return "error", self._gone_text()

        async def report(progress: float, total: float | None, message: str | None) -> None:
            if message:
                ctx.progress(message)
            elif total:
                ctx.progress(f"{progress:g}/{total:g}")
            else:
                ctx.progress(f"{progress:g}")

        try:
            result = await session.call_tool(name, arguments, progress_callback=report)
        except MCPError as exc:
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                # Over HTTP this may be the first sign: the server is gone either way.
                self._connection_lost()
                # The process is going: its last words on stderr say why, once read.
                with trio.move_on_after(1.0):
                    await self._stderr_done.wait()
                return "error", self._gone_text()
            return "error", f"MCP server {self.name} refused the call: {exc.error.message}"
        # A change of the tool list announced during the call (the server sends it
        # before the result) is listed before the result goes back, so that the
        # model's next turn already has the new tools.
        with trio.move_on_after(self.start_timeout):
            await self._refreshed.wait()
        content, is_error = convert_result(result)
        details = {"server": self.name, "tool": name}
        if result.structured_content is not None:
            details["structured_content"] = result.structured_content
        return ToolResult(content, is_error=is_error, details=details)

    def _gone_text(self) -> str:
        detail = self._exit_detail or self._describe_exit()
        return f"MCP server {self.name} exited: {detail}"

    # --- running ------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the server until cancelled, as a supervisor's child.

        Raises:
            MCPServerError: it could not start, or it exited (a crash: the supervisor
                restarts it, with its tool list listed anew).
        """
        await self._run(True, task_status=task_status)

    async def serve_quietly(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the server until cancelled; if it exits, its calls answer
        ``Error: MCP server NAME exited: ...`` and this returns (what ``async with`` and
        an agent that started the server do).

        Raises:
            MCPServerError: it could not start.
        """
        await self._run(False, task_status=task_status)

    async def _run(
        self, crash_on_exit: bool, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        if self.state in (State.STARTING, State.RUNNING):
            raise MCPServerError(self.name, "is already running")
        self.state = State.STARTING
        self._lost = trio.Event()
        self._stderr_done = trio.Event()
        self._exit_detail = ""
        self._stderr_tail = ""
        try:
            await self._connect(task_status)
        except MCPServerError:
            self.state = State.EXITED
            if crash_on_exit or not self._started:
                raise
        except BaseException:  # cancelled (stopped), or a bug: not an exit of the server
            if self.state is not State.EXITED:
                self.state = State.STOPPED
            raise
        finally:
            self._session = None
            self._tasks = None

    async def _connect(self, task_status: trio.TaskStatus[None]) -> None:
        self._started = False
        try:
            async with trio.open_nursery() as nursery, self._transport(nursery) as (read, write):
                self._tasks = nursery
                watched = EndWatcher(read, self._connection_lost)
                async with ClientSession(
                    watched,
                    write,
                    message_handler=self._on_message,
                    client_info=_CLIENT_INFO,
                ) as session:
                    with trio.move_on_after(self.start_timeout) as timer:
                        await session.initialize()
                        tools = await self._list_tools(session)
                    if timer.cancelled_caught:
                        raise MCPServerError(
                            self.name,
                            f"did not start: no answer within {self.start_timeout:g}s",
                        )
                    self._session = session
                    self._set_tools(tools)
                    self.state = State.RUNNING
                    self._started = True
                    task_status.started()
                    await self._lost.wait()
                    with trio.move_on_after(1.0):  # its last words on stderr say why
                        await self._stderr_done.wait()
                    self._exit_detail = self._describe_exit()
                    logger.warning("MCP server %s exited: %s", self.name, self._exit_detail)
                    raise MCPServerError(self.name, f"exited: {self._exit_detail}")
        except BaseException as exc:
            raise self._explain(exc) from None

    def _explain(self, exc: BaseException) -> BaseException:
        """What to raise for what came out of the transport and the session: the SDK
        wraps everything in exception groups, several levels deep."""
        leaves = leaf_exceptions(exc)
        cancelled = next((leaf for leaf in leaves if isinstance(leaf, trio.Cancelled)), None)
        if cancelled is not None:
            # Stopped by whoever runs us: what the transport raised while it was torn
            # down (an HTTP server already gone, say) is noise, and Cancelled goes on.
            for leaf in leaves:
                if leaf is not cancelled:
                    logger.debug("MCP server %s: while stopping: %r", self.name, leaf)
            return cancelled
        for leaf in leaves:
            if isinstance(leaf, MCPServerError):
                return leaf
        for leaf in leaves:
            if isinstance(leaf, (MCPError, OSError, httpx2.HTTPError)):
                detail = describe_end(leaf, self._stderr_tail)
                if self._started:
                    self._exit_detail = detail
                    return MCPServerError(self.name, f"exited: {detail}")
                return MCPServerError(self.name, f"did not start: {detail}")
        return exc  # a bug: raised as it is

    @contextlib.asynccontextmanager
    async def _transport(self, nursery: trio.Nursery) -> AsyncIterator[tuple[Any, Any]]:
        if self.url is not None:
            self._stderr_done.set()  # no process of ours: nothing to read
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with (
                create_mcp_http_client(headers=self.headers) as client,
                streamable_http_client(self.url, http_client=client) as (read, write),
            ):
                yield read, write
            return
        read_fd, write_fd = os.pipe()
        # The server's stderr: read here, logged, and its end kept to explain an exit.
        nursery.start_soon(self._read_stderr, read_fd)
        errlog = os.fdopen(write_fd, "w")
        params = StdioServerParameters(
            command=self.command,
            args=list(self.args),
            env=self.env,
            cwd=self.cwd,
        )
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                errlog.close()  # the child has its own copy: EOF comes when it exits
                yield read, write
        finally:
            errlog.close()

    async def _read_stderr(self, fd: int) -> None:
        stream = trio.lowlevel.FdStream(fd)
        done = self._stderr_done
        async with stream:
            pending = b""
            while chunk := await stream.receive_some(1 << 14):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    text = line.decode("utf-8", "replace")
                    logger.debug("MCP server %s stderr: %s", self.name, text)
                    self._stderr_tail = (self._stderr_tail + text + "\n")[-_STDERR_KEPT:]
        done.set()

    async def _list_tools(self, session: ClientSession) -> list[mcp_types.Tool]:
        found: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return found

    def _set_tools(self, listed: list[mcp_types.Tool]) -> None:
        tools: list[MCPTool] = []
        seen: set[str] = set()
        for remote in listed:
            name = self._local_name(remote.name)
            if name in seen:
                logger.warning("MCP server %s: tool %r skipped: duplicate name", self.name, name)
                continue
            try:
                tools.append(self._make_tool(name, remote))
            except ToolDefinitionError as exc:
                logger.warning("MCP server %s: tool %r skipped: %s", self.name, remote.name, exc)
                continue
            seen.add(name)
        self._tools = tools
        self.generation += 1

    def _local_name(self, remote: str) -> str:
        name = _TOOL_NAME_INVALID.sub("_", remote)
        if self.prefix is not None:
            name = f"{self.prefix}__{name}"
        return name[:64]

    def _make_tool(self, name: str, remote: mcp_types.Tool) -> MCPTool:
        namespace = {
            "name": name,
            "description": remote.description or f"{remote.name} (from MCP server {self.name})",
            "label": remote.title or remote.name,
            "input_schema": dict(remote.input_schema),
            "server": self,
            "remote_name": remote.name,
            "__module__": __name__,
            "__qualname__": f"MCPTool[{self.name}.{remote.name}]",
        }
        cls: type[MCPTool] = type(f"MCPTool_{name}", (MCPTool,), namespace)
        return cls()

    async def _refresh_tools(self, refreshed: trio.Event) -> None:
        try:
            session = self._session
            if session is None:
                return
            try:
                tools = await self._list_tools(session)
            except MCPError as exc:
                logger.warning("MCP server %s: tool list not refreshed: %s", self.name, exc)
                return
            self._set_tools(tools)
            logger.info("MCP server %s: tool list changed (%d tools)", self.name, len(tools))
        finally:
            refreshed.set()

    def _connection_lost(self) -> None:
        # From this moment calls answer the "exited" text at once.
        if self.state is State.RUNNING:
            self.state = State.EXITED
        self._lost.set()

    async def _on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            # Not awaited here: this handler runs in the session's receive loop, which
            # must go on to receive the answer to list_tools.
            if self._tasks is not None:
                refreshed = trio.Event()
                self._refreshed = refreshed
                self._tasks.start_soon(self._refresh_tools, refreshed)
        elif isinstance(message, Exception):
            logger.warning("MCP server %s sent something unreadable: %s", self.name, message)

    def _describe_exit(self) -> str:
        return describe_end(None, self._stderr_tail)
