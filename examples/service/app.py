"""An HTTP service that answers prompts with a supervised pool of agents.

Run it with ``python examples/service/app.py --port 8000``, then::

    curl -s localhost:8000/ask -d '{"prompt": "Hello"}'
    curl -s localhost:8000/health

The app is a hand-written ASGI app served by hypercorn's trio worker. The agents are
children of a ``satsuma.Supervisor("one_for_one")``: an agent that crashes fails only the
request it was serving (503), and is restarted for the next one. SIGTERM or SIGINT stops
the service gracefully: no new connections, requests in flight finish (within
``--graceful-timeout``), then the agents are stopped.

With ANTHROPIC_API_KEY set the agents use the Anthropic API; without it, a loopback
``MessagesServer`` that echoes each prompt, and where a prompt containing ``CRASH``
crashes its agent and one containing ``SLOW`` is answered after a second. See README.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeAlias, final

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

import satsuma
from satsuma.testing import MessagesServer

logger = logging.getLogger("service")

CRASH_MARKER = "CRASH"
SLOW_MARKER = "SLOW"
SLOW_SECONDS = 1.0
MAX_BODY_BYTES = 64 * 1024
# MessagesServer plays a finite script; this many answers outlast any demo session.
OFFLINE_ANSWERS = 100_000


class Assistant(satsuma.Agent):
    name = "assistant"
    system = "You answer questions sent to an HTTP service, briefly."
    max_iterations = 4


# --- the model ------------------------------------------------------------------------


def _last_text(blocks: Sequence[Mapping[str, Any]] | str) -> str:
    """The last text of a message's content: the prompt, in the request's last message."""
    if isinstance(blocks, str):
        return blocks
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    return texts[-1] if texts else ""


@final
@attrs.define(eq=False)
class FaultInjectingModel:
    """Wraps a model; a prompt containing CRASH_MARKER makes it raise RuntimeError.

    Not a ModelError (which only fails the run): any other exception from a model is a
    bug, and crashes the agent, so that its supervisor restarts it.
    """

    inner: satsuma.Model

    async def respond(
        self, request: satsuma.ModelRequest, listener: satsuma.ModelListener
    ) -> satsuma.ModelResponse:
        if CRASH_MARKER in _last_text(request.messages[-1].content):
            raise RuntimeError(f"injected fault: the prompt contains {CRASH_MARKER}")
        return await self.inner.respond(request, listener)


async def offline_answer(body: dict[str, Any]) -> str:
    """The loopback API's answer to one request (a MessagesServer script function)."""
    prompt = _last_text(body["messages"][-1]["content"])
    if SLOW_MARKER in prompt:
        await trio.sleep(SLOW_SECONDS)
    return f"You said: {prompt}"


@asynccontextmanager
async def open_model(*, inject_faults: bool) -> AsyncIterator[satsuma.Model]:
    """The Anthropic API if ANTHROPIC_API_KEY is set, else a loopback MessagesServer
    (whose answers always go through FaultInjectingModel)."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        async with satsuma.AnthropicModel() as model:
            logger.info("model: the Anthropic API")
            yield FaultInjectingModel(model) if inject_faults else model
        return
    async with MessagesServer([offline_answer] * OFFLINE_ANSWERS) as server:
        logger.info("model: offline, a MessagesServer at %s", server.base_url)
        # Retries are for a real API's hiccups; this one has none to offer.
        yield FaultInjectingModel(satsuma.AnthropicModel(server.client(), max_retries=0))


# --- the pool -------------------------------------------------------------------------


class UnknownAgent(LookupError):
    """A request asked for an agent that the pool does not have."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        super().__init__(f"no agent {agent_id!r} in the pool")


class PoolBusy(Exception):
    """No agent was free for a request within the pool's queue timeout."""

    def __init__(self, waited: float) -> None:
        self.waited = waited
        super().__init__(f"no agent was free within {waited:g}s")


@attrs.define(eq=False)
class Member:
    """One agent of the pool and what the pool knows of it."""

    id: str
    handle: satsuma.AgentHandle
    busy: bool = False
    served: int = 0
    crashes: int = 0
    restarts: int = 0


