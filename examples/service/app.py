"""An HTTP service that answers prompts with supervised agents, on ``satsuma.serve``.

Run it with ``python examples/service/app.py --port 8000``, then::

    curl -s localhost:8000/v1/agents/assistant/alice/runs -d '{"prompt": "Hello"}'

``Server`` serves ``Assistant`` over satsuma's API (and A2A, AG-UI, MCP). Each
conversation (``alice`` above) is an agent child of the server's supervisor: one that
crashes fails only its run, and is restarted for the next. SIGTERM or SIGINT drains the
server (requests in flight finish), then the process exits 0.

Without ANTHROPIC_API_KEY the model is a loopback ``MessagesServer`` that echoes each
prompt: ``CRASH`` in one crashes its agent, ``SLOW`` takes a second. See README.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, final

import attrs
import trio

import satsuma
from satsuma.serve import Server, TokenFileError
from satsuma.store import SQLiteStore
from satsuma.testing import MessagesServer

logger = logging.getLogger("service")

CRASH_MARKER = "CRASH"
SLOW_MARKER = "SLOW"
OFFLINE_ANSWERS = 100_000  # MessagesServer plays a finite script: this outlasts a demo


class Assistant(satsuma.Agent):
    name = "assistant"
    system = "You answer questions sent to an HTTP service, briefly."


def _last_text(blocks: Sequence[Mapping[str, Any]] | str) -> str:
    """The last text of a message's content: the prompt, in the request's last message."""
    if isinstance(blocks, str):
        return blocks
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    return texts[-1] if texts else ""


@final
@attrs.define(eq=False)
class FaultInjectingModel:
    """Wraps a model; a prompt containing CRASH_MARKER makes it raise RuntimeError: not
    a ModelError (which fails the run only) but a bug, which crashes the agent."""

    inner: satsuma.Model

    async def respond(
        self, request: satsuma.ModelRequest, listener: satsuma.ModelListener
    ) -> satsuma.ModelResponse:
        prompt = _last_text(request.messages[-1].content)
        logger.info("model <- %r", prompt)  # the test reads this: the run is in flight
        if CRASH_MARKER in prompt:
            raise RuntimeError(f"injected fault: the prompt contains {CRASH_MARKER}")
        return await self.inner.respond(request, listener)


async def offline_answer(body: dict[str, Any]) -> str:
    """The loopback API's answer to one request (a MessagesServer script function)."""
    prompt = _last_text(body["messages"][-1]["content"])
    if SLOW_MARKER in prompt:
        await trio.sleep(1.0)
    return f"You said: {prompt}"


@asynccontextmanager
async def open_model(*, inject_faults: bool) -> AsyncIterator[satsuma.Model]:
    """The Anthropic API if ANTHROPIC_API_KEY is set, else a loopback MessagesServer
    (always behind FaultInjectingModel, and without retries: it has no hiccups)."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        async with satsuma.AnthropicModel() as model:
            logger.info("model: the Anthropic API")
            yield FaultInjectingModel(model) if inject_faults else model
        return
    async with MessagesServer([offline_answer] * OFFLINE_ANSWERS) as server:
        logger.info("model: offline, a MessagesServer at %s", server.base_url)
        yield FaultInjectingModel(satsuma.AnthropicModel(server.client(), max_retries=0))


async def run_service(options: argparse.Namespace) -> None:
    # Opened first, so that a signal during start-up also drains rather than kills.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with AsyncExitStack() as stack:
            model = await stack.enter_async_context(open_model(inject_faults=options.inject_faults))
            store = None
            if options.store is not None:  # else a memory store: gone when the service stops
                store = await stack.enter_async_context(SQLiteStore(options.store))
            server = Server(
                [Assistant],
                store=store,
                model=model,
                tokens=options.token_file,  # None: no tokens, on loopback only
                host=options.host,
                port=options.port,
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                logger.info("listening on %s", server.url)
                async for signum in signals:
                    logger.info("%s: draining", signal.Signals(signum).name)
                    server.shutdown()  # serve() returns once the requests in flight end
                    break
    logger.info("stopped")


def parse_options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    parser.add_argument("--store", help="a SQLite file for conversations and runs")
    parser.add_argument("--token-file", help="bearer tokens (satsuma serve token create)")
    parser.add_argument(
        "--inject-faults", action="store_true", help="crash on CRASH with the Anthropic API too"
    )
    return parser.parse_args(argv)


def main() -> None:
    options = parse_options()
    # One log, on stdout, for the service, the server and satsuma alike.
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per model call otherwise
    try:
        trio.run(run_service, options)
    except* (ValueError, OSError, TokenFileError, satsuma.SupervisorFailed) as group:
        # A bad option, a port taken, agents crashing too often: one line, no traceback.
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup):
            error = error.exceptions[0]
        sys.exit(f"service: {error}")


if __name__ == "__main__":
    main()
