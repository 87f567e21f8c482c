"""An offline stand-in for the model, to try an agent (or smoke-test one in CI) with no
key and no network: ``FakeModel`` for ``open_agent(model=...)``, ``satsuma run --model
fake``, and the answers of ``satsuma fake-server``.

It is deterministic and does what the prompt asks of it, no more:

- a prompt that names tools (``use add``, ``call read_file``) gets one call of each named
  tool; a JSON object right after a tool's name is that call's arguments (``add {"a": 2,
  "b": 3}``), otherwise arguments are made up from the tool's schema (the first enum
  value, the minimum, ``"example"``...);
- once the calls are answered, it replies with what each tool returned;
- any other prompt is answered with the prompt itself, so that a run completes;
- an agent with a typed answer (a ``final_answer`` tool among the tools) gets, where it
  would otherwise get a text reply, that text and a ``final_answer`` call whose input is
  made up from the tool's schema (as for any tool: a value of each required field's
  type), so that a typed run completes too.

Every answer starts with ``(fake model)``, so that it is never taken for a real one.

Its usage is billed as ``MessagesServer`` bills the same request sent by an
AnthropicModel: the prompt is the JSON body that model would send (a token per 4
characters), and a prompt cache (one per FakeModel, on trio's clock) reads and writes
the prefixes the request's breakpoints mark, so that an offline agent with
``cache="auto"`` shows what caching saves. A request with ``cache=None`` is billed as by
``FunctionModel``: a token per 4 characters of its messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from .._messages import Usage
from ..models import ModelListener, ModelRequest, ModelResponse, anthropic_params
from ._billing import PromptCache
from ._script import Reply
from ._scripted import FunctionModel

__all__ = ["FakeModel", "example_arguments", "fake_reply"]

PREFIX = "(fake model)"
_EXCERPT = 300
# The tool a typed agent answers with (satsuma.agents._output.OUTPUT_TOOL; not imported:
# the fake model serves any client, and stays below the agents).
_ANSWER_TOOL = "final_answer"


def example_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a tool whose ``input_schema`` is ``schema``: its required properties,
    each with a value of the declared type (made up, not necessarily valid for every
    constraint)."""
    value = _example(schema, depth=0)
    return value if isinstance(value, dict) else {}


