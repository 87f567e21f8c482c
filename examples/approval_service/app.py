"""An HTTP service where people approve or deny the payments an agent wants to make.

Run it with ``python examples/approval_service/app.py --store approvals.db``, then::

    curl -s localhost:8000/runs -d '{"agent_id": "acme", "prompt": "pay bob 500"}'
    curl -s localhost:8000/approvals
    curl -s -X POST localhost:8000/approvals/RUN_ID/CALL_ID/approve
    curl -s localhost:8000/approvals/RUN_ID/CALL_ID/deny -d '{"reason": "not this month"}'
    curl -s localhost:8000/runs/RUN_ID

The ``payments`` agent has a ``transfer`` tool: a transfer over 100 EUR waits for a
person (a policy hook answers ``satsuma.Ask``), one up to 100 EUR runs at once. With no
approver, a run that reaches a transfer to decide ends ``awaiting_approval``; its pending
calls are in the SQLite store, so they outlive the service. Once every pending call of a
run is decided, the service resumes it with ``agent.resume(run_id, decisions=...)``.

The app is a hand-written ASGI app served by hypercorn's trio worker, as in
examples/service; the agents (one per ``agent_id``) are children of a supervisor. SIGTERM
or SIGINT stops the service gracefully. With ANTHROPIC_API_KEY set the agents use the
Anthropic API; without it, a loopback ``MessagesServer`` that reads ``pay NAME AMOUNT``
and ``balance`` in the prompt as tool calls. See README.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeAlias, final

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

import satsuma
from satsuma.store import PendingApproval, RunRecord, SQLiteStore
from satsuma.testing import MessagesServer, Reply

logger = logging.getLogger("approvals")

LIMIT = 100  # EUR: a transfer over this waits for a person
OPENING_BALANCE = 10_000
MAX_BODY_BYTES = 64 * 1024
AGENT_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


# --- the agent ------------------------------------------------------------------------


def _paid(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    return sum(int(line.split(" ", 1)[0]) for line in ledger.read_text().splitlines())


@satsuma.tool
async def transfer(to: str, amount: int, ctx: satsuma.ToolContext) -> str:
    """Send money from the company account.

    Args:
        to: Who gets it (an account name).
        amount: How much, in whole euros.
    """
    if amount < 1:
        raise satsuma.ToolError(f"amount must be 1 EUR or more, got {amount}")
    # The ledger is the payments made: one line each, which the tests count.
    ledger = trio.Path(ctx.extra["ledger"])
    async with await ledger.open("a") as file:
        await file.write(f"{amount} EUR to {to} ({ctx.tool_use_id})\n")
    logger.info("paid %d EUR to %s", amount, to)
    return f"sent {amount} EUR to {to}"


@satsuma.tool
async def balance(ctx: satsuma.ToolContext) -> str:
    """The company account's balance, in euros."""
    paid = await trio.to_thread.run_sync(_paid, Path(ctx.extra["ledger"]))
    return f"the balance is {OPENING_BALANCE - paid} EUR"


