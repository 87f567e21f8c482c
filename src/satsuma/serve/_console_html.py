"""The console's pages as HTML text, rendered on the server.

Every value that came from a model, a tool, a user or the store goes through ``e``
(``html.escape`` with quotes) before it is put in a page: a tool's result
``<img src=x onerror=...>`` is shown as those characters, never parsed as markup. The
pages hold no inline script or style (the CSP forbids both): the one stylesheet and the
one script are files of the package, under ``/console/static/``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from ._http import Principal
from ._runs import PendingView, RunView

__all__ = [
    "approvals_page",
    "conversation_page",
    "e",
    "error_page",
    "event_summary",
    "login_page",
    "overview_page",
    "run_page",
]


def e(value: object) -> str:
    """``value`` as text safe in HTML content and in quoted attributes."""
    return html.escape(str(value), quote=True)


def q(value: str) -> str:
    """``value`` as one path segment of a URL (every reserved character escaped)."""
    return quote(value, safe="")


def json_text(value: Any) -> str:
    """A JSON value, indented, as escaped text."""
    return e(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def page(
    title: str, body: str, *, principal: Principal | None, csrf: str | None, logins: bool
) -> str:
    """A whole document: the header with the navigation (and logout when logged in),
    then ``body``."""
    nav = ""
    if principal is not None:
        who = f"<span>signed in as {e(principal.name)}</span>" if principal.name else ""
        logout = ""
        if logins and csrf is not None:
            logout = (
                '<form method="post" action="/console/logout" class="inline">'
                f'<input type="hidden" name="csrf" value="{e(csrf)}">'
                '<button type="submit">Log out</button></form>'
            )
        nav = (
            '<nav aria-label="console"><a href="/console">Overview</a> '
            '<a href="/console/agents">Agents</a> '
            '<a href="/console/approvals">Approvals</a> '
            '<a href="/console/usage">Usage</a> '
            f'<a href="/console/cluster">Cluster</a> {who} {logout}</nav>'
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · satsuma console</title>"
        '<link rel="icon" href="/console/static/icon.svg">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script>'
        f"</head><body><header><strong>satsuma console</strong> {nav}</header>"
        f"<main><h1>{e(title)}</h1>{body}</main></body></html>"
    )


def _run_row(view: RunView) -> str:
    return (
        f'<tr><td><a href="/console/runs/{q(view.run_id)}">{e(view.run_id)}</a></td>'
        f"<td>{e(view.agent)}</td>"
        f'<td><a href="/console/conversations/{q(view.agent)}/{q(view.agent_id)}">'
        f"{e(view.agent_id)}</a></td>"
        f'<td class="status-{e(view.status)}">{e(view.status)}</td>'
        f"<td>{e(view.usage.get('input_tokens', 0))} in / "
        f"{e(view.usage.get('output_tokens', 0))} out</td></tr>"
    )


def _runs_table(runs: Sequence[RunView]) -> str:
    if not runs:
        return "<p>No runs yet.</p>"
    rows = "".join(_run_row(view) for view in runs)
    return (
        "<table><thead><tr><th>run</th><th>agent</th><th>conversation</th><th>status</th>"
        f"<th>tokens</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def overview_page(
    agents: Mapping[str, str], runs: Sequence[RunView], pending: int
) -> tuple[str, str]:
    """The overview's title and body: the served agents, the approvals waiting, the
    latest runs. ``agents`` maps each served name to its class's qualified name."""
    items = "".join(
        f"<li><strong>{e(name)}</strong> <code>{e(cls)}</code></li>"
        for name, cls in sorted(agents.items())
    )
    waiting = (
        f'<p><a href="/console/approvals">{pending} call{"s" if pending != 1 else ""} '
        "waiting for a decision</a></p>"
    )
    body = (
        f'<section aria-labelledby="agents"><h2 id="agents">Served agents</h2><ul>{items}</ul>'
        f'</section><section aria-labelledby="inbox"><h2 id="inbox">Approvals</h2>{waiting}'
        '</section><section aria-labelledby="latest"><h2 id="latest">Latest runs</h2>'
        f"{_runs_table(runs)}</section>"
    )
    return "Overview", body


