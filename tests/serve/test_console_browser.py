"""The console in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium): logging in, the approval inbox's approve
(with an edited input) and deny, hostile text shown as text, a run's events appearing
live, the keyboard alone, every page with JavaScript off (steering and cancelling by
its forms), and the screenshots docs/console.md shows. No test skips when the browser is missing: it fails naming the install
command (``make test`` installs it, as root).

The server runs in the test's trio loop; each selenium call (blocking) runs in a
thread, so the loop answers the browser meanwhile. The browser quits when each test
ends, with its processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest
import serve_agents
import trio
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, NoSuchElementException
from selenium.common.exceptions import StaleElementReferenceException as StaleElement
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from serve_agents import Banker, scripted, two_transfers

import satsuma
from satsuma import Usage
from satsuma.serve import create_token
from satsuma.store import PostgresStore
from satsuma.testing import Reply

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
INSTALL = "apt-get install -y chromium chromium-driver"
HOSTILE = "<img src=x onerror=alert(1)>"
# A deadline for the browser to show what the test waits for, not a measure of speed.
WAIT = 30

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _reset() -> None:
    serve_agents.done.clear()
    serve_agents.gate["open"] = trio.Event()


def chromium(*, javascript: bool = True, size: tuple[int, int] | None = None) -> WebDriver:
    """A headless Chromium (failing, naming the install command, when it is missing)."""
    missing = [str(path) for path in (CHROMIUM, DRIVER) if not path.exists()]
    if missing:
        pytest.fail(
            f"the console's browser tests need Debian's Chromium ({', '.join(missing)} "
            f"missing): install it with `{INSTALL}` (make test does, as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    if size is not None:
        options.add_argument(f"--window-size={size[0]},{size[1]}")
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(DRIVER)))


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


async def off(call: Callable[..., T], *args: Any) -> T:
    """A blocking selenium call, in a thread (the server answers in the meantime)."""
    return await trio.to_thread.run_sync(call, *args)


def until(driver: WebDriver, check: Callable[[WebDriver], Any]) -> Any:
    # A check that reads an element while the page is replaced by the next one (a form
    # posted, a redirect followed) finds it stale: not yet, as an element not found is.
    return WebDriverWait(
        driver, WAIT, ignored_exceptions=(NoSuchElementException, StaleElement)
    ).until(check)


def no_browser_errors(driver: WebDriver) -> None:
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


@satsuma.tool
async def fetch_page(url: str) -> str:
    """Fetch a page (here: always a hostile one).

    Args:
        url: The page.
    """
    return HOSTILE


class Reader(satsuma.Agent):
    name = "reader"
    tools = [fetch_page]


async def test_login_then_approve_an_edited_input_and_deny_with_a_reason(
    serve_http: Any, browser: WebDriver, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.txt"
    token = create_token(path, name="ops", scopes=["run", "read", "approve"])
    model = scripted(*two_transfers("Done."))
    async with serve_http([Banker], model=model, tokens=path) as served:
        bearer = {"Authorization": f"Bearer {token}"}
        run = (
            await served.client.post(
                "/v1/agents/banker/pay/runs", json={"prompt": "Pay"}, headers=bearer
            )
        ).json()
        assert run["status"] == "awaiting_approval"

        def log_in(driver: WebDriver) -> str:
            driver.get(f"{served.url}/console/approvals")
            until(driver, lambda d: d.current_url.endswith("/console/login"))
            driver.find_element(By.ID, "token").send_keys(token)
            driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            until(driver, lambda d: "signed in as ops" in d.page_source)
            driver.get(f"{served.url}/console/approvals")
            return driver.find_element(By.TAG_NAME, "h1").text

        assert await off(log_in, browser) == "Approvals"
        first, second = (p["call_id"] for p in run["pending"])

        def refused_edit(driver: WebDriver, sent: str, saying: str) -> tuple[str, str]:
            field = driver.find_element(By.ID, f"call-{first}-input")
            field.clear()
            field.send_keys(sent)
            card = driver.find_element(By.ID, f"call-{first}")
            card.find_element(By.XPATH, ".//button[text()='Approve']").click()

            def alert(d: WebDriver) -> str | bool:
                # The previous refusal's alert may still be shown, then replaced: wait
                # for the one saying this refusal's problem.
                text = d.find_element(By.CSS_SELECTOR, f"#call-{first} [role=alert]").text
                return text if saying in text else False

            shown = WebDriverWait(
                driver, WAIT, ignored_exceptions=(NoSuchElementException, StaleElement)
            ).until(alert)
            kept = driver.find_element(By.ID, f"call-{first}-input").get_attribute("value")
            # The 400 the refusal answers with is the only error the browser notes.
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert all("status of 400" in e["message"] for e in errors), errors
            return str(shown), str(kept)

        # Refused in the page, with what was sent kept to correct: not JSON, then JSON
        # the tool's schema refuses (checked as resume checks it). Nothing ran.
        problem, kept = await off(refused_edit, browser, "{to: carol", "the input is not JSON")
        assert "the input is not JSON" in problem and kept == "{to: carol"
        schema = json.dumps({"to": "carol", "amount": "five"})
        problem, kept = await off(refused_edit, browser, schema, "amount")
        assert "amount" in problem and kept == schema
        assert serve_agents.done == []

        def approve_edited(driver: WebDriver) -> int:
            field = driver.find_element(By.ID, f"call-{first}-input")
            field.clear()
            field.send_keys(json.dumps({"to": "carol", "amount": 5}))
            card = driver.find_element(By.ID, f"call-{first}")
            card.find_element(By.XPATH, ".//button[text()='Approve']").click()
            until(driver, lambda d: not d.find_elements(By.ID, f"call-{first}"))
            return len(driver.find_elements(By.CSS_SELECTOR, "article.approval"))

        assert await off(approve_edited, browser) == 1

        def deny(driver: WebDriver) -> str:
            driver.find_element(By.ID, f"call-{second}-reason").send_keys("not to al")
            card = driver.find_element(By.ID, f"call-{second}")
            card.find_element(By.XPATH, ".//button[text()='Deny']").click()
            until(driver, lambda d: "No call is waiting" in d.page_source)
            no_browser_errors(driver)
            return str(driver.get_cookie("satsuma_console"))

        cookie = await off(deny, browser)
        assert "'httpOnly': True" in cookie and "'sameSite': 'Strict'" in cookie
        view = (await served.client.get(f"/v1/runs/{run['run_id']}", headers=bearer)).json()
        while view["status"] != "completed":
            await trio.sleep(0.01)
            view = (await served.client.get(f"/v1/runs/{run['run_id']}", headers=bearer)).json()
        # The tool ran exactly once, with the edited input; the denied call not at all.
        assert serve_agents.done == ["transfer 5 to carol"]
        messages = (
            await served.client.get("/v1/agents/banker/pay/messages", headers=bearer)
        ).json()["messages"]
        results = [b for m in messages for b in m["content"] if b["type"] == "tool_result"]
        assert len(results) == 2 and "not to al" in json.dumps(results[1])
        assert "sent 5 to carol" in json.dumps(results[0])


async def test_hostile_text_is_shown_and_never_run(serve_http: Any, browser: WebDriver) -> None:
    model = scripted(
        Reply(text=HOSTILE, tool_calls=[("fetch_page", {"url": "<script>alert(2)</script>"})]),
        f"Read it: {HOSTILE}",
    )
    agent_id = '"><svg onload=alert(3)>'
    async with serve_http([Reader], model=model) as served:
        run = await served.client.post(
            f"/v1/agents/reader/{quote(agent_id)}/runs", json={"prompt": HOSTILE}
        )
        assert run.json()["status"] == "completed"

        def look(driver: WebDriver) -> list[str]:
            driver.get(f"{served.url}/console/conversations/reader/{quote(agent_id, safe='')}")
            until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "pre.outcome"))
            with pytest.raises(NoAlertPresentException):
                driver.switch_to.alert.text  # noqa: B018 (no script ran: no alert)
            assert driver.find_elements(By.TAG_NAME, "img") == []
            assert driver.find_elements(By.TAG_NAME, "svg") == []
            assert driver.find_element(By.TAG_NAME, "h1").text == f"Conversation {agent_id}"
            no_browser_errors(driver)
            return [pre.text for pre in driver.find_elements(By.CSS_SELECTOR, "pre")]

        shown = await off(look, browser)
        assert HOSTILE in shown  # the tool's result, as text
        assert any("<script>alert(2)</script>" in text for text in shown)  # its input

        def lists(driver: WebDriver) -> list[str]:
            texts = []
            for path in ("/console", "/console/agents", "/console/usage"):
                driver.get(f"{served.url}{path}")
                until(driver, lambda d: d.find_elements(By.TAG_NAME, "h1"))
                with pytest.raises(NoAlertPresentException):
                    driver.switch_to.alert.text  # noqa: B018 (no script ran: no alert)
                assert driver.find_elements(By.TAG_NAME, "img") == []
                assert driver.find_elements(By.TAG_NAME, "svg") == []
                texts.append(driver.find_element(By.TAG_NAME, "main").text)
            no_browser_errors(driver)
            return texts

        overview, agents, _ = await off(lists, browser)
        assert agent_id in overview and agent_id in agents  # the tree, the latest runs


async def test_a_runs_events_appear_live(serve_http: Any, browser: WebDriver) -> None:
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with serve_http([Banker], model=model) as served:
        run = (
            await served.client.post(
                "/v1/agents/banker/live/runs", json={"prompt": "Go", "wait": False}
            )
        ).json()

        def open_page(driver: WebDriver) -> list[str]:
            driver.get(f"{served.url}/console/runs/{run['run_id']}")
            until(driver, lambda d: "ToolCallStart" in d.find_element(By.ID, "events").text)
            return [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#events li")]

        before = await off(open_page, browser)
        assert not any(line.startswith("RunEnd") for line in before)
        # The run goes on only now, while the page stays open.
        serve_agents.gate["open"].set()

        def watch(driver: WebDriver) -> tuple[str, list[str]]:
            until(driver, lambda d: "RunEnd" in d.find_element(By.ID, "events").text)
            no_browser_errors(driver)
            lines = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#events li")]
            return driver.find_element(By.ID, "status").text, lines

        status, lines = await off(watch, browser)
        assert status == "completed"
        assert any(line.startswith("ToolCallEnd slow ok: done a") for line in lines)
        assert lines[-1] == "RunEnd completed"
        ids = [int(line) for line in await off(_ids, browser)]
        assert ids == sorted(set(ids))  # each event once, in order
        async with httpx.AsyncClient(base_url=served.url) as client:
            ended = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert ended["output"] == "Finished."


def _ids(driver: WebDriver) -> list[str]:
    return [
        str(li.get_attribute("data-id"))
        for li in driver.find_elements(By.CSS_SELECTOR, "#events li")
    ]


ALL_LOCAL = """
const here = location.origin;
return performance.getEntriesByType("resource").map((entry) => entry.name)
    .filter((name) => !name.startsWith(here));
