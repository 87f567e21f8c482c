"""The console's pages over the store, the supervisor and the cluster, as HTML text: the
supervision tree, the agents (one SQL page of conversations), usage and cost, the
cluster, and the decisions taken lately.

As in ``_console_html``, every value from a model, a tool, a user or the store goes
through ``e`` before it is put in a page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .._messages import Usage
from ..store import ApprovalRecord, ConversationSummary, UsageTotal
from ._console_html import e, json_text, q
from ._views import split_stored_id

__all__ = [
    "TreeNode",
    "agents_page",
    "cluster_page",
    "decided_section",
    "money",
    "moment",
    "tree_section",
    "usage_page",
]


def moment(seconds: float | None) -> str:
    """A time (seconds since the epoch) as a person reads it, in UTC."""
    if seconds is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(seconds))


def money(cost: float | None, unpriced: int = 0) -> str:
    """A cost in US dollars; ``unpriced`` runs had no known price (a lower bound then)."""
    shown = "unknown" if cost is None else f"${cost:.4f}"
    if unpriced and cost is not None:
        shown += f" (+{unpriced} unpriced)"
    return shown


def _conversation_link(stored: str) -> str:
    parts = split_stored_id(stored)
    if parts is None:
        return f"<code>{e(stored)}</code>"
    return (
        f'<a href="/console/conversations/{q(parts[0])}/{q(parts[1])}">'
        f"{e(parts[0])} / {e(parts[1])}</a>"
    )


@attrs.frozen(kw_only=True)
class TreeNode:
    """One child of the supervision tree, as shown.

    Attributes:
        id: Its id (a served conversation's stored id, ``name/agent_id``).
        kind: ``supervisor`` or ``worker``.
        what: What it runs (the agent class's or service's name).
        state: ``running``, ``restarting``, ...
        restarts: Its restarts so far.
        intensity: A supervisor's ``(recent restarts, max_restarts, within)``.
        children: A supervisor's children.
    """

    id: str
    kind: str
    what: str
    state: str
    restarts: int
    intensity: tuple[int, int, float] | None = None
    children: tuple[TreeNode, ...] = ()


def _intensity(intensity: tuple[int, int, float] | None) -> str:
    if intensity is None:
        return ""
    recent, most, within = intensity
    return (
        f' <span class="intensity">intensity {recent} of {most} restarts within {within:g} s</span>'
    )


def _tree_item(node: TreeNode) -> str:
    inner = "".join(_tree_item(child) for child in node.children)
    nested = f"<ul>{inner}</ul>" if inner else ""
    label = _conversation_link(node.id) if node.kind == "supervisor" else f"{e(node.id)}"
    return (
        f'<li><span class="child">{label}</span> <code>{e(node.what)}</code> '
        f'<span class="state state-{e(node.state)}">{e(node.state)}</span> '
        f'<span class="restarts">{node.restarts} restart{"s" if node.restarts != 1 else ""}'
        f"</span>{_intensity(node.intensity)}{nested}</li>"
    )


def tree_section(root: TreeNode | None, hidden: int, *, cluster: bool = False) -> str:
    """The supervision tree: the server's supervisor, each conversation's own under it
    and its agent; ``hidden`` children past the page's limit are counted, not shown.
    Without a tree (``root`` None), ``cluster`` says the runs go through a cluster."""
    heading = '<h2 id="tree">Supervision tree</h2>'
    if root is None and cluster:
        body = (
            "<p>Runs go through the cluster: each node supervises its own agents (see "
            '<a href="/console/cluster">Cluster</a>).</p>'
        )
    elif root is None:
        body = "<p>This server's runs tell no supervision tree.</p>"
    else:
        more = f"<p>and {hidden} more conversations open.</p>" if hidden else ""
        opened = "" if root.children else "<p>No conversation is open now.</p>"
        body = (
            f"<p>server supervisor {_intensity(root.intensity)}</p>{opened}"
            f'<ul class="tree">{"".join(_tree_item(c) for c in root.children)}</ul>{more}'
        )
    return f'<section aria-labelledby="tree">{heading}{body}</section>'


def _pages_nav(base: str, page_number: int, pages: int, query: str) -> str:
    links = []
    if page_number > 1:
        links.append(f'<a rel="prev" href="{base}?page={page_number - 1}{query}">Previous</a>')
    links.append(f"<span>page {page_number} of {max(pages, 1)}</span>")
    if page_number < pages:
        links.append(f'<a rel="next" href="{base}?page={page_number + 1}{query}">Next</a>')
    return f'<nav aria-label="pages">{" ".join(links)}</nav>'


def agents_page(
    rows: Sequence[ConversationSummary],
    classes: Mapping[str, str],
    *,
    total: int,
    page_number: int,
    pages: int,
    search: str,
) -> tuple[str, str]:
    """The agents (each conversation of a served class): class, id, its latest run's
    status and start, runs, tokens and cost; ``search`` filters ids, one page of
    ``pages``. ``classes`` maps each served name to its class's qualified name."""
    form = (
        '<form method="get" action="/console/agents" role="search">'
        '<label for="q">Search ids</label> '
        f'<input id="q" name="q" type="search" value="{e(search)}"> '
        '<button type="submit">Search</button></form>'
    )
    lines = []
    for row in rows:
        name, _, agent_id = row.agent_id.partition("/")
        usage = row.usage
        lines.append(
            f"<tr><td>{e(name)} <code>{e(classes.get(name, ''))}</code></td>"
            f'<td><a href="/console/conversations/{q(name)}/{q(agent_id)}">{e(agent_id)}</a></td>'
            f'<td class="status-{e(row.latest.status)}">{e(row.latest.status)}</td>'
            f'<td><a href="/console/runs/{q(row.latest.run_id)}">'
            f"{e(moment(row.latest.started_at))}</a></td><td>{row.runs}</td>"
            f"<td>{usage.input_tokens} in / {usage.output_tokens} out</td>"
            f"<td>{e(money(usage.cost_usd, row.unpriced))}</td></tr>"
        )
    table = (
        "<table><caption>"
        f"{total} conversation{'s' if total != 1 else ''}</caption><thead><tr>"
        '<th scope="col">class</th><th scope="col">id</th><th scope="col">status</th>'
        '<th scope="col">last run</th><th scope="col">runs</th><th scope="col">tokens</th>'
        f'<th scope="col">cost</th></tr></thead><tbody>{"".join(lines)}</tbody></table>'
        if rows
        else f"<p>No conversation on page {page_number}: there are {total}.</p>"
        if total
        else "<p>No agent has run yet.</p>"
    )
    query = f"&amp;q={e(q(search))}" if search else ""
    return "Agents", f"{form}{table}{_pages_nav('/console/agents', page_number, pages, query)}"


def usage_page(totals: Mapping[str, UsageTotal]) -> tuple[str, str]:
    """Usage and cost by served class, and over them all."""
    if not totals:
        return "Usage", "<p>No usage to show: no served class this token reads keeps a store.</p>"

    def row(label: str, total: UsageTotal, header: bool = False) -> str:
        usage = total.usage
        cell = '<th scope="row">' if header else "<td>"
        close = "</th>" if header else "</td>"
        return (
            f"<tr>{cell}{label}{close}<td>{total.runs}</td><td>{usage.input_tokens}</td>"
            f"<td>{usage.output_tokens}</td><td>{usage.cache_creation_input_tokens}</td>"
            f"<td>{usage.cache_read_input_tokens}</td>"
            f"<td>{e(money(usage.cost_usd, total.unpriced))}</td></tr>"
        )

    lines = "".join(row(e(name), total, True) for name, total in sorted(totals.items()))
    usages = [t.usage for t in totals.values()]
    costs = [u.cost_usd for u in usages if u.cost_usd is not None]
    every = UsageTotal(
        runs=sum(t.runs for t in totals.values()),
        usage=Usage(
            input_tokens=sum(u.input_tokens for u in usages),
            output_tokens=sum(u.output_tokens for u in usages),
            cache_creation_input_tokens=sum(u.cache_creation_input_tokens for u in usages),
            cache_read_input_tokens=sum(u.cache_read_input_tokens for u in usages),
            cost_usd=sum(costs) if costs else None,
        ),
        unpriced=sum(t.unpriced for t in totals.values()),
    )
    body = (
        "<table><caption>Every stored run, by served class</caption><thead><tr>"
        '<th scope="col">class</th><th scope="col">runs</th><th scope="col">input tokens</th>'
        '<th scope="col">output tokens</th><th scope="col">cache writes</th>'
        '<th scope="col">cache reads</th><th scope="col">cost (USD)</th></tr></thead>'
        f"<tbody>{lines}</tbody><tfoot>{row('all', every, True)}</tfoot></table>"
        "<p>A cost is summed over the runs whose model has known prices; runs without "
        "one are counted as unpriced.</p>"
    )
    return "Usage", body


def decided_section(decided: Sequence[tuple[str, ApprovalRecord]]) -> str:
    """The calls decided lately: tool, conversation, run, verdict and who decided."""
    if not decided:
        items = "<p>No call has been decided yet.</p>"
    else:
        rows = []
        for stored, record in decided:
            decision = record.decision
            assert decision is not None
            who = decision.decided_by or "someone unnamed"
            detail = ""
            if decision.verdict == "edited":
                detail = f'<pre class="input">{json_text(decision.input)}</pre>'
            elif decision.reason:
                detail = f'<span class="reason">{e(decision.reason)}</span>'
            rows.append(
                f"<tr><td>{e(record.tool_name)}</td><td>{_conversation_link(stored)}</td>"
                f'<td><a href="/console/runs/{q(record.run_id)}">{e(record.run_id)}</a></td>'
                f'<td class="verdict-{e(decision.verdict)}">{e(decision.verdict)}</td>'
                f'<td class="decided-by">{e(who)}</td><td>{e(moment(decision.decided_at))}</td>'
                f"<td>{detail}</td></tr>"
            )
        items = (
            '<table><thead><tr><th scope="col">tool</th><th scope="col">conversation</th>'
            '<th scope="col">run</th><th scope="col">decision</th><th scope="col">by</th>'
            '<th scope="col">at</th><th scope="col">input or reason</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
    return (
        f'<section aria-labelledby="decided"><h2 id="decided">Decided lately</h2>{items}</section>'
    )


def cluster_page(status: Any | None, may_see: Callable[[str], bool]) -> tuple[str, str]:
    """The cluster's nodes, leases, queue depth per class and runs in flight, or a word
    saying there is no cluster. ``may_see(name)``: whether the viewer reads that class."""
    if status is None:
        return "Cluster", (
            "<p>This server runs without a cluster: its runs happen in this process, on "
            "its own store. A cluster needs a PostgreSQL store (see the cluster docs).</p>"
        )
    nodes = "".join(
        f"<tr><td>{e(n.name)}</td><td>{e(n.host)}</td><td>{n.pid}</td>"
        f"<td>{e(', '.join(n.agents))}</td><td>{n.in_flight}</td>"
        f'<td class="{"ok" if n.alive else "error"}">{"alive" if n.alive else "expired"}'
        f"</td><td>{n.heartbeat_age:.1f} s ago</td></tr>"
        for n in status.nodes
    )
    node_table = (
        '<table><thead><tr><th scope="col">node</th><th scope="col">host</th>'
        '<th scope="col">pid</th><th scope="col">classes</th><th scope="col">in flight</th>'
        '<th scope="col">state</th><th scope="col">heartbeat</th></tr></thead>'
        f"<tbody>{nodes}</tbody></table>"
        if status.nodes
        else "<p>No node is registered.</p>"
    )
    statuses = sorted({s for counts in status.queue.values() for s in counts})
    queue_rows = "".join(
        f'<tr><th scope="row">{e(name)}</th>'
        + "".join(f"<td>{counts.get(s, 0)}</td>" for s in statuses)
        + "</tr>"
        for name, counts in sorted(status.queue.items())
        if may_see(name)
    )
    queue = (
        '<table><thead><tr><th scope="col">class</th>'
        + "".join(f'<th scope="col">{e(s)}</th>' for s in statuses)
        + f"</tr></thead><tbody>{queue_rows}</tbody></table>"
        if queue_rows
        else "<p>The queue is empty.</p>"
    )
    leases = "".join(
        f"<tr><td>{_conversation_link(lease.agent_id)}</td><td>{e(lease.node or '—')}</td>"
        f"<td>{lease.epoch}</td><td>{lease.expires_in:.1f} s</td></tr>"
        for lease in status.leases
        if may_see(lease.agent_id.partition("/")[0])
    )
    lease_table = (
        '<table><thead><tr><th scope="col">conversation</th><th scope="col">node</th>'
        '<th scope="col">epoch</th><th scope="col">expires in</th></tr></thead>'
        f"<tbody>{leases}</tbody></table>"
        if leases
        else "<p>No lease is held.</p>"
    )
    flights = "".join(
        f'<tr><td><a href="/console/runs/{q(run.run_id)}">{e(run.run_id)}</a></td>'
        f"<td>{_conversation_link(run.agent_id)}</td><td>{e(run.status)}</td>"
        f"<td>{e(run.node or '—')}</td><td>{run.attempts}</td></tr>"
        for run in status.in_flight
        if may_see(run.agent_name)
    )
    flight_table = (
        '<table><thead><tr><th scope="col">run</th><th scope="col">conversation</th>'
        '<th scope="col">status</th><th scope="col">node</th><th scope="col">attempts</th>'
        f"</tr></thead><tbody>{flights}</tbody></table>"
        if flights
        else "<p>No run is in flight.</p>"
    )
    body = (
        f'<section aria-labelledby="nodes"><h2 id="nodes">Nodes</h2>{node_table}</section>'
        '<section aria-labelledby="queue"><h2 id="queue">Queue depth per class</h2>'
        f"{queue}</section>"
        f'<section aria-labelledby="leases"><h2 id="leases">Leases ({status.leases_held} '
        f"held)</h2>{lease_table}</section>"
        f'<section aria-labelledby="flight"><h2 id="flight">Runs in flight '
        f"({status.in_flight_count})</h2>{flight_table}</section>"
    )
    return "Cluster", body
