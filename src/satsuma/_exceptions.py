"""Every exception satsuma raises on purpose.

The hierarchy::

    SatsumaError
    ├── ToolError              raised by a tool's own code: "this call failed, tell the model why"
    ├── ToolDefinitionError    a tool, toolset or runner was declared wrongly (also a TypeError)
    ├── AgentDefinitionError   an Agent subclass was declared wrongly (also a TypeError)
    ├── ModelError             a model call failed and retries could not cure it
    ├── BudgetExceeded         a model call would pass a budget (the run fails; names it)
    ├── ConfigurationError     what the environment or the setup lacks (a missing API key)
    ├── AgentUnavailable       the agent is not running (stopped, or restarting too long)
    ├── AgentCrashed           the agent crashed while serving this call
    ├── StoreError             the store cannot be opened, read or written (names the file)
    │   ├── StoreUnavailable   the database cannot be reached now, or did not answer in time
    │   ├── LeaseLost          a write under a lease this process no longer holds was refused
    │   ├── StoreUnreadable    a corrupt file, a row that does not decode, or a newer schema
    │   └── StoreClosed        closed, or its file was deleted or replaced while open
    ├── RunNotAwaitingApproval resume with decisions, on a run no longer paused (also a ValueError)
    ├── NoOutput               ``result.output`` of a typed run that did not complete (no answer)
    ├── MCPServerError         an MCP server could not start, or exited under ``serve``
    ├── A2AAgentError          a remote A2A agent's card could not be fetched or read
    └── SupervisorFailed       a supervisor gave up (restart intensity) or a child failed to start

Each exception keeps its data as attributes and builds its own message, so every fixed
text lives in exactly one place.
"""

from __future__ import annotations

from ._text import MESSAGE_LIMIT, describe_exception_text

# Every exception class, in the order of the hierarchy above, and the one helper that
# builds an exception for other modules (tests/test_exceptions.py keeps this complete).
__all__ = [
    "SatsumaError",
    "ToolError",
    "ToolDefinitionError",
    "AgentDefinitionError",
    "ModelError",
    "BudgetExceeded",
    "ConfigurationError",
    "AgentUnavailable",
    "AgentCrashed",
    "StoreError",
    "StoreUnavailable",
    "LeaseLost",
    "StoreUnreadable",
    "StoreClosed",
    "RunNotAwaitingApproval",
    "NoOutput",
    "MCPServerError",
    "A2AAgentError",
    "SupervisorFailed",
    "missing_api_key",
]


class SatsumaError(Exception):
    """Root of every exception satsuma raises on purpose."""


class ToolError(SatsumaError):
    """Raised inside a tool to report that the call could not be carried out.

    It is the exception form of returning ``("error", reason)``: the model receives
    ``Error: <reason>`` with ``is_error`` set, and the outcome's ``error_kind`` is
    ``"failed"``. Use it where returning is awkward (deep inside helper functions).

    Attributes:
        reason: The text the model reads after ``Error: ``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolDefinitionError(SatsumaError, TypeError):
    """A tool, toolset or runner was declared wrongly.

    Raised when the class is created, the function decorated or the runner built — never
    at the first call. The message names the tool and, where there is one, the parameter
    path, e.g. ``Tool ping: parameter config.port has invalid type 'int'. Valid types:
    string, integer, number, boolean, array, object``.

    Attributes:
        tool: The tool's name (or the class or function name when the name itself is
            what is wrong), or None for a problem that concerns no single tool.
        path: The parameter path (``config.port``, ``tags[]``), or None.
        problem: What is wrong, without the tool and path prefix.
    """

    def __init__(self, tool: str | None, problem: str, *, path: str | None = None) -> None:
        self.tool = tool
        self.path = path
        self.problem = problem
        where = f"parameter {path} " if path is not None else ""
        prefix = f"Tool {tool}: " if tool is not None else ""
        super().__init__(f"{prefix}{where}{problem}")


class AgentDefinitionError(SatsumaError, TypeError):
    """An Agent subclass was declared wrongly; raised when the class is created.

    Attributes:
        agent: The agent's name (or class name).
        problem: What is wrong.
    """

    def __init__(self, agent: str, problem: str) -> None:
        self.agent = agent
        self.problem = problem
        super().__init__(f"Agent {agent}: {problem}")


class ModelError(SatsumaError):
    """A model call failed, and retrying could not cure it (or it was not retryable).

    A run that meets one ends with status ``failed`` and this text as its ``error``; the
    agent itself goes on serving.

    Attributes:
        message: What the API (or the connection) said.
        status: The HTTP status, when there was one.
        retryable: Whether the failure was of a kind worth retrying (429, 529, 5xx, a
            dropped connection).
        retry_after: Seconds the API asked to wait, when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(f"{status}: {message}" if status is not None else message)


