"""Replaying the calls an agent made to tool servers: a real MCP server (the suite's own
fault server) is recorded in a SQLite store, then replayed with its program gone; a
remote A2A agent is replayed with nothing listening at its address. Neither is started
nor reached."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import satsuma
from satsuma.evals import Case, Dataset, OutputMatches, RecordedCall, ToolTrajectory, evaluate
from satsuma.store import SQLiteStore
from satsuma.testing import Reply, ScriptedModel
from satsuma.tools.a2a import A2AAgent
from satsuma.tools.mcp import MCPServer

FAULT_SERVER = Path(__file__).parents[1] / "tools" / "mcp" / "fault_server.py"


def calls_structured(answer: str) -> ScriptedModel:
    return ScriptedModel([Reply(tool_calls=[("fault__structured", {"n": 3})]), answer])


async def test_an_mcp_server_s_calls_are_replayed_without_starting_it(tmp_path: Path) -> None:
    program = tmp_path / "fault_server.py"
    shutil.copy(FAULT_SERVER, program)
    server = MCPServer("fault", sys.executable, [str(program)], prefix="fault")

    class Ops(satsuma.Agent):
        name = "ops"
        tools = [server]

    async with SQLiteStore(tmp_path / "prod.db") as store:
        async with satsuma.open_agent(
            Ops, model=calls_structured("n is 3."), store=store, agent_id="t-1"
        ) as agent:
            result = await agent.run("structure 3")
        assert result.status == "completed"
        dataset = await Dataset.from_store(store, agent="ops")
    (case,) = dataset.cases
    (recorded,) = case.recorded
    assert recorded.name == "fault__structured" and recorded.input == {"n": 3}
    assert not recorded.is_error and "3" in str(recorded.content)

    program.unlink()  # the server cannot start any more: a replay must not need it
    report = await evaluate(
        Ops,
        dataset,
        [ToolTrajectory(inputs=True), OutputMatches()],
        model=lambda case: calls_structured("n is 3."),
    )
    assert report.passed, report.markdown()
    run = report.cases[0].runs[0]
    assert run.replayed == 1 and run.missed == 0
    assert not server.running

    # A call the record does not hold is answered "not recorded"; nothing is started.
    other = await evaluate(
        Ops,
        dataset,
        [ToolTrajectory(inputs=True)],
        model=lambda case: ScriptedModel(
            [Reply(tool_calls=[("fault__structured", {"n": 4})]), "n is 4."]
        ),
    )
    assert not other.passed and other.cases[0].runs[0].missed == 1
    assert not server.running


async def test_a_remote_a2a_agent_is_replayed_without_reaching_it() -> None:
    remote = A2AAgent("http://127.0.0.1:9/", name="billing")  # nothing listens there

    class Front(satsuma.Agent):
        name = "front"
        tools = [remote]

    case = Case(
        id="ask-billing",
        prompt="what do I owe?",
        expected_output="You owe 12 EUR.",
        recorded=[RecordedCall("billing", {"prompt": "balance of t-1"}, "12 EUR")],
    )
    model = ScriptedModel(
        [Reply(tool_calls=[("billing", {"prompt": "balance of t-1"})]), "You owe 12 EUR."]
    )
    report = await evaluate(Front, [case], [ToolTrajectory(inputs=True), OutputMatches()],
                            model=lambda _: model)  # fmt: skip
    assert report.passed, report.markdown()
    assert report.cases[0].runs[0].replayed == 1
