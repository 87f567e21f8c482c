"""The libraries ``run.py`` puts side by side, each behind the same small interface.

Every contender declares the same four tools, with the same behaviour:

- ``noop(n)``: returns ``ok``;
- ``sleep(n)``: sleeps ``Sizes.sleep`` seconds (I/O-bound work), returns ``slept``;
- ``fail(n)``: raises ``RuntimeError("disk on fire")``;
- ``hang(n)``: sleeps ``Sizes.hang`` seconds, longer than its declared timeout
  ``Sizes.hang_timeout`` (where the library has per-tool timeouts).

``run(prompt)`` is one whole run of a fresh agent (a new conversation); ``run_many`` is
``count`` of them at once in one process, sharing one HTTP client, as a service would.
Imports of the peers happen inside ``build`` so that a child process loads only the
library it measures.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any, ClassVar, Literal, TypeAlias

import attrs
import trio

__all__ = ["CONTENDERS", "Contender", "Flavour", "Sizes"]

Flavour: TypeAlias = Literal["trio", "asyncio"]
"""The event loop a contender runs on."""

MODEL = "claude-sonnet-4-5"
MAX_TOKENS = 1024
MAX_TURNS = 100
FAIL_MESSAGE = "disk on fire"


@attrs.frozen(kw_only=True)
class Sizes:
    """Durations of the tools, in seconds."""

    sleep: float = 0.2
    hang: float = 5.0
    hang_timeout: float = 1.0


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


class Contender:
    """One library: how to build its agent, run it once, run many at once."""

    key: ClassVar[str]
    label: ClassVar[str]
    distribution: ClassVar[str]
    flavour: ClassVar[Flavour]

    def __init__(self, sizes: Sizes, anthropic_url: str, openai_url: str) -> None:
        self.sizes = sizes
        self.anthropic_url = anthropic_url
        self.openai_url = openai_url

    @classmethod
    def version(cls) -> str:
        return f"{cls.distribution} {_version(cls.distribution)}"

    async def open(self) -> None:
        """Build the client and the agent, inside the running event loop."""
        raise NotImplementedError

    async def aclose(self) -> None:
        pass

    async def run(self, prompt: str) -> str:
        """One whole run in a fresh conversation; its final text (or what ended it)."""
        raise NotImplementedError

    async def run_many(self, prompt: str, count: int) -> list[str]:
        results: list[str] = []

        async def one() -> None:
            results.append(await self.run(prompt))

        if self.flavour == "trio":
            async with trio.open_nursery() as nursery:
                for _ in range(count):
                    nursery.start_soon(one)
        else:
            await asyncio.gather(*(one() for _ in range(count)))
        return results

    async def sleep(self, seconds: float) -> None:
        if self.flavour == "trio":
            await trio.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    def tool_functions(self) -> list[Callable[..., Awaitable[str]]]:
        """The four tools as plain async functions (typed, documented), for libraries that
        build their schema from a function's signature and docstring."""
        sizes = self.sizes
        sleep = self.sleep

        async def noop(n: int) -> str:
            """Do nothing.

            Args:
                n: A number.
            """
            return "ok"

        async def sleep_tool(n: int) -> str:
            """Wait for a slow service.

            Args:
                n: A number.
            """
            await sleep(sizes.sleep)
            return "slept"

        async def fail(n: int) -> str:
            """Fail.

            Args:
                n: A number.
            """
            raise RuntimeError(FAIL_MESSAGE)

        async def hang(n: int) -> str:
            """Hang for longer than the timeout.

            Args:
                n: A number.
            """
            await sleep(sizes.hang)
            return "woke up"

        sleep_tool.__name__ = "sleep"
        return [noop, sleep_tool, fail, hang]


# Every client gets this timeout for each phase of a request. The SDKs' default connect
# timeout (5 s) fails some of 1,000 concurrent runs whose event loop is too busy to
# finish a loopback connect in time (seen with pydantic-ai): a measure of the load, not
# of the library.
CLIENT_TIMEOUT = 600.0


def _anthropic_client(base_url: str) -> Any:
    import anthropic

    return anthropic.AsyncAnthropic(
        api_key="test-key", base_url=base_url, max_retries=0, timeout=CLIENT_TIMEOUT
    )


