"""What a long conversation costs, with prompt caching and without, and how often a
trimmed one rewrites its cache.

One agent, one conversation of many turns (100 by default). Each turn is a run: a
prompt, one call of a tool that returns 2 KB of text, and a short answer: two model
requests. The model is satsuma's ``MessagesServer`` (the Anthropic Messages API over
loopback HTTP, reached through the real ``AsyncAnthropic`` client), which bills cache
writes and reads by prefix as the API does (``MessagesServer.prompt_cache``; a token is
4 characters there).

Three conversations, the same turns:

- ``cache=None``: no breakpoint; every request's input is billed in full.
- ``cache="auto"`` (the default): breakpoints on the tools, the system prompt and the
  conversation, the last moving with it.
- ``cache="auto"`` with ``history = TokenBudget(limit)``, a limit the conversation
  passes several times, so that the trimmer must cut.

Input is priced as the API prices it, in input-token equivalents: uncached input at
1, 5-minute cache writes at 1.25, cache reads at 0.1. The bars (issue 33, item 8): the
cached conversation costs at most 20 % of the uncached one, and the trimmed one rewrites
its cached prefix at most once every 5 turns (a rewrite: a request that read from the
cache less than half of what the request before it sent).

A fourth conversation, of 1,000 turns by default, has ``history = Compaction(limit,
limit // 4)``: the bar (issue 33, item 8) is that every request stays within the limit
and that no run fails; it prints how many summaries were made. Then what compaction
saves: a conversation of 300 turns by default, with Compaction and sent whole (its
model's context window lifted for the comparison), billed input compared, summary calls
included. (Sent whole, 1,000 turns would send some 2.5 GB of request bodies: the
quadratic cost compaction removes, too slow to measure here.)
Then the budget figures (``_budget_figures``): how far a budget is overrun, by one run
and by concurrent spenders of one ledger, and the CPU time caching and cost accounting
add to a model call.

Figures are printed next to their bars, never asserted: the exit status is 0 whatever
they are (it is not 0 when the benchmark itself goes wrong).

    python benchmarks/cost.py [--quick] [--turns N] [--limit TOKENS] [--long-turns N]
        [--compare-turns N]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import itertools
import warnings
from typing import Any

import trio
from _budget_figures import budget_rows
from _harness import header, table

import satsuma
from satsuma import AnthropicModel, Compaction, TokenBudget, tool
from satsuma.testing import MessagesServer, Reply

WRITE, READ = 1.25, 0.1  # the API's 5-minute cache write and cache read prices, x input
RESULT = "0123456789abcdef " * 120  # some 2 KB
SYSTEM = "You keep a service's logbook: read the entries asked for, then summarise. " * 20


@tool
async def read_entry(index: int) -> str:
    """Read one entry of the logbook."""
    return f"entry {index}: {RESULT}"


SUMMARISE = "Summarise the logbook conversation so far."
SUMMARY = "The user had entries read one by one; each was routine. " * 8
_summary_calls = [0]  # how many summaries the server wrote


def _respond(body: dict[str, Any]) -> Reply:
    """A tool call for a new prompt; a short answer once the tool's result is in; a
    summary for Compaction's call."""
    if SUMMARISE in str(body.get("system")):
        _summary_calls[0] += 1
        return Reply(text=SUMMARY)
    content = body["messages"][-1]["content"]
    if any(block.get("type") == "tool_result" for block in content):
        return Reply(text="Noted: nothing unusual in that entry.")
    return Reply(tool_calls=[("read_entry", {"index": len(body["messages"])})])


class Logbook(satsuma.Agent):
    name = "logbook"
    system = SYSTEM
    tools = [read_entry]
    max_tokens = 1024