def _example(schema: Any, depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            usable = [
                b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")
            ]
            return _example((usable or branches)[0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        names = required if isinstance(required, list) else []
        return {name: _example(properties.get(name, {}), depth + 1) for name in names}
    if kind == "array":
        count = schema.get("minItems", 0)
        count = count if isinstance(count, int) and 0 <= count <= 10 else 0
        return [_example(schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = low if isinstance(low, (int, float)) and not isinstance(low, bool) else 1
        if "exclusiveMinimum" in schema and value == schema["exclusiveMinimum"]:
            value += 1
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if kind == "string":
        length = schema.get("minLength", 0)
        text = "example"
        if isinstance(length, int) and length > len(text):
            text = text + "x" * (length - len(text))
        return text
    return "example"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    parts = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, Mapping) and block.get("type") == "tool_result":
            parts.append(_text_of(block.get("content", "")))
    return "".join(parts)


def _named_calls(prompt: str, tools: Sequence[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """The tools ``prompt`` names, in the order it names them, each with its arguments."""
    found: list[tuple[int, str, Any]] = []
    decoder = json.JSONDecoder()
    for tool in tools:
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            continue
        match = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", prompt)
        if match is None:
            continue
        arguments: Any = None
        rest = prompt[match.end() :].lstrip()
        if rest.startswith("{"):
            try:
                arguments, _ = decoder.raw_decode(rest)
            except ValueError:
                arguments = None
        if not isinstance(arguments, dict):
            schema = tool.get("input_schema")
            arguments = example_arguments(schema if isinstance(schema, Mapping) else {})
        found.append((match.start(), name, arguments))
    return [(name, arguments) for _, name, arguments in sorted(found, key=lambda f: f[0])]


def fake_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
) -> Reply:
    """The fake model's answer to a conversation (Messages API shapes: ``role`` and
    ``content`` per message; ``name`` and ``input_schema`` per tool)."""
    reply = _reply(messages, tools)
    if reply.tool_calls:
        return reply
    answer = next((t for t in tools if t.get("name") == _ANSWER_TOOL), None)
    if answer is None:
        return reply
    # A typed answer is due: the text, and the answer made up from its schema.
    schema = answer.get("input_schema")
    arguments = example_arguments(schema if isinstance(schema, Mapping) else {})
    return Reply(text=reply.text, tool_calls=[(_ANSWER_TOOL, arguments)])


def _reply(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> Reply:
    if not messages:
        return Reply(text=f"{PREFIX} There is nothing to answer.")
    last = messages[-1]
    content = last.get("content")
    blocks = content if isinstance(content, Sequence) and not isinstance(content, str) else []
    results = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]
    if results:
        names = _tool_names(messages[:-1])
        lines = []
        for result in results:
            name = names.get(str(result.get("tool_use_id")), "a tool")
            text = _text_of(result.get("content", "")).strip() or "(nothing)"
            if len(text) > _EXCERPT:
                text = text[:_EXCERPT] + "..."
            failed = " (an error)" if result.get("is_error") else ""
            lines.append(f"- {name}{failed}: {text}")
        return Reply(text=f"{PREFIX} The tools answered:\n" + "\n".join(lines))
    prompt = _text_of(content).strip()
    calls = _named_calls(prompt, tools)
    if calls:
        listed = ", ".join(name for name, _ in calls)
        return Reply(text=f"{PREFIX} Calling {listed}.", tool_calls=calls)
    return Reply(text=f"{PREFIX} You said: {prompt}" if prompt else f"{PREFIX} Hello.")


def _tool_names(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) or not isinstance(content, Sequence):
            continue
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
    return names


class FakeModel:
    """The fake model as a ``Model``: ``open_agent(MyAgent, model=FakeModel())``.

    Attributes:
        requests: The requests it was sent: the last 100 (as FunctionModel keeps).
        request_count: How many requests it was sent in all.
    """

    def __init__(self) -> None:
        self._model = FunctionModel(self._reply)
        self._cache = PromptCache()

    @property
    def prompt_cache(self) -> PromptCache:
        """The model's own prompt cache (``min_tokens`` as ``MessagesServer``'s)."""
        return self._cache

    @property
    def requests(self) -> list[ModelRequest]:
        return self._model.requests

    @property
    def request_count(self) -> int:
        return self._model.request_count

    @staticmethod
    def _reply(request: ModelRequest) -> Reply:
        messages = [{"role": m.role, "content": list(m.content)} for m in request.messages]
        return fake_reply(messages, request.tools)

    async def respond(self, request: ModelRequest, listener: ModelListener) -> ModelResponse:
        # Billed as it arrives, as MessagesServer bills a request before it answers.
        now = trio.current_time()
        # Streamed or whole as an AnthropicModel with its default stream=None chooses:
        # the body it would send differs by its "stream" field.
        stream = bool(getattr(listener, "wants_deltas", True))
        response = await self._model.respond(request, listener)
        if request.cache is None:
            return response  # billed as ever: a token per 4 characters of the messages
        return attrs.evolve(response, usage=self._billed(request, response.usage, stream, now))

    def _billed(self, request: ModelRequest, usage: Usage, stream: bool, now: float) -> Usage:
        params = anthropic_params(request)
        if stream:
            params["stream"] = True
        # Measured as the SDK writes the body (compact, UTF-8) and the server reads it.
        body = json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()
        usage = attrs.evolve(usage, input_tokens=max(1, len(body) // 4))
        bill = self._cache.bill(json.loads(body), usage.input_tokens, now)
        return attrs.evolve(
            usage,
            input_tokens=bill.input_tokens,
            cache_creation_input_tokens=bill.cache_creation_input_tokens,
            cache_read_input_tokens=bill.cache_read_input_tokens,
            cache_creation_1h_input_tokens=bill.written_for_an_hour,
        )
