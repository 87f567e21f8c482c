"""What a turn costs late in a long-lived agent's life, next to early in it.

One agent, one conversation, many runs in a row (1,000 by default), as a service that
keeps an agent for months would see it. Each run is a prompt, one call of a no-op tool
and a text answer: two model requests. The conversation grows by four messages a run, so
the last request carries some 4,000 messages.

The model is satsuma's ``MessagesServer`` (the Anthropic Messages API over loopback
HTTP), in a child process of its own, so that the CPU time measured here is the client's
alone. Two clients talk to it, one after the other, each with a fresh conversation:

- satsuma as the docs show it: an ``Agent`` class declaring ``model =
  "claude-sonnet-4-5"`` and the tool, opened with ``open_agent`` (its ``AnthropicModel``
  built from ``ANTHROPIC_BASE_URL``), ``agent.run(prompt)`` per run;
- the floor: a hand-written trio loop over one ``AsyncAnthropic`` client, streaming each
  response (``messages.stream``, as satsuma streams) and keeping the history as a list of
  dicts, the same request bodies as satsuma's (a prompt as a text block).

Both must send the whole history with every request (that is what the Messages API
takes), so both grow with it: the serialising of the request body, by the SDK and
httpx, is the floor's share. What is printed is the wall time and the client's CPU time
per run in the first and in the last window of runs, for each, and satsuma's CPU time
beyond the floor's in each window: flat when satsuma's own per-turn work does not
depend on the history's length.

Figures are printed, never asserted: the exit status is 0 whatever they are (it is not
0 when the benchmark itself goes wrong, e.g. a run did not complete).

    python benchmarks/long_lived.py [--quick] [--runs N]

``--quick`` uses tiny sizes so that a test can exercise the harness in a moment.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from _harness import header, table

from satsuma import Agent, open_agent, tool
from satsuma.testing import MessagesServer, Reply

MODEL = "claude-sonnet-4-5"
MAX_TOKENS = 1024
PROMPT_PADDING = "x" * 200  # a prompt of some 210 characters, as a person would type
ANSWER = "Done: the note is filed. " * 4


def _respond(body: dict[str, Any]) -> Reply:
    """A tool call for a new prompt; a text answer once the tool's result is in."""
    last = body["messages"][-1]
    content = last["content"]
    if isinstance(content, list) and any(block.get("type") == "tool_result" for block in content):
        return Reply(text=ANSWER)
    return Reply(tool_calls=[("noop", {"n": 1})])


async def _serve(port_file: str) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        server.requests.clear()  # a long life's bodies would otherwise all be kept
        return _respond(body)

    # Never exhausted in a benchmark's lifetime; each item is the same function.
    server = MessagesServer([respond] * 1_000_000)
    async with server:
        await trio.Path(port_file + ".part").write_text(server.base_url, encoding="utf-8")
        os.replace(port_file + ".part", port_file)
        await trio.sleep_forever()


async def _noop(n: int) -> str:
    return "ok"


@tool
async def noop(n: int) -> str:
    """Does nothing.

    Args:
        n: A number.
    """
    return "ok"


class Notes(Agent):
    name = "notes"
    model = MODEL
    tools = [noop]


async def _satsuma(runs: int, on_run: Callable[[int], None]) -> None:
    async with open_agent(Notes) as agent:
        for index in range(runs):
            result = await agent.run(f"note {index}: {PROMPT_PADDING}")
            if result.status != "completed" or result.output != ANSWER:
                raise SystemExit(f"satsuma run {index} ended {result.status}: {result.error}")
            on_run(index)


async def _hand_loop(runs: int, on_run: Callable[[int], None], *, fresh: bool = False) -> None:
    """A hand-written trio loop over one shared ``AsyncAnthropic``: one conversation that
    grows run after run, or with ``fresh`` a new one per run (as default_path.py opens an
    agent per conversation)."""
    import anthropic

    tools = [
        {
            "name": "noop",
            "description": "Does nothing.",
            "input_schema": {
                "type": "object",
                "properties": {"n": {"type": "integer", "description": "A number."}},
                "required": ["n"],
            },
        }
    ]
    client = anthropic.AsyncAnthropic()
    messages: list[dict[str, Any]] = []
    try:
        for index in range(runs):
            # The same body as satsuma sends (a prompt is a text block), so that what
            # differs is the client's own work.
            prompt = {"type": "text", "text": f"note {index}: {PROMPT_PADDING}"}
            if fresh:
                messages = []
            messages.append({"role": "user", "content": [prompt]})
            while True:
                async with client.messages.stream(
                    model=MODEL, max_tokens=MAX_TOKENS, messages=messages, tools=tools
                ) as stream:
                    message = await stream.get_final_message()
                content = [block.model_dump(exclude_none=True) for block in message.content]
                messages.append({"role": "assistant", "content": content})
                calls = [block for block in message.content if block.type == "tool_use"]
                if not calls:
                    break
                results: list[dict[str, Any]] = []

                async def call(block: Any, results: list[dict[str, Any]] = results) -> None:
                    try:
                        text, is_error = await _noop(**block.input), False
                    except Exception as exc:
                        text, is_error = f"Error: {exc}", True
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": block.id,
                            "content": text,
                            "is_error": is_error,
                        }
                    )

                async with trio.open_nursery() as nursery:
                    for block in calls:
                        nursery.start_soon(call, block)
                messages.append({"role": "user", "content": results})
            if message.content[0].text != ANSWER:  # type: ignore[union-attr]
                raise SystemExit(f"hand loop run {index} answered {message.content!r}")
            on_run(index)
    finally:
        await client.close()