class Satsuma(Contender):
    key = "satsuma"
    label = "satsuma"
    distribution = "satsuma"
    flavour = "trio"
    stream: bool | None = None  # AnthropicModel's default

    async def open(self) -> None:
        import satsuma

        self._agent_class = self._declare()
        self._client = _anthropic_client(self.anthropic_url)
        self._model = satsuma.AnthropicModel(self._client, stream=self.stream)

    def _declare(self) -> type[Any]:
        import satsuma

        noop, sleep, fail, hang = self.tool_functions()

        class BenchAgent(satsuma.Agent):
            name = "bench"
            model = MODEL
            tools: ClassVar[Sequence[object]] = [
                satsuma.tool(noop),
                satsuma.tool(sleep),
                satsuma.tool(fail),
                satsuma.tool(timeout=self.sizes.hang_timeout)(hang),
            ]
            max_iterations = MAX_TURNS
            max_tokens = MAX_TOKENS

        return BenchAgent

    async def aclose(self) -> None:
        await self._client.close()

    async def run(self, prompt: str) -> str:
        import satsuma

        async with satsuma.open_agent(self._agent_class, model=self._model) as agent:
            result = await agent.run(prompt)
        if result.status != "completed":
            return f"run ended {result.status}: {result.error}"
        return result.output


class SatsumaDefault(Satsuma):
    """satsuma as the docs show it: the agent declares its model by name, and each run
    opens it with ``open_agent(BenchAgent)`` and nothing more; the model and its client
    come from the environment (``ANTHROPIC_BASE_URL``), with every default."""

    key = "satsuma_default"
    label = "satsuma, as the docs show it"

    async def open(self) -> None:
        os.environ["ANTHROPIC_BASE_URL"] = self.anthropic_url
        os.environ.setdefault("ANTHROPIC_API_KEY", "test-key")
        self._agent_class = self._declare()

    async def aclose(self) -> None:
        pass

    async def run(self, prompt: str) -> str:
        import satsuma

        async with satsuma.open_agent(self._agent_class) as agent:
            result = await agent.run(prompt)
        if result.status != "completed":
            return f"run ended {result.status}: {result.error}"
        return result.output


class AnthropicToolRunner(Contender):
    key = "anthropic"
    label = "anthropic tool_runner"
    distribution = "anthropic"
    flavour = "asyncio"

    async def open(self) -> None:
        from anthropic import beta_async_tool

        # No per-tool timeout in beta_async_tool (nor in tool_runner): hang is plain.
        self._tools = [beta_async_tool(function) for function in self.tool_functions()]
        self._client = _anthropic_client(self.anthropic_url)

    async def aclose(self) -> None:
        await self._client.close()

    async def run(self, prompt: str) -> str:
        runner = self._client.beta.messages.tool_runner(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": prompt}],
            tools=self._tools,
            max_iterations=MAX_TURNS,
            # The default keeps the conversation in a server-side thread, which the
            # loopback server does not implement: send the whole history each turn, as
            # every other contender does.
            thread=False,
        )
        message = await runner.until_done()
        return "".join(block.text for block in message.content if block.type == "text")