class OverTheLimit(satsuma.ToolHook):
    """Asks a person about each transfer over ``limit`` euros; the others just run."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def before_call(self, call: satsuma.ToolCall, ctx: satsuma.ToolContext) -> satsuma.HookDecision:
        amount = call.input.get("amount")
        if call.name == "transfer" and isinstance(amount, int) and amount > self.limit:
            return satsuma.Ask(f"{amount} EUR is over the {self.limit} EUR limit")
        return None


class Payments(satsuma.Agent):
    name = "payments"
    system = (
        "You make payments from the company account with the transfer tool, as asked, "
        "and say briefly what was done. A denied transfer is not made: say so."
    )
    tools = [transfer, balance]
    hooks = [OverTheLimit(LIMIT)]
    max_iterations = 6


# --- the model ------------------------------------------------------------------------

PAY = re.compile(r"\bpay (\w+) (-?\d+)", re.IGNORECASE)
BALANCE = re.compile(r"\bbalance\b", re.IGNORECASE)


def _text(content: object) -> str:
    """The text of a message's or a tool result's content (a string or text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(block.get("text", "") for block in content if isinstance(block, dict))
    return ""


def offline_answer(body: dict[str, Any]) -> Reply | str:
    """The loopback API's answer (a MessagesServer script function): ``pay NAME AMOUNT``
    and ``balance`` in a prompt become tool calls, and tool results are read back."""
    content = body["messages"][-1]["content"]
    blocks = content if isinstance(content, list) else []
    results = [block for block in blocks if block.get("type") == "tool_result"]
    if results:
        return "Done: " + "; ".join(_text(block.get("content")) for block in results)
    prompt = _text(content)
    calls = [
        # Ids unique across restarts: a conversation lives longer than this process.
        satsuma.ToolCall(
            f"toolu_{uuid.uuid4().hex[:16]}", "transfer", {"to": to, "amount": int(amount)}
        )
        for to, amount in PAY.findall(prompt)
    ]
    if BALANCE.search(prompt):
        calls.append(satsuma.ToolCall(f"toolu_{uuid.uuid4().hex[:16]}", "balance", {}))
    if not calls:
        return "I make payments ('pay bob 20') and tell the balance ('balance')."
    return Reply(tool_calls=calls)


@asynccontextmanager
async def open_model() -> AsyncIterator[satsuma.Model]:
    """The Anthropic API if ANTHROPIC_API_KEY is set, else a loopback MessagesServer."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        async with satsuma.AnthropicModel() as model:
            logger.info("model: the Anthropic API")
            yield model
        return
    async with MessagesServer(then=offline_answer, keep_requests=0) as server:
        logger.info("model: offline, a MessagesServer at %s", server.base_url)
        # Retries are for a real API's hiccups; this one has none to offer.
        yield satsuma.AnthropicModel(server.client(), max_retries=0)


# --- the agents -----------------------------------------------------------------------


@final
class Agents:
    """One supervised agent per agent id (a conversation), started on first use.

    ``using`` hands out an agent for one run or resume at a time. That is what keeps a
    new run from going past a paused one: the check that the agent has no run awaiting
    approval and the run itself happen under one lock (a run started past a paused run
    would answer its pending calls "no decision was made" for good).
    """

    def __init__(
        self,
        supervisor: satsuma.Supervisor,
        model: satsuma.Model,
        store: SQLiteStore,
        ledger: Path,
    ) -> None:
        self.supervisor = supervisor
        self.model = model
        self.store = store
        self.ledger = ledger
        self._handles: dict[str, satsuma.AgentHandle] = {}
        self._locks: dict[str, trio.Lock] = {}

    @asynccontextmanager
    async def using(self, agent_id: str) -> AsyncIterator[satsuma.AgentHandle]:
        async with self._locks.setdefault(agent_id, trio.Lock()):
            handle = self._handles.get(agent_id)
            if handle is None:
                handle = await self.supervisor.start_child(
                    Payments,
                    id=agent_id,
                    model=self.model,
                    store=self.store,
                    agent_id=agent_id,
                    context={"ledger": str(self.ledger)},
                )
                self._handles[agent_id] = handle
            yield handle


# --- HTTP -----------------------------------------------------------------------------

# ASGI messages are plain dicts; Any keeps this app to the ASGI spec (see examples/service).
Scope: TypeAlias = Mapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Any]]
Send: TypeAlias = Callable[[Any], Awaitable[None]]
Answer: TypeAlias = tuple[int, dict[str, Any]]
Decision: TypeAlias = satsuma.Approve | satsuma.Deny


class Refused(Exception):
    """The request cannot be served as sent; answered with ``status`` and the problem."""

    def __init__(self, status: int, problem: str) -> None:
        self.status = status
        self.problem = problem
        super().__init__(problem)


@attrs.define(eq=False)
class Job:
    """A run or a resume, carried out by the service whether or not its requester still
    waits: a person who closes the page must not cancel a payment halfway."""

    done: trio.Event = attrs.Factory(trio.Event)
    answer: Answer | None = None


def _decision_name(decision: Decision) -> Literal["approved", "denied"]:
    return "approved" if isinstance(decision, satsuma.Approve) else "denied"


def _decided_text(decision: Decision) -> str:
    by = f" by {decision.by}" if decision.by is not None else ""
    return f"{_decision_name(decision)}{by}"


def _pending_json(
    run_id: str, agent_id: str, call: PendingApproval | satsuma.PendingCall
) -> dict[str, Any]:
    call_id = call.tool_use_id if isinstance(call, PendingApproval) else call.id
    return {
        "run_id": run_id,
        "agent_id": agent_id,
        "call_id": call_id,
        "tool": call.tool_name,
        "input": call.input,
        "reason": call.reason,
    }


def _result_answer(agent_id: str, result: satsuma.RunResult) -> Answer:
    body: dict[str, Any] = {"run_id": result.run_id, "agent_id": agent_id, "status": result.status}
    if result.status == "awaiting_approval":
        body["pending"] = [_pending_json(result.run_id, agent_id, call) for call in result.pending]
    else:
        body["output"] = result.output
    if result.error is not None:
        body["error"] = result.error
    # A failed run is the model API refusing or failing: a bad gateway.
    return (502 if result.status == "failed" else 200), body


@final
class ApprovalService:
    """The ASGI app: runs, and the decisions on their pending calls.

    Decisions arrive one call at a time. Those of a run are kept (in memory) until every
    pending call of the run has one; the decision that completes the set resumes the run.
    A call decided twice, or a run decided while it is being resumed, is a 409: the first
    decision stands, and a call never runs twice (``resume`` claims the run atomically in
    the store, which also holds against another process deciding the same run).
    """

    def __init__(self, store: SQLiteStore, agents: Agents, jobs: trio.Nursery) -> None:
        self.store = store
        self.agents = agents
        self.jobs = jobs
        # Bookkeeping of decisions, one request at a time (a few quick store reads each).
        self._deciding = trio.Lock()
        self._decided: dict[str, dict[str, Decision]] = {}
        self._resuming: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: the server closes them
        try:
            status, body = await self.route(scope["method"], scope["path"], receive)
        except Refused as exc:
            status, body = exc.status, {"error": exc.problem}
        data = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def route(self, method: str, path: str, receive: Receive) -> Answer:
        parts = path.strip("/").split("/")
        match parts:
            case ["runs"]:
                _allow(method, "POST", path)
                return await self.start_run(await _read_json(receive))
            case ["runs", run_id]:
                _allow(method, "GET", path)
                return await self.get_run(run_id)
            case ["approvals"]:
                _allow(method, "GET", path)
                return 200, {"approvals": await self.approvals()}
            case ["approvals", run_id, call_id, "approve" | "deny" as verb]:
                _allow(method, "POST", path)
                payload = await _read_json(receive, empty_is={})
                return await self.decide(run_id, call_id, verb, payload)
        raise Refused(404, f"no such path: {path}")

    # --- runs ---------------------------------------------------------------------------

    async def start_run(self, payload: object) -> Answer:
        """``POST /runs {"agent_id", "prompt"}``: run the agent, answer how it ended."""
        if not isinstance(payload, dict):
            raise Refused(400, 'the body must be a JSON object: {"agent_id": ..., "prompt": ...}')
        agent_id, prompt = payload.get("agent_id"), payload.get("prompt")
        if not isinstance(agent_id, str) or not AGENT_ID.fullmatch(agent_id):
            raise Refused(400, f"agent_id must match {AGENT_ID.pattern}, got: {agent_id!r}")
        if not isinstance(prompt, str) or not prompt.strip():
            raise Refused(400, "prompt must be a non-empty string")

        async def run() -> satsuma.RunResult:
            async with self.agents.using(agent_id) as handle:
                runs = await self.store.runs(agent_id)
                paused = [r.run_id for r in runs if r.status == "awaiting_approval"]
                if paused:
                    raise Refused(
                        409,
                        f"agent {agent_id} has run {paused[0]} awaiting approval: decide its "
                        "pending calls first (GET /approvals)",
                    )
                return await handle.run(prompt)

        logger.info("run on %s: %r", agent_id, prompt)
        return await self._carry_out(agent_id, run)

    async def get_run(self, run_id: str) -> Answer:
        """``GET /runs/{run_id}``: the run as stored, with its answer once it has one."""
        record = await self.store.get_run(run_id)
        if record is None:
            raise Refused(404, f"no run {run_id}")
        body: dict[str, Any] = {
            "run_id": run_id,
            "agent_id": record.agent_id,
            "status": record.status,
        }
        if record.status == "awaiting_approval":
            body["pending"] = [
                _pending_json(run_id, record.agent_id, call)
                for call in await self.store.pending_calls(run_id)
            ]
        elif record.status != "running":
            body["output"] = await self._stored_answer(record)
        if record.error is not None:
            body["error"] = record.error
        return 200, body

    async def _stored_answer(self, record: RunRecord) -> str:
        """The run's last assistant text, from the conversation in the store: a run's
        messages go from its prompt (``position``) to the next run's prompt."""
        if record.position is None:
            return ""
        later = [
            r.position
            for r in await self.store.runs(record.agent_id)
            if r.position is not None and r.position > record.position
        ]
        messages = await self.store.load_messages(record.agent_id)
        own = messages[record.position : min(later, default=len(messages))]
        texts = [
            block["text"]
            for message in own
            if message.role == "assistant"
            for block in message.content
            if block.get("type") == "text"
        ]
        return texts[-1] if texts else ""

    # --- approvals ----------------------------------------------------------------------

    async def approvals(self) -> list[dict[str, Any]]:
        """``GET /approvals``: every pending call of every paused run in the store, with
        the decision this service holds for it, if any."""
        listed = []
        for record in await self.store.runs_awaiting_approval():
            decided = self._decided.get(record.run_id, {})
            for call in await self.store.pending_calls(record.run_id):
                decision = decided.get(call.tool_use_id)
                listed.append(
                    {
                        **_pending_json(record.run_id, record.agent_id, call),
                        "prompt": record.prompt,
                        "decision": None if decision is None else _decision_name(decision),
                        "decided_by": None if decision is None else decision.by,
                    }
                )
        return listed

    async def decide(self, run_id: str, call_id: str, verb: str, payload: object) -> Answer:
        """``POST /approvals/{run_id}/{call_id}/approve`` (body ``{}`` or ``{"input":
        {...}}``, an edit) or ``.../deny`` (body ``{"reason": "..."}``)."""
        async with self._deciding:
            record = await self.store.get_run(run_id)
            if record is None:
                raise Refused(404, f"no run {run_id}")
            if run_id in self._resuming:
                raise Refused(409, f"run {run_id} is being resumed: its calls are decided")
            if record.status != "awaiting_approval":
                raise Refused(409, f"run {run_id} is not awaiting approval (it is {record.status})")
            pending = await self.store.pending_calls(run_id)
            call = next((call for call in pending if call.tool_use_id == call_id), None)
            if call is None:
                waiting = ", ".join(call.tool_use_id for call in pending)
                raise Refused(
                    404, f"run {run_id} has no pending call {call_id} (it waits on: {waiting})"
                )
            decided = self._decided.setdefault(run_id, {})
            if call_id in decided:
                raise Refused(
                    409,
                    f"call {call_id} of run {run_id} was {_decided_text(decided[call_id])} already",
                )
            async with self.agents.using(record.agent_id) as handle:
                decision = _decision(call, verb, payload, handle)
            decided[call_id] = decision
            logger.info("call %s of run %s %s", call_id, run_id, _decided_text(decision))
            undecided = [p.tool_use_id for p in pending if p.tool_use_id not in decided]
            if undecided:
                return 202, {
                    "run_id": run_id,
                    "call_id": call_id,
                    "decision": _decision_name(decision),
                    "decided_by": decision.by,
                    "status": "awaiting_approval",
                    "undecided": undecided,
                }
            decisions = self._decided.pop(run_id)
            self._resuming.add(run_id)

        async def resume() -> satsuma.RunResult:
            try:
                async with self.agents.using(record.agent_id) as handle:
                    return await handle.resume(run_id, decisions=decisions)
            except satsuma.RunNotAwaitingApproval as exc:
                # Another decision (another process) came first: it stands.
                raise Refused(409, str(exc)) from None
            except ValueError as exc:
                # Decisions resume refused (the agent's tools changed under an edit, say):
                # nothing ran, the run still waits, and its calls are to be decided again.
                raise Refused(400, f"{exc}; decide its calls again") from None
            finally:
                self._resuming.discard(run_id)

        logger.info("resuming run %s of %s", run_id, record.agent_id)
        return await self._carry_out(record.agent_id, resume)

    # --- jobs -----------------------------------------------------------------------------

    async def _carry_out(
        self, agent_id: str, work: Callable[[], Awaitable[satsuma.RunResult]]
    ) -> Answer:
        """Do ``work`` with the agent in a task of the service's own, and wait for it: if
        this request is cancelled (its client left), the run goes on all the same."""
        job = Job()
        self.jobs.start_soon(self._do, job, agent_id, work)
        await job.done.wait()
        assert job.answer is not None
        return job.answer

    async def _do(
        self,
        job: Job,
        agent_id: str,
        work: Callable[[], Awaitable[satsuma.RunResult]],
    ) -> None:
        try:
            result = await work()
            job.answer = _result_answer(agent_id, result)
            logger.info("run %s of %s: %s", result.run_id, agent_id, result.status)
        except Refused as exc:
            job.answer = exc.status, {"error": exc.problem}
        except satsuma.AgentCrashed as exc:
            job.answer = (
                503,
                {"error": f"agent {agent_id} crashed: {exc.cause!r}; it is being restarted"},
            )
        except satsuma.AgentUnavailable as exc:
            job.answer = 503, {"error": f"agent {agent_id} is unavailable: {exc.reason}"}
        except satsuma.SupervisorFailed as exc:  # the agent could not start
            job.answer = 503, {"error": f"agent {agent_id} could not start: {exc}"}
        except satsuma.StoreError as exc:
            job.answer = 503, {"error": f"the store failed: {exc}"}
        except Exception:
            logger.exception("a bug, serving %s", agent_id)
            job.answer = 500, {"error": "the service failed; its log says how"}
        finally:
            if job.answer is None:  # cancelled: the service is stopping
                job.answer = 503, {"error": "the service is stopping"}
            job.done.set()


def _decision(
    call: PendingApproval, verb: str, payload: object, handle: satsuma.AgentHandle
) -> Decision:
    """The decision a request's body makes, an edit checked by the call's agent as the
    model's input is."""
    if not isinstance(payload, dict):
        raise Refused(400, "the body must be a JSON object")
    # Who decides, if the request says: recorded in ApprovalDecided.decided_by and on the
    # call's telemetry span. A real service would take it from its authentication.
    by = payload.get("by")
    if by is not None and (not isinstance(by, str) or not by.strip()):
        raise Refused(400, f"by must be a non-empty string (who decides), got: {json.dumps(by)}")
    if verb == "deny":
        reason = payload.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise Refused(400, 'a denial needs a reason the model reads: {"reason": "..."}')
        return satsuma.Deny(reason.strip(), by=by)
    if "input" not in payload:
        return satsuma.Approve(by=by)
    edit = payload["input"]
    if not isinstance(edit, dict):
        raise Refused(
            400,
            f"input must be a JSON object (the call's edited arguments), got: {json.dumps(edit)}",
        )
    try:
        # As resume will check it: refused now, the person can correct it, and the
        # decisions already taken on the run's other calls stand.
        handle.check_edit(call, edit)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    return satsuma.Approve(input=edit, by=by)


def _allow(method: str, allowed: str, path: str) -> None:
    if method != allowed:
        raise Refused(405, f"{path} takes {allowed} only")


async def _read_json(receive: Receive, *, empty_is: object = None) -> object:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, "the client went away")
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, f"the body is over {MAX_BODY_BYTES} bytes")
        if not message.get("more_body", False):
            break
    if not body.strip() and empty_is is not None:
        return empty_is
    try:
        return json.loads(body)
    except ValueError as exc:
        raise Refused(400, f"the body is not valid JSON: {exc}") from None


