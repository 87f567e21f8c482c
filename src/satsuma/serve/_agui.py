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
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

from ._agui_events import AGUIStream, finished_without_end, run_error
from ._http import HTTPError, JSONAnswer, Request, ServerSentEvent, SSEAnswer
from ._runs import Runs, UnknownAgent

__all__ = ["AGUISurface", "RunInput", "parse_run_input"]

_MAX_ID = 200


@attrs.frozen
class RunInput:
    """What satsuma takes from a ``RunAgentInput``.

    Attributes:
        thread_id: ``threadId``: the conversation (``agent_id``).
        run_id: ``runId``: echoed on RUN_STARTED and RUN_FINISHED.
        prompt: The text of the last message, the user's.
    """

    thread_id: str
    run_id: str
    prompt: str


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
                POST, 400 for a bad body, 403 without the ``run`` scope.
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
        try:
            view = await self._runs.start(name, run_input.thread_id, run_input.prompt)
        except UnknownAgent:
            raise HTTPError(404, "not_found", f"no served agent is named {name!r}") from None
        except ValueError as error:
            raise _bad(str(error)) from None
        return SSEAnswer(self._stream(run_input, view.run_id))

    async def _stream(
        self, run_input: RunInput, satsuma_run_id: str
    ) -> AsyncIterator[ServerSentEvent]:
        stream = AGUIStream(run_input.thread_id, run_input.run_id)
        yield _sse(stream.start(satsuma_run_id))
        events = self._runs.events(satsuma_run_id)
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
