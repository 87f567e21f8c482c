"""satsuma's own API under ``/v1/``: runs, their events as SSE, the stored
conversation, and approvals decided one call at a time (DESIGN, "Serving agents over
HTTP"; docs/serve.md, "satsuma's API").

A translation only: each request is checked (scope, path, body) and becomes one call of
``Runs``; each answer is a ``RunView``'s or ``PendingView``'s JSON. Bodies are strict: a
field the endpoint does not know is a 400 naming it, so that a misspelt ``wiat`` never
silently runs with the default. A run of an agent the token does not reach answers 404,
as an unknown run does: a token learns nothing of runs outside its agents.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from typing import Any, NoReturn

import trio

from ..tools import Approve, Deny
from ._http import HTTPError, JSONAnswer, Request, Scope, ServerSentEvent, SSEAnswer, agent_id_from
from ._runs import (
    DENIED,
    Busy,
    IfBusy,
    RunEvent,
    Runs,
    RunView,
    UnknownAgent,
)
from ._slots import RunSlot, RunSlots

__all__ = ["ApiSurface"]

_IF_BUSY = ("enqueue", "reject", "interrupt")
# Events encoded lately, shared by every stream of their run (see ApiSurface._encoded).
_ENCODED_KEPT = 256


def _bad(message: str, kind: str = "bad_request") -> NoReturn:
    raise HTTPError(400, kind, message)


def _not_found(message: str) -> NoReturn:
    raise HTTPError(404, "not_found", message)


def _allows(request: Request, scope: Scope, agent: str | None = None) -> bool:
    return request.principal.allows(scope, agent)


def _require(request: Request, scope: Scope, agent: str | None = None) -> None:
    request.require(scope, agent)


def _body(request: Request, fields: Mapping[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """The body as a JSON object of known fields with the right types (an empty body is
    ``{}``)."""
    if not request.body.strip():
        return {}
    try:
        data = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        _bad("the body is not valid JSON")
    if not isinstance(data, dict):
        _bad("the body must be a JSON object")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        _bad(f"unknown field {unknown[0]!r}; expected: {', '.join(fields)}")
    for name, kinds in fields.items():
        value = data.get(name)
        if name not in data:
            continue
        # bool is an int to Python, not to JSON: keep them apart.
        wrong = not isinstance(value, kinds) or (
            isinstance(value, bool) and bool not in _as_tuple(kinds)
        )
        if wrong:
            expected = " or ".join(_JSON_NAMES[k] for k in _as_tuple(kinds))
            _bad(f"field {name!r} must be {expected}, got: {_json_name(value)}")
    return data


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


_JSON_NAMES: dict[type, str] = {
    str: "a string",
    bool: "true or false",
    dict: "an object",
    int: "an integer",
    type(None): "null",
}


def _json_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a number"


def _after(request: Request) -> int:
    """Where an event stream resumes: ``Last-Event-ID`` or ``?after=``, else 0."""
    raw = request.headers.get("last-event-id", request.query.get("after", "0")).strip()
    if not raw.isdigit() or len(raw) > 18:
        _bad(f"Last-Event-ID (or after) must be an event id (a number), got: {raw[:40]!r}")
    return int(raw)


class ApiSurface:
    """satsuma's own API (``/v1/``) over a ``Runs``."""

    def __init__(self, runs: Runs, *, slots: RunSlots | None = None) -> None:
        """``slots``: the server's cap on runs in flight per token (none: no cap)."""
        self._runs = runs
        self._slots = slots
        # A run's streams all read the same RunEvent objects from its log: an event is
        # encoded once for all of them, not once per stream (a thousand streams of one
        # run spent most of an event's fan-out in json.dumps). Keyed by the object, which
        # the entry keeps so that its id cannot be reused while cached.
        self._encoded: OrderedDict[int, tuple[RunEvent, ServerSentEvent]] = OrderedDict()

    @property
    def prefix(self) -> str:
        """The path prefix it answers."""
        return "/v1/"

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        """Answer one request (see the module and docs/serve.md); the runs'
        exceptions become HTTP errors in the app, as for every surface."""
        return await self._route(request)

    async def _route(self, request: Request) -> JSONAnswer | SSEAnswer:
        parts = request.path.removeprefix("/v1/").split("/")
        if parts[0] == "agents" and len(parts) >= 4 and parts[-1] in ("runs", "messages"):
            name, agent_id = parts[1], "/".join(parts[2:-1])
            agent_id_from(agent_id)
            if parts[-1] == "runs":
                self._method(request, "POST")
                return await self._start(request, name, agent_id)
            self._method(request, "GET")
            _require(request, "read", name)
            return JSONAnswer(200, {"messages": await self._runs.messages(name, agent_id)})
        if parts[0] == "runs" and len(parts) in (2, 3) and parts[1]:
            run_id, action = parts[1], parts[2] if len(parts) == 3 else ""
            if action == "":
                self._method(request, "GET")
                return JSONAnswer(200, (await self._run(request, run_id, "read")).to_json())
            if action == "events":
                self._method(request, "GET")
                return await self._events(request, run_id)
            if action == "cancel":
                self._method(request, "POST")
                await self._run(request, run_id, "run")
                return JSONAnswer(200, (await self._runs.cancel(run_id)).to_json())
        if parts[0] == "approvals" and len(parts) == 1:
            self._method(request, "GET")
            _require(request, "read")
            pending = await self._runs.pending()
            reached = [p.to_json() for p in pending if _allows(request, "read", p.agent)]
            return JSONAnswer(200, {"approvals": reached})
        if parts[0] == "approvals" and len(parts) == 3 and parts[1] and parts[2]:
            self._method(request, "POST")
            return await self._decide(request, parts[1], parts[2])
        _not_found(f"no such endpoint: {request.method} {request.path}")

    @staticmethod
    def _method(request: Request, allowed: str) -> None:
        if request.method != allowed:
            raise HTTPError(
                405,
                "method_not_allowed",
                f"{request.path} answers {allowed}, not {request.method}",
                headers={"Allow": allowed},
            )

    async def _run(self, request: Request, run_id: str, scope: Scope) -> RunView:
        """The run, once the token may reach it (else 404, as for no run)."""
        _require(request, scope)
        view = await self._runs.get(run_id)
        if not _allows(request, scope, view.agent):
            _not_found(f"no run {run_id!r}")
        return view

    async def _start(self, request: Request, name: str, agent_id: str) -> JSONAnswer:
        _require(request, "run", name)
        body = _body(request, {"prompt": str, "wait": bool, "if_busy": str})
        prompt = body.get("prompt")
        if prompt is None or not prompt.strip():
            _bad("field 'prompt' is required: the user's message, a non-empty string")
        if_busy = body.get("if_busy", "enqueue")
        if if_busy not in _IF_BUSY:
            _bad(f"field 'if_busy' must be one of {', '.join(_IF_BUSY)}, got: {if_busy!r}")
        mode: IfBusy = if_busy
        if name not in self._runs.agents:
            raise UnknownAgent(f"no agent named {name!r} is served")
        slot = self._slots.take(request.principal) if self._slots is not None else None
        try:
            try:
                view = await self._runs.start(name, agent_id, prompt, if_busy=mode)
            except (UnknownAgent, Busy):
                raise
            except ValueError as exc:
                _bad(str(exc))
            if not body.get("wait", True):
                if slot is not None:
                    # The run outlives this request: its slot is given back when it
                    # ends or pauses, by a task that lives no longer than the run.
                    trio.lowlevel.spawn_system_task(self._release_after, view.run_id, slot)
                    slot = None
                return JSONAnswer(202, view.to_json())
            return JSONAnswer(200, (await self._runs.wait(view.run_id)).to_json())
        finally:
            if slot is not None:
                slot.release()

    async def _release_after(self, run_id: str, slot: RunSlot) -> None:
        try:
            await self._runs.wait(run_id)
        except Exception:  # the run is gone (UnknownRun, a store error): it is not in flight
            pass
        finally:
            slot.release()

    async def _events(self, request: Request, run_id: str) -> SSEAnswer:
        after = _after(request)
        await self._run(request, run_id, "read")

        async def stream() -> AsyncIterator[ServerSentEvent]:
            events = self._runs.events(run_id, after=after)
            try:
                async for event in events:
                    yield self._encode(event)
            finally:
                await _aclose(events)

        return SSEAnswer(stream())

    def _encode(self, event: RunEvent) -> ServerSentEvent:
        """``event`` as an SSE event, made once however many streams send it."""
        cached = self._encoded.get(id(event))
        if cached is not None and cached[0] is event:
            return cached[1]
        encoded = ServerSentEvent(
            json.dumps(dict(event.data), default=str), id=str(event.id), event=event.type
        )
        self._encoded[id(event)] = (event, encoded)
        if len(self._encoded) > _ENCODED_KEPT:
            self._encoded.popitem(last=False)
        return encoded

    async def _decide(self, request: Request, run_id: str, call_id: str) -> JSONAnswer:
        view = await self._run(request, run_id, "approve")
        body = _body(request, {"decision": str, "input": dict, "reason": str})
        verdict = body.get("decision")
        if verdict not in ("approve", "deny"):
            _bad(f"field 'decision' must be 'approve' or 'deny', got: {verdict!r}")
        by = request.principal.name
        decision: Approve | Deny
        if verdict == "approve":
            if "reason" in body:
                _bad("field 'reason' goes with a denial only")
            decision = Approve(input=body.get("input"), by=by)
        else:
            if "input" in body:
                _bad("field 'input' goes with an approval only")
            decision = Deny(body.get("reason", "").strip() or DENIED, by=by)
        resumed = await self._runs.decide(run_id, call_id, decision)
        if resumed is None:
            waiting = [p for p in await self._runs.pending(view.agent) if p.run_id == run_id]
            return JSONAnswer(
                202,
                {
                    "run_id": run_id,
                    "call_id": call_id,
                    "status": "awaiting_approval",
                    "pending": [p.to_json() for p in waiting],
                },
            )
        return JSONAnswer(200, (await self._runs.wait(resumed.run_id)).to_json())


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
