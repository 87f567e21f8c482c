"""The rooms of DESIGN.md "Layout", enforced on the source: which room may import which,
front doors only, no import cycle inside a package, and the size of modules.

Read from the AST of every module under src/satsuma, counting every import: at module
level, inside functions, and under ``if TYPE_CHECKING:`` (a type-only import is still an
arrow between rooms, and still a cycle for a reader). docs/architecture.md draws the same
map for people. Each rule is checked on a small hand-made tree too, so that a rule that
found nothing on satsuma is known to find something when there is something to find.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import satsuma

SRC = Path(satsuma.__file__).parent

# The shared kernel: top-level modules any room may import.
KERNEL = frozenset(
    {
        "_messages",
        "_exceptions",
        "_text",
        "_jsonvalue",
        "_frozen",
        "_telemetry",
        "_public",
        "_shapes",
        "_toolcall",
        "_a2a",
        "_a2a_values",
        "_sse",
    }
)
# The CLI: the ``satsuma`` command and its top-level helpers, one room.
CLI = frozenset(
    {
        "cli",
        "_commands",
        "_cluster_commands",
        "_store_commands",
        "_live",
        "_demo",
        "_terminal",
        "_tally",
        "_command_error",
        "_store_option",
        "_arguments",
        "_run_command",
        "_runs_command",
        "_chat_command",
        "_fake_server",
        "_serve_command",
        "_eval_command",
        "_eval_progress",
    }
)
PACKAGES = (
    "models", "agents", "supervisor", "store", "cluster", "serve", "evals", "testing", "aio"
)  # fmt: skip
_BELOW_SERVE = frozenset(
    {
        "tools",
        "tools.builtin",
        "tools.mcp",
        "tools.a2a",
        "models",
        "agents",
        "supervisor",
        "store",
        "cluster",
    }
)
# Room -> the other rooms it may import (the kernel always; its own room always). The
# arrows of DESIGN.md "Layout": a room may use those below it, never one above or beside.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "kernel": frozenset(),
    "tools": frozenset(),
    "tools.builtin": frozenset({"tools"}),
    "tools.mcp": frozenset({"tools"}),
    "tools.a2a": frozenset({"tools"}),
    "models": frozenset(),
    "store": frozenset(),
    # The store sits below the agents (it knows only the kernel's messages): an agent
    # writes its conversation and journal through satsuma.store's interface.
    "agents": frozenset({"tools", "models", "store"}),
    "supervisor": frozenset({"agents", "tools", "models", "store"}),
    "cluster": frozenset({"agents", "supervisor", "store", "tools", "models"}),
    "testing": frozenset({"models", "agents", "tools"}),
    "serve": _BELOW_SERVE,
    "evals": _BELOW_SERVE,
    # satsuma inside asyncio: it may use every room below it, as serve does; nothing
    # imports it (users do).
    "aio": _BELOW_SERVE,
    "cli": _BELOW_SERVE | {"serve", "evals", "testing", "satsuma"},
    # The front door re-exports the rooms (the cluster is loaded by name, on first use).
    "satsuma": frozenset({"tools", "models", "agents", "supervisor", "store"}),
}

# Imports of another room's private module that are allowed, each with its reason (at
# most 5: DESIGN.md "Layout"). (importing module, imported module) -> reason.
ALLOWED_PRIVATE: dict[tuple[str, str], str] = {}

MAX_LINES = 700
LONG = 500
MAX_LONG_MODULES = 4
# A module past LONG lines says why it is one piece in its docstring, in words that can
# be checked, in any case: "One piece: ..." or "One module past 500 lines, on purpose: ...".
ONE_PIECE = re.compile(r"one piece|past 500 lines", re.IGNORECASE)


@attrs.frozen
class Import:
    importer: str  # dotted module name
    target: str  # the satsuma module imported (a package means its __init__)
    names: tuple[str, ...]  # the names taken from it (empty for ``import x``)
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, path): path for path in sorted(root.rglob("*.py"))}


def room_of(module: str) -> str | None:
    """The room a module belongs to, or None for a top-level module in no room."""
    parts = module.split(".")[1:]
    if not parts:
        return "satsuma"
    if parts[0] == "tools":
        return (
            "tools." + parts[1]
            if len(parts) > 1 and parts[1] in ("builtin", "mcp", "a2a")
            else "tools"
        )
    if parts[0] in PACKAGES:
        return parts[0]
    if len(parts) == 1 and parts[0] in KERNEL:
        return "kernel"
    if len(parts) == 1 and parts[0] in CLI:
        return "cli"
    return None


def front_door(room: str) -> str:
    return "satsuma" if room == "satsuma" else "satsuma." + room


def imports(root: Path, known: dict[str, Path]) -> Iterator[Import]:
    """Every import of a satsuma module, anywhere in each module."""
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known:
                        yield Import(name, alias.name, (), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = tuple(alias.name for alias in node.names)
                # ``from . import _loop`` imports the module _loop, not the package.
                submodules = [n for n in names if f"{target}.{n}" in known]
                for sub in submodules:
                    yield Import(name, f"{target}.{sub}", (), node.lineno)
                rest = tuple(n for n in names if n not in submodules)
                if target in known and rest:
                    yield Import(name, target, rest, node.lineno)


def dependency_violations(root: Path) -> list[str]:
    known = modules(root)
    found = [f"{name} is in no room" for name in known if room_of(name) is None]
    for imp in imports(root, known):
        mine, theirs = room_of(imp.importer), room_of(imp.target)
        if mine is None or theirs is None or theirs in (mine, "kernel"):
            continue
        if theirs == "satsuma" and all(_is_dunder(name) for name in imp.names):
            continue  # the package's own metadata (``from . import __version__``)
        if theirs not in MAY_IMPORT[mine]:
            found.append(f"{imp.importer}:{imp.line} ({mine}) imports {imp.target} ({theirs})")
    return found


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def private_violations(root: Path) -> list[str]:
    known = modules(root)
    found = []
    for imp in imports(root, known):
        mine, theirs = room_of(imp.importer), room_of(imp.target)
        if theirs in (mine, "kernel", None) or mine is None:
            continue
        if (imp.importer, imp.target) in ALLOWED_PRIVATE:
            continue
        if imp.target != front_door(theirs):
            found.append(f"{imp.importer}:{imp.line} imports {imp.target}, private to {theirs}")
        for name in imp.names:
            if name.startswith("_") and not _is_dunder(name):
                found.append(f"{imp.importer}:{imp.line} imports {imp.target}.{name}, private")
    return found


def cycle_violations(root: Path) -> list[str]:
    """Cycles among the modules of one package (its __init__ apart: a module reaching its
    own package's re-exports is the front door, not a cycle of code)."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name, path in known.items()}
    for imp in imports(root, known):
        same_package = imp.importer.rpartition(".")[0] == imp.target.rpartition(".")[0]
        if same_package and known[imp.target].name != "__init__.py":
            graph[imp.importer].add(imp.target)
    return [" -> ".join(cycle) for cycle in _cycles(graph)]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # Tarjan's strongly connected components; each one of two modules or more is a cycle
    # (reported as one of its loops, to read).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_loop(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _loop(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = min(t for t in graph[path[-1]] if t in component)
        if nxt in seen:
            return [*path[path.index(nxt) :], nxt]
        path.append(nxt)
        seen.add(nxt)


def size_violations(root: Path) -> list[str]:
    found = []
    long_ones = []
    for name, path in modules(root).items():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_LINES:
            found.append(f"{name}: {lines} lines, more than {MAX_LINES}")
        if lines > LONG:
            long_ones.append(f"{name} ({lines})")
            if not ONE_PIECE.search(ast.get_docstring(ast.parse(text)) or ""):
                found.append(f"{name}: {lines} lines and its docstring does not say why")
    if len(long_ones) > MAX_LONG_MODULES:
        found.append(
            f"{len(long_ones)} modules over {LONG} lines, at most {MAX_LONG_MODULES}: "
            + ", ".join(long_ones)
        )
    return found


def _report(rule: str, violations: list[str]) -> str:
    return f"{len(violations)} violations of {rule}:\n  " + "\n  ".join(violations)


# --- satsuma itself


def test_rooms_import_only_the_rooms_below_them() -> None:
    violations = dependency_violations(SRC)
    assert not violations, _report("the one-way arrows between rooms", violations)


def test_rooms_are_entered_by_their_front_door() -> None:
    assert len(ALLOWED_PRIVATE) <= 5
    assert all(reason.strip() for reason in ALLOWED_PRIVATE.values())
    used = {(imp.importer, imp.target) for imp in imports(SRC, modules(SRC))}
    assert set(ALLOWED_PRIVATE) <= used, "an allowed import that no longer exists"
    violations = private_violations(SRC)
    assert not violations, _report("front doors (another room's private module)", violations)


def test_no_import_cycle_inside_a_package() -> None:
    violations = cycle_violations(SRC)
    assert not violations, _report("no cycle inside a package", violations)


def test_modules_are_short_or_say_why_they_are_one_piece() -> None:
    violations = size_violations(SRC)
    assert not violations, _report("module sizes", violations)


# --- the rules on a hand-made tree


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "satsuma"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


GOOD = {
    "__init__.py": "from .tools import Tool as Tool\n",
    "_messages.py": "def version():\n    from . import __version__\n",
    "cli.py": "from .cluster import Node\nfrom .store import Store\n",
    "tools/__init__.py": "from ._tool import Tool as Tool\n",
    "tools/_tool.py": "from .._messages import version\nfrom ._results import Result\n",
    "tools/_results.py": """\
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .._messages import version
        Result = 1
        """,
    "tools/builtin/__init__.py": "from ._bash import Bash as Bash\n",
    "tools/builtin/_bash.py": "from .. import Tool\nfrom ..._messages import version\n",
    "models/__init__.py": "from ._model import Model as Model\n",
    "models/_model.py": "from .._messages import version\n",
    "agents/__init__.py": "from ._agent import Agent as Agent\n",
    "agents/_agent.py": "from ..models import Model\nfrom ..tools import Tool\n",
    "store/__init__.py": "from ._base import Store as Store\n",
    "store/_base.py": "from .. import _messages\nStore = 1\n",
    "cluster/__init__.py": "from ._node import Node as Node\n",
    "cluster/_node.py": "from ..agents import Agent\nfrom ..store import Store\nNode = 1\n",
}


def test_the_rules_pass_on_a_tree_that_keeps_them(tmp_path: Path) -> None:
    root = _tree(tmp_path, GOOD)
    assert dependency_violations(root) == []
    assert private_violations(root) == []
    assert cycle_violations(root) == []
    assert size_violations(root) == []


def test_the_rules_find_what_breaks_them(tmp_path: Path) -> None:
    long_docstring = '"""A long module.\n\nOne piece: it is.\n"""\n' + "x = 1\n" * 600
    root = _tree(
        tmp_path,
        {
            **GOOD,
            "_stray.py": "",
            # the kernel reaching the front door for more than the package's metadata
            "_text.py": "from . import Tool, __version__\n",
            # the cluster is the CLI's alone
            "agents/_agent.py": "from ..cluster import Node\n",
            # tools reaching up to the agents, and models to tools, type-only included
            "tools/_tool.py": """\
                from typing import TYPE_CHECKING
                from ._results import Result
                if TYPE_CHECKING:
                    from ..agents import Agent
                """,
            "models/_model.py": "def f():\n    from ..tools import Tool\n",
            # a cycle through a type-only import, and a private module of another room
            "tools/_results.py": """\
                import typing
                if typing.TYPE_CHECKING:
                    from ._tool import Tool
                """,
            "tools/builtin/_bash.py": "from .._results import Result\nfrom .. import _x\n",
            "store/_a.py": long_docstring,
            "store/_b.py": '"""Too long."""\n' + "x = 1\n" * 600,
            "store/_c.py": long_docstring,
            "store/_d.py": long_docstring.replace("One piece: it is", "Past 500 lines: it is"),
            "store/_e.py": '"""One piece: but past 700."""\n' + "x = 1\n" * 701,
        },
    )
    assert dependency_violations(root) == [
        "satsuma._stray is in no room",
        "satsuma._text:1 (kernel) imports satsuma (satsuma)",
        "satsuma.agents._agent:1 (agents) imports satsuma.cluster (cluster)",
        "satsuma.models._model:2 (models) imports satsuma.tools (tools)",
        "satsuma.tools._tool:4 (tools) imports satsuma.agents (agents)",
    ]
    assert private_violations(root) == [
        "satsuma.tools.builtin._bash:1 imports satsuma.tools._results, private to tools",
        "satsuma.tools.builtin._bash:2 imports satsuma.tools._x, private",
    ]
    assert cycle_violations(root) == [
        "satsuma.tools._results -> satsuma.tools._tool -> satsuma.tools._results"
    ]
    assert size_violations(root) == [
        "satsuma.store._b: 601 lines and its docstring does not say why",
        "satsuma.store._e: 702 lines, more than 700",
        "5 modules over 500 lines, at most 4: satsuma.store._a (604), satsuma.store._b (601),"
        " satsuma.store._c (604), satsuma.store._d (604), satsuma.store._e (702)",
    ]


def test_an_allowed_private_import_is_not_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, {**GOOD, "tools/builtin/_bash.py": "from .._results import Result\n"})
    assert len(private_violations(root)) == 1
    allowed = {("satsuma.tools.builtin._bash", "satsuma.tools._results"): "the reason"}
    monkeypatch.setattr(f"{__name__}.ALLOWED_PRIVATE", allowed)
    assert private_violations(root) == []


@pytest.mark.parametrize(
    ("module", "room"),
    [
        ("satsuma", "satsuma"),
        ("satsuma._exceptions", "kernel"),
        ("satsuma._commands", "cli"),
        ("satsuma.tools._runner", "tools"),
        ("satsuma.tools.mcp._server", "tools.mcp"),
        ("satsuma.tools.a2a._agent", "tools.a2a"),
        ("satsuma.tools.builtin", "tools.builtin"),
        ("satsuma.models._anthropic", "models"),
        ("satsuma._codec", None),
    ],
)
def test_room_of(module: str, room: str | None) -> None:
    assert room_of(module) == room
