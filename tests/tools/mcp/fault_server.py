"""An MCP server of the project's own that misbehaves on demand, for the MCP tests.

Its tools hang (and note whether they were told of a cancellation), crash the process,
report progress, fail in the ways the protocol allows, return an image or structured
content, and add a tool at run time (announcing the change). Run over stdio by default,
or streamable HTTP with ``--http PORT``.

Env:
  MCP_FAULT_LOG  a file to append event lines to ("hang-cancelled x", "crash", ...).
"""

import base64
import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

LOG = os.environ.get("MCP_FAULT_LOG")


def record(line: str) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(f"{time.time():.3f} {line}\n")


server = MCPServer("fault-server", version="0.1")

# 1x1 transparent PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@server.tool(description="Sleeps forever; records cancellation to $MCP_FAULT_LOG")
async def hang(tag: str = "x") -> str:
    record(f"hang-start {tag}")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        record(f"hang-cancelled {tag}")
        raise
    finally:
        record(f"hang-exit {tag}")
    return "unreachable"


@server.tool(description="Kills the server process mid-call")
async def crash(code: int = 3) -> str:
    record("crash")
    sys.stderr.write("fault-server: crashing now\n")
    sys.stderr.flush()
    os._exit(code)


@server.tool(description="Reports progress `steps` times then returns")
async def progress(steps: int, ctx: Context) -> str:
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
        await anyio.sleep(0.05)
    return f"done {steps}"


@server.tool(description="Raises ToolError -> isError result")
async def fail(msg: str = "boom") -> str:
    raise ToolError(msg)


@server.tool(description="Returns an explicit CallToolResult with is_error=True")
async def fail_explicit() -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text="explicit failure")], is_error=True
    )


@server.tool(description="Raises an unexpected exception")
async def explode() -> str:
    raise RuntimeError("unexpected kaboom")


@server.tool(description="Returns text + PNG image")
async def image() -> list[str | Image]:
    return ["a 1x1 png follows", Image(data=PNG, format="png")]


@server.tool(description="Returns a dict (structured content)")
async def structured(n: int) -> dict[str, int]:
    return {"n": n, "sq": n * n}


@server.tool(description="Adds a tool and emits notifications/tools/list_changed")
async def add_tool(name: str, ctx: Context) -> str:
    async def dyn() -> str:
        return f"I am {name}"

    server.add_tool(dyn, name=name, description="dynamically added")
    await ctx.session.send_tool_list_changed()  # legacy (initialize) era: plain notification
    await ctx.notify_tools_changed()  # 2026-07-28 era: subscriptions/listen bus
    return f"added {name}"


if __name__ == "__main__":
    record(f"start pid={os.getpid()}")
    try:
        if len(sys.argv) > 2 and sys.argv[1] == "--http":
            anyio.run(lambda: server.run_streamable_http_async(port=int(sys.argv[2])))
        else:
            anyio.run(server.run_stdio_async)
    finally:
        record("stop")
