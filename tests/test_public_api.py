"""The public names, and the direction of dependencies between layers."""

from __future__ import annotations

import ast
import importlib
import pickle
import subprocess
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import cattrs

import satsuma
import satsuma.testing
import satsuma.tools

EXPECTED_SATSUMA = {
    "ApprovalDecided", "ApprovalRequested", "Approve", "Approver", "Ask", "PendingCall",
    "Batched", "Deny", "ErrorKind", "EventSink", "FunctionTool", "HookDecision", "Interrupt", "NestedEvent",
    "Parallel", "Rewrite", "RunNotAwaitingApproval", "SatsumaError", "Sequential", "Strategy", "Tool", "ToolCall",
    "ToolCallEnd", "ToolCallStart", "ToolContext", "ToolDefinition", "ToolDefinitionError",
    "ToolError", "ToolEvent", "ToolHook", "ToolOutcome", "ToolProgress", "ToolResult",
    "ToolReturn", "ToolRunner", "ToolUpdate", "Toolset", "format_results", "get_errors", "has_errors", "tool",
    # agents
    "MODEL_ALIASES", "Agent", "AgentCrashed", "AgentDefinitionError", "SupervisorFailed", "StoreError", "MCPServerError", "AgentEvent", "AgentHandle", "AgentTool", "AnthropicModel", "OpenAIModel",
    "AgentUnavailable", "HistoryProcessor", "JsonLinesLog", "KeepAll", "KeepLastExchanges", "Message", "Model",
    "ModelError", "ConfigurationError", "ModelListener", "ModelRequest", "ModelResponse", "ModelRetry", "ModelLimits", "ModelPrices", "ModelWaitStart", "ModelWaitEnd", "set_model_limits", "set_prices", "NoOutput", "OutputDelta", "OutputRejected", "OutputValidated", "RunEnd",
    "RunResult", "RunStart", "RunStatus", "TextDelta", "ThinkingDelta", "TokenBudget",
    "TurnEnd", "Usage", "Verdict", "Verifier", "VerifyContext", "event_to_json", "open_agent",
    "Compaction", "ContextEditing", "ContextWindowExceeded", "set_context_window",
    "Budget", "BudgetExceeded", "BudgetWarning", "set_budget",
    # supervision
    "Backoff", "ChildCrashed", "ChildExited", "ChildInfo", "ChildRestarted", "ChildSpec",
    "ChildStarted", "RestartType", "Supervisor", "SupervisorEvent", "SupervisorGaveUp",
    "SupervisorStrategy",
}  # fmt: skip


def public_names(module: object) -> set[str]:
    # "@py_builtins" and friends: pytest rewrites asserts in installed plugins' packages.
    # Submodules (satsuma.cli, satsuma.tools, ...) appear as attributes once imported.
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith(("_", "@")) and not isinstance(value, types.ModuleType)
    }


def test_satsuma_exports_exactly_the_documented_names() -> None:
    assert set(satsuma.__all__) == EXPECTED_SATSUMA
    assert len(satsuma.__all__) == len(set(satsuma.__all__))
    for name in satsuma.__all__:
        assert getattr(satsuma, name) is not None
    # Nothing public is defined or imported into satsuma without being listed.
    assert public_names(satsuma) - set(satsuma.__all__) == set()


# What satsuma.tools exports for satsuma's other rooms (the agents, the supervisor, the
# cluster, the CLI) rather than for users: in neither its __all__ nor satsuma's.
TOOLS_FOR_OTHER_ROOMS = {
    "CheckedCalls", "Content", "DEFAULT_APPROVAL_TIMEOUT", "Deferral", "INTERRUPTED_TEXT",
    "ObjectNode", "Property", "StringNode", "as_strategy", "cancelled_text", "check_arguments",
    "checked_calls", "PreparedTools", "prepare_tools",
    "compile_hint", "content_text", "denied_text", "error_outcome", "gated", "structure",
    "structure_errors", "unstructure", "validate_common", "ToolServer",
}  # fmt: skip