async def _lifespan(receive: Receive, send: Send) -> None:
    # The store and the agents live outside the server (opened before it, closed after it
    # has drained), so there is nothing to do at startup or shutdown but to say so.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# --- the service ----------------------------------------------------------------------


async def run_service(options: argparse.Namespace) -> None:
    # Opened first, so that a signal during start-up also shuts down gracefully.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def until_signalled() -> None:
            async for signum in signals:
                logger.info(
                    "%s: finishing the requests in flight (at most %gs), then stopping",
                    signal.Signals(signum).name,
                    options.graceful_timeout,
                )
                return

        async with open_model() as model, SQLiteStore(options.store) as store:
            supervisor = satsuma.Supervisor("one_for_one", name="agents")
            async with supervisor, trio.open_nursery() as jobs:
                agents = Agents(supervisor, model, store, options.ledger)
                app = ApprovalService(store, agents, jobs)
                config = Config()
                config.bind = [f"{options.host}:{options.port}"]
                config.graceful_timeout = options.graceful_timeout
                config.errorlog = logging.getLogger("hypercorn.error")  # into the one log
                async with trio.open_nursery() as server:
                    binds = await server.start(
                        partial(serve, app, config, shutdown_trigger=until_signalled, mode="asgi")
                    )
                    for bind in binds:
                        logger.info("listening on %s", bind)
                # The server has drained. A job whose requester left may still be going:
                # it gets the same grace, then is cancelled (its run ends cancelled).
                jobs.cancel_scope.deadline = trio.current_time() + options.graceful_timeout
    logger.info("stopped")


def parse_options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    parser.add_argument(
        "--store",
        type=Path,
        default=Path("approvals.db"),
        help="the SQLite file of conversations, runs and pending calls",
    )
    parser.add_argument(
        "--ledger",
        type=Path,
        default=Path("ledger.txt"),
        help="where transfers are written, one line each",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=10.0,
        help="seconds to finish requests in flight after SIGTERM or SIGINT",
    )
    return parser.parse_args(argv)


def main() -> None:
    options = parse_options()
    # One log, on stdout, for the service, hypercorn and satsuma alike.
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per model call otherwise
    trio.run(run_service, options)


if __name__ == "__main__":
    main()
