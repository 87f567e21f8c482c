"""The public names, and the direction of dependencies between layers."""

from __future__ import annotations

import subprocess
import sys
import types

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
    "ModelError", "ConfigurationError", "ModelListener", "ModelRequest", "ModelResponse", "ModelRetry", "ModelLimits", "ModelWaitStart", "ModelWaitEnd", "set_model_limits", "NoOutput", "OutputDelta", "OutputRejected", "OutputValidated", "RunEnd",
    "RunResult", "RunStart", "RunStatus", "TextDelta", "ThinkingDelta", "TokenBudget",
    "TurnEnd", "Usage", "Verdict", "Verifier", "VerifyContext", "event_to_json", "open_agent",
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
    "Content", "DEFAULT_APPROVAL_TIMEOUT", "Deferral", "INTERRUPTED_TEXT", "ObjectNode",
    "Property", "StringNode", "as_strategy", "cancelled_text", "check_arguments",
    "compile_hint", "content_text", "denied_text", "error_outcome", "gated", "structure",
    "structure_errors", "unstructure", "validate_common",
}  # fmt: skip


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


def test_exported_objects_say_they_live_in_private_modules_of_their_layer() -> None:
    for name in satsuma.__all__:
        obj = getattr(satsuma, name)
        module = getattr(obj, "__module__", "")
        if module.startswith("satsuma"):
            leaf = module.rsplit(".", 1)[-1]
            assert leaf.startswith("_"), f"{name} is defined in public module {module}"


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