"""
UNLABELLED = """
return Array.from(document.querySelectorAll("input:not([type=hidden]), textarea"))
    .filter((field) => field.labels.length === 0).map((field) => field.outerHTML);
"""


async def test_every_page_loads_only_its_own_files_with_labelled_controls(
    serve_http: Any, browser: WebDriver
) -> None:
    async with serve_http([Banker], model=scripted(*two_transfers())) as served:
        run = (
            await served.client.post("/v1/agents/banker/look/runs", json={"prompt": "Pay"})
        ).json()
        pages = [
            "/console",
            "/console/agents",
            "/console/approvals",
            "/console/conversations/banker/look",
            f"/console/runs/{run['run_id']}",
            "/console/usage",
            "/console/cluster",
        ]

        def visit(driver: WebDriver) -> list[tuple[str, str, list[str], list[str]]]:
            seen = []
            for path in pages:
                driver.get(f"{served.url}{path}")
                until(
                    driver, lambda d: d.execute_script("return document.readyState") == "complete"
                )
                heading = driver.find_element(By.TAG_NAME, "h1").text
                # The stylesheet applied: it is a file of the package, not inline.
                assert (
                    driver.find_element(By.TAG_NAME, "header").value_of_css_property("display")
                    == "flex"
                )
                seen.append(
                    (
                        path,
                        heading,
                        driver.execute_script(ALL_LOCAL),
                        driver.execute_script(UNLABELLED),
                    )
                )
            no_browser_errors(driver)
            return seen

        for path, heading, foreign, unlabelled in await off(visit, browser):
            assert heading and not heading.startswith("Error"), path
            assert foreign == [], path
            assert unlabelled == [], path


FOCUSED = "return document.activeElement.outerHTML;"


async def test_the_inbox_is_used_with_the_keyboard_alone(
    serve_http: Any, browser: WebDriver
) -> None:
    async with serve_http([Banker], model=scripted(*two_transfers("Done."))) as served:
        run = (
            await served.client.post("/v1/agents/banker/keys/runs", json={"prompt": "Pay"})
        ).json()
        first = run["pending"][0]["call_id"]

        def approve_by_keyboard(driver: WebDriver) -> list[str]:
            driver.get(f"{served.url}/console/approvals")
            until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "article.approval"))
            body = driver.find_element(By.TAG_NAME, "body")
            focused = []
            # Tab from the top: the navigation's links, then each form's fields and
            # buttons, in order, each with a visible focus.
            for _ in range(40):
                body.send_keys(Keys.TAB)
                html = driver.execute_script(FOCUSED)
                focused.append(html)
                if html.startswith("<button") and "Approve" in html:
                    break
            active = driver.switch_to.active_element
            assert active.value_of_css_property("outline-style") == "solid"
            active.send_keys(Keys.ENTER)
            until(driver, lambda d: not d.find_elements(By.ID, f"call-{first}"))
            no_browser_errors(driver)
            return focused

        focused = await off(approve_by_keyboard, browser)
        assert focused[0].startswith('<a href="/console">')
        assert any(html.startswith("<textarea") for html in focused)
        assert focused[-1].startswith("<button") and "Approve" in focused[-1]
        pending = (await served.client.get("/v1/approvals")).json()["approvals"]
        assert [p["call_id"] for p in pending] == [run["pending"][1]["call_id"]]


async def test_every_page_reads_and_steers_with_javascript_off(serve_http: Any) -> None:
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Steered.", "Unused.")
    driver = chromium(javascript=False)
    try:
        async with serve_http([Banker], model=model) as served:
            run = (
                await served.client.post(
                    "/v1/agents/banker/nojs/runs", json={"prompt": "Go", "wait": False}
                )
            ).json()

            def read_and_steer(driver: WebDriver) -> list[tuple[str, str]]:
                seen = []
                for path in (
                    "/console",
                    "/console/agents",
                    "/console/approvals",
                    "/console/usage",
                    "/console/cluster",
                    f"/console/runs/{run['run_id']}",
                    "/console/conversations/banker/nojs",
                ):
                    driver.get(f"{served.url}{path}")
                    seen.append((path, driver.find_element(By.TAG_NAME, "main").text))
                driver.find_element(By.ID, "steer-prompt").send_keys("Hurry")
                driver.find_element(By.XPATH, "//button[text()='Steer']").click()
                until(driver, lambda d: d.find_element(By.TAG_NAME, "h1").text.startswith("Run"))
                driver.get(f"{served.url}/console/conversations/banker/nojs")
                driver.find_element(
                    By.XPATH, "//button[text()='Cancel the run in progress']"
                ).click()
                until(driver, lambda d: "Cancel the run in progress" not in d.page_source)
                return seen

            seen = await off(read_and_steer, driver)
            for path, text in seen:
                assert text and "Error" not in text.splitlines()[0], path
            run_text = dict(seen)[f"/console/runs/{run['run_id']}"]
            assert "RunStart" in run_text and "ToolCallStart" in run_text
            # Shown only where no script runs: JavaScript was off.
            assert "JavaScript is off: these are the events so far" in run_text
            ended = (await served.client.get(f"/v1/runs/{run['run_id']}")).json()
            assert ended["status"] == "cancelled"
            assert serve_agents.done == []
    finally:
        driver.quit()


# The pages docs/console.md shows, and the file each is saved as.
SHOTS = [
    ("/console", "overview"),
    ("/console/agents", "agents"),
    ("/console/approvals", "approvals"),
    ("/console/conversations/banker/invoice-17", "conversation"),
    ("/console/usage", "usage"),
]


async def test_screenshots_of_the_pages(serve_http: Any, tmp_path: Path) -> None:
    """Takes the screenshots docs/console.md shows, into a temporary folder; with
    SATSUMA_CONSOLE_SCREENSHOTS=DIR (docs/images/console to refresh the docs' own), into
    DIR. Compares nothing: it checks each page rendered and each image was written."""
    folder = Path(os.environ.get("SATSUMA_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    priced = Usage(input_tokens=1200, output_tokens=80, cost_usd=0.0042)
    model = scripted(
        *two_transfers(Reply(text="Paid carol 5; the transfer to al was denied.", usage=priced)),
        Reply(text="Hello! How can I help?", usage=priced),
        *two_transfers(),
    )
    driver = chromium(size=(1100, 760))
    try:
        async with serve_http([Banker, serve_agents.Greeter], model=model) as served:
            client = served.client
            first = (
                await client.post("/v1/agents/banker/invoice-17/runs", json={"prompt": "Pay"})
            ).json()
            calls = [p["call_id"] for p in first["pending"]]
            edited = {"decision": "approve", "input": {"to": "carol", "amount": 5}}
            await client.post(f"/v1/approvals/{first['run_id']}/{calls[0]}", json=edited)
            denial = {"decision": "deny", "reason": "al is not a payee"}
            await client.post(f"/v1/approvals/{first['run_id']}/{calls[1]}", json=denial)
            greeted = await client.post("/v1/agents/greeter/ann/runs", json={"prompt": "Hi"})
            assert greeted.json()["status"] == "completed"
            waiting = await client.post("/v1/agents/banker/invoice-18/runs", json={"prompt": "Pay"})
            assert waiting.json()["status"] == "awaiting_approval"

            def shoot(driver: WebDriver) -> list[Path]:
                written = []
                for path, name in SHOTS:
                    driver.get(f"{served.url}{path}")
                    until(driver, lambda d: d.find_elements(By.TAG_NAME, "h1"))
                    target = folder / f"{name}.png"
                    assert driver.save_screenshot(str(target)), path
                    written.append(target)
                no_browser_errors(driver)
                return written

            for image in await off(shoot, driver):
                assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
    finally:
        driver.quit()


async def test_the_cluster_page_in_front_of_postgresql(
    postgres_dsn: str, serve_http: Any, browser: WebDriver
) -> None:
    async with (
        PostgresStore(postgres_dsn) as store,
        serve_http([serve_agents.Greeter], store=store, node=True, model=scripted("Hi.")) as served,
    ):
        done = await served.client.post(
            f"/v1/agents/greeter/{quote(HOSTILE, safe='')}/runs", json={"prompt": "Hi"}
        )
        assert done.json()["status"] == "completed", done.text

        def look(driver: WebDriver) -> tuple[list[str], list[str], str]:
            driver.get(f"{served.url}/console/cluster")
            until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#nodes + table tbody tr"))
            nodes = [
                row.text for row in driver.find_elements(By.CSS_SELECTOR, "#nodes + table tbody tr")
            ]
            foreign = driver.execute_script(ALL_LOCAL)
            driver.get(f"{served.url}/console/agents")
            assert driver.find_elements(By.TAG_NAME, "img") == []
            no_browser_errors(driver)
            return nodes, foreign, driver.find_element(By.TAG_NAME, "main").text

        nodes, foreign, agents = await off(look, browser)
        assert len(nodes) == 1 and "greeter" in nodes[0] and "alive" in nodes[0]
        assert foreign == []
        assert HOSTILE in agents  # the conversation's id, as text