async def _converse(
    cache: str | None, turns: int, limit: int | None, compact: bool = False
) -> dict[str, float | int]:
    """One conversation of ``turns`` runs; its billed input and its cache rewrites."""
    attributes: dict[str, Any] = {"name": "logbook", "cache": cache}
    if limit is not None:
        attributes["history"] = (
            Compaction(limit, limit // 4, instructions=SUMMARISE) if compact else TokenBudget(limit)
        )
    agent_class = type("Logbook", (Logbook,), attributes)
    async with MessagesServer(then=_respond, keep_requests=0) as server:
        requests: list[satsuma.Usage] = []
        failed = 0
        summaries_before = _summary_calls[0]
        billed = satsuma.Usage()  # every call's, summary calls included
        async with satsuma.open_agent(agent_class, model=AnthropicModel(server.client())) as agent:

            def keep(event: satsuma.AgentEvent) -> None:
                if isinstance(event, satsuma.TurnEnd):  # one per model call
                    requests.append(event.usage)

            for turn in range(turns):
                result = await agent.run(f"Read the next entry ({turn}).", events=keep)
                failed += result.status != "completed"
                billed = billed + result.usage
        summaries = _summary_calls[0] - summaries_before
        uncached = sum(u.input_tokens for u in requests)
        written = sum(u.cache_creation_input_tokens for u in requests)
        read = sum(u.cache_read_input_tokens for u in requests)
        rewrites = sum(
            1
            for before, after in itertools.pairwise(requests)
            if after.cache_read_input_tokens < before.total_input_tokens / 2
        )
        return {
            "requests": len(requests),
            "failed": failed,
            "summaries": summaries,
            "billed": billed.input_tokens
            + WRITE * billed.cache_creation_input_tokens
            + READ * billed.cache_read_input_tokens,
            "total_input": uncached + written + read,
            "priced": uncached + WRITE * written + READ * read,
            "largest": max(u.total_input_tokens for u in requests),
            "rewrites": rewrites,
        }


def _verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a test")
    parser.add_argument("--turns", type=int, default=100, help="runs in the conversation")
    parser.add_argument("--limit", type=int, default=20_000, help="TokenBudget's max_tokens")
    parser.add_argument(
        "--long-turns", type=int, default=1_000, help="runs of the compacted conversation"
    )
    parser.add_argument(
        "--compare-turns", type=int, default=300, help="runs compacted and sent whole"
    )
    args = parser.parse_args()
    # The SDK warns, once per process, that a model id is near its end of life.
    warnings.simplefilter("ignore", DeprecationWarning)
    if args.quick:
        args.turns, args.limit, args.long_turns, args.compare_turns = 12, 6_000, 24, 24
    plain = trio.run(_converse, None, args.turns, None)
    cached = trio.run(_converse, "auto", args.turns, None)
    trimmed = trio.run(_converse, "auto", args.turns, args.limit)
    compacted = trio.run(_converse, "auto", args.long_turns, args.limit, True)
    shorter = trio.run(_converse, "auto", args.compare_turns, args.limit, True)
    # The same conversation sent whole: past the model's window, lifted for the figure.
    satsuma.set_context_window(Logbook.model, 100_000_000)
    whole = trio.run(_converse, "auto", args.compare_turns, None)
    share = cached["priced"] / plain["priced"]
    every = args.turns / max(1, trimmed["rewrites"])
    lines = header(
        f"Cost of a {args.turns}-turn conversation (2 KB tool results, "
        f"{plain['requests']} requests), priced in input tokens: uncached 1, "
        f"cache writes {WRITE}, cache reads {READ}"
    )
    rows = [
        [
            "cache=None (input tokens)",
            f"{plain['priced']:,.0f}",
            "",
            f"{plain['total_input']:,} tokens sent in all",
        ],
        [
            'cache="auto" (input tokens)',
            f"{cached['priced']:,.0f}",
            "",
            f"{cached['total_input']:,} tokens sent, breakpoints included",
        ],
        [
            'cache="auto" / cache=None',
            f"{share:.1%}",
            "<= 20 %",
            _verdict(share <= 0.20),
        ],
        [
            f"TokenBudget({args.limit}): turns per rewrite",
            f"{every:.1f}",
            ">= 5",
            f"{_verdict(every >= 5)}; {trimmed['rewrites']} rewrites, largest request "
            f"{trimmed['largest']:,} tokens (limit {args.limit:,}), "
            f"{trimmed['priced']:,.0f} priced",
        ],
        [
            f"Compaction({args.limit}), {args.long_turns} turns: largest request",
            f"{compacted['largest']:,}",
            f"<= {args.limit:,}",
            f"{_verdict(compacted['largest'] <= args.limit and not compacted['failed'])}; "
            f"{compacted['failed']} runs failed, {compacted['summaries']} summaries, "
            f"{compacted['requests']} requests",
        ],
        [
            f"Compaction / sent whole, {args.compare_turns} turns (billed input)",
            f"{shorter['billed'] / whole['billed']:.1%}",
            "",
            f"{shorter['billed']:,.0f} vs {whole['billed']:,.0f} priced input tokens, "
            f"{shorter['summaries']} summaries; sent whole, the largest request is "
            f"{whole['largest']:,} tokens",
        ],
    ]
    rows += budget_rows(quick=args.quick)
    lines += table(["figure", "measured", "bar", "notes"], rows)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
