"""satsuma's modules import one another without cycles, counting imports made inside
functions too (a cycle hidden in a function is still a cycle: it only moves the failure
to run time). Imports under ``if TYPE_CHECKING:`` never run and are not counted."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import satsuma

ROOT = Path(satsuma.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target in modules:
                found.add(target)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    found.discard(name)
    return found


def test_no_import_cycles_anywhere_in_satsuma() -> None:
    paths = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _imports(path, modules) for path in paths}
    # A package's __init__ re-exports its modules; a module importing a sibling through
    # the package (``from ..tools import ToolCall``) depends on that module, not back.
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                walk(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)
    package_cycles = [
        cycle
        for cycle in cycles
        # module -> its own package's __init__ -> module is the re-export pattern, not a
        # cycle of code: the package imports the module, which needs nothing back.
        if not any(
            a.startswith(b + ".") or b.startswith(a + ".") for a, b in itertools.pairwise(cycle)
        )
    ]
    assert package_cycles == []