@final
class AgentPool:
    """Routes each request to one free agent (the least used), or to the one asked for.

    An agent serves its mailbox one run at a time, and a crash fails every run queued in
    it; so the pool gives each agent one request at a time, and the others wait here,
    where a crash cannot reach them.
    """

    def __init__(self, *, queue_timeout: float) -> None:
        self.queue_timeout = queue_timeout
        self.supervisor = satsuma.Supervisor(
            "one_for_one", max_restarts=5, within=10.0, name="pool", events=self._observe
        )
        self.members: dict[str, Member] = {}
        self._released = trio.Event()

    async def add(self, agent_id: str, model: satsuma.Model) -> None:
        handle = await self.supervisor.start_child(Assistant, id=agent_id, model=model)
        self.members[agent_id] = Member(agent_id, handle)

    @asynccontextmanager
    async def checkout(self, agent_id: str | None = None) -> AsyncIterator[Member]:
        """The agent to serve one request, reserved until the block ends.

        Raises:
            UnknownAgent: ``agent_id`` names no agent of the pool.
            PoolBusy: no agent (or not the one asked for) was free in time.
        """
        if agent_id is not None and agent_id not in self.members:
            raise UnknownAgent(agent_id)
        member = None
        with trio.move_on_after(self.queue_timeout):
            while (member := self._free(agent_id)) is None:
                await self._released.wait()
        if member is None:
            raise PoolBusy(self.queue_timeout)
        member.busy = True
        try:
            yield member
        finally:
            member.busy = False
            member.served += 1
            self._released.set()
            self._released = trio.Event()

    def _free(self, agent_id: str | None) -> Member | None:
        candidates = [self.members[agent_id]] if agent_id is not None else self.members.values()
        free = [member for member in candidates if not member.busy]
        return min(free, key=lambda member: member.served) if free else None

    def health(self) -> dict[str, Any]:
        agents = [
            {
                "id": info.id,
                "state": info.state,
                "busy": self.members[info.id].busy,
                "served": self.members[info.id].served,
                "crashes": self.members[info.id].crashes,
                "restarts": self.members[info.id].restarts,
            }
            for info in self.supervisor.which_children()
            if info.id in self.members
        ]
        running = all(agent["state"] == "running" for agent in agents)
        return {"status": "ok" if running else "degraded", "agents": agents}

    def _observe(self, event: satsuma.SupervisorEvent) -> None:
        member = self.members.get(event.child_id)
        if member is None:
            return  # still starting: add() has not recorded it yet
        if isinstance(event, satsuma.ChildCrashed):
            member.crashes += 1  # satsuma.supervisor logs the crash itself
        elif isinstance(event, satsuma.ChildRestarted):
            member.restarts += 1
            logger.info("%s restarted", event.child_id)


@asynccontextmanager
async def open_agent_pool(
    model: satsuma.Model, *, size: int, queue_timeout: float
) -> AsyncIterator[AgentPool]:
    """Start ``size`` supervised agents; stop them when the block ends.

    Raises:
        SupervisorFailed: out of the block, if agents crash more often than the pool's
            supervisor allows (5 restarts in 10 s): the service goes down with it.
    """
    pool = AgentPool(queue_timeout=queue_timeout)
    async with pool.supervisor:
        for number in range(size):
            await pool.add(f"agent-{number}", model)
        yield pool


# --- HTTP -----------------------------------------------------------------------------

# ASGI messages are plain dicts. Servers type them more closely (hypercorn has a TypedDict
# per message); Any keeps this app to the ASGI spec rather than to one server's types.
Scope: TypeAlias = Mapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Any]]
Send: TypeAlias = Callable[[Any], Awaitable[None]]
Reply: TypeAlias = tuple[int, dict[str, Any]]


class BadRequest(Exception):
    """The request cannot be served as sent; answered with ``status``."""

    def __init__(self, status: int, problem: str) -> None:
        self.status = status
        self.problem = problem
        super().__init__(problem)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _preview(text: str, width: int = 40) -> str:
    return repr(text if len(text) <= width else text[: width - 3] + "...")