def login_page(csrf: str, error: str | None) -> tuple[str, str]:
    """The login form: a token, sent once, for a session cookie."""
    problem = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    body = (
        f'{problem}<form method="post" action="/console/login">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">'
        '<label for="token">Token</label> '
        '<input id="token" name="token" type="password" autocomplete="off" required>'
        ' <button type="submit">Log in</button></form>'
        "<p>A token from <code>satsuma serve token create</code> with the scope "
        "<code>read</code> (and <code>approve</code> to decide).</p>"
    )
    return "Log in", body


def approvals_page(
    pending: Sequence[PendingView],
    csrf: str,
    *,
    may_decide: Any,
    problems: Mapping[tuple[str, str], tuple[str, str]] | None = None,
    decided: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[str, str]:
    """The approval inbox: each waiting call with its tool, input and reason, and
    forms to approve (with the input as edited JSON) or deny (with a reason).

    Args:
        pending: The calls waiting.
        csrf: The session's CSRF token, for the forms.
        may_decide: ``may_decide(agent)``: whether the viewer may decide its calls.
        problems: A refused decision's message and the text sent, by (run, call).
        decided: The decisions taken already on other calls of the waiting runs
            (``ApprovalDecision``), by run and call id: shown with who took them.
    """
    if not pending:
        return "Approvals", "<p>No call is waiting for a decision.</p>"
    problems = problems or {}
    decided = decided or {}
    cards = []
    for call in pending:
        key = (call.run_id, call.call_id)
        problem, sent = problems.get(key, ("", ""))
        action = f"/console/approvals/{q(call.run_id)}/{q(call.call_id)}"
        ident = f"call-{e(call.call_id)}"
        alert = f'<p class="error" role="alert">{e(problem)}</p>' if problem else ""
        text = sent or json.dumps(call.input, indent=2, ensure_ascii=False, default=str)
        forms = "<p>Your token may not decide this call (scope approve).</p>"
        if may_decide(call.agent):
            forms = (
                f'<form method="post" action="{action}" class="decide">'
                f'<input type="hidden" name="csrf" value="{e(csrf)}">'
                '<input type="hidden" name="decision" value="approve">'
                f'<label for="{ident}-input">Input (JSON; edit to change it)</label>'
                f'<textarea id="{ident}-input" name="input" rows="5">{e(text)}</textarea>'
                '<button type="submit">Approve</button></form>'
                f'<form method="post" action="{action}" class="decide">'
                f'<input type="hidden" name="csrf" value="{e(csrf)}">'
                '<input type="hidden" name="decision" value="deny">'
                f'<label for="{ident}-reason">Reason</label>'
                f'<input id="{ident}-reason" name="reason" type="text">'
                '<button type="submit">Deny</button></form>'
            )
        cards.append(
            f'<article class="approval" id="{ident}" aria-label="call {e(call.call_id)}">'
            f"<h2>{e(call.tool)}</h2>"
            f"<p>agent <strong>{e(call.agent)}</strong>, conversation "
            f'<a href="/console/conversations/{q(call.agent)}/{q(call.agent_id)}">'
            f'{e(call.agent_id)}</a>, run <a href="/console/runs/{q(call.run_id)}">'
            f"{e(call.run_id)}</a></p>"
            f'<p>reason: <span class="reason">{e(call.reason)}</span></p>'
            f'<pre class="input">{json_text(call.input)}</pre>{alert}{forms}'
            f"{_others_decided(decided.get(call.run_id, {}))}</article>"
        )
    return "Approvals", "".join(cards)


def _others_decided(decisions: Mapping[str, Any]) -> str:
    """The calls of the same run decided already (the run waits for this one)."""
    if not decisions:
        return ""
    items = "".join(
        f"<li><code>{e(call_id)}</code> {e(d.verdict)} by "
        f'<span class="decided-by">{e(d.decided_by or "someone unnamed")}</span></li>'
        for call_id, d in sorted(decisions.items())
    )
    return f'<p>Decided already in this run:</p><ul class="decided">{items}</ul>'


def _block_html(block: Mapping[str, Any], calls: Mapping[str, Mapping[str, Any]]) -> str:
    kind = block.get("type")
    if kind == "text":
        return f'<pre class="text">{e(block.get("text", ""))}</pre>'
    if kind == "tool_use":
        decided = calls.get(str(block.get("id", "")), {}).get("decision")
        verdict = ""
        if isinstance(decided, Mapping):
            how = "approved" if decided.get("approved") else "denied"
            who = decided.get("decided_by")
            verdict = f'<p class="decided">{how}{f" by {e(who)}" if who else ""}</p>'
        return (
            f'<div class="tool-use"><p>calls <strong>{e(block.get("name", ""))}</strong> '
            f"<code>{e(block.get('id', ''))}</code></p>"
            f'<pre class="input">{json_text(block.get("input"))}</pre>{verdict}</div>'
        )
    if kind == "tool_result":
        call_id = str(block.get("tool_use_id", ""))
        ended = calls.get(call_id, {})
        error = bool(block.get("is_error"))
        error_kind = ended.get("error_kind") or ("error" if error else None)
        mark = (
            f'<strong class="error-kind error-{e(error_kind)}">{e(error_kind)}</strong> '
            if error_kind
            else '<span class="ok">ok</span> '
        )
        duration = ended.get("duration")
        # Told by the run's events only: a server holds them for a while after the run
        # (a cluster keeps them in PostgreSQL); the journal has no times.
        took = (
            f" in {float(duration):.3f} s"
            if isinstance(duration, int | float)
            else ", duration unknown"
        )
        journal = ended.get("journal")
        state = f' <span class="journal">journal: {e(journal)}</span>' if journal else ""
        return (
            f'<div class="tool-result{" failed" if error else ""}"><p>{mark}result of '
            f"<code>{e(call_id)}</code>{e(took)}{state}</p>"
            f'<pre class="outcome">{e(_content_text(block.get("content")))}</pre></div>'
        )
    return f'<pre class="other">{json_text(block)}</pre>'


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return json.dumps(content, ensure_ascii=False, default=str)


def conversation_page(
    agent: str,
    agent_id: str,
    messages: Sequence[Mapping[str, Any]],
    calls: Mapping[str, Mapping[str, Any]],
    runs: Sequence[RunView],
    *,
    steer_csrf: str | None = None,
    window: tuple[int, int, int] | None = None,
) -> tuple[str, str]:
    """A conversation: its messages, each tool call's input and outcome (its error kind,
    its duration when a run's events tell it, its state in the journal), and its runs.
    With ``steer_csrf`` (the viewer may run it), forms to steer it and to cancel its run
    in progress.

    Args:
        agent: The served agent's name.
        agent_id: The conversation.
        messages: The stored conversation (Messages API JSON).
        calls: ``ToolCallEnd`` outcomes (``error_kind``, ``duration``), decisions and
            journal states (``journal``) by call id.
        runs: The conversation's runs, newest first.
        steer_csrf: The session's CSRF token, when the viewer may steer and cancel.
        window: ``(start, total, size)``: ``messages`` are those from position
            ``start`` of ``total``, pages of ``size`` (None: they are all of them).
    """
    start, total, size = window if window is not None else (0, len(messages), len(messages))
    items = []
    for message in messages:
        content = message.get("content")
        blocks: Iterable[Any] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        )
        inner = "".join(_block_html(block, calls) for block in blocks if isinstance(block, Mapping))
        role = e(message.get("role", ""))
        items.append(f'<li class="message role-{role}"><h3>{role}</h3>{inner}</li>')
    listed = (
        f'<ol class="messages" start="{start + 1}">{"".join(items)}</ol>'
        if items
        else "<p>No messages.</p>"
    )
    here = f"/console/conversations/{q(agent)}/{q(agent_id)}"
    pages = _message_pages(here, start, len(messages), total, size)
    body = (
        f"<p>agent <strong>{e(agent)}</strong></p>{_steer_forms(agent, agent_id, runs, steer_csrf)}"
        f'<section aria-labelledby="msgs"><h2 id="msgs">Messages</h2>{pages}{listed}</section>'
        f'<section aria-labelledby="runs"><h2 id="runs">Runs</h2>{_runs_table(runs)}</section>'
    )
    return f"Conversation {agent_id}", body