class PydanticAI(Contender):
    key = "pydantic_ai"
    label = "pydantic-ai"
    distribution = "pydantic-ai-slim"
    flavour = "asyncio"

    async def open(self) -> None:
        from pydantic_ai import Agent, Tool
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        noop, sleep, fail, hang = self.tool_functions()
        self._client = _anthropic_client(self.anthropic_url)
        model = AnthropicModel(MODEL, provider=AnthropicProvider(anthropic_client=self._client))
        self._agent = Agent(
            model,
            tools=[
                Tool(noop),
                Tool(sleep),
                Tool(fail),
                Tool(hang, timeout=self.sizes.hang_timeout),
            ],
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def run(self, prompt: str) -> str:
        try:
            result = await self._agent.run(prompt)
        except Exception as exc:
            return f"run raised {type(exc).__name__}: {exc}"
        return str(result.output)


class OpenAIAgents(Contender):
    key = "openai_agents"
    label = "openai-agents"
    distribution = "openai-agents"
    flavour = "asyncio"

    async def open(self) -> None:
        from openai import AsyncOpenAI

        from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled

        # Tracing exports to OpenAI's servers by default; there are none here.
        set_tracing_disabled(True)
        noop, sleep, fail, hang = self.tool_functions()
        self._client = AsyncOpenAI(
            api_key="test-key", base_url=self.openai_url, max_retries=0, timeout=CLIENT_TIMEOUT
        )
        model = OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=self._client)
        self._agent = Agent(
            name="bench",
            model=model,
            tools=[
                function_tool(noop),
                function_tool(sleep),
                function_tool(fail),
                function_tool(hang, timeout=self.sizes.hang_timeout),
            ],
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def run(self, prompt: str) -> str:
        from agents import Runner

        try:
            result = await Runner.run(self._agent, prompt, max_turns=MAX_TURNS)
        except Exception as exc:
            return f"run raised {type(exc).__name__}: {exc}"
        return str(result.final_output)


class SatsumaStreamed(Satsuma):
    """satsuma with ``AnthropicModel(stream=True)``: every response streamed, as when
    something watches the text as it is written."""

    key = "satsuma_stream"
    label = "satsuma, stream=True"
    stream = True


class PlainLoop(Contender):
    """The floor: a hand-written loop over ``AsyncAnthropic.messages.create``, running a
    turn's calls with ``asyncio.gather``, each under ``asyncio.wait_for`` and a
    ``try``/``except`` that turns an exception into an error result."""

    key = "plain"
    label = "plain asyncio loop"
    distribution = "anthropic"
    flavour = "asyncio"

    async def open(self) -> None:
        noop, sleep, fail, hang = self.tool_functions()
        self._functions = {"noop": noop, "sleep": sleep, "fail": fail, "hang": hang}
        self._timeouts = {"hang": self.sizes.hang_timeout}
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer", "description": "A number."}},
            "required": ["n"],
        }
        self._tools = [
            {
                "name": name,
                "description": (function.__doc__ or "").split("\n")[0],
                "input_schema": schema,
            }
            for name, function in self._functions.items()
        ]
        self._client = _anthropic_client(self.anthropic_url)

    async def aclose(self) -> None:
        await self._client.close()

    async def _call(self, block: Any) -> dict[str, Any]:
        function = self._functions.get(block.name)
        timeout = self._timeouts.get(block.name, 120.0)
        try:
            if function is None:
                raise LookupError(f"unknown tool {block.name}")
            content = await asyncio.wait_for(function(**block.input), timeout)
            is_error = False
        except TimeoutError:
            content, is_error = f"Error: timed out after {timeout:g}s", True
        except Exception as exc:
            content, is_error = f"Error: {type(exc).__name__}: {exc}", True
        return {
            "type": "tool_result",
            "tool_use_id": block.id,
            "content": content,
            "is_error": is_error,
        }

    async def _respond(self, messages: list[dict[str, Any]]) -> Any:
        return await self._client.messages.create(
            model=MODEL, max_tokens=MAX_TOKENS, messages=messages, tools=self._tools
        )

    async def _results(self, calls: list[Any]) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self._call(block) for block in calls)))

    async def run(self, prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(MAX_TURNS):
            message = await self._respond(messages)
            content: list[dict[str, Any]] = []
            calls = []
            for block in message.content:
                if block.type == "text":
                    content.append({"type": "text", "text": block.text})
                elif block.type == "tool_use":
                    content.append(
                        {
                            "type": "tool_use",
                            "id": block.id,
                            "name": block.name,
                            "input": block.input,
                        }
                    )
                    calls.append(block)
            messages.append({"role": "assistant", "content": content})
            if not calls:
                return "".join(block["text"] for block in content if block["type"] == "text")
            results = await self._results(calls)
            messages.append({"role": "user", "content": results})
        return "max turns reached"


class PlainStreamingLoop(PlainLoop):
    """The same loop, streaming each response (``messages.stream``) as satsuma does."""

    key = "plain_stream"
    label = "plain loop, streaming"

    async def _respond(self, messages: list[dict[str, Any]]) -> Any:
        async with self._client.messages.stream(
            model=MODEL, max_tokens=MAX_TOKENS, messages=messages, tools=self._tools
        ) as stream:
            return await stream.get_final_message()


class PlainTrioLoop(PlainStreamingLoop):
    """The floor on trio: the same hand-written streaming loop, one nursery task per
    call, each under ``trio.move_on_after`` and a ``try``/``except``."""

    key = "plain_trio"
    label = "plain trio loop, streaming"
    flavour = "trio"

    async def _call(self, block: Any) -> dict[str, Any]:
        function = self._functions.get(block.name)
        timeout = self._timeouts.get(block.name, 120.0)
        content, is_error = f"Error: timed out after {timeout:g}s", True
        with trio.move_on_after(timeout):
            try:
                if function is None:
                    raise LookupError(f"unknown tool {block.name}")
                content, is_error = await function(**block.input), False
            except Exception as exc:
                content, is_error = f"Error: {type(exc).__name__}: {exc}", True
        return {
            "type": "tool_result",
            "tool_use_id": block.id,
            "content": content,
            "is_error": is_error,
        }

    async def _results(self, calls: list[Any]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in calls]

        async def one(index: int, block: Any) -> None:
            results[index] = await self._call(block)

        async with trio.open_nursery() as nursery:
            for index, block in enumerate(calls):
                nursery.start_soon(one, index, block)
        return results


class PlainTrioWholeLoop(PlainTrioLoop):
    """The minimal floor on trio: the same loop asking for whole responses
    (``messages.create``), as a hand-written loop most simply does."""

    key = "plain_trio_whole"
    label = "plain trio loop"

    async def _respond(self, messages: list[dict[str, Any]]) -> Any:
        return await PlainLoop._respond(self, messages)


CONTENDERS: dict[str, type[Contender]] = {
    contender.key: contender
    for contender in (
        Satsuma,
        SatsumaDefault,
        SatsumaStreamed,
        AnthropicToolRunner,
        PydanticAI,
        OpenAIAgents,
        PlainLoop,
        PlainStreamingLoop,
        PlainTrioLoop,
        PlainTrioWholeLoop,
    )
}
