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
    running, the runner holds the other tools only.

    The runner is built when a run first needs it (a call to run, one to check): most
    conversations of most agents end without one, and an idle agent need not hold its
    limiters. (One with tool classes builds it at once: see ``__init__``.)"""

    __slots__ = ("_runner", "generations", "schemas", "sources", "spec")

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.sources = spec.tool_sources
        self.generations: tuple[int, ...] | None = None
        self._runner: ToolRunner | None = None
        if spec.prepared_tools.classes:
            # Instances of tool classes are made as the agent opens, where a failing
            # constructor fails the open, as it always did.
            self._runner = self.runner
        self.schemas: tuple[Mapping[str, Any], ...] = spec.tool_schemas

    @property
    def runner(self) -> ToolRunner:
        runner = self._runner
        if runner is None:
            runner = self._runner = self.spec.make_runner(with_sources=not self.sources)
        return runner

    def refresh(self) -> None:
        """Rebuild the runner when a tool server's tool list has changed (or on the
        first call, once the servers run)."""
        if not self.sources:
            return
        generations = tuple(source.generation for source in self.sources)
        if generations == self.generations:
            return
        self._runner = self.spec.make_runner()
        self.schemas = tuple(map(freeze, self.runner.schemas()))
        self.generations = generations