def _message_pages(here: str, start: int, shown: int, total: int, size: int) -> str:
    """Which messages a page shows, and links to the earliest, earlier, later and
    latest ones (plain links: paging needs no script)."""
    if total <= shown:
        return ""
    links = []
    if start > 0:
        links.append(f'<a href="{here}?start=0">Earliest</a>')
        links.append(f'<a rel="prev" href="{here}?start={max(start - size, 0)}">Earlier</a>')
    links.append(f"<span>messages {start + 1} to {start + shown} of {total}</span>")
    if start + shown < total:
        links.append(f'<a rel="next" href="{here}?start={start + shown}">Later</a>')
        links.append(f'<a href="{here}">Latest</a>')
    return f'<nav class="pages" aria-label="messages">{" ".join(links)}</nav>'


def _steer_forms(agent: str, agent_id: str, runs: Sequence[RunView], csrf: str | None) -> str:
    if csrf is None:
        return ""
    here = f"/console/conversations/{q(agent)}/{q(agent_id)}"
    hidden = f'<input type="hidden" name="csrf" value="{e(csrf)}">'
    cancel = ""
    if any(not view.ended for view in runs):
        cancel = (
            f'<form method="post" action="{here}/cancel" class="inline">{hidden}'
            '<button type="submit">Cancel the run in progress</button></form>'
        )
    return (
        f'<form method="post" action="{here}/steer" class="steer">{hidden}'
        '<label for="steer-prompt">Steer (a prompt for the run in progress, or a new run)'
        '</label> <input id="steer-prompt" name="prompt" type="text" required> '
        f'<button type="submit">Steer</button></form>{cancel}'
    )


