"""The AG-UI surface: ``POST /ag-ui/{name}`` takes a ``RunAgentInput`` and answers the
run as a stream of AG-UI events (server-sent events, one JSON event each).

``threadId`` is the conversation's ``agent_id``. The server keeps the conversation, so
the stored history wins over the ``messages`` the client sends: only the last message,
which must be the user's, is taken, as the run's prompt. A request whose last message is
not a user's (no message, or a frontend tool's result, which satsuma does not run) is a
JSON 400 before any stream starts: the client learns it from the status, as for any
other bad body. ``tools``, ``state``, ``context`` and ``forwardedProps`` are accepted and
not used: the served agent's own tools run on the server.

Once the run has started it belongs to the server: a client that goes away stops its
stream, not the run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs

from ._agui_events import AGUIStream, finished_without_end, run_error
from ._agui_resume import Answer, parse_resume
from ._http import HTTPError, JSONAnswer, Request, ServerSentEvent, SSEAnswer
from ._runs import AlreadyDecided, BadDecision, PendingView, Runs, UnknownAgent, UnknownRun

__all__ = ["AGUISurface", "RunInput", "parse_run_input"]

_MAX_ID = 200


@attrs.frozen
class RunInput:
    """What satsuma takes from a ``RunAgentInput``.

    Attributes:
        thread_id: ``threadId``: the conversation (``agent_id``).
        run_id: ``runId``: echoed on RUN_STARTED and RUN_FINISHED.
        prompt: The text of the last message, the user's; None on a request that
            only answers interrupts (``resume``).
        answers: The decisions in ``resume``, if any.
    """

    thread_id: str
    run_id: str
    prompt: str | None
    answers: tuple[Answer, ...] = ()


def _bad(message: str) -> HTTPError:
    return HTTPError(400, "bad_request", message)


def _check_id(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{field} must be a string")
    if not 1 <= len(value) <= _MAX_ID:
        raise _bad(f"{field} must be 1 to {_MAX_ID} characters")
    if "/" in value or any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise _bad(f"{field} must contain no '/' and no control character")
    return value


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping):
                raise _bad("each part of the user message's content must be an object")
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad("only text parts of a user message are supported")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad("the user message's content must be a string or a list of text parts")


def parse_run_input(body: Any) -> RunInput:
    """The thread, run and prompt of a ``RunAgentInput`` (its JSON, camelCase).

    Raises:
        HTTPError: 400 naming the problem: not an object, a missing or bad
            ``threadId``/``runId``, ``messages`` not a list, or no user message last.
    """
    if not isinstance(body, Mapping):
        raise _bad("the body must be a RunAgentInput object")
    thread_id = _check_id(body.get("threadId"), "threadId")
    run_id = _check_id(body.get("runId"), "runId")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad("messages must be a list")
    answers = parse_resume(body)
    if answers:
        # A resumed run goes on from where it paused: no new message is taken.
        return RunInput(thread_id=thread_id, run_id=run_id, prompt=None, answers=answers)
    if not messages or not isinstance(messages[-1], Mapping):
        raise _bad("messages must end with the new user message")
    last = messages[-1]
    if last.get("role") != "user":
        raise _bad(
            "messages must end with the new user message: the server keeps the "
            "conversation and takes only that message"
        )
    prompt = _text_of(last.get("content"))
    if not prompt.strip():
        raise _bad("the user message is empty")
    return RunInput(thread_id=thread_id, run_id=run_id, prompt=prompt)


def _sse(event: Mapping[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(event, separators=(",", ":")))


class AGUISurface:
    """``/ag-ui/{name}``: each served agent's runs as AG-UI event streams.

    Args:
        runs: Where the runs happen.
    """

    def __init__(self, runs: Runs) -> None:
        self._runs = runs

    @property
    def prefix(self) -> str:
        """``/ag-ui/``."""
        return "/ag-ui/"

    async def handle(self, request: Request) -> JSONAnswer | SSEAnswer:
        """Start a run from a ``RunAgentInput`` and stream its AG-UI events.

        Raises:
            HTTPError: 404 for an unknown path or agent, 405 for a method other than
                POST, 400 for a bad body, 403 without the ``run`` scope (and
                ``approve`` to answer interrupts), 409 for an answer to a call that
                no longer waits.
        """
        name = request.path[len(self.prefix) :]
        if not name or "/" in name:
            raise HTTPError(404, "not_found", f"no such path: {request.path}")
        if name not in self._runs.agents:
            raise HTTPError(404, "not_found", f"no served agent is named {name!r}")
        if request.method != "POST":
            raise HTTPError(405, "method_not_allowed", "use POST", headers={"Allow": "POST"})
        request.require("run", name)
        run_input = parse_run_input(request.json())
        if run_input.prompt is None:
            request.require("approve", name)
            return await self._resume(name, run_input, request.principal.name)
        try:
            view = await self._runs.start(name, run_input.thread_id, run_input.prompt)
        except UnknownAgent:
            raise HTTPError(404, "not_found", f"no served agent is named {name!r}") from None
        except ValueError as error:
            raise _bad(str(error)) from None
        return SSEAnswer(self._stream(run_input, view.run_id))

    async def _resume(self, name: str, run_input: RunInput, by: str | None) -> SSEAnswer:
        """Decide the answered calls; stream the run resumed, or still waiting."""
        waiting = {
            call.call_id: call
            for call in await self._runs.pending(name)
            if call.agent_id == run_input.thread_id
        }
        for answer in run_input.answers:
            if answer.call_id not in waiting:
                raise HTTPError(
                    409,
                    "conflict",
                    f"no call {answer.call_id!r} waits for a decision in this thread",
                )
        run_ids = {waiting[answer.call_id].run_id for answer in run_input.answers}
        if len(run_ids) > 1:
            raise _bad("resume answers the calls of several runs: answer one run at a time")
        (run_id,) = run_ids
        # The resumed run's events go on numbering after the pause's.
        after = 0
        async for event in self._runs.events(run_id):
            after = event.id
        resumed = None
        for answer in run_input.answers:
            try:
                resumed = await self._runs.decide(run_id, answer.call_id, answer.to_decision(by))
            except AlreadyDecided as error:
                raise HTTPError(409, "conflict", str(error)) from None
            except BadDecision as error:
                raise _bad(str(error)) from None
            except UnknownRun:
                raise HTTPError(404, "not_found", f"no run {run_id!r}") from None
        if resumed is None:
            answered = {answer.call_id for answer in run_input.answers}
            still = [call for call in waiting.values() if call.run_id == run_id]
            still = [call for call in still if call.call_id not in answered]
            return SSEAnswer(self._still_waiting(run_input, run_id, still))
        answered_ids = [answer.call_id for answer in run_input.answers]
        return SSEAnswer(self._stream(run_input, run_id, after=after, resumed=answered_ids))

    async def _still_waiting(
        self, run_input: RunInput, run_id: str, still: list[PendingView]
    ) -> AsyncIterator[ServerSentEvent]:
        stream = AGUIStream(run_input.thread_id, run_input.run_id)
        yield _sse(stream.start(run_id))
        pending = [
            {"id": call.call_id, "tool_name": call.tool, "input": call.input, "reason": call.reason}
            for call in still
        ]
        end = {"run_id": run_id, "status": "awaiting_approval", "pending": pending}
        for out in stream.feed({"type": "RunEnd", "result": end}):
            yield _sse(out)

    async def _stream(
        self,
        run_input: RunInput,
        satsuma_run_id: str,
        *,
        after: int = 0,
        resumed: Sequence[str] = (),
    ) -> AsyncIterator[ServerSentEvent]:
        stream = AGUIStream(run_input.thread_id, run_input.run_id, resumed=resumed)
        yield _sse(stream.start(satsuma_run_id))
        events = self._runs.events(satsuma_run_id, after=after)
        try:
            # Read to its end (it ends after RunEnd) rather than leaving it early, so
            # that the Runs' own iterators close in order.
            async for event in events:
                for out in stream.feed(event.data):
                    yield _sse(out)
        except LookupError:
            # The run went past its retention between start and the first event.
            yield _sse(run_error("the run is no longer known", "not_found"))
            return
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        if not stream.ended:
            yield _sse(finished_without_end(run_input.thread_id, run_input.run_id))
