"""AgentTool: another agent offered to the model as a tool.

Each call starts a fresh agent of the given class, runs the task, and ends it: the
sub-agent's conversation lives only as long as the call. Its events are reported under
the parent's call (``NestedEvent``), cancelling the parent's call cancels it (it runs in
the call's own task), and its token usage is added to the parent run's.
"""

from __future__ import annotations

import json
from typing import Any, Final

from .._exceptions import ToolDefinitionError
from ..models import Model
from ..tools import (
    ObjectNode,
    Property,
    StringNode,
    Tool,
    ToolContext,
    ToolDefinition,
    ToolResult,
    check_arguments,
)
from ..tools import validate_common as _validate_common
from ._agent import Agent, spec_of
from ._handle import AgentHandle
from ._open import open_agent
from ._output import output_to_json
from ._result import SUBAGENT_USAGE, raw_output

__all__ = ["AgentTool"]

_PARAMETERS: Final = ObjectNode(
    properties=(
        Property(
            name="task",
            node=StringNode(
                description="The task for the agent, with everything it needs to know."
            ),
            required=True,
        ),
    )
)


class AgentTool(Tool, abstract=True):
    """Offer an agent to another agent's model as a tool taking one ``task`` string.

    Args:
        agent: The Agent subclass to run for each call.
        name: The tool's name (default: the agent's name).
        description: What the model is told (default: the agent class's docstring, or a
            sentence naming the agent).
        model: The sub-agent's model provider (default: the parent agent's).
        timeout: The call's deadline (default: the parent's tool_timeout).

    Raises:
        ToolDefinitionError: a bad name or description, or ``agent`` is not an Agent.
    """

    def __init__(
        self,
        agent: type[Agent[Any]],
        *,
        name: str | None = None,
        description: str | None = None,
        model: Model | None = None,
        timeout: float | None = None,
    ) -> None:
        try:
            spec = spec_of(agent)
        except TypeError as exc:
            raise ToolDefinitionError(name, f"AgentTool needs an Agent subclass: {exc}") from exc
        default_description = (agent.__doc__ or "").strip() or (
            f"Delegate a task to the {spec.name} agent and get its final answer."
        )
        tool_name, tool_description, label, tool_timeout, _ = _validate_common(
            spec.name,
            name or spec.name,
            description or default_description,
            None,
            timeout,
            False,
        )
        self.__satsuma_definition__ = ToolDefinition(  # type: ignore[misc]
            name=tool_name,
            description=tool_description,
            label=label,
            input_schema=_PARAMETERS.schema(),
            timeout=tool_timeout,
            idempotent=False,
            is_async=True,
            check=lambda arguments: check_arguments(_PARAMETERS, arguments),
        )
        self._agent = agent
        self._model = model

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        model = self._model
        parent = ctx.agent
        if model is None and isinstance(parent, AgentHandle):
            model = parent.model
        context = {"working_dir": ctx.working_dir, "capabilities": ctx.capabilities, **ctx.extra}
        async with open_agent(self._agent, model=model, context=context) as agent:
            result = await agent.run(args["task"], events=ctx.forward)
        details = {SUBAGENT_USAGE: result.usage, "run_id": result.run_id, "status": result.status}
        if result.status == "completed":
            answer = result.output
            if not isinstance(answer, str):
                # A typed answer (the sub-agent has an output_type): the parent reads JSON.
                answer = json.dumps(output_to_json(answer), ensure_ascii=False)
            return ToolResult(answer, details=details)
        why = f": {result.error}" if result.error else ""
        text = f"The {agent.name} agent ended {result.status}{why}."
        last = raw_output(result)  # a typed run that did not complete has no answer
        if last:
            text += f"\n\nIts last answer:\n{last}"
        return ToolResult(text, is_error=True, details=details)