@final
class ServiceApp:
    """The ASGI app: ``POST /ask`` and ``GET /health``, JSON in and out."""

    def __init__(self, pool: AgentPool) -> None:
        self.pool = pool
        self.routes: dict[str, tuple[str, Callable[[Receive], Awaitable[Reply]]]] = {
            "/ask": ("POST", self.ask),
            "/health": ("GET", self.health),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: the server closes them
        route = self.routes.get(scope["path"])
        if route is None:
            status, body = 404, {"error": f"no such path: {scope['path']}"}
        elif scope["method"] != route[0]:
            status, body = 405, {"error": f"{scope['path']} takes {route[0]} only"}
        else:
            try:
                status, body = await route[1](receive)
            except BadRequest as exc:
                status, body = exc.status, {"error": exc.problem}
        data = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def ask(self, receive: Receive) -> Reply:
        """Run one agent on ``{"prompt": ..., "agent": optional id}``."""
        prompt, agent_id = _ask_fields(await _read_json(receive))
        try:
            async with self.pool.checkout(agent_id) as member:
                logger.info("ask -> %s: %s", member.id, _preview(prompt))
                status, body = await _run(member, prompt)
                logger.info("ask <- %s: %d %s", member.id, status, body.get("status", "error"))
                return status, body
        except UnknownAgent as exc:
            return 404, {"error": str(exc)}
        except PoolBusy as exc:
            return 503, {"error": f"all agents are busy: {exc}"}

    async def health(self, receive: Receive) -> Reply:
        return 200, self.pool.health()


async def _run(member: Member, prompt: str) -> Reply:
    try:
        # Each request stands alone, so the agent first forgets the one before. Otherwise
        # its conversation would grow for the life of the service, and after a crash the
        # restarted agent would resume it, the prompt that crashed it included.
        await member.handle.reset()
        result = await member.handle.run(prompt)
    except satsuma.AgentCrashed as exc:
        error = f"agent {member.id} crashed: {_describe(exc.cause)}; it is being restarted"
        return 503, {"agent": member.id, "error": error}
    except satsuma.AgentUnavailable as exc:
        return 503, {"agent": member.id, "error": f"agent {member.id} is unavailable: {exc.reason}"}
    body = {"agent": member.id, "output": result.output, "status": result.status}
    if result.status == "failed":
        # The model API refused or kept failing (a ModelError): a bad gateway.
        return 502, {**body, "error": result.error}
    return 200, body


async def _read_json(receive: Receive) -> object:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest(400, "the client went away")
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            raise BadRequest(413, f"the body is over {MAX_BODY_BYTES} bytes")
        if not message.get("more_body", False):
            break
    try:
        return json.loads(body)
    except ValueError:
        raise BadRequest(400, "the body is not valid JSON") from None


def _ask_fields(payload: object) -> tuple[str, str | None]:
    if not isinstance(payload, dict):
        raise BadRequest(400, 'the body must be a JSON object: {"prompt": "..."}')
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadRequest(400, "prompt must be a non-empty string")
    agent_id = payload.get("agent")
    if agent_id is not None and not isinstance(agent_id, str):
        raise BadRequest(400, "agent must be a string (an agent id) if given")
    return prompt, agent_id


async def _lifespan(receive: Receive, send: Send) -> None:
    # The pool lives outside the server (started before it, stopped after it has drained),
    # so there is nothing to do at startup or shutdown but to say so.
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

        async with (
            open_model(inject_faults=options.inject_faults) as model,
            open_agent_pool(
                model, size=options.pool_size, queue_timeout=options.queue_timeout
            ) as pool,
        ):
            config = Config()
            config.bind = [f"{options.host}:{options.port}"]
            config.graceful_timeout = options.graceful_timeout
            config.errorlog = logging.getLogger("hypercorn.error")  # into the one log below
            async with trio.open_nursery() as nursery:
                # serve returns once a signal came and the requests in flight are done
                # (or the graceful timeout cut them off): then the pool is stopped.
                binds = await nursery.start(
                    partial(
                        serve,
                        ServiceApp(pool),
                        config,
                        shutdown_trigger=until_signalled,
                        mode="asgi",
                    )
                )
                for bind in binds:
                    logger.info("listening on %s", bind)
    logger.info("stopped")


def parse_options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    parser.add_argument("--pool-size", type=int, default=4, help="how many agents")
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=10.0,
        help="seconds to finish requests in flight after SIGTERM or SIGINT",
    )
    parser.add_argument(
        "--queue-timeout",
        type=float,
        default=30.0,
        help="seconds a request may wait for a free agent",
    )
    parser.add_argument(
        "--inject-faults",
        action="store_true",
        help=f"with the Anthropic API too, crash the agent on a prompt containing {CRASH_MARKER}",
    )
    options = parser.parse_args(argv)
    if options.pool_size < 1:
        parser.error("--pool-size must be 1 or more")
    return options


def main() -> None:
    options = parse_options()
    # One log, on stdout, for the service, hypercorn and satsuma alike.
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per model call otherwise
    trio.run(run_service, options)


if __name__ == "__main__":
    main()
