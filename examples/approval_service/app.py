"""An HTTP service where people approve or deny the payments an agent wants to make.

The ``payments`` agent's transfers over 100 EUR wait for a person (its policy hook answers
``satsuma.Ask``); the others run at once. ``satsuma.serve.Server`` serves it: runs, the
pending calls kept in the SQLite store (they outlive the service), decisions one call at a
time, the run resumed once all its pending calls are decided. Without ANTHROPIC_API_KEY
the model is a loopback ``MessagesServer`` that reads ``pay NAME AMOUNT`` and ``balance``
as tool calls. Transfers go to the file LEDGER names. See README.md::

    python examples/approval_service/app.py --store approvals.db
    curl -s localhost:8000/v1/agents/payments/acme/runs -d '{"prompt": "pay bob 500"}'
    curl -s localhost:8000/v1/approvals
    curl -s localhost:8000/v1/approvals/RUN_ID/CALL_ID -d '{"decision": "approve"}'
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import uuid
from typing import Any

import trio

import satsuma
from satsuma.serve import Server
from satsuma.store import SQLiteStore
from satsuma.testing import MessagesServer, Reply

logger = logging.getLogger("approvals")

LIMIT = 100  # EUR: a transfer over this waits for a person
OPENING_BALANCE = 10_000
# The bank, for this example: a file of the payments made, one line each.
LEDGER = trio.Path(os.environ.get("LEDGER", "ledger.txt"))


@satsuma.tool
async def transfer(to: str, amount: int, ctx: satsuma.ToolContext) -> str:
    """Send money from the company account.

    Args:
        to: Who gets it (an account name).
        amount: How much, in whole euros.
    """
    if amount < 1:
        raise satsuma.ToolError(f"amount must be 1 EUR or more, got {amount}")
    async with await LEDGER.open("a") as ledger:
        await ledger.write(f"{amount} EUR to {to} ({ctx.tool_use_id})\n")
    return f"sent {amount} EUR to {to}"


@satsuma.tool
async def balance() -> str:
    """The company account's balance, in euros."""
    lines = (await LEDGER.read_text()).splitlines() if await LEDGER.exists() else []
    return f"the balance is {OPENING_BALANCE - sum(int(line.split()[0]) for line in lines)} EUR"


class OverTheLimit(satsuma.ToolHook):
    """The policy: a person decides on each transfer over LIMIT euros; the others run."""

    def before_call(self, call: satsuma.ToolCall, ctx: satsuma.ToolContext) -> satsuma.HookDecision:
        amount = call.input.get("amount")
        if call.name == "transfer" and isinstance(amount, int) and amount > LIMIT:
            return satsuma.Ask(f"{amount} EUR is over the {LIMIT} EUR limit")
        return None


class Payments(satsuma.Agent):
    name = "payments"
    system = "You make the payments asked with the transfer tool; say what was done or denied."
    tools = [transfer, balance]
    hooks = [OverTheLimit()]
    max_iterations = 6


PAY = re.compile(r"\bpay (\w+) (-?\d+)", re.IGNORECASE)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(block.get("text", "") for block in content if isinstance(block, dict))


def offline_answer(body: dict[str, Any]) -> Reply | str:
    """The loopback API's answer to one request (a MessagesServer script function)."""
    content = body["messages"][-1]["content"]
    prompt = _text(content)  # a prompt's text; a tool result's blocks have none
    # Call ids unique across restarts: a conversation outlives this process.
    calls = [
        satsuma.ToolCall(f"toolu_{uuid.uuid4().hex[:16]}", "transfer", {"to": to, "amount": int(n)})
        for to, n in PAY.findall(prompt)
    ]
    if "balance" in prompt.lower():
        calls.append(satsuma.ToolCall(f"toolu_{uuid.uuid4().hex[:16]}", "balance", {}))
    if calls:
        return Reply(tool_calls=calls)
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        return "Done: " + "; ".join(_text(block.get("content", "")) for block in results)
    return "I make payments ('pay bob 20') and tell the balance ('balance')."


async def serve(options: argparse.Namespace, model: satsuma.Model | None) -> None:
    # Opened first, so that a signal during start-up drains too.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with SQLiteStore(options.store) as store, trio.open_nursery() as nursery:
            server = Server(
                [Payments],
                store=store,
                model=model,
                tokens=options.token_file,
                port=options.port,
            )
            await nursery.start(server.serve)
            logger.info("listening on %s", server.url)
            async for signum in signals:
                logger.info("%s: draining", signal.Signals(signum).name)
                server.shutdown()  # serve() returns once the requests in flight are done
                break
    logger.info("stopped")


async def main(options: argparse.Namespace) -> None:
    if os.environ.get("ANTHROPIC_API_KEY"):
        await serve(options, None)  # the class's own model, on the Anthropic API
        return
    async with MessagesServer(then=offline_answer, keep_requests=0) as api:
        logger.info("model: offline, a MessagesServer at %s", api.base_url)
        # Retries are for a real API's hiccups; this one has none to offer.
        await serve(options, satsuma.AnthropicModel(api.client(), max_retries=0))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Payments that wait for a person, over HTTP.")
    parser.add_argument("--store", default="approvals.db", help="the SQLite file")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port")
    parser.add_argument("--token-file", help="bearer tokens (satsuma serve token create)")
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per model call otherwise
    trio.run(main, parser.parse_args())
