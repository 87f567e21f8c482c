"""The console at scale (issue 32, item 5): with 1,000 agents and 10,000 runs in the
store, how long each page takes to load in a real browser, and how long a run's event
takes to appear on its page once it happened.

The store is a SQLite file written first through the Store API: 1,000 conversations of
the served class ``support`` with 10 priced runs each, 20 runs paused on a call waiting
for approval, and one long conversation of 5,000 messages (100 runs, each a prompt, 24
tool calls with their results and journal entries, and an answer), whose page shows its
latest 50 messages and links to the earlier ones. A ``Server`` serves it on loopback (hypercorn's trio worker, in
this process) and Debian's headless Chromium (selenium) loads each page in rounds:

1. Page loads: each page's Navigation Timing ``duration`` (the request's start to the
   end of the load event, as the browser measured it), median and slowest over the
   rounds. Bar: every page within 300 ms.
2. Live events: a run's page is open while its tool waits; the tool is let go, and a
   ``MutationObserver`` in the page notes when the ``ToolCallEnd`` line appears
   (``Date.now()``, the same clock as this process's ``time.time()``). Bar: within
   500 ms.

Figures are printed, never asserted: the exit status is 0 whatever they are.

    python benchmarks/console.py [--quick] [--rounds N] [--agents A]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import trio
from _harness import header, median, table
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

import satsuma
from satsuma import Message, Usage
from satsuma.serve import Server
from satsuma.store import PendingApproval, RunRecord, SQLiteStore
from satsuma.testing import FunctionModel, Reply

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
RUNS_PER_AGENT = 10
WAITING = 20
LONG = "support/long-history"
LONG_MESSAGES = 5000
CALLS_PER_RUN = 24  # a run: its prompt, 24 calls and their results, its answer
PAGE_BAR_MS = 300.0
LIVE_BAR_MS = 500.0

T = TypeVar("T")
gate: dict[str, trio.Event] = {"open": trio.Event(), "holding": trio.Event()}


@satsuma.tool
async def hold() -> str:
    """Wait until the benchmark lets go."""
    gate["holding"].set()
    await gate["open"].wait()
    return "released"


class Support(satsuma.Agent):
    name = "support"
    tools = [hold]


def _model(request: satsuma.ModelRequest) -> str | Reply:
    last = request.messages[-1]
    if last.role == "user" and last.text == "hold":
        return Reply(tool_calls=[("hold", {})])
    return "done"


async def seed(store: SQLiteStore, agents: int) -> None:
    """``agents`` conversations of 10 runs each, and 20 runs waiting for approval."""
    now = time.time() - agents * RUNS_PER_AGENT
    usage = Usage(input_tokens=1200, output_tokens=150, cost_usd=0.0042)
    for number in range(agents):
        agent_id = f"support/customer-{number:05}"
        await store.write_tail(
            agent_id,
            0,
            [
                Message.user("Where is my order?"),
                Message(role="assistant", content=[{"type": "text", "text": "It ships tomorrow."}]),
            ],
        )
        for run in range(RUNS_PER_AGENT):
            at = now + number * RUNS_PER_AGENT + run
            run_id = f"run_seed_{number:05}_{run:02}"
            record = RunRecord(
                run_id=run_id, agent_id=agent_id, status="running", prompt="Where?", started_at=at
            )
            await store.start_run(record)
            await store.end_run(
                run_id, status="completed", ended_at=at + 0.5, usage=usage, error=None
            )
    for number in range(WAITING):
        run_id = f"run_waiting_{number:02}"
        record = RunRecord(
            run_id=run_id,
            agent_id=f"support/waiting-{number:02}",
            status="running",
            prompt="Refund me",
            started_at=time.time(),
        )
        await store.start_run(record)
        call = PendingApproval(
            run_id=run_id,
            tool_use_id=f"toolu_{number:02}",
            tool_name="refund",
            input={"amount": 10 + number},
            reason="refund requires approval",
        )
        await store.pause_run(run_id, [call], usage=Usage())


async def seed_long(store: SQLiteStore, messages: int) -> None:
    """One conversation of ``messages`` messages, with its runs and their journals."""
    per_run = 2 + 2 * CALLS_PER_RUN
    now = time.time() - messages
    for number in range(messages // per_run):
        run_id = f"run_long_{number:04}"
        position = number * per_run
        record = RunRecord(
            run_id=run_id,
            agent_id=LONG,
            status="running",
            prompt=f"Task {number}",
            started_at=now + number,
            position=position,
        )
        await store.start_run(record, start=position, messages=[Message.user(f"Task {number}")])
        tail = []
        for call in range(CALLS_PER_RUN):
            call_id = f"toolu_{number:04}_{call:02}"
            arguments = {"path": f"/srv/data/{number}/{call}.txt"}
            use = {"type": "tool_use", "id": call_id, "name": "read_file", "input": arguments}
            await store.call_started(run_id, call_id, "read_file", arguments)
            text = f"contents of file {call} of task {number}\n" * 5
            await store.call_finished(
                run_id, call_id, content=text, is_error=call % 7 == 6, error_kind=None
            )
            result = {"type": "tool_result", "tool_use_id": call_id, "content": text}
            tail += [
                Message(role="assistant", content=[use]),
                Message(role="user", content=[result]),
            ]
        tail.append(Message(role="assistant", content=[{"type": "text", "text": "Done."}]))
        await store.write_tail(LONG, position + 1, tail)
        await store.end_run(
            run_id, status="completed", ended_at=now + number + 0.5, usage=Usage(), error=None
        )


def chromium() -> WebDriver:
    missing = [str(path) for path in (CHROMIUM, DRIVER) if not path.exists()]
    if missing:
        sys.exit(
            f"needs Debian's Chromium: apt-get install -y chromium chromium-driver ({missing})"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(str(DRIVER)))


async def off(call: Callable[..., T], *args: Any) -> T:
    """A blocking selenium call, in a thread (the server answers meanwhile)."""
    return await trio.to_thread.run_sync(call, *args)


NAVIGATION = 'return performance.getEntriesByType("navigation")[0].toJSON();'
OBSERVE = """
window.__seen = null;
const list = document.getElementById("events");
new MutationObserver(() => {
  if (window.__seen === null && list.textContent.includes("ToolCallEnd")) {
    window.__seen = Date.now();
  }
}).observe(list, {childList: true, subtree: true});
"""


def load(driver: WebDriver, url: str) -> float:
    """Load ``url``; its Navigation Timing duration in ms."""
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(NAVIGATION)["loadEventEnd"] > 0)
    timing = driver.execute_script(NAVIGATION)
    return float(timing["loadEventEnd"] - timing["startTime"])


async def measure(agents: int, rounds: int) -> tuple[dict[str, list[float]], list[float]]:
    pages: dict[str, str] = {
        "overview": "/console",
        "agents, page 1": "/console/agents",
        f"agents, page {agents // 50}": f"/console/agents?page={agents // 50}",
        "agents, search": "/console/agents?q=customer-0042",
        "approvals (20 waiting)": "/console/approvals",
        "conversation (10 runs)": "/console/conversations/support/customer-00042",
        "conversation (5000 messages), latest page": f"/console/conversations/{LONG}",
        "conversation (5000 messages), earliest page": f"/console/conversations/{LONG}?start=0",
        "run (ended)": "/console/runs/run_seed_00042_09",
        "usage": "/console/usage",
        "cluster (none)": "/console/cluster",
    }
    loads: dict[str, list[float]] = {name: [] for name in pages}
    live: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        async with SQLiteStore(Path(folder) / "agents.db") as store:
            started = time.perf_counter()
            await seed(store, agents)
            await seed_long(store, LONG_MESSAGES)
            print(
                f"seeded {agents} agents, {agents * RUNS_PER_AGENT} runs and "
                f"{LONG_MESSAGES} messages of one conversation in "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
            server = Server([Support], store=store, port=0, model=FunctionModel(_model))
            driver = await off(chromium)
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(server.serve)
                    await off(load, driver, f"{server.url}/console")  # warm the browser
                    for number in range(rounds):
                        # Interleaved: each round loads every page once.
                        for name, path in pages.items():
                            loads[name].append(await off(load, driver, f"{server.url}{path}"))
                        live.append(await _live(server, driver, number))
                    server.shutdown()
            finally:
                await off(driver.quit)
    return loads, live


async def _live(server: Server, driver: WebDriver, number: int) -> float:
    """ms from the tool's end to its line on the open run page."""
    import httpx

    gate["open"], gate["holding"] = trio.Event(), trio.Event()
    async with httpx.AsyncClient(base_url=server.url) as client:
        run = (
            await client.post(
                f"/v1/agents/support/live-{number}/runs", json={"prompt": "hold", "wait": False}
            )
        ).json()
    await gate["holding"].wait()

    def open_page(driver: WebDriver) -> None:
        driver.get(f"{server.url}/console/runs/{run['run_id']}")
        WebDriverWait(driver, 30).until(
            lambda d: "ToolCallStart" in d.find_element(By.ID, "events").text
        )
        driver.execute_script(OBSERVE)

    await off(open_page, driver)
    released = time.time()
    gate["open"].set()

    def seen(driver: WebDriver) -> float:
        at = WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.__seen"))
        return float(at)

    return await off(seen, driver) - released * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 agents, 2 rounds")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--agents", type=int, default=1000)
    options = parser.parse_args()
    agents, rounds = (100, 2) if options.quick else (options.agents, options.rounds)
    loads, live = trio.run(measure, agents, rounds)
    lines = header(
        f"The console: {agents} agents, {agents * RUNS_PER_AGENT} runs in SQLite, {rounds} rounds",
        f"Chromium ({CHROMIUM})",
    )
    rows = []
    for name, samples in loads.items():
        slowest = max(samples)
        verdict = "target met" if slowest <= PAGE_BAR_MS else "target MISSED"
        rows.append(
            [name, f"{median(samples):.0f}", f"{slowest:.0f}", f"<= {PAGE_BAR_MS:.0f}", verdict]
        )
    slowest_live = max(live)
    rows.append(
        [
            "live event on the run page",
            f"{statistics.median(live):.0f}",
            f"{slowest_live:.0f}",
            f"<= {LIVE_BAR_MS:.0f}",
            "target met" if slowest_live <= LIVE_BAR_MS else "target MISSED",
        ]
    )
    lines += ["", *table(["page load (ms)", "median", "slowest", "bar", ""], rows)]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