class BudgetExceeded(SatsumaError):
    """A model call would pass a budget (``satsuma.Budget``): it is not sent, and the run
    ends ``failed`` with this as its ``error`` (``BudgetExceeded: ...``). The agent goes
    on serving: the next run may fit (another run, the next UTC day).

    Attributes:
        budget: The budget's field: ``usd_per_run``, ``usd_per_agent`` or
            ``usd_per_agent_per_day``.
        source: Whose budget it is: ``agent`` (the class's ``budget``) or ``process``
            (``satsuma.set_budget``).
        limit: The limit, in USD.
        spent: What was spent under it, in USD, with what calls in flight hold.
        estimate: What the call could cost at most, in USD (its input estimated, its
            output at ``max_tokens``).
        agent_id: The agent whose call it was.
    """

    def __init__(
        self,
        budget: str,
        *,
        source: str,
        limit: float,
        spent: float,
        estimate: float,
        agent_id: str,
    ) -> None:
        self.budget = budget
        self.source = source
        self.limit = limit
        self.spent = spent
        self.estimate = estimate
        self.agent_id = agent_id
        whose = "the agent's budget" if source == "agent" else "the process's budget"
        super().__init__(
            f"{budget} of ${limit:.4f} ({whose}) would be passed by agent {agent_id!r}: "
            f"${spent:.4f} spent, and the next model call is estimated at up to "
            f"${estimate:.4f}"
        )


class ConfigurationError(SatsumaError):
    """Something the environment or the setup lacks, found before it could fail a run:
    no API key for a model declared by name, say. Not transient, so a supervisor does not
    restart a child over it: the child could not start.

    Attributes:
        problem: What is missing.
        fix: How to provide it.
    """

    def __init__(self, problem: str, fix: str) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}. {fix}")


_MISSING_KEY_FIX = (
    "Set it in the environment (export ANTHROPIC_API_KEY=sk-ant-..., or "
    "ANTHROPIC_AUTH_TOKEN for a bearer token), or pass a model to open_agent / "
    "start_child: model=AnthropicModel(client) with a client of your own, or "
    "satsuma.testing.ScriptedModel to run without the API"
)


def missing_api_key(agent: str | None = None, model: str | None = None) -> ConfigurationError:
    """The error for a model by name with no credentials in the environment."""
    who = ""
    if agent is not None:
        declared = f" declares its model by name ({model!r}) and" if model else ""
        who = f": agent {agent!r}{declared} needs an Anthropic API key"
    return ConfigurationError(f"ANTHROPIC_API_KEY is not set{who}", _MISSING_KEY_FIX)


class AgentUnavailable(SatsumaError):
    """The agent cannot take a request: it has stopped, or has not started.

    Attributes:
        agent: The agent's name.
        reason: Why it is unavailable.
    """

    def __init__(self, agent: str, reason: str) -> None:
        self.agent = agent
        self.reason = reason
        super().__init__(f"Agent {agent} is unavailable: {reason}")


def _describe(exc: BaseException) -> str:
    # The cause may be any exception of user code: its __str__ may raise, return no str
    # or be enormous, and the crash must still be said.
    return describe_exception_text(exc, limit=MESSAGE_LIMIT)


class AgentCrashed(SatsumaError):
    """The agent crashed while this call was in flight (or queued): the call will not be
    answered. A supervisor restarts the agent; the next call goes to the new one.

    Attributes:
        agent: The agent's name.
        cause: The exception that crashed it.
        agent_id: The agent's id (for a supervised agent, its child's), when known.
    """

    def __init__(self, agent: str, cause: BaseException, *, agent_id: str | None = None) -> None:
        self.agent = agent
        self.cause = cause
        self.agent_id = agent_id
        which = f"{agent} ({agent_id})" if agent_id is not None and agent_id != agent else agent
        super().__init__(f"Agent {which} crashed: {_describe(cause)}")


class SupervisorFailed(SatsumaError):
    """A supervisor stopped all its children and failed: more than ``max_restarts``
    restarts within ``within`` seconds, or a child that could not start. It fails to its
    own supervisor (which handles it as a crash of that child) or out of its ``async
    with``.

    Attributes:
        supervisor: The supervisor's name.
        child: The id of the child that caused it.
        cause: That child's last crash (None if it kept exiting normally).
        reason: ``"too many restarts"`` or ``"could not start"``.
        label: How the message names the supervisor (``the root supervisor`` for one
            left with the default name); ``supervisor NAME`` unless given.
        gave_up: False when only ``start_child`` or ``restart_child`` failed: the
            supervisor runs on with its other children, and the caller is told.
    """

    def __init__(
        self,
        supervisor: str,
        child: str,
        cause: BaseException | None,
        reason: str = "too many restarts",
        *,
        label: str | None = None,
        gave_up: bool = True,
    ) -> None:
        self.supervisor = supervisor
        self.child = child
        self.cause = cause
        self.reason = reason
        self.label = label if label is not None else f"supervisor {supervisor}"
        self.gave_up = gave_up
        last = _describe(cause) if cause is not None else "it kept exiting"
        who = self.label[:1].upper() + self.label[1:]
        if gave_up:
            super().__init__(f"{who} gave up ({reason}): child {child}: {last}")
        else:
            super().__init__(f"{who} could not start child {child} (it runs on): {last}")