def test_satsuma_lists_each_public_name_once_and_the_rest_is_made_from_it() -> None:
    # One list of names: the imports for tools and the shared kernel, and for the rooms
    # loaded on first use their own __all__ (star-imported under TYPE_CHECKING for type
    # checkers, looked up by __getattr__ at run time).
    tree = ast.parse(Path(satsuma.__file__).read_text())
    eager: list[str] = []
    starred: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            eager += [alias.name for alias in node.names if alias.asname == alias.name]
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "_typing.TYPE_CHECKING":
            for child in node.body:
                if isinstance(child, ast.ImportFrom):
                    assert [alias.name for alias in child.names] == ["*"]
                    starred.append(f"satsuma.{child.module}")
    assert sorted(starred) == sorted(satsuma._LATER)
    later = [name for room in satsuma._LATER for name in importlib.import_module(room).__all__]
    assert len(eager) == len(set(eager))
    assert len(later) == len(set(later))
    assert not set(eager) & set(later)
    assert set(eager) | set(later) == set(satsuma.__all__)
    assert set(satsuma.__all__) <= set(dir(satsuma))
    namespace: dict[str, object] = {}
    exec("from satsuma import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(satsuma.__all__)


def test_tools_exports_match_their_all() -> None:
    assert public_names(satsuma.tools) == set(satsuma.tools.__all__) | TOOLS_FOR_OTHER_ROOMS
    assert set(satsuma.tools.__all__) <= EXPECTED_SATSUMA
    assert not TOOLS_FOR_OTHER_ROOMS & (set(satsuma.tools.__all__) | set(satsuma.__all__))


def test_builtin_tools_exports() -> None:
    import satsuma.tools.builtin as builtin

    assert set(builtin.__all__) == {
        "Bash", "DateResolver", "EditFile", "HttpFetch", "ListDir", "PathEscapes", "ReadFile",
        "Search", "ShellIsolation", "WriteFile",
    }  # fmt: skip
    assert public_names(builtin) == set(builtin.__all__)
    tools = set(builtin.__all__) - {"PathEscapes", "ShellIsolation"}
    names = {getattr(builtin, name).name for name in tools}
    assert names == {
        "bash", "date_resolver", "edit_file", "http_fetch", "list_dir", "read_file", "search",
        "write_file",
    }  # fmt: skip


def test_mcp_exports() -> None:
    import satsuma.tools.mcp as mcp

    assert set(mcp.__all__) == {"MCPServer", "MCPServerError", "MCPTool"}
    assert public_names(mcp) == set(mcp.__all__)
    assert mcp.MCPServerError is satsuma.MCPServerError


def test_supervisor_exports_are_all_reexported_by_satsuma() -> None:
    import satsuma.supervisor

    assert public_names(satsuma.supervisor) == set(satsuma.supervisor.__all__)
    for name in satsuma.supervisor.__all__:
        assert getattr(satsuma, name) is getattr(satsuma.supervisor, name)


def test_agents_exports_are_all_reexported_by_satsuma() -> None:
    import satsuma.agents

    assert public_names(satsuma.agents) == set(satsuma.agents.__all__)
    assert set(satsuma.agents.__all__) <= EXPECTED_SATSUMA
    for name in satsuma.agents.__all__:
        assert getattr(satsuma, name) is getattr(satsuma.agents, name)


def test_testing_exports() -> None:
    assert set(satsuma.testing.__all__) == {
        "EventRecorder", "FakeModel", "Failure", "FunctionModel", "fake_reply", "MessagesServer", "ChatCompletionsServer", "Reply", "ScriptedModel",
        "check_conversation", "run_tool", "tool_call",
    }  # fmt: skip
    assert public_names(satsuma.testing) == set(satsuma.testing.__all__)


def test_cluster_exports_and_it_loads_only_when_used() -> None:
    import satsuma.cluster

    assert set(satsuma.cluster.__all__) == {
        "Cluster", "ClusterEvent", "EventLog", "EventStream", "EventsDropped", "Node",
        "QueuedRun", "QueuedRunStatus", "RunResumed",
    }  # fmt: skip
    assert public_names(satsuma.cluster) == set(satsuma.cluster.__all__)
    code = (
        "import sys, satsuma;"
        "print(sorted(m for m in sys.modules if m.startswith(('satsuma.cluster', 'psycopg'))));"
        "satsuma.cluster.Node;"
        "print('satsuma.cluster' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"]


PUBLIC_PACKAGES = (
    "satsuma",
    "satsuma.testing",
    "satsuma.tools",
    "satsuma.tools.builtin",
    "satsuma.tools.mcp",
    "satsuma.store",
    "satsuma.cluster",
    "satsuma.aio",
    "satsuma.evals",
)
SRC = Path(satsuma.__file__).parent


def test_public_packages_define_nothing_they_export() -> None:
    # Every exported name is defined in a private module of its room and re-exported
    # (its __module__ says where users import it from, so the source file is the check).
    for package in PUBLIC_PACKAGES:
        init = SRC.joinpath(*package.split(".")[1:], "__init__.py")
        defined = [
            node.name
            for node in ast.parse(init.read_text()).body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        # Only the module's own hooks (PEP 562) and their private helpers.
        assert [name for name in defined if not name.startswith("_")] == [], (package, defined)


def _exported(package: str) -> Iterator[tuple[str, object]]:
    module = importlib.import_module(package)
    for name in module.__all__:
        yield name, getattr(module, name)


def test_every_public_class_and_function_carries_its_public_path() -> None:
    # A name satsuma exports carries "satsuma" whichever package also exports it
    # (satsuma.store.StoreError is satsuma.StoreError); the others their own package's.
    for package in PUBLIC_PACKAGES:
        for name, obj in _exported(package):
            if not isinstance(obj, (type, types.FunctionType)):
                continue  # constants and type aliases (Literal, unions) have no path
            # The same object, that is: satsuma.evals.Verifier is not satsuma.Verifier.
            home = "satsuma" if getattr(satsuma, name, None) is obj else package
            assert (obj.__module__, obj.__qualname__, obj.__name__) == (home, name, name)
            if isinstance(obj, type):
                assert repr(obj) == f"<class '{home}.{name}'>"
                assert pickle.loads(pickle.dumps(obj)) is obj
    assert repr(satsuma.ToolResult(content="x")) == (
        "ToolResult(content='x', is_error=False, details=None)"
    )
    assert satsuma.tool.__module__ == "satsuma"


def test_names_carry_their_path_whichever_package_is_imported_first() -> None:
    # The cluster loads the agents itself: their names are moved by the agents room's
    # own __init__, before anyone reads satsuma.Agent.
    code = (
        "import satsuma.cluster, satsuma.agents, satsuma.supervisor;"
        "print(satsuma.agents.Agent.__module__, satsuma.supervisor.Supervisor.__module__,"
        " satsuma.cluster.Node.__module__, satsuma.agents.RunResult.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["satsuma", "satsuma", "satsuma.cluster", "satsuma"]


def test_a_traceback_names_the_public_path() -> None:
    code = "import satsuma\nraise satsuma.ToolError('no such order')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr.splitlines()[-1] == "satsuma.ToolError: no such order"


def test_type_hints_of_public_classes_resolve_at_their_public_path() -> None:
    # get_type_hints reads a class's string annotations in sys.modules[cls.__module__]:
    # cattrs, the tools' JSON schemas and the event decoder go through it.
    for package in PUBLIC_PACKAGES:
        for name, obj in _exported(package):
            if isinstance(obj, type):
                hints = typing.get_type_hints(obj, include_extras=True)
                assert not any(isinstance(hint, str) for hint in hints.values()), name
                if attrs.has(obj):
                    attrs.resolve_types(obj)

    @attrs.frozen
    class Mine(satsuma.ToolResult):
        note: Sequence[str] = ()

    assert typing.get_type_hints(Mine)["content"] == satsuma.ToolResult.__annotations__["content"]
    converter = cattrs.Converter()
    call = satsuma.ToolCall(id="t1", name="add", input={"a": 1})
    assert converter.structure(converter.unstructure(call), satsuma.ToolCall) == call


def test_public_exceptions_and_frozen_values_pickle() -> None:
    import satsuma.store

    # The exceptions whose constructor takes their message alone (the others never
    # unpickled: BaseException pickles its args, and theirs are built from several).
    for error in (
        satsuma.SatsumaError("x"),
        satsuma.ToolError("no such order"),
        satsuma.ModelError("Overloaded", status=529, retryable=True, retry_after=2.0),
        satsuma.ContextWindowExceeded("claude-sonnet-4-5", 210_000, 200_000, "estimate"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), vars(copy)) == (type(error), str(error), vars(error))
    values: list[object] = [
        satsuma.ToolResult(content="x", details={"k": 1}),
        satsuma.ToolCall(id="t1", name="add", input={"a": 1}),
        satsuma.Usage(input_tokens=3, output_tokens=4),
        satsuma.Message(role="user", content=[{"type": "text", "text": "hi"}]),
        satsuma.Deny("not today", by="ops"),
        satsuma.Approve(by="ops"),
        satsuma.ToolCallStart(tool_use_id="t1", tool_name="add", input={"a": 1}),
        satsuma.store.JournalEntry(run_id="r1", tool_use_id="t1", tool_name="add", input={}),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value


def test_importing_tools_loads_neither_agents_nor_supervisor() -> None:
    # `import satsuma` alone too: the agent names load on first use.
    code = (
        "import sys, satsuma, satsuma.tools, satsuma.tools.builtin;"
        "loaded = sorted(m for m in sys.modules if m.startswith(('satsuma.agents', 'satsuma.supervisor')));"
        "print(loaded)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_satsuma_loads_no_sdk_and_no_jsonschema() -> None:
    # They load when first needed: the SDK with the first model, jsonschema with the
    # first tool declared with a raw JSON Schema.
    code = (
        "import sys, satsuma, satsuma.tools, satsuma.tools.builtin;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'anthropic', 'jsonschema', 'mcp'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_package_is_typed() -> None:
    from importlib.resources import files

    assert files("satsuma").joinpath("py.typed").is_file()


def test_version_is_the_installed_metadata_and_written_once() -> None:
    """The version lives in pyproject.toml alone: ``satsuma.__version__`` reads it back
    from the installed package's metadata, so a release cannot bump one copy only."""
    import importlib.metadata
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parent.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    assert satsuma.__version__ == importlib.metadata.version("satsuma") == declared
    copies = [
        path
        for path in (root / "src").rglob("*.py")
        if f'"{declared}"' in path.read_text() or f"'{declared}'" in path.read_text()
    ]
    assert copies == []
