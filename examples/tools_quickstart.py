"""Three tools, one turn: run with ``python examples/tools_quickstart.py``.

Shows a class tool with a spec dict, a decorated function, and what the model gets back
when one call succeeds, one has bad arguments and one times out.
"""

from __future__ import annotations

from typing import Any

import trio

import satsuma


class Ping(satsuma.Tool):
    name = "ping"
    description = "Check whether a host answers"
    parameters = {
        "host": {"type": "string", "required": True, "description": "Hostname or IP"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
    }
    timeout = 2.0

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        await trio.sleep(0.05 * args["count"])
        return ("ok", f"{args['host']}: {args['count']} replies")


@satsuma.tool(timeout=0.2)
async def traceroute(host: str) -> str:
    """Trace the route to a host (this one never finishes).

    Args:
        host: Hostname or IP.
    """
    await trio.sleep_forever()
    return "unreachable"


async def main() -> None:
    runner = satsuma.ToolRunner([Ping, traceroute])
    outcomes = await runner.execute(
        [
            {"id": "toolu_1", "name": "ping", "input": {"host": "example.org", "count": 3}},
            {"id": "toolu_2", "name": "ping", "input": {"host": "example.org", "count": 0}},
            {"id": "toolu_3", "name": "traceroute", "input": {"host": "example.org"}},
        ]
    )
    for block in satsuma.format_results(outcomes):
        print(block)


if __name__ == "__main__":
    trio.run(main)
