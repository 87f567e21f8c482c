"""The agent's tools as its runs see them: the runner and the schemas sent to the model,
rebuilt when a tool server announces a new tool list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

from .._frozen import freeze

if TYPE_CHECKING:
    from ..tools import ToolRunner
    from ._agent import AgentSpec

__all__ = ["Toolbox"]


@final
class Toolbox:
    """Tool servers list their tools once running: until ``refresh`` has seen them
    running, the runner holds the other tools only."""

    __slots__ = ("generations", "runner", "schemas", "sources", "spec")

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.sources = spec.tool_sources
        self.generations: tuple[int, ...] | None = None
        self.runner: ToolRunner = spec.make_runner(with_sources=not self.sources)
        self.schemas: tuple[Mapping[str, Any], ...] = spec.tool_schemas

    def refresh(self) -> None:
        """Rebuild the runner when a tool server's tool list has changed (or on the
        first call, once the servers run)."""
        if not self.sources:
            return
        generations = tuple(source.generation for source in self.sources)
        if generations == self.generations:
            return
        self.runner = self.spec.make_runner()
        self.schemas = tuple(map(freeze, self.runner.schemas()))
        self.generations = generations