def event_summary(data: Mapping[str, Any]) -> str:
    """One line telling what an event says (the script writes the same for live ones)."""
    kind = str(data.get("type", ""))
    if kind == "TextDelta":
        return str(data.get("text", ""))
    if kind in ("ToolCallStart", "ApprovalRequested"):
        return f"{data.get('tool_name', '')} {json.dumps(data.get('input'), default=str)}"
    if kind == "ToolCallEnd":
        outcome = data.get("outcome") or {}
        mark = outcome.get("error_kind") or "ok"
        return f"{data.get('tool_name', '')} {mark}: {_content_text(outcome.get('content'))}"
    if kind == "RunEnd":
        result = data.get("result") or {}
        return str(result.get("status", ""))
    return ""


_NO_SCRIPT = (
    '<noscript><p class="noscript">JavaScript is off: these are the events so far; '
    "reload the page to see the next ones.</p></noscript>"
)


def run_page(
    view: RunView,
    events: Sequence[tuple[int, Mapping[str, Any]]],
    types: Sequence[str],
    *,
    cancel_csrf: str | None = None,
) -> tuple[str, str]:
    """A run: where it stands, its output, and its events so far; the script adds the
    next ones as they happen (from ``/v1/runs/{id}/events?after=N``). With
    ``cancel_csrf`` (the viewer may run it) a run not ended has a Cancel button."""
    after = events[-1][0] if events else 0
    rows = "".join(
        f'<li data-id="{number}"><span class="event-type">{e(data.get("type", ""))}</span> '
        f'<span class="event-text">{e(event_summary(data))}</span></li>'
        for number, data in events
    )
    live = ""
    if not view.ended:
        live = (
            f' data-live="/v1/runs/{q(view.run_id)}/events?after={after}"'
            f' data-types="{e(" ".join(types))}"'
        )
    output = (
        f'<pre class="output">{json_text(view.output) if not isinstance(view.output, str) else e(view.output)}</pre>'
        if view.output is not None
        else ""
    )
    error = (
        f'<p class="error">{e(view.error.get("type", ""))}: {e(view.error.get("message", ""))}</p>'
        if view.error
        else ""
    )
    cancel = ""
    if cancel_csrf is not None and not view.ended:
        cancel = (
            f'<form method="post" action="/console/runs/{q(view.run_id)}/cancel">'
            f'<input type="hidden" name="csrf" value="{e(cancel_csrf)}">'
            '<button type="submit">Cancel the run</button></form>'
        )
    body = (
        f'<p>agent <strong>{e(view.agent)}</strong>, conversation <a href="/console/'
        f'conversations/{q(view.agent)}/{q(view.agent_id)}">{e(view.agent_id)}</a></p>'
        f'<p>status <strong id="status" class="status-{e(view.status)}">{e(view.status)}'
        f'</strong></p>{cancel}<pre class="prompt">{e(view.prompt)}</pre>{output}{error}'
        '<section aria-labelledby="evs"><h2 id="evs">Events</h2>'
        f'<ol id="events" aria-live="polite"{live}>{rows}</ol>{_NO_SCRIPT if live else ""}'
        "</section>"
    )
    return f"Run {view.run_id}", body


def error_page(status: int, message: str) -> tuple[str, str]:
    """A page saying what went wrong."""
    return f"Error {status}", f'<p class="error" role="alert">{e(message)}</p>'