class StoreError(SatsumaError):
    """The store cannot do what was asked. What was committed before stays committed.

    ``except StoreError`` catches every store failure. Its subclasses say what the
    caller does next: :class:`StoreUnavailable` (try again later), :class:`LeaseLost`
    (stop serving the agent), :class:`StoreUnreadable` (a person must repair, restore or
    upgrade; retrying does not help) and :class:`StoreClosed` (this store object is done).
    A plain ``StoreError`` is any other refusal: the file or database cannot be written
    (permissions, a full disk), an agent is held by another live owner, a misuse.

    Attributes:
        location: The store's file (or another description of where it is).
        problem: What went wrong.
    """

    def __init__(self, location: str, problem: str) -> None:
        self.location = location
        self.problem = problem
        super().__init__(f"Store {location}: {problem}")


class StoreUnavailable(StoreError):
    """The store cannot be reached now: the database refused or dropped the connection,
    or did not answer before the caller's deadline. Nothing of this call was committed
    unless the message says its commit may have landed; retrying later may succeed.
    """


class LeaseLost(StoreError):
    """A write under a lease that this process no longer holds was refused: another
    owner took the agent (its epoch is newer). The write did not happen; the caller stops
    serving the agent rather than retry.
    """


class StoreUnreadable(StoreError):
    """The store holds what this satsuma cannot read: the file is not a database or is
    corrupt, a stored row does not decode (the message names it; nothing is guessed in
    its place), or the schema is newer than this version knows. Retrying does not help:
    a person repairs or restores the data, or upgrades satsuma.
    """


class StoreClosed(StoreError):
    """This store object can no longer be used: it was closed (``aclose``), or it
    closed itself because its file was deleted, moved or replaced while it was open
    (the message names the path), so that nothing is written where no one will read
    it. Every later call raises it too; the caller stops. Open a new store to go on.
    """


class RunNotAwaitingApproval(SatsumaError, ValueError):
    """``resume(run_id, decisions=...)`` on a run that is not awaiting approval: another
    decision took it first (two people, two processes), it was resumed already, a later
    run went past it, or it never paused. Nothing was run for these decisions.

    A ``ValueError`` like resume's other refusals, but a conflict rather than a request
    to correct: an HTTP service answers it with 409, the others (a decision for an
    unknown call, an invalid edit) with 400.

    Attributes:
        run_id: The run.
        status: Its status when the decisions came (``completed``, ``cancelled``, ...),
            or None when another decision took it between the check and the claim.
    """

    def __init__(self, run_id: str, status: str | None = None) -> None:
        self.run_id = run_id
        self.status = status
        if status is None:
            why = "any more: another decision on it came first"
        else:
            why = f"(it is {status})"
        super().__init__(f"run {run_id} is not awaiting approval {why}")


class NoOutput(SatsumaError):
    """``result.output`` of a run of a typed agent (one with an ``output_type``) that did
    not complete: it has no typed answer. Check ``result.status`` first; ``result.error``
    says what ended the run (for a failed one, the last invalid answer and its errors),
    and ``result.messages`` holds what the model wrote.

    Attributes:
        run_id: The run.
        status: How it ended (``failed``, ``cancelled``, ``max_iterations``, ...).
        error: Its ``error``, if any.
    """

    def __init__(self, run_id: str, status: str, error: str | None) -> None:
        self.run_id = run_id
        self.status = status
        self.error = error
        why = f": {error}" if error else ""
        super().__init__(
            f"run {run_id} has no typed output: it ended {status}{why} "
            "(check result.status before reading result.output)"
        )


class MCPServerError(SatsumaError):
    """An MCP server could not start, or it exited.

    Out of ``async with MCPServer(...)`` only for a server that did not start; out of
    ``serve`` also for one that exited (a crash, which its supervisor restarts). Calls to
    a server that has gone do not raise: the model reads ``Error: MCP server NAME exited:
    ...``.

    Attributes:
        server: The server's name.
        problem: What went wrong (``did not start: ...``, ``exited: ...``).
    """

    def __init__(self, server: str, problem: str) -> None:
        self.server = server
        self.problem = problem
        super().__init__(f"MCP server {server} {problem}")


class A2AAgentError(SatsumaError):
    """A remote A2A agent could not be reached as a tool: its agent card could not be
    fetched, or what came back is not a card.

    Raised when an ``A2AAgent`` starts (``async with``, ``serve``, or the agent that lists
    it). Calls do not raise: a remote that fails mid-call answers the model with an error
    result that names the problem.

    Attributes:
        agent: The name the remote agent was given, or its URL.
        url: The URL that was asked.
        problem: What went wrong.
    """

    def __init__(self, agent: str, url: str, problem: str) -> None:
        self.agent = agent
        self.url = url
        self.problem = problem
        super().__init__(f"A2A agent {agent} at {url}: {problem}")