class _Windows:
    """Wall and CPU time of the first and the last ``size`` runs."""

    def __init__(self, runs: int, size: int) -> None:
        self.runs, self.size = runs, size
        self.marks: dict[int, tuple[float, float]] = {}

    def start(self) -> None:
        self.marks[-1] = (time.perf_counter(), time.process_time())

    def on_run(self, index: int) -> None:
        if index in (self.size - 1, self.runs - self.size - 1, self.runs - 1):
            self.marks[index] = (time.perf_counter(), time.process_time())

    def per_run(self, first: int, last: int) -> tuple[float, float]:
        (wall0, cpu0), (wall1, cpu1) = self.marks[first], self.marks[last]
        return (wall1 - wall0) / self.size, (cpu1 - cpu0) / self.size

    def early(self) -> tuple[float, float]:
        return self.per_run(-1, self.size - 1)

    def late(self) -> tuple[float, float]:
        return self.per_run(self.runs - self.size - 1, self.runs - 1)


async def _measure(
    contender: Callable[[int, Callable[[int], None]], Awaitable[None]], runs: int, size: int
) -> _Windows:
    windows = _Windows(runs, size)
    windows.start()
    await contender(runs, windows.on_run)
    return windows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a test")
    parser.add_argument("--runs", type=int, default=1000, help="runs in the agent's life")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child process's mode
    args = parser.parse_args()
    if args.serve:
        trio.run(_serve, args.serve)
        return
    # The SDK warns, once per process, that a model id is near its end of life.
    warnings.simplefilter("ignore", DeprecationWarning)
    runs = 20 if args.quick else args.runs
    size = max(1, min(100, runs // 10))
    with _server() as base_url:
        os.environ["ANTHROPIC_BASE_URL"] = base_url
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        # A first short life of each warms the imports and the connection code.
        for contender in (_satsuma, _hand_loop):
            trio.run(_measure, contender, 2, 1)
        hand = trio.run(_measure, _hand_loop, runs, size)
        ours = trio.run(_measure, _satsuma, runs, size)
    lines = header(f"Long-lived agent: {runs} runs of one conversation (2 requests a run)")
    rows: list[list[str]] = []
    for label, windows in (("hand loop (floor)", hand), ("satsuma, model by name", ours)):
        (early_wall, early_cpu), (late_wall, late_cpu) = windows.early(), windows.late()
        rows.append(
            [
                label,
                _ms(early_wall),
                _ms(late_wall),
                _ms(early_cpu),
                _ms(late_cpu),
                f"{late_cpu / early_cpu:.1f}x",
            ]
        )
    early_extra = ours.early()[1] - hand.early()[1]
    late_extra = ours.late()[1] - hand.late()[1]
    rows.append(
        [
            "satsuma beyond the floor",
            "",
            "",
            _ms(early_extra),
            _ms(late_extra),
            f"{(late_extra - early_extra) * 1e3:+.2f} ms a run late in life",
        ]
    )
    lines += [
        "",
        f"per run, in runs 1-{size} (early) and {runs - size + 1}-{runs} (late):",
        "",
        *table(["", "wall early", "wall late", "CPU early", "CPU late", "CPU late/early"], rows),
    ]
    print("\n".join(lines))


class _server:
    """MessagesServer in a child process; its base URL while the block runs."""

    def __enter__(self) -> str:
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        port_file = os.path.join(self._dir.name, "url")
        self._process = subprocess.Popen([sys.executable, __file__, "--serve", port_file])
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the MessagesServer child did not start")
            time.sleep(0.05)
        with open(port_file, encoding="utf-8") as source:
            return source.read()

    def __exit__(self, *exc: object) -> None:
        self._process.kill()
        self._process.wait()
        self._dir.cleanup()


if __name__ == "__main__":
    main()
