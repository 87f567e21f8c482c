"""The console under ``/console``: server-rendered pages to watch a service and decide
its approvals from a browser (docs/console.md; DESIGN, "The console").

It is an ASGI surface that authenticates its own requests: a browser holds a session
cookie (``_console_session``), not a bearer token, and a page it may not see answers
with the login form rather than a JSON 401. Every POST carries the session's CSRF
token, and one whose ``Origin`` is another site is refused before that. Every answer
has the same security headers: a CSP of ``default-src 'self'`` (no inline script or
style, no file from another host), no framing, no sniffing, no caching.

Pages read the server's ``Runs`` as every surface does, and what only the store, the
supervisor or the cluster knows through ``_console_reads`` (a page of the store at a
time); a decision here is ``Runs.decide``, the same call satsuma's API makes, so an
edited input is checked as ``resume`` checks it and a refusal (``BadDecision``) is
shown in the page. Steering a conversation is ``Runs.start`` with
``if_busy="interrupt"``; cancelling is ``Runs.cancel``.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Mapping
from importlib.resources import files
from typing import Any, final
from urllib.parse import parse_qsl, quote

from .._exceptions import StoreError
from ..agents import AgentEvent
from ..tools import Approve, Deny
from ._console_html import (
    approvals_page,
    conversation_page,
    error_page,
    login_page,
    overview_page,
    page,
    run_page,
)
from ._console_pages import agents_page, cluster_page, decided_section, tree_section, usage_page
from ._console_reads import ConsoleReads
from ._console_session import COOKIE, Sessions, cookie_value
from ._http import HTTPError, JSONAnswer, Principal, Request, Scope, SSEAnswer, agent_id_from
from ._runs import (
    AlreadyDecided,
    BadDecision,
    NotResumed,
    Runs,
    RunView,
    UnknownAgent,
    UnknownRun,
)
from ._tokens import TokenBook

__all__ = ["ConsoleSurface"]

log = logging.getLogger("satsuma.serve")

_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; base-uri 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
_STATIC = {
    "console.css": b"text/css; charset=utf-8",
    "console.js": b"text/javascript",
    "icon.svg": b"image/svg+xml",
}
_CONVERSATION_RUNS = 20
_MESSAGES_PAGE = 50
_AGENTS_PAGE = 50


def _event_types() -> list[str]:
    """The names of every event a run reports, for the script's listeners (an SSE event
    with an ``event:`` name reaches only a listener of that name)."""
    names: list[str] = []

    def walk(kind: Any) -> None:
        args = typing.get_args(kind)
        if args:
            for arg in args:
                walk(arg)
        elif isinstance(kind, type):
            names.append(kind.__name__)

    walk(AgentEvent)
    return sorted(set(names))


@final
class ConsoleSurface:
    """The console (``/console``) over a server's runs and tokens."""

    prefix = "/console"
    authenticates = True
    """The app leaves this surface's requests to it (the cookie, the login page)."""

    def __init__(self, runs: Runs, tokens: TokenBook | None) -> None:
        """``tokens``: the server's; None serves the console without login."""
        self._runs = runs
        self._reads = ConsoleReads(runs)
        self.sessions = Sessions(tokens)
        self._logins = tokens is not None
        self._types = _event_types()

    def signed_in(self, headers: Mapping[str, str]) -> Principal | None:
        """Who a request's session cookie stands for, for the app's other surfaces
        (``/v1/runs/{id}/events`` is what the run page's script reads)."""
        return self.sessions.principal(headers) if self._logins else None

    @property
    def asgi(self) -> Any:
        """The surface as an ASGI app (the server's app calls it)."""
        return self._asgi

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        raise AssertionError("an ASGI surface is called through asgi")  # pragma: no cover

    async def _asgi(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        method = str(scope.get("method", "GET")).upper()
        path = str(scope.get("path", "/")).rstrip("/") or "/"
        headers = {
            bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1")
            for k, v in scope.get("headers", ())
        }
        secure = scope.get("scheme") == "https"
        if path.startswith("/console/static/"):
            await self._static(path.removeprefix("/console/static/"), send)
            return
        session = cookie_value(headers)
        cookies: list[bytes] = []
        if not self.sessions.known(session):
            session = self.sessions.open()
            cookies.append(self._cookie(session, secure))
        assert session is not None
        form: dict[str, str] = {}
        if method == "POST":
            form = await self._form(receive)
            problem = self._csrf_problem(headers, session, form)
            if problem is not None:
                await self._page(send, 403, *error_page(403, problem), None, None, cookies)
                return
        elif method not in ("GET", "HEAD"):
            await self._page(
                send, 405, *error_page(405, f"{path} answers GET and POST only"), None, None, []
            )
            return
        if path == "/console/login":
            await self._login(send, method, form, session, secure, cookies)
            return
        principal = self.sessions.principal_of(session)
        if principal is None:
            await _redirect(send, "/console/login", cookies)
            return
        if path == "/console/logout" and method == "POST":
            self.sessions.close(session)
            fresh = self.sessions.open()
            await _redirect(send, "/console/login", [self._cookie(fresh, secure)])
            return
        csrf = self.sessions.csrf(session)
        try:
            query = dict(parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
            status, title, body = await self._route(method, path, principal, csrf, form, query)
        except HTTPError as error:
            status, (title, body) = error.status, error_page(error.status, error.message)
        except (UnknownRun, UnknownAgent) as error:
            status, (title, body) = 404, error_page(404, str(error))
        except NotResumed as error:  # a decision kept, its run not resumed: logged already
            status, (title, body) = 503, error_page(503, error.public)
        except StoreError as error:  # said in a page as the API says it: the log names it
            log.warning("the store failed: %s", error)
            message = "the store failed to answer (the server's log says why); try again later"
            status, (title, body) = 503, error_page(503, message)
        if status == 303:
            await _redirect(send, body, cookies)
            return
        await self._page(send, status, title, body, principal, csrf, cookies)

    async def _route(
        self,
        method: str,
        path: str,
        principal: Principal,
        csrf: str,
        form: Mapping[str, str],
        query: Mapping[str, str],
    ) -> tuple[int, str, str]:
        _require(principal, "read")
        parts = path.removeprefix("/console").strip("/").split("/")
        if parts == [""] and method != "POST":
            return 200, *await self._overview(principal)
        if parts == ["approvals"] and method != "POST":
            return 200, *await self._approvals(principal, csrf)
        if parts[0] == "approvals" and len(parts) == 3 and method == "POST":
            return await self._decide(principal, csrf, parts[1], parts[2], form)
        if parts == ["agents"] and method != "POST":
            return 200, *await self._agents(principal, query)
        if parts == ["usage"] and method != "POST":
            return 200, *usage_page(await self._reads.usage(_reader(principal)))
        if parts == ["cluster"] and method != "POST":
            return 200, *cluster_page(await self._reads.cluster(), _reader(principal))
        if parts[0] == "runs" and len(parts) == 2 and method != "POST":
            return 200, *await self._run(principal, csrf, parts[1])
        if parts[0] == "runs" and len(parts) == 3 and parts[2] == "cancel" and method == "POST":
            view = await self._readable(principal, parts[1])
            _require(principal, "run", view.agent)
            await self._runs.cancel(view.run_id)
            return 303, "", f"/console/runs/{quote(view.run_id, safe='')}"
        if parts[0] == "conversations" and len(parts) == 3 and method != "POST":
            name, agent_id = parts[1], agent_id_from(parts[2])
            _require(principal, "read", name)
            start = query.get("start", "")
            first = int(start) if start.isdigit() and len(start) < 10 else None
            return 200, *await self._conversation(principal, csrf, name, agent_id, first)
        if parts[0] == "conversations" and len(parts) == 4 and method == "POST":
            return await self._steer_or_cancel(principal, parts[1], parts[2], parts[3], form)
        raise HTTPError(404, "not_found", f"no such page: {method} {path}")

    async def _overview(self, principal: Principal) -> tuple[str, str]:
        reads = _reader(principal)
        agents = {name: cls.__qualname__ for name, cls in self._runs.agents.items() if reads(name)}
        runs = await self._reads.latest(reads)
        pending = [p for p in await self._runs.pending() if reads(p.agent)]
        title, body = overview_page(agents, runs, len(pending))
        tree = tree_section(*self._reads.tree(reads), cluster=self._reads.clustered)
        return title, tree + body

    async def _approvals(
        self,
        principal: Principal,
        csrf: str,
        problems: Mapping[tuple[str, str], tuple[str, str]] | None = None,
    ) -> tuple[str, str]:
        pending = [p for p in await self._runs.pending() if principal.allows("read", p.agent)]
        title, body = approvals_page(
            pending,
            csrf,
            may_decide=lambda agent: principal.allows("approve", agent),
            problems=problems,
            decided=await self._reads.proposed([p.run_id for p in pending]),
        )
        return title, body + decided_section(await self._reads.decided(_reader(principal)))

    async def _decide(
        self, principal: Principal, csrf: str, run_id: str, call_id: str, form: Mapping[str, str]
    ) -> tuple[int, str, str]:
        view = await self._readable(principal, run_id)
        _require(principal, "approve", view.agent)
        sent = form.get("input", "")
        try:
            decision = _decision(form, principal.name)
            await self._runs.decide(run_id, call_id, decision)
        except (BadDecision, AlreadyDecided, ValueError) as error:
            # Shown beside the call, with the text that was sent kept for correcting.
            problems = {(run_id, call_id): (str(error) or type(error).__name__, sent)}
            title, body = await self._approvals(principal, csrf, problems)
            return 409 if isinstance(error, AlreadyDecided) else 400, title, body
        return 303, "", "/console/approvals"

    async def _readable(self, principal: Principal, run_id: str) -> RunView:
        """The run, once the viewer may read it (else 404, as for no run)."""
        view = await self._runs.get(run_id)
        if not principal.allows("read", view.agent):
            raise HTTPError(404, "not_found", f"no run {run_id!r}")
        return view

    async def _run(self, principal: Principal, csrf: str, run_id: str) -> tuple[str, str]:
        view = await self._readable(principal, run_id)
        events = await self._reads.events_so_far(run_id, waits=not view.ended)
        may_cancel = principal.allows("run", view.agent)
        return run_page(view, events, self._types, cancel_csrf=csrf if may_cancel else None)

    async def _agents(self, principal: Principal, query: Mapping[str, str]) -> tuple[str, str]:
        search = query.get("q", "").strip()
        number = query.get("page", "1")
        page_number = int(number) if number.isdigit() and 0 < len(number) < 7 else 1
        rows, total = await self._reads.conversations(
            _reader(principal), search, page_number - 1, _AGENTS_PAGE
        )
        classes = {name: cls.__qualname__ for name, cls in self._runs.agents.items()}
        return agents_page(
            rows,
            classes,
            total=total,
            page_number=page_number,
            pages=(total + _AGENTS_PAGE - 1) // _AGENTS_PAGE,
            search=search,
        )

    async def _conversation(
        self, principal: Principal, csrf: str, name: str, agent_id: str, start: int | None
    ) -> tuple[str, str]:
        # One page of its messages (the latest without ``start``) and its latest runs,
        # each read from the store's index: a conversation of thousands of messages and
        # runs is not read whole. Its calls are told from the runs that wrote the page.
        first, messages, total = await self._reads.messages(name, agent_id, start, _MESSAGES_PAGE)
        runs = await self._reads.latest(
            _reader(principal), _CONVERSATION_RUNS, conversation=(name, agent_id)
        )
        writers = await self._reads.writers(name, agent_id, first, first + len(messages))
        calls = await self._reads.calls(writers if self._reads.store is not None else runs)
        may_run = principal.allows("run", name)
        return conversation_page(
            name,
            agent_id,
            messages,
            calls,
            runs,
            steer_csrf=csrf if may_run else None,
            window=(first, total, _MESSAGES_PAGE),
        )

    async def _steer_or_cancel(
        self, principal: Principal, name: str, raw_id: str, action: str, form: Mapping[str, str]
    ) -> tuple[int, str, str]:
        """A conversation's Steer (a prompt for its run in progress, or a new run when
        none is) or Cancel (its run in progress); then the run's page."""
        agent_id = agent_id_from(raw_id)
        _require(principal, "read", name)
        _require(principal, "run", name)
        here = f"/console/conversations/{quote(name, safe='')}/{quote(agent_id, safe='')}"
        if action == "steer":
            prompt = form.get("prompt", "").strip()
            if not prompt:
                raise HTTPError(400, "bad_request", "give the prompt to steer the agent with")
            try:
                view = await self._runs.start(name, agent_id, prompt, if_busy="interrupt")
            except ValueError as error:
                raise HTTPError(400, "bad_request", str(error)) from None
            return 303, "", f"/console/runs/{quote(view.run_id, safe='')}"
        if action == "cancel":
            live = [v for v in await self._runs.runs(name, agent_id, limit=5) if not v.ended]
            if not live:
                raise HTTPError(409, "conflict", "the conversation has no run in progress")
            for view in live:
                await self._runs.cancel(view.run_id)
            return 303, "", here
        raise HTTPError(404, "not_found", f"no such action: {action}")

    async def _login(
        self,
        send: Any,
        method: str,
        form: Mapping[str, str],
        session: str,
        secure: bool,
        cookies: list[bytes],
    ) -> None:
        if not self._logins:
            await _redirect(send, "/console", cookies)
            return
        error = None
        if method == "POST":
            token = form.get("token", "").strip()
            if self.sessions.tokens is not None and token:
                principal = self.sessions.tokens.authenticate(token)
                if principal is not None:
                    # A new id at login: an id planted before it is worth nothing after.
                    self.sessions.close(session)
                    fresh = self.sessions.open(token)
                    await _redirect(send, "/console", [self._cookie(fresh, secure)])
                    return
            error = "That token is not valid." if token else "Give a token."
        title, body = login_page(self.sessions.csrf(session), error)
        status = 401 if error else 200
        await self._page(send, status, title, body, None, None, cookies)

    def _csrf_problem(
        self, headers: Mapping[str, str], session: str, form: Mapping[str, str]
    ) -> str | None:
        origin = headers.get("origin")
        host = headers.get("host")
        # A browser names the page a POST comes from: another site's (or "null", a
        # sandboxed one's) is refused whatever else it carries.
        if origin is not None and host is not None and origin.partition("://")[2] != host:
            return "refused: this form was sent from another site"
        if not self.sessions.csrf_ok(session, form.get("csrf")):
            return "refused: the form's CSRF token is missing or stale; reload the page"
        return None

    def _cookie(self, session: str, secure: bool) -> bytes:
        flags = "; Secure" if secure else ""
        return f"{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict{flags}".encode("latin-1")

    async def _form(self, receive: Any) -> dict[str, str]:
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                raise HTTPError(400, "bad_request", "the client went away before its body ended")
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                break
        try:
            text = b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError:
            raise HTTPError(400, "bad_request", "the form is not UTF-8") from None
        return dict(parse_qsl(text, keep_blank_values=True))

    async def _static(self, name: str, send: Any) -> None:
        kind = _STATIC.get(name)
        if kind is None:
            raise HTTPError(404, "not_found", "no such file")
        data = files("satsuma.serve").joinpath("console_static", name).read_bytes()
        await _send(send, 200, [(b"content-type", kind), *_HEADERS[:2]], data)

    async def _page(
        self,
        send: Any,
        status: int,
        title: str,
        body: str,
        principal: Principal | None,
        csrf: str | None,
        cookies: list[bytes],
    ) -> None:
        text = page(title, body, principal=principal, csrf=csrf, logins=self._logins)
        headers = [(b"content-type", b"text/html; charset=utf-8"), *_HEADERS]
        headers += [(b"set-cookie", cookie) for cookie in cookies]
        await _send(send, status, headers, text.encode("utf-8"))


def _reader(principal: Principal) -> Any:
    """Whether the viewer reads a served class, by name."""
    return lambda name: principal.allows("read", name)


def _require(principal: Principal, scope: Scope, agent: str | None = None) -> None:
    if not principal.allows(scope, agent):
        who = f"token {principal.name!r}" if principal.name else "this token"
        what = f" for the agent {agent!r}" if agent is not None else ""
        raise HTTPError(403, "forbidden", f"{who} lacks the scope {scope!r}{what}")


def _decision(form: Mapping[str, str], by: str | None) -> Approve | Deny:
    """The decision a form sends.

    Raises:
        ValueError: not ``approve`` or ``deny``, or an input that is not a JSON object.
    """
    verdict = form.get("decision")
    if verdict == "deny":
        return Deny(form.get("reason", "").strip() or "denied", by=by)
    if verdict != "approve":
        raise ValueError(f"the decision must be approve or deny, got: {verdict!r}")
    text = form.get("input", "").strip()
    if not text:
        return Approve(by=by)
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"the input is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError("the input must be a JSON object (the tool's arguments)")
    return Approve(input=value, by=by)


async def _redirect(send: Any, location: str, cookies: list[bytes]) -> None:
    headers = [(b"location", location.encode("latin-1")), *_HEADERS]
    headers += [(b"set-cookie", cookie) for cookie in cookies]
    await _send(send, 303, headers, b"")


async def _send(send: Any, status: int, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(data)).encode("ascii"))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
