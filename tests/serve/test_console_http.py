"""The console over real HTTP (hypercorn's trio worker, httpx): its pages, the login and
session cookie, CSRF on every POST, scopes, security headers, hostile text shown as
text, and approvals decided from its forms (checked over satsuma's API)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import serve_agents
import trio
from serve_agents import Banker, Greeter, scripted, two_transfers

import satsuma
from satsuma.serve import Server, create_token
from satsuma.testing import Reply

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(autouse=True)
def _reset() -> None:
    serve_agents.done.clear()
    serve_agents.gate["open"] = trio.Event()


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


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


async def login(client: httpx.AsyncClient, token: str) -> httpx.Response:
    form = await client.get("/console/login")
    return await client.post("/console/login", data={"token": token, "csrf": csrf_of(form.text)})


async def test_without_tokens_the_console_is_open_with_its_security_headers(
    serve_http: Any,
) -> None:
    async with serve_http([Banker, Greeter], model=scripted("Hi.")) as served:
        page = await served.client.get("/console")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        cookie = page.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
        assert "banker" in page.text and "greeter" in page.text
        # No login on a server without tokens.
        login_page = await served.client.get("/console/login")
        assert (login_page.status_code, login_page.headers["location"]) == (303, "/console")
        css = await served.client.get("/console/static/console.css")
        js = await served.client.get("/console/static/console.js")
        assert css.headers["content-type"].startswith("text/css") and "body" in css.text
        assert js.headers["content-type"] == "text/javascript" and "EventSource" in js.text
        assert (await served.client.get("/console/static/../_app.py")).status_code == 404
        assert (await served.client.get("/console/nope")).status_code == 404


async def test_the_session_cookie_is_secure_under_tls() -> None:
    server = Server([Greeter], model=scripted("Hi."))
    async with server.open_runs():
        transport = httpx.ASGITransport(app=server.asgi)
        async with httpx.AsyncClient(transport=transport, base_url="https://console") as client:
            page = await client.get("/console")
    assert page.status_code == 200
    assert "; Secure" in page.headers["set-cookie"]


async def test_login_session_scopes_and_logout(serve_http: Any, tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    reader = create_token(path, name="reader", scopes=["read"], agents=["banker"])
    runner = create_token(path, name="runner", scopes=["run"])
    async with serve_http([Banker], model=scripted(*two_transfers()), tokens=path) as served:
        client = served.client
        started = await client.post(
            "/v1/agents/banker/t1/runs",
            json={"prompt": "Pay", "wait": True},
            headers={
                "Authorization": f"Bearer {create_token(path, name='ops', scopes=['run', 'read'])}"
            },
        )
        assert started.json()["status"] == "awaiting_approval"
        run_id = started.json()["run_id"]
        first = await client.get("/console", follow_redirects=False)
        assert (first.status_code, first.headers["location"]) == (303, "/console/login")
        form = await client.get("/console/login")
        assert form.status_code == 200 and 'type="password"' in form.text
        # No CSRF token: refused before the token is even looked at.
        refused = await client.post("/console/login", data={"token": reader})
        assert refused.status_code == 403 and "CSRF" in refused.text
        wrong = await client.post(
            "/console/login", data={"token": "nope", "csrf": csrf_of(form.text)}
        )
        assert wrong.status_code == 401 and "not valid" in wrong.text
        before = client.cookies.get("satsuma_console")
        entered = await login(client, reader)
        assert (entered.status_code, entered.headers["location"]) == (303, "/console")
        assert "HttpOnly" in entered.headers["set-cookie"]
        # A new session id at login.
        assert client.cookies.get("satsuma_console") != before
        overview = await client.get("/console")
        assert overview.status_code == 200 and "signed in as reader" in overview.text
        inbox = await client.get("/console/approvals")
        assert "transfer" in inbox.text
        # read only: the calls are shown, with no form to decide them...
        assert 'value="approve"' not in inbox.text
        call_id = started.json()["pending"][0]["call_id"]
        decided = await client.post(
            f"/console/approvals/{run_id}/{call_id}",
            data={"decision": "approve", "input": "", "csrf": csrf_of(overview.text)},
        )
        # ...and a decision sent anyway is refused.
        assert decided.status_code == 403 and "approve" in decided.text
        # The cookie reads satsuma's API (the run page's script), but never POSTs to it.
        assert (await client.get(f"/v1/runs/{run_id}")).status_code == 200
        assert (await client.post(f"/v1/runs/{run_id}/cancel")).status_code == 401
        out = await client.post("/console/logout", data={"csrf": csrf_of(overview.text)})
        assert (out.status_code, out.headers["location"]) == (303, "/console/login")
        assert (await client.get("/console")).status_code == 303
        assert (await client.get(f"/v1/runs/{run_id}")).status_code == 401
        # A token without the scope read sees no page.
        await login(client, runner)
        forbidden = await client.get("/console")
        assert forbidden.status_code == 403
        assert "lacks the scope &#x27;read&#x27;" in forbidden.text


async def test_csrf_and_origin_are_checked_on_every_post(serve_http: Any) -> None:
    async with serve_http([Banker], model=scripted(*two_transfers())) as served:
        client = served.client
        run = (await client.post("/v1/agents/banker/c/runs", json={"prompt": "Pay"})).json()
        call_id = run["pending"][0]["call_id"]
        # A paused run's page: its events up to the pause, answered at once.
        paused = await client.get(f"/console/runs/{run['run_id']}")
        assert paused.status_code == 200 and paused.text.count(">ApprovalRequested<") == 2
        page = await client.get("/console/approvals")
        csrf = csrf_of(page.text)
        action = f"/console/approvals/{run['run_id']}/{call_id}"
        missing = await client.post(action, data={"decision": "approve"})
        stale = await client.post(action, data={"decision": "approve", "csrf": "0" * 64})
        elsewhere = await client.post(
            action,
            data={"decision": "approve", "csrf": csrf},
            headers={"Origin": "https://evil.example"},
        )
        sandboxed = await client.post(
            action, data={"decision": "approve", "csrf": csrf}, headers={"Origin": "null"}
        )
        # Another browser (no cookie of this session) with this page's token.
        async with httpx.AsyncClient(base_url=served.url) as stranger:
            foreign = await stranger.post(action, data={"decision": "approve", "csrf": csrf})
        for answer in (missing, stale, elsewhere, sandboxed, foreign):
            assert answer.status_code == 403, answer.text
        assert serve_agents.done == []
        pending = (await client.get("/v1/approvals")).json()["approvals"]
        assert len(pending) == 2


async def test_approve_with_edited_input_and_deny_with_a_reason(serve_http: Any) -> None:
    model = scripted(*two_transfers("Done."))
    async with serve_http([Banker], model=model) as served:
        client = served.client
        run = (await client.post("/v1/agents/banker/pay/runs", json={"prompt": "Pay"})).json()
        first, second = (p["call_id"] for p in run["pending"])
        page = await client.get("/console/approvals")
        assert page.text.count('class="approval"') == 2
        assert "&quot;bob&quot;" in page.text and "requires approval" in page.text.lower()
        csrf = csrf_of(page.text)
        action = f"/console/approvals/{run['run_id']}/{first}"
        not_json = await client.post(
            action, data={"decision": "approve", "input": "{to: bob", "csrf": csrf}
        )
        assert not_json.status_code == 400
        assert "the input is not JSON" in not_json.text
        assert "{to: bob" in not_json.text  # what was sent is kept to correct it
        refused = await client.post(
            action,
            data={"decision": "approve", "input": '{"to": "bob", "amount": "ten"}', "csrf": csrf},
        )
        # Checked as resume checks it: the tool's schema refuses it, nothing ran.
        assert refused.status_code == 400 and "amount" in refused.text
        assert serve_agents.done == []
        approved = await client.post(
            action,
            data={"decision": "approve", "input": '{"to": "carol", "amount": 5}', "csrf": csrf},
        )
        assert (approved.status_code, approved.headers["location"]) == (303, "/console/approvals")
        again = await client.post(action, data={"decision": "deny", "csrf": csrf})
        assert again.status_code == 409
        denied = await client.post(
            f"/console/approvals/{run['run_id']}/{second}",
            data={"decision": "deny", "reason": "not to al", "csrf": csrf},
        )
        assert denied.status_code == 303
        ended = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        while ended["status"] not in ("completed", "failed"):
            await trio.sleep(0.01)
            ended = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert ended["output"] == "Done."
        assert serve_agents.done == ["transfer 5 to carol"]
        conversation = await client.get("/console/conversations/banker/pay")
        assert "sent 5 to carol" in conversation.text and "not to al" in conversation.text
        assert '<p class="decided">approved</p>' in conversation.text
        assert '<p class="decided">denied</p>' in conversation.text
        assert '<strong class="error-kind error-denied">denied</strong>' in conversation.text
        assert "No call is waiting" in (await client.get("/console/approvals")).text


async def test_hostile_text_is_shown_as_text(serve_http: Any) -> None:
    model = scripted(
        Reply(text=HOSTILE, tool_calls=[("fetch_page", {"url": "<script>alert(2)</script>"})]),
        f"Read it: {HOSTILE}",
    )
    agent_id = '"><svg onload=alert(3)>'
    async with serve_http([Reader], model=model) as served:
        client = served.client
        run = (
            await client.post(f"/v1/agents/reader/{agent_id}/runs", json={"prompt": HOSTILE})
        ).json()
        assert run["status"] == "completed"
        pages = [
            await client.get("/console"),
            await client.get(f"/console/runs/{run['run_id']}"),
            await client.get(f"/console/conversations/reader/{agent_id}"),
        ]
        for page in pages:
            assert page.status_code == 200
            assert "<img" not in page.text and "<svg" not in page.text
            assert "<script>alert" not in page.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in pages[2].text
        assert "&lt;script&gt;alert(2)&lt;/script&gt;" in pages[2].text
        assert "&lt;svg onload=alert(3)&gt;" in pages[0].text
        # The run page: its events so far, with the tool's outcome.
        assert "ToolCallEnd" in pages[1].text and "RunEnd" in pages[1].text
        assert "data-live" not in pages[1].text  # an ended run has nothing to follow


async def test_the_agents_page_pages_and_searches(serve_http: Any) -> None:
    async with serve_http([Greeter], model=scripted(*["Hi."] * 53)) as served:
        for number in range(52):
            await served.client.post(
                f"/v1/agents/greeter/user-{number:02}/runs", json={"prompt": "Hi"}
            )
        await served.client.post("/v1/agents/greeter/user-00/runs", json={"prompt": "Again"})
        first = await served.client.get("/console/agents")
        assert first.status_code == 200
        assert first.text.count("<tr><td>greeter <code>Greeter</code></td>") == 50
        assert "page 1 of 2" in first.text and 'rel="next"' in first.text
        second = await served.client.get("/console/agents?page=2")
        assert (
            second.text.count("<tr><td>greeter <code>Greeter</code></td>") == 2
            and 'rel="prev"' in second.text
        )
        found = await served.client.get("/console/agents?q=user-00")
        assert found.text.count("<tr><td>greeter <code>Greeter</code></td>") == 1
        # Its two runs, counted in one row.
        assert "<td>2</td>" in found.text
        past = await served.client.get("/console/agents?page=9")
        assert "No conversation on page 9: there are 52." in past.text
        none = await served.client.get("/console/agents?q=%3Cnobody%3E")
        assert "No agent has run yet." in none.text and "&lt;nobody&gt;" in none.text


async def test_a_run_cancelled_from_its_page(serve_http: Any, tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    reader = create_token(path, name="reader", scopes=["read"])
    runner = create_token(path, name="runner", scopes=["run", "read"])
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Finished.")
    async with serve_http([Banker], model=model, tokens=path) as served:
        client = served.client
        run = (
            await client.post(
                "/v1/agents/banker/c/runs",
                json={"prompt": "Go", "wait": False},
                headers={"Authorization": f"Bearer {runner}"},
            )
        ).json()
        await login(client, reader)
        page = await client.get(f"/console/runs/{run['run_id']}")
        assert page.status_code == 200 and "Cancel the run" not in page.text
        refused = await client.post(
            f"/console/runs/{run['run_id']}/cancel", data={"csrf": csrf_of(page.text)}
        )
        assert refused.status_code == 403
        await login(client, runner)
        page = await client.get(f"/console/runs/{run['run_id']}")
        assert "Cancel the run" in page.text and "data-live" in page.text
        cancelled = await client.post(
            f"/console/runs/{run['run_id']}/cancel", data={"csrf": csrf_of(page.text)}
        )
        assert cancelled.status_code == 303
        ended = await client.get(cancelled.headers["location"])
        assert "status-cancelled" in ended.text and "Cancel the run" not in ended.text
        assert serve_agents.done == []
