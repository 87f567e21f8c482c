from __future__ import annotations

from typing import Any

import satsuma
from satsuma.testing import run_tool


class Echo(satsuma.Tool):
    name = "echo"
    description = "Echo the text back"
    parameters = {"text": {"type": "string", "required": True}}

    async def run(self, args: dict[str, Any], ctx: satsuma.ToolContext) -> Any:
        return ("ok", args["text"])


async def test_echo_runs_through_the_runner() -> None:
    outcome = await run_tool(Echo, {"text": "hi"})
    assert outcome.content == "hi"
    assert outcome.is_error is False
    assert outcome.error_kind is None
